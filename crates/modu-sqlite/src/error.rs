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
    /// A query failed (I/O, disk full, …). A lock still held past the busy timeout is
    /// [`StoreError::Timeout`] instead, as PostgreSQL's lock and statement timeouts are.
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
        // SQLITE_BUSY (and its extended codes): another connection or process held the lock
        // past the busy timeout. SQLITE_LOCKED is no wait (a conflict inside one connection)
        // and stays a query error with its message.
        sqlx::Error::Database(ref db) if db.code().is_some_and(|c| gave_up_waiting(&c)) => StoreError::Timeout,
        other => SqliteStoreError::Query {
            operation,
            message: other.to_string(),
        }
        .into(),
    }
}

/// Whether a SQLite result code (primary or extended) is `SQLITE_BUSY` (5): the primary code
/// is the low byte.
fn gave_up_waiting(code: &str) -> bool {
    code.parse::<i32>().is_ok_and(|c| c & 0xff == 5)
}
