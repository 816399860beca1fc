//! The OpenAI-compatible endpoints: `POST /v1/chat/completions` and `GET /v1/models`.
//!
//! The `model` field names the agent. The agent's tools run on the server; the answer comes
//! back as the assistant message. Client-side tools (`tools` in the request) are refused; the
//! fields that shape the run (sampling, `tool_choice`, `response_format`) are honoured or
//! refused as [`crate::openai_params`] says.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use modu_core::{AgentError, AgentEvent, Message, ToolCall, Usage};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::control::start_live;
use crate::error::{ApiPath, ServerError};
use crate::live::LiveRun;
use crate::mount::{Finished, Item, RunInput, Served, called_tool};
use crate::openai_params::RunOptions;
use crate::{AppState, unix_now};

/// A chat completion request (the fields the server reads; others are ignored).
#[derive(Debug, Deserialize)]
pub(crate) struct ChatCompletionRequest {
    model: String,
    messages: Vec<WireMessage>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    /// Sampling and the like, over the agent's settings (see [`crate::openai_params`]).
    #[serde(flatten)]
    options: RunOptions,
}

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    role: String,
    #[serde(default)]
    content: Option<WireContent>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    /// An assistant message's refusal (its content is then null), as OpenAI's history has it.
    #[serde(default)]
    refusal: Option<String>,
    /// The legacy form of an assistant's call (its content may then be null).
    #[serde(default)]
    function_call: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum WireContent {
    Text(String),
    Parts(Vec<WirePart>),
}

#[derive(Debug, Deserialize)]
struct WirePart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireToolCall {
    id: String,
    function: WireFunction,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

fn content_text(content: WireContent) -> Result<String, ServerError> {
    match content {
        WireContent::Text(text) => Ok(text),
        WireContent::Parts(parts) => {
            let mut text = String::new();
            for part in parts {
                match (part.kind.as_str(), part.text) {
                    ("text", Some(t)) => text.push_str(&t),
                    _ => return Err(ServerError::bad_request("only text content parts are supported")),
                }
            }
            Ok(text)
        }
    }
}

/// 400 `invalid_value` naming the field (`messages[2].content`), as OpenAI answers it.
fn invalid(param: String, message: String) -> ServerError {
    ServerError::InvalidParameter {
        param,
        code: "invalid_value",
        message,
    }
}

/// The request's messages as modu messages.
///
/// A message's `content` is required (`null` or missing is refused, as OpenAI refuses it),
/// but for an assistant message with tool calls, a legacy `function_call` or a `refusal`
/// (which is then its text), as OpenAI's own history has them. Messages with no user message (a system
/// prompt alone) are taken, as OpenAI takes them.
fn to_messages(wire: Vec<WireMessage>) -> Result<Vec<Message>, ServerError> {
    let mut out: Vec<Message> = Vec::with_capacity(wire.len());
    for (index, m) in wire.into_iter().enumerate() {
        let assistant = m.role == "assistant";
        let has_calls =
            assistant && (m.tool_calls.as_ref().is_some_and(|calls| !calls.is_empty()) || m.function_call.is_some());
        let text = match m.content {
            Some(content) => content_text(content)?,
            None if assistant && m.refusal.is_some() => m.refusal.unwrap_or_default(),
            None if has_calls => String::new(),
            None => {
                return Err(invalid(
                    format!("messages[{index}].content"),
                    format!(
                        "messages[{index}].content is required: a {} message needs content",
                        m.role
                    ),
                ));
            }
        };
        let message = match m.role.as_str() {
            "system" | "developer" => Message::system(text),
            "user" => Message::user(text),
            "assistant" => {
                let calls: Vec<ToolCall> = m
                    .tool_calls
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| ToolCall::new(c.id, c.function.name, c.function.arguments))
                    .collect();
                if calls.is_empty() {
                    Message::assistant(text)
                } else {
                    Message::assistant_tool_calls(text, calls)
                }
            }
            "tool" => {
                let Some(call_id) = m.tool_call_id else {
                    return Err(ServerError::bad_request("a tool message needs a tool_call_id"));
                };
                // The request is the whole conversation: a result must answer a call in it
                // (a model server would refuse the orphan, and the client would see a 502).
                let Some(name) = called_tool(&out, &call_id) else {
                    return Err(ServerError::bad_request(format!(
                        "the tool message with tool_call_id {call_id:?} answers no tool call of an earlier assistant message"
                    )));
                };
                Message::tool_result(call_id, name, text, false)
            }
            other => return Err(ServerError::bad_request(format!("unknown message role {other:?}"))),
        };
        out.push(message);
    }
    if out.is_empty() {
        return Err(ServerError::bad_request("messages must not be empty"));
    }
    Ok(out)
}

fn usage_json(usage: &Usage) -> Value {
    let total = if usage.total_tokens == 0 {
        usage.input_tokens.saturating_add(usage.output_tokens)
    } else {
        usage.total_tokens
    };
    json!({"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens, "total_tokens": total})
}

/// The request in `body` (JSON text, read straight into the request: no `Value` tree in
/// between), or 400 `invalid_value` with `param` naming the field whose value does not fit
/// (`temperature`, `messages[1].role`), as OpenAI answers it.
fn parse_request(body: &str) -> Result<ChatCompletionRequest, ServerError> {
    if !body.trim_start().starts_with('{') {
        return Err(ServerError::bad_request("the body must be a JSON object"));
    }
    let error = match serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(body)) {
        Ok(request) => return Ok(request),
        Err(error) => error,
    };
    // A flattened field's error (the sampling fields) has no path: the options read alone
    // have it.
    let options = serde_path_to_error::deserialize::<_, RunOptions>(&mut serde_json::Deserializer::from_str(body));
    let error = match options {
        Err(options) if error.path().iter().next().is_none() && options.path().iter().next().is_some() => options,
        _ => error,
    };
    let mut message = error.inner().to_string();
    // The position in the body ("at line 1 column 40") says less than the field named.
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    // serde's sentence for a value no form of the field takes names a type of the server.
    if message.starts_with("data did not match any variant of untagged enum") {
        message = "the value is not of a type this field takes".to_owned();
    }
    let path = error.path().iter().next().map(|_| error.path().to_string());
    // A missing field is reported at the object that lacks it.
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field);
    let param = match (path, missing) {
        (Some(path), Some(field)) => format!("{path}.{field}"),
        (Some(path), None) => path,
        (None, Some(field)) => field.to_owned(),
        (None, None) => return Err(ServerError::bad_request(message)),
    };
    Err(ServerError::InvalidParameter {
        message: format!("{param}: {message}"),
        param,
        code: "invalid_value",
    })
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(state): State<Arc<AppState>>,
    Caller(principal): Caller,
    payload: Result<Json<Box<serde_json::value::RawValue>>, JsonRejection>,
) -> Result<Response, ServerError> {
    let Json(body) = payload?;
    let request = parse_request(body.get())?;
    drop(body);
    let agent = Arc::clone(state.agent(&request.model)?);
    if request.n.is_some_and(|n| n != 1) {
        return Err(ServerError::bad_request("only n = 1 is supported"));
    }
    if request.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ServerError::bad_request(
            "client-side tools are not supported: the agent's own tools run on the server",
        ));
    }
    let model_settings = request.options.settings(agent.response_format().as_ref())?;
    let messages = to_messages(request.messages)?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    // The run is in flight under its id while it runs (its client sees it as
    // `chatcmpl-<run id>`): run control's `resume` of it is refused meanwhile (409), and its
    // `cancel` cancels it.
    let live = start_live(&state, &request.model, &run_id, &principal)?;
    // Its events are not kept: there is nothing to follow (`GET .../events` is 404).
    live.not_followable();
    let input = RunInput {
        messages,
        session_id: None,
        run_id: run_id.clone(),
        metadata: state.run_metadata(&request.model, serde_json::Map::new()),
        cancel: live.cancel.clone(),
        model_settings,
    };
    // A client that goes away mid-run drops the run (an OpenAI run is driven by its
    // request): its `running` checkpoint, which no session leads back to, is deleted.
    let run = Arc::new(InFlight {
        state: Arc::clone(&state),
        agent: Arc::clone(&agent),
        name: request.model.clone(),
        run_id: run_id.clone(),
        live,
        ended: AtomicBool::new(false),
    });
    let abandoned = Abandoned(Arc::clone(&run));
    let meta = Meta {
        id: format!("chatcmpl-{run_id}"),
        run_id,
        created: unix_now(),
        model: request.model,
    };
    if request.stream.unwrap_or(false) {
        let include_usage = request.stream_options.and_then(|o| o.include_usage).unwrap_or(false);
        let mut chunks = Chunks {
            meta,
            include_usage,
            sent_text: false,
        };
        let opening = stream_event(&chunks.chunk(json!({"role": "assistant", "content": ""}), Value::Null));
        let events = agent.stream(&principal, input).flat_map(move |item| {
            if matches!(item, Item::Done(_)) {
                // Before its client reads the end: a paused run is resumable right away.
                run.end();
            }
            futures::stream::iter(chunks.on(item))
        });
        let body = futures::stream::once(async move { opening }).chain(events).boxed();
        let body = Guarded {
            events: body,
            _abandoned: abandoned,
        }
        .map(Ok::<Event, Infallible>);
        return Ok(Sse::new(body).keep_alive(KeepAlive::default()).into_response());
    }
    let finished = agent.run(&principal, input).await;
    run.end();
    drop(abandoned);
    if let Some(error) = meta.run_error(&finished) {
        return Err(error);
    }
    // The answer's reasoning, as vLLM and llama.cpp send it (`reasoning_content`).
    let reasoning = finished
        .messages
        .iter()
        .rev()
        .find(|m| m.role == modu_core::Role::Assistant)
        .and_then(modu_core::Message::reasoning);
    let mut message = json!({"role": "assistant", "content": finished.text.unwrap_or_default(), "refusal": null});
    if let Some(reasoning) = reasoning {
        message["reasoning_content"] = json!(reasoning);
    }
    let body = json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": null,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(finished.cut),
        }],
        "usage": usage_json(&finished.usage),
    });
    Ok(Json(body).into_response())
}

/// The completion's `finish_reason`: `length` when the model stopped the answer at its output
/// limit (as OpenAI says it), else `stop`.
fn finish_reason(cut: bool) -> &'static str {
    if cut { "length" } else { "stop" }
}

struct Meta {
    id: String,
    /// The run's id (a paused run is resumed under it on the run-control routes).
    run_id: String,
    created: u64,
    model: String,
}

impl Meta {
    /// The error a run that ended without an answer is answered with: a paused run's names
    /// the run, so its owner can decide (or answer) and resume it on the run-control routes.
    fn run_error(&self, finished: &Finished) -> Option<ServerError> {
        let error = finished.error.as_ref()?;
        Some(match error {
            AgentError::Interrupted { .. } if finished.waits_for_input_only() => ServerError::InputRequired {
                agent: self.model.clone(),
                run_id: self.run_id.clone(),
            },
            AgentError::Interrupted { .. } => ServerError::RunPaused {
                agent: self.model.clone(),
                run_id: self.run_id.clone(),
            },
            other => ServerError::run_failed(other),
        })
    }
}

/// Turns a run's items into `chat.completion.chunk` events.
struct Chunks {
    meta: Meta,
    include_usage: bool,
    /// Whether any answer text went out (else the output is sent whole at the end).
    sent_text: bool,
}

fn stream_event(data: &Value) -> Event {
    Event::default().data(data.to_string())
}

impl Chunks {
    fn chunk(&self, delta: Value, finish_reason: Value) -> Value {
        let mut chunk = json!({
            "id": self.meta.id,
            "object": "chat.completion.chunk",
            "created": self.meta.created,
            "model": self.meta.model,
            "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    fn on(&mut self, item: Item) -> Vec<Event> {
        match item {
            Item::Event(AgentEvent::ModelDelta { text, .. } | AgentEvent::FinalDelta { text, .. })
                if !text.is_empty() =>
            {
                self.sent_text = true;
                vec![stream_event(&self.chunk(json!({"content": text}), Value::Null))]
            }
            // Reasoning as vLLM and llama.cpp stream it; a strict run's step reasoning stays
            // internal.
            Item::Event(AgentEvent::ReasoningDelta {
                text, step_id: None, ..
            }) if !text.is_empty() => vec![stream_event(
                &self.chunk(json!({"reasoning_content": text}), Value::Null),
            )],
            Item::Event(_) => Vec::new(),
            Item::Done(finished) => self.done(*finished),
        }
    }

    fn done(&mut self, finished: Finished) -> Vec<Event> {
        if let Some(error) = self.meta.run_error(&finished) {
            // OpenAI's SDKs raise on a chunk carrying `error`; no [DONE] follows.
            return vec![stream_event(&error.body())];
        }
        let mut out = Vec::new();
        if !self.sent_text
            && let Some(text) = finished.text.filter(|t| !t.is_empty())
        {
            out.push(stream_event(&self.chunk(json!({"content": text}), Value::Null)));
        }
        out.push(stream_event(&self.chunk(json!({}), json!(finish_reason(finished.cut)))));
        if self.include_usage {
            let mut last = self.chunk(json!({}), Value::Null);
            last["choices"] = json!([]);
            last["usage"] = usage_json(&finished.usage);
            out.push(stream_event(&last));
        }
        out.push(Event::default().data("[DONE]"));
        out
    }
}

/// An OpenAI run in flight: registered under its id while it runs (see [`start_live`]).
struct InFlight {
    state: Arc<AppState>,
    agent: Arc<dyn Served>,
    /// The agent's name (the request's `model`).
    name: String,
    run_id: String,
    live: Arc<LiveRun>,
    /// Set once the run's end was seen (its result handed on).
    ended: AtomicBool,
}

impl InFlight {
    /// The run has ended: it is no longer in flight.
    fn end(&self) {
        if !self.ended.swap(true, Ordering::SeqCst) {
            self.forget();
        }
    }

    fn forget(&self) {
        self.live.finish();
        self.state.live.remove(&self.name, &self.run_id, &self.live);
    }
}

/// The run of a request whose client may go away before it ends. An OpenAI run is driven by
/// its request (its stream, or the handler's future): a client that disconnects drops the run
/// mid-way, and its checkpoint would stay `running`, with no session for
/// `Agent::recover_orphans` to find it by and no client that knows to resume it. Dropped before
/// the run ended, this deletes that checkpoint (a run that waits for a person keeps its own:
/// its owner resumes it on the run-control routes), then lets the run's id go (so no resume
/// starts on the checkpoint meanwhile).
struct Abandoned(Arc<InFlight>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if self.0.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        let run = Arc::clone(&self.0);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            run.forget();
            return;
        };
        runtime.spawn(async move {
            let run_id = run.run_id.as_str();
            match run.agent.paused(run_id).await {
                // Working when its client went away: nobody can continue it.
                Ok(paused) if !paused.waits => {
                    if let Err(error) = run.agent.discard(run_id).await {
                        tracing::warn!(run_id, %error, "the checkpoint of a run its client abandoned was not deleted");
                    }
                }
                // Waiting for a person (it paused as its client went away): kept for run control;
                // or no checkpoint at all.
                Ok(_) | Err(AgentError::CheckpointNotFound { .. } | AgentError::Configuration { .. }) => {}
                Err(error) => {
                    tracing::warn!(run_id, %error, "the checkpoint of a run its client abandoned was not read");
                }
            }
            run.forget();
        });
    }
}

/// A streamed answer with the [`Abandoned`] guard of its run, dropped after the stream (so the
/// run has stopped before its checkpoint is looked at).
struct Guarded {
    events: BoxStream<'static, Event>,
    _abandoned: Abandoned,
}

impl Stream for Guarded {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.events.poll_next_unpin(cx)
    }
}

/// An agent as an OpenAI model object. A structured agent's also has `response_format`: the
/// `json_schema` format it answers in, as a request may send it back and as OpenAI takes it
/// ([`ResponseFormat::wire_schema`](modu_core::model::ResponseFormat::wire_schema): `strict`
/// only with a schema in strict mode's subset).
fn model_json(state: &AppState, name: &str, agent: &Arc<dyn Served>) -> Value {
    let mut model = json!({"id": name, "object": "model", "created": state.created, "owned_by": "modu"});
    if let Some(format) = agent.response_format() {
        let (schema, strict) = format.wire_schema();
        model["response_format"] = json!({"type": "json_schema", "json_schema": {
            "name": format.name, "schema": schema, "strict": strict,
        }});
    }
    model
}

/// `GET /v1/models`.
pub(crate) async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    let data: Vec<Value> = state
        .agents
        .iter()
        .map(|(name, agent)| model_json(&state, name, agent))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{model}`: one agent as a model; 404 `model_not_found` for another name.
pub(crate) async fn model(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(&name)?;
    Ok(Json(model_json(&state, &name, agent)))
}
