//! The crate's error ([`SqliteStoreError`]) and how sqlx errors become [`StoreError`]s.

use modu_core::StoreError;

/// What went wrong in SQLite. It is the `source` of the [`StoreError::Backend`] the stores
/// return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteStoreError {
    /// The database file or its folder could not be created or opened.
    #[error("cannot open sqlite database {path}: {message}")]
    Open {
        /// The file.
        path: String,
        /// The cause.
        message: String,
    },
    /// A query failed (locked past the busy timeout, I/O, disk full, …).
    #[error("sqlite {operation} failed: {message}")]
    Query {
        /// The store operation (`"conversation.append"`, …).
        operation: &'static str,
        /// The cause.
        message: String,
    },
    /// The database was migrated by a newer version of this crate.
    #[error("the database schema is version {found}, this build knows up to {known}")]
    SchemaTooNew {
        /// The version in the database.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
}

impl From<SqliteStoreError> for StoreError {
    fn from(err: SqliteStoreError) -> Self {
        StoreError::Backend {
            message: err.to_string(),
            source: Some(Box::new(err)),
        }
    }
}

pub(crate) fn query_err(operation: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| match e {
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => StoreError::Corrupted {
            message: format!("{operation}: {e}"),
        },
        sqlx::Error::PoolTimedOut => StoreError::Timeout,
        other => SqliteStoreError::Query {
            operation,
            message: other.to_string(),
        }
        .into(),
    }
}
