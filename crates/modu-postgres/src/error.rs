//! The crate's error ([`PostgresStoreError`]), how sqlx errors become [`StoreError`]s, and the
//! redaction of credentials in their messages.

use modu_core::StoreError;

/// What went wrong in PostgreSQL. It is the `source` of the [`StoreError::Backend`] the stores
/// return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresStoreError {
    /// The server could not be reached or refused the connection (address, credentials, TLS
    /// required: this crate connects without TLS).
    #[error("cannot connect to postgres {url}: {message}")]
    Connect {
        /// The URL, without its password.
        url: String,
        /// The cause.
        message: String,
    },
    /// A query failed (connection lost, constraint, permission, …).
    #[error("postgres {operation} failed: {message}")]
    Query {
        /// The store operation (`"conversation.append"`, …).
        operation: &'static str,
        /// The cause.
        message: String,
    },
    /// The schema was migrated by a newer version of this crate.
    #[error("the database schema is version {found}, this build knows up to {known}")]
    SchemaTooNew {
        /// The version in the database.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// The schema name given to [`connect_in_schema`](crate::connect_in_schema) cannot be used.
    #[error("invalid schema name {schema:?}: {reason}")]
    InvalidSchema {
        /// The name.
        schema: String,
        /// Why.
        reason: &'static str,
    },
    /// The connection's `search_path` names no existing schema, so there is nowhere to create
    /// the tables.
    #[error("the connection's search_path names no existing schema")]
    NoSchema,
}

impl From<PostgresStoreError> for StoreError {
    fn from(err: PostgresStoreError) -> Self {
        StoreError::Backend {
            message: err.to_string(),
            source: Some(Box::new(err)),
        }
    }
}

/// Removes the user info (`user:password@`) and secret-named query parameters
/// (`?password=…`) of every URL in `text` (for messages and logs); see
/// [`modu_core::redact::redact_urls`].
pub fn redact_credentials(text: &str) -> String {
    modu_core::redact::redact_urls(text)
}

/// SQLSTATEs that mean "gave up waiting": `query_canceled` (statement_timeout) and
/// `lock_not_available` (lock_timeout).
const TIMEOUT_CODES: &[&str] = &["57014", "55P03"];

pub(crate) fn query_err(operation: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| match e {
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => StoreError::Corrupted {
            message: format!("{operation}: {e}"),
        },
        sqlx::Error::PoolTimedOut => StoreError::Timeout,
        sqlx::Error::Database(ref db) if db.code().is_some_and(|c| TIMEOUT_CODES.contains(&c.as_ref())) => {
            StoreError::Timeout
        }
        other => PostgresStoreError::Query {
            operation,
            message: redact_credentials(&other.to_string()),
        }
        .into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(
            redact_credentials("cannot reach postgres://modu:s3cret@db:5432/app?sslmode=disable"),
            "cannot reach postgres://***@db:5432/app?sslmode=disable"
        );
        assert_eq!(redact_credentials("postgres://db/app"), "postgres://db/app");
        assert_eq!(
            redact_credentials("postgresql://u:p@h?x=1 and postgres://a@b/"),
            "postgresql://***@h?x=1 and postgres://***@b/"
        );
    }
}
