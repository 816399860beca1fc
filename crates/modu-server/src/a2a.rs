//! The A2A endpoint (protocol 1.0, JSON-RPC binding): `POST /a2a/{agent}` and the agent card
//! at `/a2a/{agent}/.well-known/agent-card.json` (the path A2A names, under the agent's own
//! URL; `/.well-known/agent-card.json` too when one agent is served).
//!
//! - `SendMessage` runs a task to its end (or its pause) and answers with the task;
//!   `SendStreamingMessage` answers with an SSE stream: the task, the answer as artifact
//!   updates while it streams, tool calls as working status updates, and a last status update.
//! - A task is a run (`task id` = run id); `contextId` is the session, bound to the principal
//!   that first used it (anyone else's message naming it is refused).
//! - A run that waits for approvals leaves its task `TASK_STATE_INPUT_REQUIRED`, its status
//!   message listing the calls (`{"approvals": [...]}` in a data part). The next message on the
//!   task (`taskId` set) carries the decision: the text `approve` or `reject`, or a data part
//!   `{"approved": true|false, "callId"?, "always"?, "message"?}` (or `{"decisions": [...]}`);
//!   every waiting call must be decided, and the run then continues. The run may also be
//!   decided and resumed through run control or an AG-UI resume: the task is then
//!   `TASK_STATE_WORKING` while it runs and ends with it, as if A2A had resumed it
//!   (`SubscribeToTask` gives the task, then its answer and last status when the run ends).
//! - A `SendMessage` / `SendStreamingMessage` task holds at most its request's
//!   `configuration.historyLength` newest messages (as `GetTask`'s `historyLength`). A
//!   `SendMessage` with `configuration.returnImmediately` is answered with the task as it
//!   stands (working) once its run has started; the run goes on for the client to poll
//!   (`GetTask`). Push notification configurations are not read.
//! - A data part `{"mcp": {...}}` is the run's MCP selection, checked as AG-UI's
//!   `forwardedProps.mcp` (inline stdio servers refused; one selection per message).
//! - `GetTask` reads a task; `CancelTask` cancels a task: a running one (its paused run resumed
//!   by A2A, run control or an AG-UI resume) stops at its next
//!   boundary (its checkpoint kept, so run control's `resume` can continue it), one waiting
//!   for input has its paused run dropped. Either way the task reads `TASK_STATE_CANCELED`.
//! - A notification (a request without `id`) is not run and gets no reply (204, no body):
//!   JSON-RPC 2.0 forbids the reply, and every A2A method is a request whose answer is its point.
//! - A batch (a JSON array of requests, as JSON-RPC 2.0 defines it) is answered with an array of the
//!   responses, in order (see [`crate::a2a_rpc`]).
//! - A task's run goes on when its client goes away; a streamed task can be followed again
//!   (`GET /agents/{agent}/runs/{task}/events`, with `Last-Event-ID`). Tasks are kept in memory, the newest 10,000, and only their
//!   owner (the principal's user) sees them.

use std::sync::Arc;

use axum::Json;
use axum::extract::{OriginalUri, State};
use axum::response::Response;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::HeaderMap;
use modu_core::Message;
use serde_json::{Value, json};

pub(crate) use crate::a2a_tasks::Tasks;
use crate::a2a_tasks::{ResumedTask, StreamTranslator, TaskGuard, TaskRecord, task_json};
use crate::a2a_wire::{
    RpcError, SendParams, TaskParams, TaskState, WireMessage, agent_message, behind, code, incoming, parse, success,
    text_decision, user_message,
};
use crate::auth::Principal;
use crate::control::{decide, follow_sse, owned_run, start_live};
use crate::error::{ApiPath, ServerError};
use crate::live::run_detached;
use crate::mount::{Decision, Item, RunInput, Served};
use crate::{AppState, Metadata};

/// The URL of an agent's JSON-RPC endpoint, from the public URL or the request.
fn rpc_url(state: &AppState, headers: &HeaderMap, card_path: &str, name: &str, root: bool) -> String {
    if let Some(public) = &state.public_url {
        return format!("{public}/a2a/{name}");
    }
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let base = card_path.trim_end_matches("/.well-known/agent-card.json");
    if root {
        format!("http://{host}{base}/a2a/{name}")
    } else {
        format!("http://{host}{base}")
    }
}

/// The media types the agent's answer comes in, as its card says: a structured agent's is
/// one JSON data part; a text agent answers text (and data parts alongside a pause).
fn output_modes(agent: &dyn Served) -> &'static [&'static str] {
    if agent.response_format().is_some() {
        &["application/json"]
    } else {
        &DEFAULT_OUTPUT_MODES
    }
}

/// The card's `defaultOutputModes`.
const DEFAULT_OUTPUT_MODES: [&str; 2] = ["text/plain", "application/json"];

fn card_json(name: &str, agent: &Arc<dyn Served>, url: String) -> Value {
    let own = agent.agent_name();
    let description = format!("The modu agent {own}, served as {name}");
    let mut skill = json!({"id": name, "name": name, "description": description, "tags": ["modu"]});
    let mut capabilities = json!({"streaming": true, "pushNotifications": false});
    // A structured agent answers one JSON data part: its skill says so, and the output-schema
    // extension (an `AgentExtension`, whose `params` the A2A spec leaves to the extension)
    // carries the schema, so a client can check (or generate types for) the answer.
    if let Some(format) = agent.response_format() {
        skill["outputModes"] = json!(["application/json"]);
        capabilities["extensions"] = json!([{
            "uri": OUTPUT_SCHEMA_EXTENSION,
            "description": "The JSON schema of the agent's answer (a data part of the answer artifact)",
            "required": false,
            "params": {"name": format.name, "schema": format.schema},
        }]);
    }
    json!({
        "name": name,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": capabilities,
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": DEFAULT_OUTPUT_MODES,
        "skills": [skill],
    })
}

/// The URI of the agent-card extension that publishes a structured agent's output schema.
pub(crate) const OUTPUT_SCHEMA_EXTENSION: &str = "https://github.com/modu-rs/modu/a2a/output-schema/v1";

/// `GET /a2a/{agent}/.well-known/agent-card.json`.
pub(crate) async fn card(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(&name)?;
    let url = rpc_url(&state, &headers, uri.path(), &name, false);
    Ok(Json(card_json(&name, agent, url)))
}

/// `GET /.well-known/agent-card.json`: the card of the one agent served.
pub(crate) async fn root_card(
    State(state): State<Arc<AppState>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Result<Json<Value>, ServerError> {
    let mut names = state.agents.keys();
    let (Some(name), None) = (names.next(), names.next()) else {
        return Err(ServerError::not_found(
            "several agents are served: each has its card at /a2a/{agent}/.well-known/agent-card.json",
        ));
    };
    let url = rpc_url(&state, &headers, uri.path(), name, true);
    Ok(Json(card_json(name, state.agent(name)?, url)))
}

/// A message ready to run: a new task or the continuation of a paused one.
struct Prepared {
    task_id: String,
    context_id: String,
    /// The new run's input; `None` to resume the paused run.
    start: Option<RunInput>,
    /// The paused run's registration as in flight, for a continuation (claimed before its
    /// decisions are recorded, so a concurrent resume of the same run is refused).
    live: Option<Arc<crate::live::LiveRun>>,
}

/// Checks a message and records its task (new, or moved from input-required to working).
async fn prepare(
    state: &AppState,
    name: &str,
    agent: &Arc<dyn Served>,
    principal: &Principal,
    params: Value,
) -> Result<Prepared, RpcError> {
    let params: SendParams = parse(params)?;
    let message = params.message;
    let incoming = incoming(&message)?;
    if let Some(task_id) = message.task_id.clone().filter(|t| !t.is_empty()) {
        return continuation(state, name, agent, principal, task_id, &message, incoming).await;
    }
    if !incoming.decisions.is_empty() {
        return Err(RpcError::invalid_params(
            "a decision answers a task: set the message's taskId",
        ));
    }
    if incoming.text.trim().is_empty() {
        return Err(RpcError::invalid_params("the message has no text"));
    }
    let task_id = uuid::Uuid::new_v4().simple().to_string();
    let context_id = message
        .context_id
        .clone()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    // The contextId is the session id: one no store can keep (too long, a NUL) is the
    // caller's mistake, said before anything runs, not a store failure after.
    if let Err(refused) = modu_core::StoreError::check_id(&context_id) {
        return Err(RpcError::invalid_params(format!(
            "the contextId cannot be a session id: {refused}"
        )));
    }
    if !state.sessions.claim(&context_id, principal) {
        // Another caller's session: refused without saying whose.
        return Err(RpcError::invalid_params(
            "this contextId cannot be used; choose another",
        ));
    }
    let mut metadata = Metadata::new();
    if let Some(mcp) = incoming.mcp {
        metadata.insert("mcp".into(), mcp);
    }
    let record = TaskRecord {
        agent: name.to_owned(),
        owner: principal.user.clone(),
        context_id: context_id.clone(),
        state: TaskState::Working,
        status_message: None,
        artifacts: Vec::new(),
        history: vec![user_message(&task_id, &context_id, &message)],
        changed: 0,
        resumed_elsewhere: false,
    };
    state.tasks.insert(&task_id, record);
    let start = RunInput {
        messages: vec![Message::user(incoming.text)],
        session_id: Some(context_id.clone()),
        run_id: task_id.clone(),
        metadata: state.run_metadata(name, metadata),
        cancel: tokio_util::sync::CancellationToken::new(),
        model_settings: None,
    };
    Ok(Prepared {
        task_id,
        context_id,
        start: Some(start),
        live: None,
    })
}

/// The next message on an input-required task: its decisions, recorded; the run is resumed.
async fn continuation(
    state: &AppState,
    name: &str,
    agent: &Arc<dyn Served>,
    principal: &Principal,
    task_id: String,
    message: &WireMessage,
    incoming: crate::a2a_wire::Incoming,
) -> Result<Prepared, RpcError> {
    let task = state.tasks.get(&task_id, name, principal)?;
    if message
        .context_id
        .as_deref()
        .is_some_and(|c| !c.is_empty() && c != task.context_id)
    {
        return Err(RpcError::invalid_params("the contextId is not the task's"));
    }
    match task.state {
        TaskState::InputRequired => {}
        TaskState::Working => return Err(RpcError::new(code::UNSUPPORTED_OPERATION, "the task is still working")),
        _ => return Err(RpcError::new(code::UNSUPPORTED_OPERATION, "the task has ended")),
    }
    if incoming.mcp.is_some() {
        return Err(RpcError::invalid_params(
            "the MCP selection of a task is set by its first message",
        ));
    }
    let paused = owned_run(agent, &task_id, principal)
        .await
        .map_err(|_| RpcError::task_not_found())?;
    if paused.approvals.is_empty() && !paused.inputs.is_empty() {
        return Err(RpcError::invalid_params(crate::inputs::not_an_approval(name, &task_id)));
    }
    let mut decisions = incoming.decisions;
    if decisions.is_empty() {
        let decision = text_decision(&incoming.text)
            .ok_or_else(|| RpcError::invalid_params("the task waits for approval: answer approve or reject"))?;
        decisions.push((None, decision));
    }
    let mut chosen: Vec<(String, Decision)> = Vec::new();
    for (call, decision) in &decisions {
        if let Some(call) = call {
            if !paused.approvals.iter().any(|r| &r.call_id == call) {
                return Err(RpcError::invalid_params(format!("no call {call:?} waits for approval")));
            }
            chosen.push((call.clone(), decision.clone()));
        }
    }
    let default = decisions
        .iter()
        .find(|(call, _)| call.is_none())
        .map(|(_, d)| d.clone());
    for waiting in &paused.approvals {
        if chosen.iter().any(|(call, _)| *call == waiting.call_id) {
            continue;
        }
        let Some(decision) = default.clone() else {
            return Err(RpcError::invalid_params(format!(
                "the call {:?} is not decided",
                waiting.call_id
            )));
        };
        chosen.push((waiting.call_id.clone(), decision));
    }
    // The paused run is claimed before anything is recorded: a resume of it in flight (from
    // run control or AG-UI) refuses this one, and this one refuses theirs.
    let live = live_task(state, name, &task_id, principal)?;
    if !state
        .tasks
        .transition(&task_id, TaskState::InputRequired, TaskState::Working)
    {
        state.live.remove(name, &task_id, &live);
        return Err(RpcError::new(
            code::UNSUPPORTED_OPERATION,
            "the task is not waiting for input",
        ));
    }
    for (call, decision) in chosen {
        if let Err(error) = decide(agent, &task_id, &call, decision).await {
            state
                .tasks
                .transition(&task_id, TaskState::Working, TaskState::InputRequired);
            state.live.remove(name, &task_id, &live);
            return Err(RpcError::new(code::INTERNAL, error.to_string()));
        }
    }
    let user = user_message(&task_id, &task.context_id, message);
    state.tasks.update(&task_id, |t| {
        t.history.push(user);
        t.status_message = None;
        t.resumed_elsewhere = false;
    });
    Ok(Prepared {
        task_id,
        context_id: task.context_id,
        start: None,
        live: Some(live),
    })
}

/// `SendMessage`: runs the task to its end or pause; answers `{"task": ...}`.
pub(crate) async fn send(
    state: &Arc<AppState>,
    name: &str,
    agent: Arc<dyn Served>,
    principal: &Principal,
    params: Value,
) -> Result<Value, RpcError> {
    let history_length = crate::a2a_wire::history_length(&params)?;
    let return_immediately = crate::a2a_wire::return_immediately(&params)?;
    crate::a2a_wire::check_output_modes(&params, output_modes(agent.as_ref()))?;
    let mut prepared = prepare(state, name, &agent, principal, params).await?;
    let live = match prepared.live.take() {
        Some(live) => live,
        None => live_task(state, name, &prepared.task_id, principal)?,
    };
    let guard = TaskGuard {
        state: Arc::clone(state),
        id: prepared.task_id.clone(),
        armed: true,
    };
    let run = match prepared.start {
        Some(mut input) => {
            input.cancel = live.cancel.clone();
            agent.run(principal, input)
        }
        None => agent.resume(principal, &prepared.task_id, live.cancel.clone()),
    };
    let ended = {
        let (state, name, task_id) = (Arc::clone(state), name.to_owned(), prepared.task_id.clone());
        async move {
            // The whole guard moves in (not its field alone): it marks the task cancelled
            // when this future is dropped before the run ended.
            let mut guard = guard;
            let finished = run_detached(Arc::clone(&state), name, task_id.clone(), live, run).await;
            guard.armed = false;
            if let Some(finished) = finished {
                state.tasks.finish(&task_id, &finished);
            }
        }
    };
    if return_immediately {
        // The run goes on, on its own task; the client polls `GetTask` for its end.
        tokio::spawn(ended);
    } else {
        ended.await;
    }
    let task = state.tasks.get(&prepared.task_id, name, principal)?;
    Ok(json!({"task": task_json(&prepared.task_id, &task, history_length)}))
}

/// `SendStreamingMessage`: an SSE stream of JSON-RPC responses.
pub(crate) async fn stream(
    state: Arc<AppState>,
    name: &str,
    agent: Arc<dyn Served>,
    principal: &Principal,
    params: Value,
    id: Value,
) -> Result<Response, RpcError> {
    let history_length = crate::a2a_wire::history_length(&params)?;
    crate::a2a_wire::check_output_modes(&params, output_modes(agent.as_ref()))?;
    let mut prepared = prepare(&state, name, &agent, principal, params).await?;
    let live = match prepared.live.take() {
        Some(live) => live,
        None => live_task(&state, name, &prepared.task_id, principal)?,
    };
    let task = match state.tasks.get(&prepared.task_id, name, principal) {
        Ok(task) => task,
        Err(error) => {
            state.live.remove(name, &prepared.task_id, &live);
            return Err(error);
        }
    };
    let opening = json!({"task": task_json(&prepared.task_id, &task, history_length)});
    let items: BoxStream<'static, Item> = match prepared.start {
        Some(mut input) => {
            input.cancel = live.cancel.clone();
            agent.stream(principal, input)
        }
        None => agent.resume_stream(principal, &prepared.task_id, live.cancel.clone()),
    };
    let mut translator = StreamTranslator {
        guard: TaskGuard {
            state: Arc::clone(&state),
            id: prepared.task_id.clone(),
            armed: true,
        },
        task_id: prepared.task_id.clone(),
        context_id: prepared.context_id,
        fresh: true,
    };
    let events = futures::stream::once(async move { opening })
        .chain(items.flat_map(move |item| futures::stream::iter(translator.on(item))))
        .boxed();
    crate::live::drive(
        Arc::clone(&state),
        name.to_owned(),
        prepared.task_id,
        Arc::clone(&live),
        events,
    );
    let behind = behind(&id);
    follow_sse(&live, None, move |value| success(&id, value).to_string(), behind)
        .map_err(|e| RpcError::new(code::INTERNAL, e.to_string()))
}

/// Registers a task's run as in flight.
fn live_task(
    state: &AppState,
    name: &str,
    task_id: &str,
    principal: &Principal,
) -> Result<Arc<crate::live::LiveRun>, RpcError> {
    start_live(state, name, task_id, principal)
        .map_err(|_| RpcError::new(code::UNSUPPORTED_OPERATION, "the task is running already"))
}

/// `SubscribeToTask`: an SSE stream of a working task's updates, as `SendStreamingMessage`
/// sends them. The first response is the task as it stands; then every update the task's run
/// still keeps (with `Last-Event-ID`, those after that event) and the rest as they come, until
/// the task ends or pauses. A task not working (ended, or waiting for input) cannot be
/// subscribed to; nor, with `Last-Event-ID`, one whose run was resumed elsewhere (no ids).
pub(crate) fn subscribe(
    state: &Arc<AppState>,
    name: &str,
    principal: &Principal,
    params: Value,
    headers: &HeaderMap,
    id: Value,
) -> Result<Response, RpcError> {
    let params: TaskParams = parse(params)?;
    let task = state.tasks.get(&params.id, name, principal)?;
    let not_working = || RpcError::new(code::UNSUPPORTED_OPERATION, "the task is not working");
    if task.state != TaskState::Working {
        return Err(not_working());
    }
    // The run that continues the task: under its id (A2A's own, or a run-control resume), or
    // an AG-UI resume's under another id.
    let running = state
        .live
        .get(name, &params.id, principal)
        .filter(|live| !live.is_done());
    let first = success(&id, json!({"task": task_json(&params.id, &task, None)})).to_string();
    let after = crate::a2a_wire::last_event_id(headers)?;
    if task.resumed_elsewhere {
        if after.is_some() {
            return Err(RpcError::invalid_params(crate::a2a_wire::RESUMED_ELSEWHERE));
        }
        let live = running
            .or_else(|| state.live.resuming(name, &params.id, principal))
            .ok_or_else(not_working)?;
        return Ok(ResumedTask::subscribe(Arc::clone(state), live, params.id, id, first));
    }
    let live = running.ok_or_else(not_working)?;
    let behind = behind(&id);
    crate::control::follow_sse_from(
        &live,
        after,
        Some(first),
        move |value| success(&id, value).to_string(),
        behind,
    )
    .map_err(RpcError::events_gone)
}

/// `GetTask`.
pub(crate) fn get_task(state: &AppState, name: &str, principal: &Principal, params: Value) -> Result<Value, RpcError> {
    let params: TaskParams = parse(params)?;
    let task = state.tasks.get(&params.id, name, principal)?;
    Ok(task_json(&params.id, &task, params.history_length))
}

/// `CancelTask`: a task waiting for input is cancelled (its paused run is dropped).
pub(crate) async fn cancel_task(
    state: &AppState,
    name: &str,
    agent: Arc<dyn Served>,
    principal: &Principal,
    params: Value,
) -> Result<Value, RpcError> {
    let params: TaskParams = parse(params)?;
    let task = state.tasks.get(&params.id, name, principal)?;
    if task.state == TaskState::Working {
        // A running task: its run stops at its next boundary, its checkpoint kept. A task
        // whose paused run an AG-UI resume continues runs under the resume's id.
        let live = state
            .live
            .get(name, &params.id, principal)
            .filter(|live| !live.is_done())
            .or_else(|| state.live.resuming(name, &params.id, principal))
            .ok_or_else(|| RpcError::new(code::TASK_NOT_CANCELABLE, "the task has ended"))?;
        if !state
            .tasks
            .transition(&params.id, TaskState::Working, TaskState::Canceled)
        {
            return Err(RpcError::new(code::TASK_NOT_CANCELABLE, "the task has ended"));
        }
        live.cancel.cancel();
        let message = agent_message(
            &params.id,
            &task.context_id,
            vec![json!({"text": "The task was cancelled."})],
        );
        state.tasks.update(&params.id, |t| t.status_message = Some(message));
        let task = state.tasks.get(&params.id, name, principal)?;
        return Ok(task_json(&params.id, &task, None));
    }
    if !state
        .tasks
        .transition(&params.id, TaskState::InputRequired, TaskState::Canceled)
    {
        return Err(RpcError::new(code::TASK_NOT_CANCELABLE, "the task has ended"));
    }
    if let Err(error) = agent.discard(&params.id).await {
        tracing::warn!(error = %error, task = %params.id, "could not drop a cancelled task's checkpoint");
    }
    let message = agent_message(
        &params.id,
        &task.context_id,
        vec![json!({"text": "The task was cancelled."})],
    );
    state.tasks.update(&params.id, |t| t.status_message = Some(message));
    let task = state.tasks.get(&params.id, name, principal)?;
    Ok(task_json(&params.id, &task, None))
}
