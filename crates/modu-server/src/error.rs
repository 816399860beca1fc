//! [`ServerError`]: every error the server answers with, as a JSON body.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequestParts, Path};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;
use modu_core::AgentError;
use serde::de::DeserializeOwned;

use crate::mount::public_error;

/// An error answered to a client.
///
/// The body has OpenAI's error shape on every endpoint,
/// `{"error": {"message", "type", "param", "code"}}`. A failed run's answer carries
/// `x-should-retry: false`, which OpenAI's SDKs honour: they would otherwise retry its 409 or
/// 5xx by running the agent again, its tools included. Messages are the server's own sentences:
/// a run's error is reported by its kind (`model_error`, `timeout`, …) with a fixed sentence,
/// never with a tool's, a provider's or a model server's text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No agent is mounted under this name.
    #[error("no agent is served under the name {name:?}")]
    UnknownAgent {
        /// The name asked for.
        name: String,
    },
    /// The request is malformed or asks for something the endpoint does not do.
    #[error("{message}")]
    BadRequest {
        /// What is wrong, in the server's words.
        message: String,
    },
    /// A request field the endpoint does not honour, or a value of it the endpoint does not
    /// take; the body's `param` names the field.
    #[error("{message}")]
    InvalidParameter {
        /// The field, as the request names it (`tool_choice`, `response_format`,
        /// `messages[0].content`, …).
        param: String,
        /// `unsupported_parameter` (the field cannot be honoured), `unsupported_value` (this
        /// value of it cannot) or `invalid_value` (the value is out of range).
        code: &'static str,
        /// What is wrong, in the server's words.
        message: String,
    },
    /// The thing asked for does not exist, or is not the caller's.
    #[error("{message}")]
    NotFound {
        /// What was not found, in the server's words.
        message: String,
    },
    /// The route does not take the request's method.
    #[error("the route does not take this method")]
    MethodNotAllowed,
    /// The body is larger than the server accepts.
    #[error("the request body is larger than the server accepts")]
    PayloadTooLarge,
    /// The run id is taken: a run with this id has a checkpoint or is running, or the paused
    /// run it resumes is being resumed already (one resume at a time).
    #[error("a run with this runId exists already, or is running or being resumed")]
    RunIdInUse,
    /// The run is running (a resume of it is in flight): a decision or an answer is recorded
    /// only while it waits, paused.
    #[error(
        "the run {run_id} is being resumed: decisions and answers are taken only while it is paused; wait for it to pause or end"
    )]
    RunInFlight {
        /// The run's id.
        run_id: String,
    },
    /// The events asked for are no longer kept (a `Last-Event-ID` older than the run's
    /// replay buffer).
    #[error("{message}")]
    Gone {
        /// What is gone, in the server's words.
        message: String,
    },
    /// The request carries no valid credentials.
    #[error("the request is not authenticated")]
    Unauthorized,
    /// The run paused: it waits for a person's decision on some of its calls. The body names
    /// the run (`run_id`), so the caller can list, decide and resume it on the run-control
    /// routes (`/agents/{agent}/runs/{run_id}/approvals`, `approve`, `reject`, `resume`).
    #[error(
        "the run {run_id} waits for a person's approval: list its calls at /agents/{agent}/runs/{run_id}/approvals, approve or reject each, then POST /agents/{agent}/runs/{run_id}/resume"
    )]
    RunPaused {
        /// The agent's name (the route's `{agent}`, the OpenAI `model`).
        agent: String,
        /// The paused run's id.
        run_id: String,
    },
    /// The run paused for a person's input alone: tools of it asked for values
    /// (`RunContext::ask_user`) and no call waits for approval. The body names the run
    /// (`run_id`), so the caller can list, answer and resume it on the run-control routes
    /// (`/agents/{agent}/runs/{run_id}/inputs`, `answer`, `decline`, `resume`).
    #[error(
        "the run {run_id} waits for a person's input: list its asks at /agents/{agent}/runs/{run_id}/inputs, answer or decline each, then POST /agents/{agent}/runs/{run_id}/resume"
    )]
    InputRequired {
        /// The agent's name (the route's `{agent}`, the OpenAI `model`).
        agent: String,
        /// The paused run's id.
        run_id: String,
    },
    /// The run ended without an answer.
    #[error("{message}")]
    RunFailed {
        /// The error's kind (`model_error`, `timeout`, `approval_required`, `session_busy`, …).
        code: &'static str,
        /// A fixed sentence for the kind.
        message: &'static str,
    },
}

impl ServerError {
    /// A bad request with this message.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ServerError::BadRequest {
            message: message.into(),
        }
    }

    /// A not-found error with this message.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        ServerError::NotFound {
            message: message.into(),
        }
    }

    /// The error of a failed run, logged in full here and answered by its kind.
    pub(crate) fn run_failed(error: &AgentError) -> Self {
        tracing::warn!(error = %error, "run failed");
        let (code, message) = public_error(error);
        ServerError::RunFailed { code, message }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ServerError::UnknownAgent { .. } => StatusCode::NOT_FOUND,
            ServerError::BadRequest { .. } | ServerError::InvalidParameter { .. } => StatusCode::BAD_REQUEST,
            ServerError::NotFound { .. } => StatusCode::NOT_FOUND,
            ServerError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ServerError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ServerError::RunIdInUse | ServerError::RunInFlight { .. } => StatusCode::CONFLICT,
            ServerError::Gone { .. } => StatusCode::GONE,
            ServerError::Unauthorized => StatusCode::UNAUTHORIZED,
            ServerError::RunPaused { .. } | ServerError::InputRequired { .. } => StatusCode::CONFLICT,
            ServerError::RunFailed { code, .. } => match *code {
                "model_error" => StatusCode::BAD_GATEWAY,
                "timeout" => StatusCode::GATEWAY_TIMEOUT,
                "approval_required"
                | "input_required"
                | "session_busy"
                | "lease_lost"
                | "resume_incompatible"
                | "already_completed" => StatusCode::CONFLICT,
                "guardrail_tripped" => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
        }
    }

    /// OpenAI's `type` and `code` for this error.
    fn kind(&self) -> (&'static str, &'static str) {
        match self {
            ServerError::UnknownAgent { .. } => ("invalid_request_error", "model_not_found"),
            ServerError::BadRequest { .. } => ("invalid_request_error", "invalid_request"),
            ServerError::InvalidParameter { code, .. } => ("invalid_request_error", code),
            ServerError::NotFound { .. } => ("invalid_request_error", "not_found"),
            ServerError::MethodNotAllowed => ("invalid_request_error", "method_not_allowed"),
            ServerError::PayloadTooLarge => ("invalid_request_error", "payload_too_large"),
            ServerError::RunIdInUse => ("invalid_request_error", "run_id_in_use"),
            ServerError::RunInFlight { .. } => ("invalid_request_error", "run_in_flight"),
            ServerError::Gone { .. } => ("invalid_request_error", "events_gone"),
            ServerError::Unauthorized => ("authentication_error", "invalid_api_key"),
            ServerError::RunPaused { .. } => ("server_error", "approval_required"),
            ServerError::InputRequired { .. } => ("server_error", "input_required"),
            ServerError::RunFailed { code, .. } => ("server_error", code),
        }
    }

    /// The JSON body. A paused run's ([`ServerError::RunPaused`], [`ServerError::InputRequired`])
    /// and a running one's ([`ServerError::RunInFlight`]) also names the run: `{"error": {…, "code": "approval_required", "run_id": …}}`; an
    /// [`ServerError::InvalidParameter`]'s `param` names the field.
    pub fn body(&self) -> serde_json::Value {
        let (kind, code) = self.kind();
        let mut body = serde_json::json!({
            "error": {"message": self.to_string(), "type": kind, "param": null, "code": code}
        });
        match self {
            ServerError::RunPaused { run_id, .. }
            | ServerError::InputRequired { run_id, .. }
            | ServerError::RunInFlight { run_id } => {
                body["error"]["run_id"] = serde_json::Value::String(run_id.clone());
            }
            ServerError::InvalidParameter { param, .. } => {
                body["error"]["param"] = serde_json::Value::from(param.as_str());
            }
            _ => {}
        }
        body
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.body())).into_response();
        match self {
            ServerError::Unauthorized => {
                response
                    .headers_mut()
                    .insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
            }
            // OpenAI's SDKs retry a 409 or a 5xx twice by default, and a retry runs the agent
            // again, its tools included (the run already retried its model calls): they honour
            // this header.
            ServerError::RunFailed { .. } | ServerError::RunPaused { .. } | ServerError::InputRequired { .. } => {
                response
                    .headers_mut()
                    .insert("x-should-retry", http::HeaderValue::from_static("false"));
            }
            _ => {}
        }
        response
    }
}

impl From<JsonRejection> for ServerError {
    fn from(rejection: JsonRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ServerError::PayloadTooLarge;
        }
        match rejection {
            JsonRejection::MissingJsonContentType(_) => {
                ServerError::bad_request("the body must be JSON (Content-Type: application/json)")
            }
            JsonRejection::JsonSyntaxError(_) => ServerError::bad_request("the body is not valid JSON"),
            // The message names the field and what was expected (the caller's own payload).
            JsonRejection::JsonDataError(e) => ServerError::bad_request(e.body_text()),
            _ => ServerError::bad_request("the body could not be read"),
        }
    }
}

/// 400 naming `param` (`run_id`, `session_id`) when a client-chosen id is one no store can
/// keep (over `MAX_ID_BYTES`, or holding a NUL): said before anything runs, not as a missing
/// run or a store failure after.
pub(crate) fn checked_id(param: &'static str, id: &str) -> Result<(), ServerError> {
    modu_core::StoreError::check_id(id).map_err(|refused| ServerError::InvalidParameter {
        param: param.to_owned(),
        code: "invalid_value",
        message: format!("{param} cannot be an id: {refused}"),
    })
}

/// The path parameters, as [`Path`] reads them, with a rejection (say, a segment that is not
/// UTF-8) answered as a [`ServerError::BadRequest`] in the error shape.
pub(crate) struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            // axum's sentence names the parameter and what is wrong with it (the caller's URL).
            Err(rejection @ PathRejection::FailedToDeserializePathParams(_)) => {
                Err(ServerError::bad_request(rejection.body_text()))
            }
            Err(_) => Err(ServerError::bad_request("the path could not be read")),
        }
    }
}

/// The router's fallback: no route has this path.
pub(crate) async fn no_route() -> ServerError {
    ServerError::not_found("no route has this path")
}

/// The routes' fallback for a method they do not take.
pub(crate) async fn no_method() -> ServerError {
    ServerError::MethodNotAllowed
}
