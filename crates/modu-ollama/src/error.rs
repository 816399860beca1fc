//! The crate's configuration error, and the mapping of HTTP failures onto
//! [`ModelError`](modu_core::ModelError).

use std::time::{Duration, Instant};

use modu_core::ModelError;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

/// Building an [`OllamaClient`](crate::OllamaClient) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OllamaConfigError {
    /// A required setting is missing (no model).
    #[error("missing setting: {0}")]
    Missing(&'static str),
    /// The base URL is not an `http://` or `https://` URL (its user info, if any, is shown as
    /// `***`).
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A header name or value is invalid (the value is never printed: it may be a secret).
    #[error("invalid header {name:?}")]
    InvalidHeader {
        /// The header's name.
        name: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

pub(crate) use modu_core::model::http::Timeouts;
use modu_core::model::http::trim_body;

use modu_core::redact::{Redactor, display_url};

/// The message of an Ollama error body (`{"error": "..."}`), or the body itself.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        match v.get("error") {
            Some(Value::String(s)) => return trim_body(s),
            Some(Value::Object(o)) => {
                if let Some(Value::String(s)) = o.get("message") {
                    return trim_body(s);
                }
            }
            _ => {}
        }
    }
    trim_body(body)
}

fn is_context_length_error(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    [
        "context length",
        "context window",
        "exceeds the context",
        "num_ctx",
        "context size",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    modu_core::model::http::retry_after(headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?)
}

/// Maps an error status and body onto a [`ModelError`]. The client's secrets are masked in the
/// body first, before it is cut to length (a cut secret would leak its first part).
pub(crate) fn status_error(
    status: StatusCode,
    headers: &HeaderMap,
    body: &str,
    model: &str,
    redactor: &Redactor,
    url: &str,
) -> ModelError {
    let body = redactor.text(body);
    let code = status.as_u16();
    let message = error_message(&body);
    // Go's "404 page not found" for a wrong base URL.
    if let Some(wrong) = modu_core::model::http::wrong_endpoint(code, &message, &body, &display_url(url)) {
        return wrong;
    }
    let context_length = matches!(code, 400 | 413 | 500) && is_context_length_error(&message);
    modu_core::model::http::status_error(code, message, &body, parse_retry_after(headers), model, context_length)
}

/// An `{"error": ...}` line inside a 200 stream: the server failed mid-answer.
pub(crate) fn stream_error(error: &Value, model: &str, redactor: &Redactor) -> ModelError {
    let body = serde_json::json!({ "error": error }).to_string();
    status_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        &HeaderMap::new(),
        &body,
        model,
        redactor,
        "",
    )
}

/// Maps a reqwest failure of a request sent at `started`: timeouts to [`ModelError::Timeout`]
/// with the timeout that fired ([`Timeouts::fired`]), the rest to [`ModelError::Transport`].
/// `what` (a URL, or what was being read) and the error's URL lose their user info.
pub(crate) fn transport_error(
    mut err: reqwest::Error,
    timeouts: &Timeouts,
    started: Instant,
    what: &str,
) -> ModelError {
    if let Some(url) = err.url_mut() {
        let _ = url.set_password(None);
        let _ = url.set_username("");
    }
    if err.is_timeout() {
        return ModelError::Timeout(timeouts.fired(started, err.is_connect()));
    }
    let kind = if err.is_connect() {
        "cannot connect to the Ollama server"
    } else if err.is_body() || err.is_decode() {
        "the connection broke while reading the answer"
    } else {
        "HTTP request failed"
    };
    ModelError::transport(format!("{kind} ({})", display_url(what)), err)
}
