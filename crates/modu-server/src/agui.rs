//! The AG-UI endpoint: `POST /agui/{agent}` takes a `RunAgentInput` and answers with an SSE
//! stream of AG-UI events (`data: {event}` lines).
//!
//! - `threadId` is the run's session, bound to the principal that first used it (anyone else
//!   gets 404); `runId` its run id (a run id that already has a
//!   checkpoint is refused with 409, so a request cannot overwrite another run's state).
//! - `forwardedProps.mcp` becomes the run's `mcp` metadata, the MCP server selection that
//!   modu-mcp reads (`{"servers": [...]}`); inline stdio servers are refused from the network.
//! - When the agent keeps conversations (a conversation store), the thread's history is on the
//!   server and the run's input is the messages after the last assistant or tool message;
//!   otherwise the input is every message of the request.
//! - A run that waits for approvals ends with `RUN_FINISHED` and an `interrupt` outcome, one
//!   interrupt per waiting call (id `{runId}#{callId}`, `toolCallId` the call). The next
//!   `RunAgentInput` of the thread answers them in `resume` (AG-UI 1.0's interrupt/resume):
//!   an entry `{"interruptId", "status": "resolved", "payload": {"approved": true}}` approves
//!   the call (`"always": true` also later calls of the tool), `{"approved": false,
//!   "message"?}` rejects it, and `"status": "cancelled"` rejects it too. Every waiting call
//!   must be answered, once; an entry for a call that does not wait is refused (404), and a
//!   refused resume records no decision. The paused run then continues and streams under the
//!   new `runId`. While
//!   it runs, the paused run is taken: another resume of it (over AG-UI, run control or A2A)
//!   is refused with 409.
//! - A request with `Last-Event-ID` reconnects to its run (`runId`): the events after that id,
//!   then the rest live; it never starts a run, and a run no longer kept is answered with 410.
//!   Without it, a `runId` the server still keeps (running, or ended less than
//!   [`KEEP_FINISHED`](crate::KEEP_FINISHED) ago) is refused with 409 `run_id_in_use` and
//!   nothing runs (a resume may reuse its paused run's own id): reconnect with
//!   `Last-Event-ID: 0` to read that run's events from its first.
//! - Frontend tools (`tools`), `context` and `state` are not used yet.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::response::Response;
use http::HeaderMap;
use modu_core::{Message, Role, ToolCall};
use serde::Deserialize;
use serde_json::Value;

use crate::AppState;
use crate::agui_events::Translator;
use crate::auth::{Caller, Principal};
use crate::control::{agui_stream, decide, last_event_id, owned_run, reconnect, start_live, start_live_resuming};
use crate::error::{ApiPath, ServerError};
use crate::mount::{Decision, RunInput, Served, called_tool};

/// An AG-UI `RunAgentInput` (the fields the server reads).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunAgentInput {
    thread_id: String,
    run_id: String,
    messages: Vec<AguiMessage>,
    #[serde(default)]
    forwarded_props: Option<Value>,
    #[serde(default)]
    resume: Option<Vec<ResumeEntry>>,
}

/// An AG-UI `ResumeEntry`: the answer to one interrupt.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    interrupt_id: String,
    status: String,
    #[serde(default)]
    payload: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AguiMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<AguiToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct AguiToolCall {
    id: String,
    function: AguiFunction,
}

#[derive(Debug, Deserialize)]
struct AguiFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

/// The text of a message's content: a string, or the text parts of a part list.
fn content_text(content: Option<&Value>) -> Result<String, ServerError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => return Err(ServerError::bad_request("only text content parts are supported")),
                }
            }
            Ok(text)
        }
        Some(_) => Err(ServerError::bad_request(
            "message content must be a string or a list of parts",
        )),
    }
}

fn to_messages(wire: Vec<AguiMessage>) -> Result<Vec<Message>, ServerError> {
    let mut out: Vec<Message> = Vec::with_capacity(wire.len());
    for m in wire {
        let text = content_text(m.content.as_ref())?;
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
                Message::assistant_tool_calls(text, calls)
            }
            "tool" => {
                let Some(call_id) = m.tool_call_id else {
                    return Err(ServerError::bad_request("a tool message needs a toolCallId"));
                };
                let name = called_tool(&out, &call_id).unwrap_or_default();
                let is_error = m.error.is_some();
                let text = m.error.unwrap_or(text);
                Message::tool_result(call_id, name, text, is_error)
            }
            // Activity and reasoning messages are the UI's, not the conversation's.
            "activity" | "reasoning" => continue,
            other => return Err(ServerError::bad_request(format!("unknown message role {other:?}"))),
        };
        out.push(message);
    }
    Ok(out)
}

/// An id the server accepts as a run id or thread id: 1 to 200 characters of letters, digits
/// and `-_.:`.
fn valid_id(id: &str) -> bool {
    (1..=200).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// `forwardedProps.mcp`, checked: an object, no inline stdio server (a network caller may
/// never start a process on the server, whatever the resolver allows), and no inline server
/// that names a variable of the server's environment (`bearer_token_env`, `client_secret_env`:
/// its value would be sent to the URL the caller chose).
pub(crate) fn mcp_selection(forwarded: Option<&Value>) -> Result<Option<Value>, ServerError> {
    let Some(mcp) = forwarded.and_then(|f| f.get("mcp")).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    if !mcp.is_object() {
        return Err(ServerError::bad_request(
            "forwardedProps.mcp must be an object with a `servers` array",
        ));
    }
    if let Some(servers) = mcp.get("servers").and_then(Value::as_array) {
        for server in servers.iter().filter(|s| s.is_object()) {
            let stdio =
                server.get("transport").and_then(Value::as_str) == Some("stdio") || server.get("command").is_some();
            if stdio {
                return Err(ServerError::bad_request(
                    "inline stdio MCP servers are refused from the network",
                ));
            }
            if let Some(key) = environment_key(server) {
                return Err(ServerError::bad_request(format!(
                    "inline MCP servers from the network may not read the server's environment (`{key}`); give the credential inline or configure the server"
                )));
            }
        }
    }
    Ok(Some(mcp.clone()))
}

/// The first key ending in `_env` (a variable the server would read) anywhere in `value`.
fn environment_key(value: &Value) -> Option<&str> {
    match value {
        Value::Object(map) => map.iter().find_map(|(key, v)| {
            if key.ends_with("_env") {
                Some(key.as_str())
            } else {
                environment_key(v)
            }
        }),
        Value::Array(items) => items.iter().find_map(environment_key),
        _ => None,
    }
}

/// `POST /agui/{agent}`.
pub(crate) async fn run(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
    Caller(principal): Caller,
    headers: HeaderMap,
    payload: Result<Json<RunAgentInput>, JsonRejection>,
) -> Result<Response, ServerError> {
    let Json(input) = payload?;
    let agent = Arc::clone(state.agent(&name)?);
    if !valid_id(&input.thread_id) || !valid_id(&input.run_id) {
        return Err(ServerError::bad_request(
            "threadId and runId must be 1 to 200 letters, digits or -_.:",
        ));
    }
    if !state.sessions.claim(&input.thread_id, &principal) {
        return Err(ServerError::not_found("no thread with this id"));
    }
    // A client reconnecting to its run: the events after the last one it saw (410 when the
    // run is no longer kept). A request with `Last-Event-ID` never starts a run.
    if let Some(after) = last_event_id(&headers)? {
        return reconnect(&state, &name, &input.run_id, &principal, after);
    }
    // A run id the server still keeps (running, or ended less than KEEP_FINISHED ago) names
    // that run: without Last-Event-ID it is refused rather than run again, so a client that
    // re-POSTs a finished run's input does not run its tools twice, and the run's events stay
    // the ones a reconnect reads. Only a resume may reuse its own paused run's id.
    let resumes_itself = input.resume.iter().flatten().any(|entry| {
        entry
            .interrupt_id
            .split_once('#')
            .is_some_and(|(paused, _)| paused == input.run_id)
    });
    if state.live.running(&name, &input.run_id) || (state.live.kept(&name, &input.run_id) && !resumes_itself) {
        return Err(ServerError::RunIdInUse);
    }
    if let Some(entries) = input.resume.filter(|r| !r.is_empty()) {
        return resume(&state, &name, agent, &principal, input.thread_id, input.run_id, entries).await;
    }
    let mut metadata = serde_json::Map::new();
    if let Some(mcp) = mcp_selection(input.forwarded_props.as_ref())? {
        metadata.insert("mcp".into(), mcp);
    }
    let metadata = state.run_metadata(&name, metadata);
    let mut messages = to_messages(input.messages)?;
    if agent.keeps_history() {
        let new_turn = messages
            .iter()
            .rposition(|m| matches!(m.role, Role::Assistant | Role::Tool))
            .map_or(0, |i| i + 1);
        messages.drain(..new_turn);
    }
    if !messages.iter().any(|m| m.role == Role::User) {
        return Err(ServerError::bad_request("the run has no new user message"));
    }
    if agent.has_run(&input.run_id).await {
        return Err(ServerError::RunIdInUse);
    }
    let live = start_live(&state, &name, &input.run_id, &principal)?;
    let translator = Translator::new(input.thread_id.clone(), input.run_id.clone(), messages.len());
    let run_id = input.run_id.clone();
    let run = RunInput {
        messages,
        session_id: Some(input.thread_id),
        run_id: input.run_id,
        metadata,
        cancel: live.cancel.clone(),
        model_settings: None,
    };
    let items = agent.stream(&principal, run);
    agui_stream(&state, &name, &run_id, live, translator, items)
}

/// The decision a resume entry carries: `status: "cancelled"` rejects; a resolved entry's
/// payload is `{"approved": bool, "always"?: bool, "message"?: string}` (or a bare boolean).
fn decision(entry: &ResumeEntry) -> Result<Decision, ServerError> {
    let invalid = || {
        ServerError::bad_request(format!(
            "resume entry {:?}: the payload must be {{\"approved\": true|false}}",
            entry.interrupt_id
        ))
    };
    match entry.status.as_str() {
        "cancelled" => Ok(Decision::Reject { message: None }),
        "resolved" => match &entry.payload {
            Some(Value::Bool(true)) => Ok(Decision::Approve { always: false }),
            Some(Value::Bool(false)) => Ok(Decision::Reject { message: None }),
            Some(Value::Object(fields)) => match fields.get("approved").and_then(Value::as_bool) {
                Some(true) => Ok(Decision::Approve {
                    always: fields.get("always").and_then(Value::as_bool).unwrap_or(false),
                }),
                Some(false) => Ok(Decision::Reject {
                    message: fields.get("message").and_then(Value::as_str).map(str::to_owned),
                }),
                None => Err(invalid()),
            },
            _ => Err(invalid()),
        },
        other => Err(ServerError::bad_request(format!(
            "resume entry status {other:?}: expected \"resolved\" or \"cancelled\""
        ))),
    }
}

/// A `RunAgentInput` whose `resume` answers the interrupts of a paused run of the thread:
/// records the decisions, then streams the continued run under the new run id.
async fn resume(
    state: &Arc<AppState>,
    name: &str,
    agent: Arc<dyn Served>,
    principal: &Principal,
    thread_id: String,
    run_id: String,
    entries: Vec<ResumeEntry>,
) -> Result<Response, ServerError> {
    let mut paused_run: Option<&str> = None;
    let mut answers = Vec::with_capacity(entries.len());
    for entry in &entries {
        let Some((run, call)) = entry.interrupt_id.split_once('#') else {
            return Err(ServerError::bad_request(format!(
                "resume entry {:?} answers no interrupt of this server",
                entry.interrupt_id
            )));
        };
        if paused_run.is_some_and(|r| r != run) {
            return Err(ServerError::bad_request(
                "resume entries must answer the interrupts of one run",
            ));
        }
        paused_run = Some(run);
        answers.push((call, decision(entry)?));
    }
    let Some(paused_id) = paused_run.map(str::to_owned) else {
        return Err(ServerError::bad_request("resume is empty"));
    };
    let paused = owned_run(&agent, &paused_id, principal).await?;
    if paused.session_id.as_deref() != Some(thread_id.as_str()) {
        return Err(ServerError::not_found("no paused run with this id in this thread"));
    }
    for waiting in &paused.approvals {
        if !answers.iter().any(|(call, _)| *call == waiting.call_id) {
            return Err(ServerError::bad_request(format!(
                "interrupt {:?} is not answered",
                crate::agui_events::interrupt_id(&paused_id, &waiting.call_id)
            )));
        }
    }
    // The paused run is claimed too, for as long as this resume runs: a second resume of it
    // (AG-UI, run control or A2A) is refused with 409 instead of running its calls again.
    let live = start_live_resuming(state, name, &run_id, Some(&paused_id), principal)?;
    // Every entry is checked before any decision is recorded: a refused resume records
    // nothing, so the person can still answer each interrupt either way.
    if let Err(error) = answer_waiting_calls(&paused_id, &paused.approvals, &answers) {
        state.live.remove(name, &run_id, &live);
        return Err(error);
    }
    for (call, decision) in answers {
        if let Err(error) = decide(&agent, &paused_id, call, decision).await {
            state.live.remove(name, &run_id, &live);
            return Err(error);
        }
    }
    let translator =
        Translator::new(thread_id, run_id.clone(), paused.message_count).resuming(paused_id.clone(), paused.call_ids);
    let task = crate::a2a_tasks::ResumedTask::of(state, &paused_id);
    let items =
        crate::a2a_tasks::ResumedTask::follow(task, agent.resume_stream(principal, &paused_id, live.cancel.clone()));
    agui_stream(state, name, &run_id, live, translator, items)
}

/// Checks that each answer is to a call of the paused run that waits, and to each call once.
fn answer_waiting_calls(
    paused_id: &str,
    waiting: &[modu_core::ApprovalRequest],
    answers: &[(&str, Decision)],
) -> Result<(), ServerError> {
    for (i, (call, _)) in answers.iter().enumerate() {
        let interrupt = || crate::agui_events::interrupt_id(paused_id, call);
        if !waiting.iter().any(|w| w.call_id == *call) {
            return Err(ServerError::not_found(format!(
                "interrupt {:?} answers no call of the run that waits for approval",
                interrupt()
            )));
        }
        if answers[..i].iter().any(|(earlier, _)| earlier == call) {
            return Err(ServerError::bad_request(format!(
                "interrupt {:?} is answered twice",
                interrupt()
            )));
        }
    }
    Ok(())
}
