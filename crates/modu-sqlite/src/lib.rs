#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use modu_core::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStatus, CheckpointStore, CheckpointSummary,
    ConversationStore, Fence, MemoryStateStore, Message, SessionSummary, StoreError,
};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, Sqlite, Transaction};

mod lease;
#[cfg(feature = "mcp")]
mod mcp;

pub use lease::SqliteLeaseStore;
use lease::check_fence;
#[cfg(feature = "mcp")]
pub use mcp::SqliteMcpTokenStore;
pub use sqlx;

/// The schema migrations, embedded in the binary: `(version, description, SQL)`. They are
/// applied in order by [`migrate`] and recorded in the table `modu_schema_migrations` (not
/// sqlx's `_sqlx_migrations`, so an application's own sqlx migrations on the same database
/// do not collide with these).
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (
        2,
        "checkpoint metadata, session last append, expiry indexes",
        include_str!("../migrations/0002_list_and_expiry.sql"),
    ),
    (3, "session leases", include_str!("../migrations/0003_leases.sql")),
    (4, "mcp oauth tokens", include_str!("../migrations/0004_mcp_tokens.sql")),
];

/// The most expired checkpoints one [`CheckpointStore::purge_expired`] call deletes.
pub const PURGE_BATCH: u32 = 500;

/// The most expired checkpoints a [`CheckpointStore::save`] deletes on the side (with a TTL),
/// so the table stays bounded even when nobody calls `purge_expired`: every save removes up
/// to this many expired rows, more than the one row it may add.
pub const SAVE_PRUNE_BATCH: u32 = 8;

/// How long a connection waits for a lock held by another connection or process.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

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

fn query_err(operation: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
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

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A stored millisecond timestamp as a time (negative values, which this crate never writes,
/// read as the epoch).
fn time_of_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The oldest `touched_ms` still alive for a TTL.
fn cutoff(now: i64, ttl: Duration) -> i64 {
    now.saturating_sub(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

/// Opens (creating the file and its parent folders if needed) a SQLite database in WAL mode
/// with a busy timeout of [`BUSY_TIMEOUT`] and `synchronous = NORMAL` (a committed write
/// survives a crash of the process; with WAL, a power loss may lose the last commits), then
/// applies the [`MIGRATIONS`]. Share the pool between the three stores.
pub async fn open(path: impl AsRef<Path>) -> Result<SqlitePool, StoreError> {
    let path = path.as_ref();
    let open_err = |message: String| -> StoreError {
        SqliteStoreError::Open {
            path: path.display().to_string(),
            message,
        }
        .into()
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| open_err(e.to_string()))?;
    }
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(BUSY_TIMEOUT);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
        .map_err(|e| open_err(e.to_string()))?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Opens an in-memory database (one connection, so every query sees the same data), migrated.
/// For tests and examples.
pub async fn open_in_memory() -> Result<SqlitePool, StoreError> {
    let options = SqliteConnectOptions::from_str("sqlite::memory:").map_err(query_err("open"))?;
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(query_err("open"))?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Applies the [`MIGRATIONS`] this database lacks, in one `BEGIN IMMEDIATE` transaction (so
/// two processes opening one new file at once do not both migrate). Idempotent; the stores'
/// `from_pool` constructors call it.
pub async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let err = query_err("migrate");
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(&err)?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS modu_schema_migrations (
            version INTEGER PRIMARY KEY NOT NULL,
            description TEXT NOT NULL,
            applied_ms INTEGER NOT NULL
        )",
    )
    .execute(&mut *tx)
    .await
    .map_err(&err)?;
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM modu_schema_migrations")
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > known {
        return Err(SqliteStoreError::SchemaTooNew { found: current, known }.into());
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        sqlx::raw_sql(sql).execute(&mut *tx).await.map_err(&err)?;
        sqlx::query("INSERT INTO modu_schema_migrations (version, description, applied_ms) VALUES (?1, ?2, ?3)")
            .bind(version)
            .bind(description)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)
}

async fn write_tx(pool: &SqlitePool, operation: &'static str) -> Result<Transaction<'static, Sqlite>, StoreError> {
    // IMMEDIATE takes the write lock up front: no lock upgrade, so no SQLITE_BUSY halfway
    // through; waiting for the lock is bounded by the busy timeout.
    pool.begin_with("BEGIN IMMEDIATE").await.map_err(query_err(operation))
}

/// Conversations in SQLite: a row per session (`modu_sessions`: next sequence number, last
/// access) and a row per message (`modu_messages`, keyed by session and sequence number).
///
/// `append` runs in one `BEGIN IMMEDIATE` transaction that reserves a range of sequence
/// numbers and inserts the batch: concurrent appends (from any number of connections or
/// processes) are serialised by SQLite's write lock, keep each batch contiguous and lose
/// nothing. With a TTL, sessions not appended to or loaded for `ttl` read as empty and are
/// deleted lazily (on their next access, or by [`SqliteConversationStore::purge_expired`]).
#[derive(Clone, Debug)]
pub struct SqliteConversationStore {
    pool: SqlitePool,
    ttl: Option<Duration>,
}

impl SqliteConversationStore {
    /// Opens (and creates) the database at `path` (see [`open`]).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(SqliteConversationStore {
            pool: open(path).await?,
            ttl: None,
        })
    }

    /// A store on an existing pool; applies the migrations.
    pub async fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(SqliteConversationStore { pool, ttl: None })
    }

    /// Sessions expire `ttl` after their last append or load.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// An append, fenced when `fence` is given: the lease check and the writes are one
    /// `BEGIN IMMEDIATE` transaction.
    async fn append_checked(
        &self,
        session_id: &str,
        messages: &[Message],
        fence: Option<&Fence>,
    ) -> Result<(), StoreError> {
        let op = if fence.is_some() {
            "conversation.append_fenced"
        } else {
            "conversation.append"
        };
        let err = query_err(op);
        let mut encoded = Vec::with_capacity(messages.len());
        for m in messages {
            encoded.push(serde_json::to_string(m).map_err(|e| StoreError::Backend {
                message: format!("cannot encode a message: {e}"),
                source: Some(Box::new(e)),
            })?);
        }
        let count = i64::try_from(encoded.len()).unwrap_or(i64::MAX);
        let mut tx = write_tx(&self.pool, op).await?;
        if let Some(fence) = fence {
            check_fence(&mut tx, fence, op).await?;
        }
        let now = now_ms();
        if let Some(ttl) = self.ttl {
            drop_session(&mut tx, session_id, Some(cutoff(now, ttl)), op).await?;
        }
        let next: i64 = sqlx::query_scalar(
            "INSERT INTO modu_sessions (session_id, next_seq, touched_ms, appended_ms) VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT (session_id) DO UPDATE SET next_seq = next_seq + ?2, touched_ms = ?3, appended_ms = ?3
             RETURNING next_seq",
        )
        .bind(session_id)
        .bind(count)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
        let start = next - count;
        for (i, message) in encoded.iter().enumerate() {
            sqlx::query("INSERT INTO modu_messages (session_id, seq, message) VALUES (?1, ?2, ?3)")
                .bind(session_id)
                .bind(start + i as i64)
                .bind(message)
                .execute(&mut *tx)
                .await
                .map_err(&err)?;
        }
        tx.commit().await.map_err(&err)
    }

    /// Deletes every expired session now; returns how many. A no-op without a TTL.
    pub async fn purge_expired(&self) -> Result<u64, StoreError> {
        let Some(ttl) = self.ttl else { return Ok(0) };
        let err = query_err("conversation.purge_expired");
        let cut = cutoff(now_ms(), ttl);
        let mut tx = write_tx(&self.pool, "conversation.purge_expired").await?;
        sqlx::query(
            "DELETE FROM modu_messages WHERE session_id IN
                (SELECT session_id FROM modu_sessions WHERE touched_ms < ?1)",
        )
        .bind(cut)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
        let n = sqlx::query("DELETE FROM modu_sessions WHERE touched_ms < ?1")
            .bind(cut)
            .execute(&mut *tx)
            .await
            .map_err(&err)?
            .rows_affected();
        tx.commit().await.map_err(&err)?;
        Ok(n)
    }
}

/// Deletes `session_id` if it expired before `cut` (all sessions when `cut` is `None`).
async fn drop_session(
    tx: &mut Transaction<'static, Sqlite>,
    session_id: &str,
    cut: Option<i64>,
    operation: &'static str,
) -> Result<(), StoreError> {
    let err = query_err(operation);
    let cut = cut.unwrap_or(i64::MAX);
    sqlx::query(
        "DELETE FROM modu_messages WHERE session_id = ?1
            AND EXISTS (SELECT 1 FROM modu_sessions WHERE session_id = ?1 AND touched_ms < ?2)",
    )
    .bind(session_id)
    .bind(cut)
    .execute(&mut **tx)
    .await
    .map_err(&err)?;
    sqlx::query("DELETE FROM modu_sessions WHERE session_id = ?1 AND touched_ms < ?2")
        .bind(session_id)
        .bind(cut)
        .execute(&mut **tx)
        .await
        .map_err(&err)?;
    Ok(())
}

#[async_trait]
impl ConversationStore for SqliteConversationStore {
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError> {
        self.append_checked(session_id, messages, None).await
    }

    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        self.append_checked(session_id, messages, Some(fence)).await
    }

    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        const OP: &str = "conversation.load";
        let err = query_err(OP);
        let select = "SELECT seq, CAST(message AS TEXT) FROM modu_messages WHERE session_id = ?1 ORDER BY seq";
        let rows = match self.ttl {
            None => sqlx::query(select)
                .bind(session_id)
                .fetch_all(&self.pool)
                .await
                .map_err(&err)?,
            Some(ttl) => {
                let now = now_ms();
                let mut tx = write_tx(&self.pool, OP).await?;
                let alive =
                    sqlx::query("UPDATE modu_sessions SET touched_ms = ?1 WHERE session_id = ?2 AND touched_ms >= ?3")
                        .bind(now)
                        .bind(session_id)
                        .bind(cutoff(now, ttl))
                        .execute(&mut *tx)
                        .await
                        .map_err(&err)?
                        .rows_affected()
                        > 0;
                let rows = if alive {
                    sqlx::query(select)
                        .bind(session_id)
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(&err)?
                } else {
                    drop_session(&mut tx, session_id, Some(cutoff(now, ttl)), OP).await?;
                    Vec::new()
                };
                tx.commit().await.map_err(&err)?;
                rows
            }
        };
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get(0).map_err(&err)?;
                let text: String = row.try_get(1).map_err(&err)?;
                serde_json::from_str(&text).map_err(|e| StoreError::Corrupted {
                    message: format!("message {seq} of session {session_id:?} is not a valid message: {e}"),
                })
            })
            .collect()
    }

    async fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        const OP: &str = "conversation.delete";
        let mut tx = write_tx(&self.pool, OP).await?;
        drop_session(&mut tx, session_id, None, OP).await?;
        tx.commit().await.map_err(query_err(OP))
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let err = query_err("conversation.list_sessions");
        let cut = self.ttl.map_or(i64::MIN, |ttl| cutoff(now_ms(), ttl));
        let rows =
            sqlx::query("SELECT session_id, appended_ms FROM modu_sessions WHERE touched_ms >= ?1 ORDER BY session_id")
                .bind(cut)
                .fetch_all(&self.pool)
                .await
                .map_err(&err)?;
        let mut sessions = rows
            .iter()
            .map(|row| {
                let id: String = row.try_get(0).map_err(&err)?;
                let appended: i64 = row.try_get(1).map_err(&err)?;
                Ok(SessionSummary::new(id, time_of_ms(appended)))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        Ok(sessions)
    }
}

/// Run checkpoints in SQLite (`modu_checkpoints`: run id, bytes, agent, status, session, last
/// save, last access).
///
/// With a TTL, a checkpoint not saved or loaded for `ttl` reads as missing and is never
/// listed. Expired rows are deleted on their next access, by
/// [`CheckpointStore::purge_expired`] (at most [`PURGE_BATCH`] rows per call) and by every
/// save (at most [`SAVE_PRUNE_BATCH`] rows, in the save's transaction), so the table stays
/// bounded even for runs nobody reads again (paused or failed runs that are never resumed).
/// Each of these deletes walks an index on the last access: its work is bounded by the
/// batch, not by the table size.
///
/// [`CheckpointStore::list`] pages by run id (keyset paging on the primary key, whose
/// `BINARY` collation is the byte order of the UTF-8 ids).
#[derive(Clone, Debug)]
pub struct SqliteCheckpointStore {
    pool: SqlitePool,
    ttl: Option<Duration>,
}

impl SqliteCheckpointStore {
    /// Opens (and creates) the database at `path` (see [`open`]).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(SqliteCheckpointStore {
            pool: open(path).await?,
            ttl: None,
        })
    }

    /// A store on an existing pool; applies the migrations.
    pub async fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(SqliteCheckpointStore { pool, ttl: None })
    }

    /// Checkpoints expire `ttl` after they were last saved or loaded (independent of the
    /// conversation TTL).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// A save, fenced when `fence` is given: the lease check and the writes are one
    /// `BEGIN IMMEDIATE` transaction.
    async fn save_checked(
        &self,
        run_id: &str,
        meta: &CheckpointMeta,
        state: &[u8],
        fence: Option<&Fence>,
    ) -> Result<(), StoreError> {
        let op = if fence.is_some() {
            "checkpoint.save_fenced"
        } else {
            "checkpoint.save"
        };
        let err = query_err(op);
        if fence.is_none() && self.ttl.is_none() {
            // One statement: no transaction needed.
            upsert_checkpoint(run_id, meta, state, now_ms())
                .execute(&self.pool)
                .await
                .map_err(&err)?;
            return Ok(());
        }
        let mut tx = write_tx(&self.pool, op).await?;
        if let Some(fence) = fence {
            check_fence(&mut tx, fence, op).await?;
        }
        let now = now_ms();
        upsert_checkpoint(run_id, meta, state, now)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
        if let Some(ttl) = self.ttl {
            delete_expired_checkpoints(&mut tx, cutoff(now, ttl), SAVE_PRUNE_BATCH, op).await?;
        }
        tx.commit().await.map_err(&err)
    }
}

/// The upsert of a checkpoint's row.
fn upsert_checkpoint<'q>(
    run_id: &'q str,
    meta: &'q CheckpointMeta,
    state: &'q [u8],
    now: i64,
) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    sqlx::query(
        "INSERT INTO modu_checkpoints (run_id, state, touched_ms, agent, status, session_id, saved_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?3)
         ON CONFLICT (run_id) DO UPDATE SET state = excluded.state, touched_ms = excluded.touched_ms,
            agent = excluded.agent, status = excluded.status, session_id = excluded.session_id,
            saved_ms = excluded.saved_ms",
    )
    .bind(run_id)
    .bind(state)
    .bind(now)
    .bind(meta.agent.as_str())
    .bind(meta.status.as_str())
    .bind(meta.session_id.as_deref())
}

/// Deletes at most `limit` checkpoints last touched before `cut` (oldest first, through the
/// index on `touched_ms`); how many.
async fn delete_expired_checkpoints(
    tx: &mut Transaction<'static, Sqlite>,
    cut: i64,
    limit: u32,
    operation: &'static str,
) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "DELETE FROM modu_checkpoints WHERE rowid IN
            (SELECT rowid FROM modu_checkpoints WHERE touched_ms < ?1 ORDER BY touched_ms LIMIT ?2)",
    )
    .bind(cut)
    .bind(i64::from(limit))
    .execute(&mut **tx)
    .await
    .map_err(query_err(operation))?
    .rows_affected())
}

#[async_trait]
impl CheckpointStore for SqliteCheckpointStore {
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
        self.save_checked(run_id, meta, state, None).await
    }

    async fn save_fenced(
        &self,
        run_id: &str,
        meta: &CheckpointMeta,
        state: &[u8],
        fence: &Fence,
    ) -> Result<(), StoreError> {
        self.save_checked(run_id, meta, state, Some(fence)).await
    }

    async fn delete_fenced(&self, run_id: &str, fence: &Fence) -> Result<(), StoreError> {
        const OP: &str = "checkpoint.delete_fenced";
        let err = query_err(OP);
        let mut tx = write_tx(&self.pool, OP).await?;
        check_fence(&mut tx, fence, OP).await?;
        sqlx::query("DELETE FROM modu_checkpoints WHERE run_id = ?1")
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
        tx.commit().await.map_err(&err)
    }

    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let err = query_err("checkpoint.load");
        // CAST: a row whose state is not a BLOB (written by hand, or by another tool) still
        // reads as bytes, and the run loop reports what is wrong with them.
        match self.ttl {
            None => sqlx::query_scalar("SELECT CAST(state AS BLOB) FROM modu_checkpoints WHERE run_id = ?1")
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err),
            Some(ttl) => {
                let now = now_ms();
                let cut = cutoff(now, ttl);
                let state: Option<Vec<u8>> = sqlx::query_scalar(
                    "UPDATE modu_checkpoints SET touched_ms = ?1 WHERE run_id = ?2 AND touched_ms >= ?3
                     RETURNING CAST(state AS BLOB)",
                )
                .bind(now)
                .bind(run_id)
                .bind(cut)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err)?;
                if state.is_none() {
                    sqlx::query("DELETE FROM modu_checkpoints WHERE run_id = ?1 AND touched_ms < ?2")
                        .bind(run_id)
                        .bind(cut)
                        .execute(&self.pool)
                        .await
                        .map_err(&err)?;
                }
                Ok(state)
            }
        }
    }

    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM modu_checkpoints WHERE run_id = ?1")
            .bind(run_id)
            .execute(&self.pool)
            .await
            .map_err(query_err("checkpoint.delete"))?;
        Ok(())
    }

    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        const OP: &str = "checkpoint.list";
        let err = query_err(OP);
        let limit = query.effective_limit();
        // One row more than the page tells whether another page follows.
        let fetch = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
        let cut = self.ttl.map_or(i64::MIN, |ttl| cutoff(now_ms(), ttl));
        let rows = match &query.after {
            Some(after) => sqlx::query(
                "SELECT run_id, agent, status, session_id, saved_ms FROM modu_checkpoints
                 WHERE run_id > ?1 AND touched_ms >= ?2 ORDER BY run_id LIMIT ?3",
            )
            .bind(after.as_str())
            .bind(cut)
            .bind(fetch)
            .fetch_all(&self.pool)
            .await
            .map_err(&err)?,
            None => sqlx::query(
                "SELECT run_id, agent, status, session_id, saved_ms FROM modu_checkpoints
                 WHERE touched_ms >= ?1 ORDER BY run_id LIMIT ?2",
            )
            .bind(cut)
            .bind(fetch)
            .fetch_all(&self.pool)
            .await
            .map_err(&err)?,
        };
        let more = rows.len() > limit;
        let mut items = Vec::with_capacity(rows.len().min(limit));
        for row in rows.iter().take(limit) {
            let run_id: String = row.try_get(0).map_err(&err)?;
            let agent: String = row.try_get(1).map_err(&err)?;
            let status: String = row.try_get(2).map_err(&err)?;
            let session_id: Option<String> = row.try_get(3).map_err(&err)?;
            let saved_ms: i64 = row.try_get(4).map_err(&err)?;
            let status = CheckpointStatus::parse(&status).ok_or_else(|| StoreError::Corrupted {
                message: format!("checkpoint {run_id:?} has the unknown status {status:?}"),
            })?;
            let meta = CheckpointMeta::new(agent, status).with_session(session_id);
            items.push(CheckpointSummary::new(run_id, meta, time_of_ms(saved_ms)));
        }
        let next = if more {
            items.last().map(|i| i.run_id.clone())
        } else {
            None
        };
        Ok(CheckpointPage::new(items, next))
    }

    async fn purge_expired(&self) -> Result<u64, StoreError> {
        const OP: &str = "checkpoint.purge_expired";
        let Some(ttl) = self.ttl else { return Ok(0) };
        let mut tx = write_tx(&self.pool, OP).await?;
        let n = delete_expired_checkpoints(&mut tx, cutoff(now_ms(), ttl), PURGE_BATCH, OP).await?;
        tx.commit().await.map_err(query_err(OP))?;
        Ok(n)
    }
}

/// Memory state (cached summaries, …) in SQLite (`modu_memory_state`). With a TTL, a value
/// not put or read for `ttl` reads as missing and is deleted lazily.
#[derive(Clone, Debug)]
pub struct SqliteMemoryStateStore {
    pool: SqlitePool,
    ttl: Option<Duration>,
}

impl SqliteMemoryStateStore {
    /// Opens (and creates) the database at `path` (see [`open`]).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(SqliteMemoryStateStore {
            pool: open(path).await?,
            ttl: None,
        })
    }

    /// A store on an existing pool; applies the migrations.
    pub async fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(SqliteMemoryStateStore { pool, ttl: None })
    }

    /// Values expire `ttl` after their last put or get.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

#[async_trait]
impl MemoryStateStore for SqliteMemoryStateStore {
    async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        let err = query_err("memory.get");
        let raw: Option<Vec<u8>> = match self.ttl {
            None => sqlx::query_scalar("SELECT CAST(value AS BLOB) FROM modu_memory_state WHERE key = ?1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err)?,
            Some(ttl) => {
                let now = now_ms();
                let cut = cutoff(now, ttl);
                let v: Option<Vec<u8>> = sqlx::query_scalar(
                    "UPDATE modu_memory_state SET touched_ms = ?1 WHERE key = ?2 AND touched_ms >= ?3
                     RETURNING CAST(value AS BLOB)",
                )
                .bind(now)
                .bind(key)
                .bind(cut)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err)?;
                if v.is_none() {
                    sqlx::query("DELETE FROM modu_memory_state WHERE key = ?1 AND touched_ms < ?2")
                        .bind(key)
                        .bind(cut)
                        .execute(&self.pool)
                        .await
                        .map_err(&err)?;
                }
                v
            }
        };
        raw.map(|bytes| {
            String::from_utf8(bytes).map_err(|e| StoreError::Corrupted {
                message: format!("memory value {key:?} is not UTF-8: {e}"),
            })
        })
        .transpose()
    }

    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO modu_memory_state (key, value, touched_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, touched_ms = excluded.touched_ms",
        )
        .bind(key)
        .bind(value)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(query_err("memory.put"))?;
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM modu_memory_state WHERE key = ?1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(query_err("memory.delete"))?;
        Ok(())
    }
}
