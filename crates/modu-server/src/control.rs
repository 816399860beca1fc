//! Run control over HTTP: a paused run's pending approvals, approving and rejecting its
//! calls, resuming it (streamed as AG-UI events, or answered as JSON), and a session's
//! history.
//!
//! A run is the caller's when it runs for the caller's user (the principal's user id, the
//! same for an anonymous caller and an anonymous run); any other run is answered with 404,
//! as if it did not exist.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http::HeaderMap;
use modu_core::{AgentError, ApprovalRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::a2a_tasks::ResumedTask;
use crate::agui_events::Translator;
use crate::auth::{Caller, Principal};
use crate::error::{ApiPath, ServerError, checked_id};
use crate::inputs::input_json;
use crate::live::{Followed, LiveRun, Unfollowable};
use crate::mount::{Decision, Finished, PausedRun, Served};

/// A waiting call as the wire shows it.
pub(crate) fn approval_json(request: &ApprovalRequest) -> Value {
    json!({
        "callId": request.call_id,
        "tool": request.tool_name,
        "arguments": request.arguments,
        "metadata": request.metadata,
    })
}

/// The paused run `run_id`, if it is the caller's.
pub(crate) async fn owned_run(
    agent: &Arc<dyn Served>,
    run_id: &str,
    principal: &Principal,
) -> Result<PausedRun, ServerError> {
    checked_id("run_id", run_id)?;
    match agent.paused(run_id).await {
        Ok(run) if run.owned_by(principal) => Ok(run),
        Ok(_) | Err(AgentError::CheckpointNotFound { .. }) => Err(ServerError::not_found("no paused run with this id")),
        Err(AgentError::Configuration { .. }) => Err(ServerError::not_found(
            "this agent keeps no checkpoints, so it has no paused runs",
        )),
        Err(error) => Err(ServerError::run_failed(&error)),
    }
}

/// 409 when the run `run_id` is running (being resumed, from whichever endpoint): what it
/// waited for is being worked on, and a decision or answer recorded now would be lost or
/// taken by a later resume it was not meant for. Otherwise the run is claimed until the
/// returned guard drops: a resume that starts meanwhile is refused, not raced.
pub(crate) fn not_in_flight<'a>(
    state: &'a AppState,
    agent: &str,
    run_id: &str,
    principal: &Principal,
) -> Result<crate::live::Deciding<'a>, ServerError> {
    state
        .live
        .deciding(agent, run_id, principal)
        .ok_or_else(|| ServerError::RunInFlight {
            run_id: run_id.to_owned(),
        })
}

/// Records a decision, mapping an unknown call to 404.
pub(crate) async fn decide(
    agent: &Arc<dyn Served>,
    run_id: &str,
    call_id: &str,
    decision: Decision,
) -> Result<(), ServerError> {
    match agent.decide(run_id, call_id, decision).await {
        Ok(()) => Ok(()),
        Err(AgentError::UnknownApproval { .. }) => {
            Err(ServerError::not_found("no call with this id waits for approval"))
        }
        Err(error) => Err(ServerError::run_failed(&error)),
    }
}

/// `GET /agents/{agent}/runs/{run_id}/approvals`.
pub(crate) async fn approvals(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(&name)?;
    let run = owned_run(agent, &run_id, &principal).await?;
    let approvals: Vec<Value> = run.approvals.iter().map(approval_json).collect();
    let inputs: Vec<Value> = run.inputs.iter().map(input_json).collect();
    Ok(Json(
        json!({"runId": run_id, "sessionId": run.session_id, "approvals": approvals, "inputs": inputs}),
    ))
}

/// The body of `approve`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ApproveBody {
    call_id: String,
    /// Approve every later call of the same tool in this run too.
    #[serde(default)]
    always: bool,
}

/// The body of `reject`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RejectBody {
    call_id: String,
    /// Why, for the model.
    #[serde(default)]
    message: Option<String>,
}

async fn decided(
    state: &AppState,
    name: &str,
    run_id: &str,
    principal: &Principal,
    call_id: &str,
    decision: Decision,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(name)?;
    let _claim = not_in_flight(state, name, run_id, principal)?;
    owned_run(agent, run_id, principal).await?;
    decide(agent, run_id, call_id, decision).await?;
    Ok(Json(json!({"runId": run_id, "callId": call_id, "recorded": true})))
}

/// `POST /agents/{agent}/runs/{run_id}/approve` with `{"callId", "always"?}`.
pub(crate) async fn approve(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
    payload: Result<Json<ApproveBody>, JsonRejection>,
) -> Result<Json<Value>, ServerError> {
    let Json(body) = payload?;
    let decision = Decision::Approve { always: body.always };
    decided(&state, &name, &run_id, &principal, &body.call_id, decision).await
}

/// `POST /agents/{agent}/runs/{run_id}/reject` with `{"callId", "message"?}`.
pub(crate) async fn reject(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
    payload: Result<Json<RejectBody>, JsonRejection>,
) -> Result<Json<Value>, ServerError> {
    let Json(body) = payload?;
    let decision = Decision::Reject { message: body.message };
    decided(&state, &name, &run_id, &principal, &body.call_id, decision).await
}

/// Whether the client asked for an SSE stream.
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// A resumed run's end as JSON: `completed` with the output, or `paused` with the calls
/// that wait (`approvals`, and `inputs`: asks for a person's input); a failed run is an error
/// response.
pub(crate) fn finished_json(run_id: &str, finished: Finished) -> Result<Value, ServerError> {
    if !finished.interruptions.is_empty() || !finished.inputs.is_empty() {
        let approvals: Vec<Value> = finished.interruptions.iter().map(approval_json).collect();
        let inputs: Vec<Value> = finished.inputs.iter().map(input_json).collect();
        return Ok(json!({"runId": run_id, "status": "paused", "approvals": approvals, "inputs": inputs}));
    }
    if let Some(error) = &finished.error {
        return Err(ServerError::run_failed(error));
    }
    Ok(json!({
        "runId": run_id,
        "status": "completed",
        "output": finished.output,
        "text": finished.text,
        "usage": {"inputTokens": finished.usage.input_tokens, "outputTokens": finished.usage.output_tokens},
    }))
}

/// `POST /agents/{agent}/runs/{run_id}/resume`: continues a paused run once its calls are
/// decided, or a cancelled one. With `Accept: text/event-stream` the answer is an SSE stream of AG-UI events
/// (`threadId` the run's session); otherwise JSON (see [`finished_json`]).
pub(crate) async fn resume(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
    headers: HeaderMap,
) -> Result<Response, ServerError> {
    let agent = Arc::clone(state.agent(&name)?);
    let run = owned_run(&agent, &run_id, &principal).await?;
    let live = start_live(&state, &name, &run_id, &principal)?;
    let task = ResumedTask::of(&state, &run_id);
    if !wants_stream(&headers) {
        let resumed = ResumedTask::follow_run(task, agent.resume(&principal, &run_id, live.cancel.clone()));
        let finished = crate::live::run_detached(Arc::clone(&state), name, run_id.clone(), live, resumed)
            .await
            .ok_or_else(|| ServerError::run_failed(&AgentError::Cancelled))?;
        return Ok(Json(finished_json(&run_id, finished)?).into_response());
    }
    let thread = run.session_id.clone().unwrap_or_else(|| run_id.clone());
    let translator = Translator::new(thread, run_id.clone(), run.message_count).resuming(run_id.clone(), run.call_ids);
    let items = ResumedTask::follow(task, agent.resume_stream(&principal, &run_id, live.cancel.clone()));
    agui_stream(&state, &name, &run_id, live, translator, items)
}

/// Registers a run about to start under `run_id`; 409 when one with this id is in flight.
///
/// Every resume of a paused run takes the paused run's id here (run control and A2A run under
/// it; an AG-UI resume runs under its new id and claims the paused one, see
/// [`start_live_resuming`]), so a second resume of a paused run being resumed is refused.
pub(crate) fn start_live(
    state: &AppState,
    agent: &str,
    run_id: &str,
    principal: &Principal,
) -> Result<Arc<LiveRun>, ServerError> {
    start_live_resuming(state, agent, run_id, None, principal)
}

/// [`start_live`] for a run `run_id` that resumes the paused run `paused`: it claims the
/// paused id too while it runs; 409 when either id is in flight (a run, or a resume's claim).
pub(crate) fn start_live_resuming(
    state: &AppState,
    agent: &str,
    run_id: &str,
    paused: Option<&str>,
    principal: &Principal,
) -> Result<Arc<LiveRun>, ServerError> {
    state
        .live
        .start(agent, run_id, paused, principal, state.cancel_on_disconnect)
        .ok_or(ServerError::RunIdInUse)
}

/// The `Last-Event-ID` header: `None` without one (or an empty one), the event id it holds,
/// or 400 when it holds something else.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ServerError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let invalid = || ServerError::bad_request("Last-Event-ID must be the id of an event the server sent");
    let value = value.to_str().map_err(|_| invalid())?.trim();
    if value.is_empty() {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| invalid())
}

/// A client reconnecting to its run `run_id` with `Last-Event-ID: after`: the events after
/// it, then the rest live; 410 when the run is no longer kept (it ended more than
/// [`KEEP_FINISHED`](crate::KEEP_FINISHED) ago), never ran, or is not the caller's. A
/// reconnect never starts a run.
pub(crate) fn reconnect(
    state: &AppState,
    agent: &str,
    run_id: &str,
    principal: &Principal,
    after: u64,
) -> Result<Response, ServerError> {
    let Some(live) = state
        .live
        .get(agent, run_id, principal)
        .filter(|live| live.followable())
    else {
        return Err(ServerError::Gone {
            message: format!(
                "the run's events are no longer kept (a run can be followed while it runs and for {} s after)",
                crate::KEEP_FINISHED.as_secs()
            ),
        });
    };
    follow_sse(&live, Some(after), |event| event.to_string(), agui_behind())
}

/// The AG-UI event that tells a client that fell behind ([`crate::live::Followed::Behind`]).
pub(crate) fn agui_behind() -> String {
    serde_json::json!({"type": "RUN_ERROR", "message": crate::live::BEHIND, "code": "events_dropped"}).to_string()
}

/// An SSE response following `live` from `after`: each event with its id, its data the
/// event as `wrap` writes it.
pub(crate) fn follow_sse(
    live: &Arc<LiveRun>,
    after: Option<u64>,
    wrap: impl Fn(Value) -> String + Send + 'static,
    behind: String,
) -> Result<Response, ServerError> {
    follow_sse_from(live, after, None, wrap, behind)
}

/// [`follow_sse`], with `first` (an event without an id) sent before the run's events.
/// `behind` is the last event (without an id) of a client that fell behind the run's log.
pub(crate) fn follow_sse_from(
    live: &Arc<LiveRun>,
    after: Option<u64>,
    first: Option<String>,
    wrap: impl Fn(Value) -> String + Send + 'static,
    behind: String,
) -> Result<Response, ServerError> {
    let events = live.follow(after).map_err(|unfollowable| ServerError::Gone {
        message: match unfollowable {
            Unfollowable::Evicted { oldest } => format!(
                "the events before {oldest} are no longer kept (a run keeps its newest {})",
                crate::live::EVENT_BUFFER
            ),
            Unfollowable::NotSent { last } => {
                format!("the run sent no event with this id (its newest is {last})")
            }
        },
    })?;
    let first = futures::stream::iter(first.map(|data| Ok::<Event, Infallible>(Event::default().data(data))));
    let body = first.chain(events.map(move |followed| {
        Ok::<Event, Infallible>(match followed {
            Followed::Event(id, event) => Event::default().id(id.to_string()).data(wrap(event)),
            Followed::Behind => Event::default().data(behind.as_str()),
        })
    }));
    Ok(Sse::new(body).keep_alive(KeepAlive::default()).into_response())
}

/// Starts an AG-UI run on its own task (`RUN_STARTED`, then the translated items, into the
/// run's log) and answers with an SSE stream following it.
pub(crate) fn agui_stream(
    state: &Arc<AppState>,
    agent: &str,
    run_id: &str,
    live: Arc<LiveRun>,
    mut translator: Translator,
    items: futures::stream::BoxStream<'static, crate::mount::Item>,
) -> Result<Response, ServerError> {
    let opening = translator.started();
    let events = futures::stream::once(async move { opening })
        .chain(items.flat_map(move |item| futures::stream::iter(translator.on(item))))
        .boxed();
    crate::live::drive(
        Arc::clone(state),
        agent.to_owned(),
        run_id.to_owned(),
        Arc::clone(&live),
        events,
    );
    follow_sse(&live, None, |event| event.to_string(), agui_behind())
}

/// `POST /agents/{agent}/runs/{run_id}/cancel`: cancels a running run of the caller's. The run
/// stops at its next boundary (a model call in flight is abandoned, tools in flight finish)
/// with the error `cancelled`; its checkpoint is kept, so `resume` can continue it.
pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
) -> Result<Response, ServerError> {
    state.agent(&name)?;
    checked_id("run_id", &run_id)?;
    match state.live.get(&name, &run_id, &principal) {
        Some(live) if !live.is_done() => {
            live.cancel.cancel();
            Ok((
                http::StatusCode::ACCEPTED,
                Json(json!({"runId": run_id, "status": "cancelling"})),
            )
                .into_response())
        }
        _ => Err(ServerError::not_found("no running run with this id")),
    }
}

/// `GET /agents/{agent}/runs/{run_id}/events`: follows a streamed run of the caller's (AG-UI
/// events; A2A stream responses for a task): the events after `Last-Event-ID` (all the run
/// still keeps without it), then the rest as they come. A run can be followed while it runs
/// and for [`KEEP_FINISHED`](crate::KEEP_FINISHED) after its end; after that (or for a run
/// that is not the caller's) it is 404, or 410 with `Last-Event-ID` (see [`reconnect`]).
pub(crate) async fn events(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
    headers: HeaderMap,
) -> Result<Response, ServerError> {
    state.agent(&name)?;
    checked_id("run_id", &run_id)?;
    if let Some(after) = last_event_id(&headers)? {
        return reconnect(&state, &name, &run_id, &principal, after);
    }
    let live = state
        .live
        .get(&name, &run_id, &principal)
        .filter(|live| live.followable())
        .ok_or_else(|| ServerError::not_found("no streamed run with this id"))?;
    follow_sse(&live, None, |event| event.to_string(), agui_behind())
}

/// `GET /agents/{agent}/sessions/{session_id}/messages`: the stored messages of a session
/// of the caller's (404 for anyone else's).
pub(crate) async fn history(
    State(state): State<Arc<AppState>>,
    ApiPath((name, session_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(&name)?;
    checked_id("session_id", &session_id)?;
    if !state.sessions.owned_by(&session_id, &principal) {
        return Err(ServerError::not_found("no session with this id"));
    }
    match agent.history(&session_id).await {
        Ok(Some(messages)) => Ok(Json(json!({"sessionId": session_id, "messages": messages}))),
        Ok(None) => Err(ServerError::not_found(
            "this agent keeps no conversations, so it has no session history",
        )),
        Err(error) => Err(ServerError::run_failed(&error)),
    }
}

/// `GET /agents/{agent}/sessions`: the caller's stored sessions, most recently used first.
pub(crate) async fn sessions(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
    Caller(principal): Caller,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(&name)?;
    match agent.sessions().await {
        Ok(Some(mut sessions)) => {
            sessions.retain(|(id, _)| state.sessions.owned_by(id, &principal));
            sessions.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let sessions: Vec<Value> = sessions
                .into_iter()
                .map(|(id, last_used)| json!({"sessionId": id, "lastUsedMs": last_used}))
                .collect();
            Ok(Json(json!({"sessions": sessions})))
        }
        Ok(None) => Err(ServerError::not_found(
            "this agent keeps no conversations, so it has no sessions",
        )),
        Err(error) => Err(ServerError::run_failed(&error)),
    }
}

/// `GET /agents/{agent}/sessions/{session_id}/approvals`: the caller's paused runs of the
/// session, each with its waiting calls.
pub(crate) async fn session_approvals(
    State(state): State<Arc<AppState>>,
    ApiPath((name, session_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(&name)?;
    checked_id("session_id", &session_id)?;
    if !state.sessions.owned_by(&session_id, &principal) {
        return Err(ServerError::not_found("no session with this id"));
    }
    let run_ids = agent
        .paused_runs(&session_id)
        .await
        .map_err(|e| ServerError::run_failed(&e))?;
    let mut runs = Vec::new();
    for run_id in run_ids {
        match agent.paused(&run_id).await {
            Ok(run) if run.owned_by(&principal) => {
                let approvals: Vec<Value> = run.approvals.iter().map(approval_json).collect();
                let inputs: Vec<Value> = run.inputs.iter().map(input_json).collect();
                runs.push(json!({"runId": run_id, "approvals": approvals, "inputs": inputs}));
            }
            // Another user's run, or one that ended since it was listed.
            Ok(_) | Err(AgentError::CheckpointNotFound { .. }) => {}
            Err(error) => return Err(ServerError::run_failed(&error)),
        }
    }
    Ok(Json(json!({"sessionId": session_id, "runs": runs})))
}
