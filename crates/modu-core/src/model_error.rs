//! How a model call fails: [`ModelError`], and the one mapping of HTTP error answers onto it
//! ([`http`]). Also re-exported from [`crate::model`].

use std::time::Duration;

use crate::BoxError;

/// Errors a model call can end with. Providers map their failures onto these so the run loop
/// can decide what to retry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The connection failed or broke (refused, reset, cut mid-stream).
    #[error("transport error: {message}")]
    Transport {
        /// What happened, without secrets.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The call did not finish in time.
    #[error("model call timed out after {0:?}")]
    Timeout(Duration),
    /// The server asked us to slow down (HTTP 429).
    #[error("rate limited by the model server{}", retry_after.map(|d| format!(" (retry after {d:?})")).unwrap_or_default())]
    RateLimited {
        /// How long the server asked us to wait.
        retry_after: Option<Duration>,
    },
    /// The server refused our credentials (HTTP 401/403).
    #[error("model server refused the credentials (HTTP {status}): {message}")]
    Authentication {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The server does not know the model (HTTP 404).
    #[error("the model server does not know model {model:?}: {message}")]
    ModelNotFound {
        /// The model asked for.
        model: String,
        /// The server's message.
        message: String,
    },
    /// The request does not fit the model's context window.
    #[error("context length exceeded: {message}")]
    ContextLengthExceeded {
        /// The server's message.
        message: String,
    },
    /// Any other error status from the server.
    #[error("model server answered HTTP {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The body (trimmed).
        body: String,
        /// How long the server asked us to wait, when it said.
        retry_after: Option<Duration>,
    },
    /// The server's answer could not be understood.
    #[error("invalid response from the model server: {message}")]
    InvalidResponse {
        /// What was wrong.
        message: String,
    },
    /// The request itself is invalid (found before sending it).
    #[error("invalid request: {message}")]
    InvalidRequest {
        /// What was wrong.
        message: String,
    },
    /// The request holds content the model cannot take: a medium the model is declared not
    /// to accept ([`ChatModel::input_modalities`](crate::model::ChatModel::input_modalities)) or its provider cannot send, or an inline
    /// medium over the size limit — found before anything was sent — or the server refused
    /// the medium (llama.cpp without a vision projector). Not retryable.
    #[error("model {model:?} cannot take this content: {message}")]
    UnsupportedContent {
        /// The model.
        model: String,
        /// The modality refused, when known.
        modality: Option<crate::modality::Modality>,
        /// What was refused, and why.
        message: String,
    },
}

impl ModelError {
    /// A transport error with a cause.
    pub fn transport(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        ModelError::Transport {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An invalid-response error.
    pub fn invalid_response(message: impl Into<String>) -> Self {
        ModelError::InvalidResponse {
            message: message.into(),
        }
    }

    /// Whether trying the same request again may succeed: rate limits, timeouts, transport
    /// failures and server-side (5xx, 408) statuses.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Transport { .. } | ModelError::Timeout(_) | ModelError::RateLimited { .. } => true,
            ModelError::Status { status, .. } => *status >= 500 || *status == 408,
            _ => false,
        }
    }

    /// How long the server asked us to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::RateLimited { retry_after } | ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The error's kind, a short stable code (`rate_limited`, `timeout`, …) for events and
    /// metrics.
    pub fn kind(&self) -> crate::codes::ModelErrorKind {
        use crate::codes::ModelErrorKind as K;
        match self {
            ModelError::Transport { .. } => K::Transport,
            ModelError::Timeout(_) => K::Timeout,
            ModelError::RateLimited { .. } => K::RateLimited,
            ModelError::Authentication { .. } => K::Authentication,
            ModelError::ModelNotFound { .. } => K::ModelNotFound,
            ModelError::ContextLengthExceeded { .. } => K::ContextLengthExceeded,
            ModelError::Status { .. } => K::Status,
            ModelError::InvalidResponse { .. } => K::InvalidResponse,
            ModelError::InvalidRequest { .. } => K::InvalidRequest,
            ModelError::UnsupportedContent { .. } => K::UnsupportedContent,
        }
    }
}

/// Helpers for providers that speak HTTP: one mapping of error answers onto [`ModelError`].
pub mod http {
    use std::time::{Duration, Instant, SystemTime};

    use super::ModelError;

    /// The most bytes of an error body kept in a [`ModelError`].
    pub const MAX_ERROR_BODY: usize = 2000;

    /// The body, trimmed and cut to [`MAX_ERROR_BODY`] bytes on a character boundary.
    pub fn trim_body(body: &str) -> String {
        let body = body.trim();
        if body.len() <= MAX_ERROR_BODY {
            return body.to_owned();
        }
        let mut end = MAX_ERROR_BODY;
        while !body.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &body[..end])
    }

    /// A `Retry-After` value: seconds (whole or decimal) or an HTTP date (a date in the past
    /// means now).
    pub fn retry_after(value: &str) -> Option<Duration> {
        let value = value.trim();
        if let Ok(secs) = value.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        if let Ok(secs) = value.parse::<f64>() {
            return Duration::try_from_secs_f64(secs).ok();
        }
        let when = httpdate::parse_http_date(value).ok()?;
        Some(when.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO))
    }

    /// A 404 whose body names no model: the server does not serve the endpoint (a wrong base
    /// URL path, a server of another kind), so it is `Status` 404 naming `shown_url` (the URL
    /// as it may be shown, without user info), not [`ModelError::ModelNotFound`]. `None` for
    /// any other answer.
    pub fn wrong_endpoint(status: u16, message: &str, body: &str, shown_url: &str) -> Option<ModelError> {
        (status == 404 && !body.to_ascii_lowercase().contains("model")).then(|| ModelError::Status {
            status,
            body: format!("{message} (no such endpoint: {shown_url}; is the base URL right?)"),
            retry_after: None,
        })
    }

    /// The timeouts a client's requests run under (`None` where unknown: a client given its
    /// own HTTP client does not know that client's connect and read timeouts).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Timeouts {
        /// Connecting.
        pub connect: Option<Duration>,
        /// The silence between two reads.
        pub read: Option<Duration>,
        /// The whole request.
        pub request: Option<Duration>,
    }

    impl Timeouts {
        /// The timeout that a request sent at `started` ran into: the whole request's once it
        /// has passed, else the connect timeout while `connecting` and the read timeout after;
        /// the time spent where that timeout is not known.
        pub fn fired(&self, started: Instant, connecting: bool) -> Duration {
            let elapsed = started.elapsed();
            match self.request {
                Some(request) if elapsed >= request => request,
                _ if connecting => self.connect.unwrap_or(elapsed),
                _ => self.read.unwrap_or(elapsed),
            }
        }
    }

    /// Classifies an HTTP error answer: 401/403 → `Authentication`, 404 → `ModelNotFound`,
    /// 429 → `RateLimited`, `context_length` (the provider recognised its server's message) →
    /// `ContextLengthExceeded`, anything else → `Status` with the trimmed body.
    pub fn status_error(
        status: u16,
        message: String,
        body: &str,
        retry_after: Option<Duration>,
        model: &str,
        context_length: bool,
    ) -> ModelError {
        match status {
            401 | 403 => ModelError::Authentication { status, message },
            404 => ModelError::ModelNotFound {
                model: model.to_owned(),
                message,
            },
            429 => ModelError::RateLimited { retry_after },
            _ if context_length => ModelError::ContextLengthExceeded { message },
            _ => ModelError::Status {
                status,
                body: trim_body(body),
                retry_after,
            },
        }
    }
}
