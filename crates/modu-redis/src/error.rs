//! The crate's error ([`RedisStoreError`]), how Redis errors become [`StoreError`]s, and the
//! redaction of credentials in their messages.

use modu_core::StoreError;

/// What went wrong talking to Redis, with any password removed from the text. It is the
/// `source` of the [`StoreError::Backend`] the stores return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The URL could not be parsed or the first connection failed.
    #[error("cannot connect to redis: {message}")]
    Connect {
        /// The cause, redacted.
        message: String,
    },
    /// A command failed (connection lost or refused, timeout, server error).
    #[error("redis {operation} failed ({kind}): {message}")]
    Command {
        /// The store operation (`"conversation.append"`, …).
        operation: &'static str,
        /// The error class, e.g. `io error`, `timeout`, `response error`.
        kind: String,
        /// The cause, redacted.
        message: String,
    },
}

/// Removes the user info (`user:password@`) and secret-named query parameters
/// (`?password=…`) of every URL in `text` (for messages and logs); see
/// [`modu_core::redact::redact_urls`].
pub fn redact_credentials(text: &str) -> String {
    modu_core::redact::redact_urls(text)
}

pub(crate) fn error_kind(e: &redis::RedisError) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connection_refusal() {
        "connection refused".into()
    } else if e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() {
        "connection lost".into()
    } else {
        format!("{:?}", e.kind()).to_lowercase()
    }
}

pub(crate) fn backend(operation: &'static str, e: redis::RedisError) -> StoreError {
    if e.is_timeout() {
        tracing::debug!(operation, "redis command timed out");
        return StoreError::Timeout;
    }
    let err = RedisStoreError::Command {
        operation,
        kind: error_kind(&e),
        message: redact_credentials(&e.to_string()),
    };
    StoreError::Backend {
        message: err.to_string(),
        source: Some(Box::new(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_removes_passwords() {
        assert_eq!(
            redact_credentials("failed to connect to redis://user:s3cret@host:6379/0 (refused)"),
            "failed to connect to redis://***@host:6379/0 (refused)"
        );
        assert_eq!(redact_credentials("rediss://:pw@h/1"), "rediss://***@h/1");
        assert_eq!(
            redact_credentials("redis://host:1/ no secret"),
            "redis://host:1/ no secret"
        );
        assert_eq!(redact_credentials("no url at all"), "no url at all");
    }
}
