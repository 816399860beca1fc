//! The JSON-RPC envelope of the A2A endpoint, `POST /a2a/{agent}`: one request, or a batch.
//!
//! - A batch (a JSON array of requests, as JSON-RPC 2.0 defines it; A2A 1.0 takes JSON-RPC
//!   2.0 as it is) is answered with a JSON array of the responses of its requests that have an
//!   `id`, in the batch's order; its requests run one after the other. An entry that is not a request object
//!   gets its own `-32600` response (`id` null). The streaming methods (`SendStreamingMessage`,
//!   `SubscribeToTask`) answer with an SSE stream, which a batch's array cannot hold: in a
//!   batch each gets a `-32600` response saying to send it alone.
//! - An empty batch is one `-32600` response (`id` null), not an array; a batch of
//!   notifications only gets no reply (204, no body), as a notification alone.
//! - A request whose `id` is not a string, a number or null is one `-32600` response (`id`
//!   null) and runs nothing.
//! - A batch holds at most [`MAX_BATCH`] entries: a larger one is one `-32600` response (`id`
//!   null) and runs nothing. One HTTP request would otherwise start any number of agent runs
//!   (past a proxy's per-request rate limit) and hold all their answers in memory at once.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde_json::Value;

use crate::AppState;
use crate::a2a::{cancel_task, get_task, send, stream, subscribe};
use crate::a2a_wire::{RpcError, code, failure, success};
use crate::auth::{Caller, Principal};
use crate::error::{ApiPath, ServerError};
use crate::mount::Served;

/// What one request of the endpoint is answered with.
enum Answer {
    /// A JSON-RPC response object.
    Json(Value),
    /// An SSE stream (a streaming method's), or its refusal, as it goes out.
    Streamed(Response),
    /// Nothing: the request was a notification.
    Nothing,
}

/// One request's surroundings: the agent called, by whom, with which headers.
struct Call<'a> {
    state: &'a Arc<AppState>,
    name: &'a str,
    agent: &'a Arc<dyn Served>,
    principal: &'a Principal,
    headers: &'a HeaderMap,
}

fn response(id: &Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(value) => success(id, value),
        Err(error) => failure(id, &error),
    }
}

/// The most entries a JSON-RPC batch may hold.
pub(crate) const MAX_BATCH: usize = 32;

/// `POST /a2a/{agent}`: one JSON-RPC request, or a batch of them.
pub(crate) async fn rpc(
    State(state): State<Arc<AppState>>,
    ApiPath(name): ApiPath<String>,
    Caller(principal): Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ServerError> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ServerError::PayloadTooLarge
        } else {
            ServerError::bad_request("the body could not be read")
        }
    })?;
    let agent = Arc::clone(state.agent(&name)?);
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        let error = RpcError::new(code::PARSE_ERROR, "the body is not valid JSON");
        return Ok(Json(response(&Value::Null, Err(error))).into_response());
    };
    let call = Call {
        state: &state,
        name: &name,
        agent: &agent,
        principal: &principal,
        headers: &headers,
    };
    let Value::Array(requests) = request else {
        return Ok(match call.one(request, false).await {
            Answer::Json(body) => Json(body).into_response(),
            Answer::Streamed(response) => response,
            Answer::Nothing => StatusCode::NO_CONTENT.into_response(),
        });
    };
    if requests.is_empty() {
        let error = RpcError::new(code::INVALID_REQUEST, "an empty batch holds no request");
        return Ok(Json(response(&Value::Null, Err(error))).into_response());
    }
    if requests.len() > MAX_BATCH {
        let error = RpcError::new(
            code::INVALID_REQUEST,
            format!(
                "a batch holds at most {MAX_BATCH} requests; this one holds {}",
                requests.len()
            ),
        );
        return Ok(Json(response(&Value::Null, Err(error))).into_response());
    }
    let mut responses = Vec::with_capacity(requests.len());
    for request in requests {
        match call.one(request, true).await {
            Answer::Json(body) => responses.push(body),
            // `one` streams nothing in a batch.
            Answer::Streamed(_) | Answer::Nothing => {}
        }
    }
    if responses.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(Json(Value::Array(responses)).into_response())
}

impl Call<'_> {
    /// Answers one request; `batched` when it is an entry of a batch (no stream then).
    async fn one(&self, request: Value, batched: bool) -> Answer {
        let Call {
            state,
            name,
            agent,
            principal,
            headers,
        } = *self;
        let id = match request.get("id") {
            None => Value::Null,
            Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
            // JSON-RPC 2.0 (4): an id is a string, a number or null; a request with another is
            // invalid and runs nothing; its response's id is null, the id being unreadable.
            Some(_) => {
                let error = RpcError::new(code::INVALID_REQUEST, "the id must be a string, a number or null");
                return Answer::Json(response(&Value::Null, Err(error)));
            }
        };
        let (Some("2.0"), Some(method)) = (
            request.get("jsonrpc").and_then(Value::as_str),
            request.get("method").and_then(Value::as_str),
        ) else {
            let error = RpcError::new(code::INVALID_REQUEST, "not a JSON-RPC 2.0 request");
            return Answer::Json(response(&id, Err(error)));
        };
        if request.get("id").is_none() {
            // A notification: JSON-RPC 2.0 (4.1) forbids any reply, and A2A 1.0 (9.3) defines
            // every method as a request with an id, whose answer (a task id, a task) is its
            // point. Nothing is run: a message nobody can follow would run tools and spend
            // tokens for no reader.
            tracing::debug!(agent = %name, method, "A2A notification (no id) ignored");
            return Answer::Nothing;
        }
        if let Some(version) = headers.get("a2a-version").and_then(|v| v.to_str().ok())
            && !version.trim().is_empty()
            && !version.trim().starts_with("1.")
            && version.trim() != "1"
        {
            let error = RpcError::new(code::VERSION_NOT_SUPPORTED, "this server speaks A2A 1.0");
            return Answer::Json(response(&id, Err(error)));
        }
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        if batched && matches!(method, "SendStreamingMessage" | "SubscribeToTask") {
            let error = RpcError::new(
                code::INVALID_REQUEST,
                format!("{method} answers with an SSE stream, which a batch cannot hold: send it alone"),
            );
            return Answer::Json(response(&id, Err(error)));
        }
        let agent = Arc::clone(agent);
        let result = match method {
            "SendMessage" => send(state, name, agent, principal, params).await,
            "SendStreamingMessage" => {
                return Answer::Streamed(
                    match stream(Arc::clone(state), name, agent, principal, params, id.clone()).await {
                        Ok(response) => response,
                        Err(error) => Json(response(&id, Err(error))).into_response(),
                    },
                );
            }
            "SubscribeToTask" => {
                return Answer::Streamed(match subscribe(state, name, principal, params, headers, id.clone()) {
                    Ok(response) => response,
                    Err(error) => Json(response(&id, Err(error))).into_response(),
                });
            }
            "GetTask" => get_task(state, name, principal, params),
            "CancelTask" => cancel_task(state, name, agent, principal, params).await,
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => Err(RpcError::new(
                code::PUSH_NOT_SUPPORTED,
                "push notifications are not supported",
            )),
            "ListTasks" => crate::a2a_tasks::list_tasks(&state.tasks, name, principal, params),
            "GetExtendedAgentCard" => Err(RpcError::new(
                code::UNSUPPORTED_OPERATION,
                format!("{method} is not supported"),
            )),
            _ => Err(RpcError::new(code::METHOD_NOT_FOUND, format!("no method {method:?}"))),
        };
        Answer::Json(response(&id, result))
    }
}
