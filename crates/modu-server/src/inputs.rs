//! Run control for asks for input: a paused run's tools that asked a person for a value
//! (`RunContext::ask_user`) are listed, answered or declined here, then the run is resumed
//! with `POST /agents/{agent}/runs/{run_id}/resume` as after approvals.
//!
//! A run is the caller's when it runs for the caller's user; any other is answered with 404.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use modu_core::{AgentError, InputRequest};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Caller;
use crate::control::owned_run;
use crate::error::{ApiPath, ServerError};
use crate::mount::InputReply;

/// An ask for input as the wire shows it.
pub(crate) fn input_json(request: &InputRequest) -> Value {
    json!({
        "callId": request.call_id,
        "tool": request.tool_name,
        "index": request.index,
        "prompt": request.prompt,
        "schema": request.schema,
        "metadata": request.metadata,
    })
}

/// Why a message on an A2A task whose run waits only for input is refused: A2A messages answer
/// approvals; an ask is answered here.
pub(crate) fn not_an_approval(agent: &str, task_id: &str) -> String {
    format!(
        "the task waits for a person's input, not an approval: answer it on the run-control routes (POST /agents/{agent}/runs/{task_id}/answer), then resume it there (POST /agents/{agent}/runs/{task_id}/resume)"
    )
}

/// `GET /agents/{agent}/runs/{run_id}/inputs`: the asks of a paused run that wait for an answer.
pub(crate) async fn inputs(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(&name)?;
    let run = owned_run(agent, &run_id, &principal).await?;
    let inputs: Vec<Value> = run.inputs.iter().map(input_json).collect();
    Ok(Json(
        json!({"runId": run_id, "sessionId": run.session_id, "inputs": inputs}),
    ))
}

/// A field that must be present, `null` included (`Some(Value::Null)`).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// The body of `answer`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AnswerBody {
    call_id: String,
    /// The answer; it must fit the ask's schema.
    #[serde(default, deserialize_with = "present")]
    value: Option<Value>,
}

/// The body of `decline`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct DeclineBody {
    call_id: String,
    /// Why, for the model.
    #[serde(default)]
    message: Option<String>,
}

async fn replied(
    state: &AppState,
    name: &str,
    run_id: &str,
    principal: &crate::auth::Principal,
    call_id: &str,
    reply: InputReply,
) -> Result<Json<Value>, ServerError> {
    let agent = state.agent(name)?;
    let _claim = crate::control::not_in_flight(state, name, run_id, principal)?;
    owned_run(agent, run_id, principal).await?;
    match agent.answer(run_id, call_id, reply).await {
        Ok(()) => Ok(Json(json!({"runId": run_id, "callId": call_id, "recorded": true}))),
        Err(AgentError::UnknownInput { .. }) => Err(ServerError::not_found("no call with this id waits for input")),
        // The caller's own value against the schema the tool asked with: what does not fit.
        Err(AgentError::InvalidInput { message, .. }) => Err(ServerError::InvalidParameter {
            param: "value".to_owned(),
            code: "invalid_value",
            message: format!("the value does not fit the requested schema: {message}"),
        }),
        Err(error) => Err(ServerError::run_failed(&error)),
    }
}

/// `POST /agents/{agent}/runs/{run_id}/answer` with `{"callId", "value"}`: 400 when the value
/// does not fit the ask's schema (nothing is recorded), 404 when no such ask waits.
pub(crate) async fn answer(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
    payload: Result<Json<AnswerBody>, JsonRejection>,
) -> Result<Json<Value>, ServerError> {
    let Json(body) = payload?;
    let Some(value) = body.value else {
        return Err(ServerError::bad_request("missing field `value`"));
    };
    let reply = InputReply::Given(value);
    replied(&state, &name, &run_id, &principal, &body.call_id, reply).await
}

/// `POST /agents/{agent}/runs/{run_id}/decline` with `{"callId", "message"?}`: the ask fails
/// with a tool error the model sees when the run resumes.
pub(crate) async fn decline(
    State(state): State<Arc<AppState>>,
    ApiPath((name, run_id)): ApiPath<(String, String)>,
    Caller(principal): Caller,
    payload: Result<Json<DeclineBody>, JsonRejection>,
) -> Result<Json<Value>, ServerError> {
    let Json(body) = payload?;
    let reply = InputReply::Declined(body.message);
    replied(&state, &name, &run_id, &principal, &body.call_id, reply).await
}
