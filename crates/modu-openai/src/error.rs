//! The crate's configuration error, and the mapping of HTTP failures onto
//! [`ModelError`](modu_core::ModelError).

use std::time::{Duration, Instant};

use modu_core::ModelError;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

/// Building an [`OpenAiClient`](crate::OpenAiClient) or a token counter failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenAiConfigError {
    /// A required setting is missing (no base URL, no model).
    #[error("missing setting: {0}")]
    Missing(&'static str),
    /// An environment variable is not set (or empty).
    #[error("environment variable {0} is not set")]
    MissingEnv(&'static str),
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

pub(crate) use modu_core::model::http::{Timeouts, trim_body};

use modu_core::redact::{Redactor, display_url};

/// The human message of an error body: `{"error":{"message":…}}` (OpenAI, llama.cpp),
/// `{"message":…}` (vLLM), `{"error":"…"}`, `{"detail":…}`, or the body itself.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let candidates = [
            v.pointer("/error/message"),
            v.get("error").filter(|e| e.is_string()),
            v.get("message"),
            v.get("detail"),
        ];
        for c in candidates.into_iter().flatten() {
            match c {
                Value::String(s) => return trim_body(s),
                Value::Null => {}
                other => return trim_body(&other.to_string()),
            }
        }
    }
    trim_body(body)
}

/// Whether an error body says the request does not fit the context window.
///
/// Recognises vLLM ("This model's maximum context length is N tokens…", "…longer than the
/// maximum model length…"), llama.cpp (type `exceed_context_size_error`, "the request exceeds
/// the available context size"), OpenAI (code `context_length_exceeded`) and LiteLLM's proxy
/// (`litellm.ContextWindowExceededError`, over Anthropic's "prompt is too long").
pub fn is_context_length_error(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    [
        "maximum context length",
        "context_length_exceeded",
        "exceed_context_size",
        "exceeds the available context size",
        "longer than the maximum model length",
        "context length exceeded",
        "context window",
        "contextwindowexceeded",
        "prompt is too long",
        "too many tokens",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// Whether a 429's body says the account's quota is used up (OpenAI: code or type
/// `insufficient_quota`), which no wait fixes.
fn is_quota_error(body: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return false;
    };
    ["/error/code", "/error/type"]
        .iter()
        .any(|p| v.pointer(p).and_then(Value::as_str) == Some("insufficient_quota"))
}

/// `Retry-After` as seconds or as an HTTP date (a date in the past means now).
pub fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    modu_core::model::http::retry_after(headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?)
}

/// Maps an error status and body onto a [`ModelError`]. The client's secrets are masked in the
/// body first, before it is cut to length (a cut secret would leak its first part).
///
/// A 404 is [`ModelError::ModelNotFound`] only when its body speaks of a model (vLLM "The model
/// `x` does not exist", OpenAI `model_not_found`); any other 404 (llama.cpp's "File Not
/// Found", a proxy's page) says the endpoint `url` does not exist, and is a
/// [`ModelError::Status`] naming it. A 429 for an exhausted quota (`insufficient_quota`) is a
/// `Status` 429 with the body (not retryable), not [`ModelError::RateLimited`].
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
    let context_length = matches!(code, 400 | 413 | 422) && is_context_length_error(&body);
    let message = error_message(&body);
    if let Some(wrong) = modu_core::model::http::wrong_endpoint(code, &message, &body, &display_url(url)) {
        return wrong;
    }
    if code == 429 && is_quota_error(&body) {
        // Not a rate limit: waiting does not help (OpenAI: the credit or the spending limit is
        // used up), and the message says what to do.
        return ModelError::Status {
            status: code,
            body: trim_body(&body),
            retry_after: None,
        };
    }
    if code >= 400
        && let Some(modality) = crate::media::refused_modality(&message)
    {
        return ModelError::UnsupportedContent {
            model: model.to_owned(),
            modality,
            message,
        };
    }
    modu_core::model::http::status_error(code, message, &body, parse_retry_after(headers), model, context_length)
}

/// An error object sent inside a 200 stream (`data: {"error": {...}}`), on the stream of `url`.
/// Its `code` is the status when it is an error status, as a number or a numeric string
/// (LiteLLM's proxy sends `"code": "400"`); otherwise (OpenAI's `"server_error"`, none) the
/// error is a 500.
pub(crate) fn stream_error(error: &Value, model: &str, redactor: &Redactor, url: &str) -> ModelError {
    let body = serde_json::json!({ "error": error }).to_string();
    let code = error
        .get("code")
        .and_then(|c| match c {
            Value::String(s) => s.trim().parse::<u64>().ok(),
            other => other.as_u64(),
        })
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .and_then(|c| StatusCode::from_u16(c).ok())
        // An exhausted quota named by its code alone (`"code": "insufficient_quota"`) is the
        // 429 OpenAI sends it as, not a server error to retry.
        .or_else(|| is_quota_error(&body).then_some(StatusCode::TOO_MANY_REQUESTS))
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    status_error(code, &HeaderMap::new(), &body, model, redactor, url)
}

/// Maps a reqwest failure of a request sent at `started`: timeouts to [`ModelError::Timeout`]
/// with the timeout that fired ([`Timeouts::fired`]), everything else (refused, reset, cut
/// mid-body) to [`ModelError::Transport`]. `what` (a URL, or what was being read) and the
/// error's URL lose their user info.
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
        "cannot connect to the model server"
    } else if err.is_body() || err.is_decode() {
        "the connection broke while reading the answer"
    } else {
        "HTTP request failed"
    };
    ModelError::transport(format!("{kind} ({})", display_url(what)), err)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "3".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(3)));
        let later = SystemTime::now() + Duration::from_secs(120);
        h.insert("retry-after", httpdate::fmt_http_date(later).parse().unwrap());
        let d = parse_retry_after(&h).unwrap();
        assert!(d > Duration::from_secs(100) && d <= Duration::from_secs(120), "{d:?}");
        h.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(parse_retry_after(&h), None);
    }

    #[test]
    fn messages_from_bodies() {
        assert_eq!(error_message(r#"{"error":{"message":"bad","type":"x"}}"#), "bad");
        assert_eq!(
            error_message(r#"{"object":"error","message":"vllm says","code":400}"#),
            "vllm says"
        );
        assert_eq!(error_message("plain"), "plain");
    }
}
