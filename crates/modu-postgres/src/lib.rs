#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use modu_core::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStatus, CheckpointStore, CheckpointSummary,
    ConversationStore, Fence, MemoryStateStore, Message, SessionSummary, StoreError,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};

mod lease;
#[cfg(feature = "mcp")]
mod mcp;

pub use lease::PostgresLeaseStore;
use lease::check_fence;
#[cfg(feature = "mcp")]
pub use mcp::PostgresMcpTokenStore;
pub use sqlx;

/// The schema migrations, embedded in the binary: `(version, description, SQL)`. They are
/// applied in order by [`migrate`] and recorded in the table `modu_schema_migrations` of the
/// store's schema (not sqlx's `_sqlx_migrations`, so an application's own sqlx migrations on
/// the same database and schema do not collide with these).
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (2, "session leases", include_str!("../migrations/0002_leases.sql")),
    (3, "mcp oauth tokens", include_str!("../migrations/0003_mcp_tokens.sql")),
];

/// The most expired checkpoints one [`CheckpointStore::purge_expired`] call deletes.
pub const PURGE_BATCH: u32 = 500;

/// The most expired checkpoints a [`CheckpointStore::save`] deletes on the side (with a TTL),
/// so the table stays bounded even when nobody calls `purge_expired`: every save removes up
/// to this many expired rows, more than the one row it may add.
pub const SAVE_PRUNE_BATCH: u32 = 8;

/// The most connections a pool opened by [`connect`] or [`connect_in_schema`] holds.
pub const MAX_CONNECTIONS: u32 = 8;

/// How long an operation waits for a free connection of the pool (then
/// [`StoreError::Timeout`]).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// The first key of the advisory locks that serialise migrations (the second is the schema).
const MIGRATION_LOCK: i32 = 0x6d6f_6475; // "modu"

/// The longest identifier PostgreSQL keeps (longer ones are silently truncated).
const MAX_IDENTIFIER_BYTES: usize = 63;

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
    /// The schema name given to [`connect_in_schema`] cannot be used.
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

/// Removes the user-info part (`user:password@`) of any URL in `text` (for messages and logs).
pub fn redact_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '/' || c == '?' || c == '"' || c == '\'' || c == ')')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***@");
                out.push_str(&authority[at + 1..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// SQLSTATEs that mean "gave up waiting": `query_canceled` (statement_timeout) and
/// `lock_not_available` (lock_timeout).
const TIMEOUT_CODES: &[&str] = &["57014", "55P03"];

fn query_err(operation: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
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

/// `name` as a quoted SQL identifier, if PostgreSQL can keep it as it is.
fn quote_identifier(name: &str) -> Result<String, StoreError> {
    let invalid = |reason| -> StoreError {
        PostgresStoreError::InvalidSchema {
            schema: name.to_owned(),
            reason,
        }
        .into()
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > MAX_IDENTIFIER_BYTES {
        return Err(invalid("longer than 63 bytes (PostgreSQL would truncate it)"));
    }
    if name.contains('\0') {
        return Err(invalid("it contains a NUL character"));
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
}

fn connect_err(url: &str) -> impl Fn(sqlx::Error) -> StoreError + '_ {
    move |e| match e {
        sqlx::Error::PoolTimedOut => StoreError::Timeout,
        other => PostgresStoreError::Connect {
            url: redact_credentials(url),
            message: redact_credentials(&other.to_string()),
        }
        .into(),
    }
}

/// Connects a pool (at most [`MAX_CONNECTIONS`] connections, [`ACQUIRE_TIMEOUT`]) to the
/// database at `url` (`postgres://user:password@host:port/database`; sqlx's URL parameters
/// apply, e.g. `?options=-c%20search_path%3Dmy_schema`), then applies the [`MIGRATIONS`] to the
/// schema the connection's `search_path` selects (`public` by default). No TLS. Share the pool
/// between the three stores.
pub async fn connect(url: &str) -> Result<PgPool, StoreError> {
    let pool = pool_options().connect(url).await.map_err(connect_err(url))?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Like [`connect`], with every connection's `search_path` set to `schema` alone: the tables
/// live in that schema, which is created if it does not exist yet. Several applications (or
/// tests) can share one database this way, each in its own schema.
pub async fn connect_in_schema(url: &str, schema: &str) -> Result<PgPool, StoreError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(connect_err(url))?
        .options([("search_path", startup_option_value(&quote_identifier(schema)?))]);
    let pool = pool_options().connect_with(options).await.map_err(connect_err(url))?;
    create_schema(&pool, schema).await?;
    migrate(&pool).await?;
    Ok(pool)
}

/// `value` escaped for the `options` startup parameter, which the server splits at ASCII
/// whitespace unless a backslash precedes it.
fn startup_option_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Creates `schema` unless it exists (checked first, so a role without the `CREATE` privilege
/// on the database can use a schema made for it), under the migration lock of that schema.
async fn create_schema(pool: &PgPool, schema: &str) -> Result<(), StoreError> {
    let err = query_err("create_schema");
    let quoted = quote_identifier(schema)?;
    let mut tx = pool.begin().await.map_err(&err)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(MIGRATION_LOCK)
        .bind(schema)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(schema)
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    if !exists {
        sqlx::raw_sql(&format!("CREATE SCHEMA {quoted}"))
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)
}

/// Applies the [`MIGRATIONS`] the connection's current schema lacks, in one transaction under
/// an advisory lock on that schema (so two processes connecting to a new database at once do
/// not both migrate; DDL is transactional, so a failed migration leaves nothing behind).
/// Idempotent; the stores' `from_pool` constructors call it.
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let err = query_err("migrate");
    let mut tx = pool.begin().await.map_err(&err)?;
    let schema: Option<String> = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    let Some(schema) = schema else {
        return Err(PostgresStoreError::NoSchema.into());
    };
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(MIGRATION_LOCK)
        .bind(&schema)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
    // Checked before creating: a role that may use the tables but not create any still passes.
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('modu_schema_migrations') IS NOT NULL")
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    if !has_table {
        sqlx::raw_sql(
            "CREATE TABLE modu_schema_migrations (
                version BIGINT PRIMARY KEY,
                description TEXT NOT NULL,
                applied_ms BIGINT NOT NULL
            )",
        )
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
    }
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0)::BIGINT FROM modu_schema_migrations")
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > known {
        return Err(PostgresStoreError::SchemaTooNew { found: current, known }.into());
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        sqlx::raw_sql(sql).execute(&mut *tx).await.map_err(&err)?;
        sqlx::query("INSERT INTO modu_schema_migrations (version, description, applied_ms) VALUES ($1, $2, $3)")
            .bind(version)
            .bind(description)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)
}

async fn begin(pool: &PgPool, operation: &'static str) -> Result<Transaction<'static, Postgres>, StoreError> {
    pool.begin().await.map_err(query_err(operation))
}

/// The stores and the session leases on one pool, as [`PostgresStores::connect`] opens them.
///
/// ```no_run
/// # async fn demo() -> Result<(), modu_core::StoreError> {
/// use std::time::Duration;
/// let stores = modu_postgres::PostgresStores::connect("postgres://modu@127.0.0.1:5432/modu")
///     .await?
///     .with_ttl(Duration::from_secs(7 * 24 * 3600));
/// # let _ = stores; Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PostgresStores {
    /// Conversations.
    pub conversations: PostgresConversationStore,
    /// Run checkpoints.
    pub checkpoints: PostgresCheckpointStore,
    /// Memory state.
    pub memory: PostgresMemoryStateStore,
    /// Session leases, checked by the fenced writes of `conversations` and `checkpoints`.
    pub leases: PostgresLeaseStore,
}

impl PostgresStores {
    /// Connects (see [`connect`]) and migrates.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::on(connect(url).await?))
    }

    /// Connects with the tables in `schema` (see [`connect_in_schema`]).
    pub async fn connect_in_schema(url: &str, schema: &str) -> Result<Self, StoreError> {
        Ok(Self::on(connect_in_schema(url, schema).await?))
    }

    /// The stores on an existing pool; applies the migrations.
    pub async fn from_pool(pool: PgPool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(Self::on(pool))
    }

    fn on(pool: PgPool) -> Self {
        PostgresStores {
            conversations: PostgresConversationStore {
                pool: pool.clone(),
                ttl: None,
            },
            checkpoints: PostgresCheckpointStore {
                pool: pool.clone(),
                ttl: None,
            },
            memory: PostgresMemoryStateStore {
                pool: pool.clone(),
                ttl: None,
            },
            leases: PostgresLeaseStore { pool },
        }
    }

    /// The same TTL for all three stores (set them one by one for different ones; leases
    /// have the ttl each run asks for).
    pub fn with_ttl(self, ttl: Duration) -> Self {
        PostgresStores {
            conversations: self.conversations.with_ttl(ttl),
            checkpoints: self.checkpoints.with_ttl(ttl),
            memory: self.memory.with_ttl(ttl),
            leases: self.leases,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.conversations.pool
    }
}

/// Conversations in PostgreSQL: a row per session (`modu_sessions`: next sequence number,
/// last access, last append) and a row per message (`modu_messages`, keyed by session and
/// sequence number).
///
/// `append` runs in one transaction that reserves a range of sequence numbers with an upsert
/// on the session row (`ON CONFLICT DO UPDATE … RETURNING next_seq`, which holds the row lock
/// until commit) and inserts the batch in one statement: concurrent appends (from any number
/// of connections or processes) are serialised on that row, keep each batch contiguous and
/// lose nothing. With a TTL, sessions not appended to or loaded for `ttl` read as empty and
/// are deleted lazily (on their next access, or by
/// [`PostgresConversationStore::purge_expired`]).
#[derive(Clone, Debug)]
pub struct PostgresConversationStore {
    pool: PgPool,
    ttl: Option<Duration>,
}

impl PostgresConversationStore {
    /// Connects to the database at `url` (see [`connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresConversationStore {
            pool: connect(url).await?,
            ttl: None,
        })
    }

    /// A store on an existing pool; applies the migrations.
    pub async fn from_pool(pool: PgPool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(PostgresConversationStore { pool, ttl: None })
    }

    /// Sessions expire `ttl` after their last append or load.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// An append, fenced when `fence` is given: the lease check comes first in the append's
    /// transaction.
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
        let mut tx = begin(&self.pool, op).await?;
        if let Some(fence) = fence {
            check_fence(&mut tx, fence, op).await?;
        }
        let now = now_ms();
        if let Some(ttl) = self.ttl {
            drop_session(&mut tx, session_id, Some(cutoff(now, ttl)), op).await?;
        }
        let next: i64 = sqlx::query_scalar(
            "INSERT INTO modu_sessions (session_id, next_seq, touched_ms, appended_ms) VALUES ($1, $2, $3, $3)
             ON CONFLICT (session_id) DO UPDATE SET next_seq = modu_sessions.next_seq + EXCLUDED.next_seq,
                touched_ms = EXCLUDED.touched_ms, appended_ms = EXCLUDED.appended_ms
             RETURNING next_seq",
        )
        .bind(session_id)
        .bind(count)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
        if !encoded.is_empty() {
            sqlx::query(
                "INSERT INTO modu_messages (session_id, seq, message)
                 SELECT $1, $2 + t.ord - 1, t.message FROM UNNEST($3::text[]) WITH ORDINALITY AS t(message, ord)",
            )
            .bind(session_id)
            .bind(next - count)
            .bind(&encoded)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
        }
        tx.commit().await.map_err(&err)
    }

    /// Deletes every expired session now; returns how many. A no-op without a TTL.
    pub async fn purge_expired(&self) -> Result<u64, StoreError> {
        const OP: &str = "conversation.purge_expired";
        let Some(ttl) = self.ttl else { return Ok(0) };
        let err = query_err(OP);
        let mut tx = begin(&self.pool, OP).await?;
        // The session rows first: deleting them waits for appends in flight, so their
        // messages are committed (and deleted below) or come after the purge.
        let gone: Vec<String> =
            sqlx::query_scalar("DELETE FROM modu_sessions WHERE touched_ms < $1 RETURNING session_id")
                .bind(cutoff(now_ms(), ttl))
                .fetch_all(&mut *tx)
                .await
                .map_err(&err)?;
        if !gone.is_empty() {
            sqlx::query("DELETE FROM modu_messages WHERE session_id = ANY($1)")
                .bind(&gone)
                .execute(&mut *tx)
                .await
                .map_err(&err)?;
        }
        tx.commit().await.map_err(&err)?;
        Ok(gone.len() as u64)
    }
}

/// Deletes `session_id` if it was last touched before `cut` (whatever its age when `cut` is
/// `None`). The session row goes first: that waits for an append in flight on it, so its
/// messages are committed before they are deleted, and no message outlives its session.
async fn drop_session(
    tx: &mut Transaction<'static, Postgres>,
    session_id: &str,
    cut: Option<i64>,
    operation: &'static str,
) -> Result<(), StoreError> {
    let err = query_err(operation);
    let removed = sqlx::query("DELETE FROM modu_sessions WHERE session_id = $1 AND touched_ms < $2")
        .bind(session_id)
        .bind(cut.unwrap_or(i64::MAX))
        .execute(&mut **tx)
        .await
        .map_err(&err)?
        .rows_affected();
    if removed > 0 || cut.is_none() {
        sqlx::query("DELETE FROM modu_messages WHERE session_id = $1")
            .bind(session_id)
            .execute(&mut **tx)
            .await
            .map_err(&err)?;
    }
    Ok(())
}

#[async_trait]
impl ConversationStore for PostgresConversationStore {
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError> {
        self.append_checked(session_id, messages, None).await
    }

    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        self.append_checked(session_id, messages, Some(fence)).await
    }

    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        const OP: &str = "conversation.load";
        let err = query_err(OP);
        let select = "SELECT seq, message FROM modu_messages WHERE session_id = $1 ORDER BY seq";
        let rows = match self.ttl {
            None => sqlx::query(select)
                .bind(session_id)
                .fetch_all(&self.pool)
                .await
                .map_err(&err)?,
            Some(ttl) => {
                let now = now_ms();
                let mut tx = begin(&self.pool, OP).await?;
                let alive =
                    sqlx::query("UPDATE modu_sessions SET touched_ms = $1 WHERE session_id = $2 AND touched_ms >= $3")
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
        let mut tx = begin(&self.pool, OP).await?;
        drop_session(&mut tx, session_id, None, OP).await?;
        tx.commit().await.map_err(query_err(OP))
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let err = query_err("conversation.list_sessions");
        let cut = self.ttl.map_or(i64::MIN, |ttl| cutoff(now_ms(), ttl));
        let rows =
            sqlx::query("SELECT session_id, appended_ms FROM modu_sessions WHERE touched_ms >= $1 ORDER BY session_id")
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
        // Already in byte order (the "C" collation); sorted again in case the column was
        // altered by hand.
        sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        Ok(sessions)
    }
}

/// Run checkpoints in PostgreSQL (`modu_checkpoints`: run id, bytes, agent, status, session,
/// last save, last access).
///
/// With a TTL, a checkpoint not saved or loaded for `ttl` reads as missing and is never
/// listed. Expired rows are deleted on their next access, by
/// [`CheckpointStore::purge_expired`] (at most [`PURGE_BATCH`] rows per call) and by every
/// save (at most [`SAVE_PRUNE_BATCH`] rows, in the save's transaction), so the table stays
/// bounded even for runs nobody reads again (paused or failed runs that are never resumed).
/// Each of these deletes walks an index on the last access and skips rows another
/// transaction holds (`FOR UPDATE SKIP LOCKED`): its work is bounded by the batch, not by the
/// table size, and concurrent saves never wait for each other's pruning.
///
/// [`CheckpointStore::list`] pages by run id (keyset paging on the primary key, whose `"C"`
/// collation is the byte order of the UTF-8 ids).
#[derive(Clone, Debug)]
pub struct PostgresCheckpointStore {
    pool: PgPool,
    ttl: Option<Duration>,
}

impl PostgresCheckpointStore {
    /// Connects to the database at `url` (see [`connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresCheckpointStore {
            pool: connect(url).await?,
            ttl: None,
        })
    }

    /// A store on an existing pool; applies the migrations.
    pub async fn from_pool(pool: PgPool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(PostgresCheckpointStore { pool, ttl: None })
    }

    /// Checkpoints expire `ttl` after they were last saved or loaded (independent of the
    /// conversation TTL).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A save, fenced when `fence` is given: the lease check comes first in the save's
    /// transaction.
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
        let mut tx = begin(&self.pool, op).await?;
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
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(
        "INSERT INTO modu_checkpoints (run_id, state, touched_ms, agent, status, session_id, saved_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $3)
         ON CONFLICT (run_id) DO UPDATE SET state = EXCLUDED.state, touched_ms = EXCLUDED.touched_ms,
            agent = EXCLUDED.agent, status = EXCLUDED.status, session_id = EXCLUDED.session_id,
            saved_ms = EXCLUDED.saved_ms",
    )
    .bind(run_id)
    .bind(state)
    .bind(now)
    .bind(meta.agent.as_str())
    .bind(meta.status.as_str())
    .bind(meta.session_id.as_deref())
}

/// Deletes at most `limit` checkpoints last touched before `cut` (oldest first, through the
/// index on `touched_ms`, skipping rows another transaction holds); how many.
async fn delete_expired_checkpoints(
    tx: &mut Transaction<'static, Postgres>,
    cut: i64,
    limit: u32,
    operation: &'static str,
) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "DELETE FROM modu_checkpoints WHERE run_id IN
            (SELECT run_id FROM modu_checkpoints WHERE touched_ms < $1 ORDER BY touched_ms LIMIT $2
             FOR UPDATE SKIP LOCKED)",
    )
    .bind(cut)
    .bind(i64::from(limit))
    .execute(&mut **tx)
    .await
    .map_err(query_err(operation))?
    .rows_affected())
}

#[async_trait]
impl CheckpointStore for PostgresCheckpointStore {
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
        let mut tx = begin(&self.pool, OP).await?;
        check_fence(&mut tx, fence, OP).await?;
        sqlx::query("DELETE FROM modu_checkpoints WHERE run_id = $1")
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
        tx.commit().await.map_err(&err)
    }

    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let err = query_err("checkpoint.load");
        match self.ttl {
            None => sqlx::query_scalar("SELECT state FROM modu_checkpoints WHERE run_id = $1")
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err),
            Some(ttl) => {
                let now = now_ms();
                let cut = cutoff(now, ttl);
                let state: Option<Vec<u8>> = sqlx::query_scalar(
                    "UPDATE modu_checkpoints SET touched_ms = $1 WHERE run_id = $2 AND touched_ms >= $3
                     RETURNING state",
                )
                .bind(now)
                .bind(run_id)
                .bind(cut)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err)?;
                if state.is_none() {
                    sqlx::query("DELETE FROM modu_checkpoints WHERE run_id = $1 AND touched_ms < $2")
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
        sqlx::query("DELETE FROM modu_checkpoints WHERE run_id = $1")
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
        // `$1::text IS NULL`: one statement for the first page and the following ones.
        let rows = sqlx::query(
            "SELECT run_id, agent, status, session_id, saved_ms FROM modu_checkpoints
             WHERE ($1::text IS NULL OR run_id > $1) AND touched_ms >= $2 ORDER BY run_id LIMIT $3",
        )
        .bind(query.after.as_deref())
        .bind(cut)
        .bind(fetch)
        .fetch_all(&self.pool)
        .await
        .map_err(&err)?;
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
        let mut tx = begin(&self.pool, OP).await?;
        let n = delete_expired_checkpoints(&mut tx, cutoff(now_ms(), ttl), PURGE_BATCH, OP).await?;
        tx.commit().await.map_err(query_err(OP))?;
        Ok(n)
    }
}

/// Memory state (cached summaries, …) in PostgreSQL (`modu_memory_state`). With a TTL, a value
/// not put or read for `ttl` reads as missing and is deleted lazily.
#[derive(Clone, Debug)]
pub struct PostgresMemoryStateStore {
    pool: PgPool,
    ttl: Option<Duration>,
}

impl PostgresMemoryStateStore {
    /// Connects to the database at `url` (see [`connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresMemoryStateStore {
            pool: connect(url).await?,
            ttl: None,
        })
    }

    /// A store on an existing pool; applies the migrations.
    pub async fn from_pool(pool: PgPool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(PostgresMemoryStateStore { pool, ttl: None })
    }

    /// Values expire `ttl` after their last put or get.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl MemoryStateStore for PostgresMemoryStateStore {
    async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        let err = query_err("memory.get");
        match self.ttl {
            None => sqlx::query_scalar("SELECT value FROM modu_memory_state WHERE key = $1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err),
            Some(ttl) => {
                let now = now_ms();
                let cut = cutoff(now, ttl);
                let v: Option<String> = sqlx::query_scalar(
                    "UPDATE modu_memory_state SET touched_ms = $1 WHERE key = $2 AND touched_ms >= $3
                     RETURNING value",
                )
                .bind(now)
                .bind(key)
                .bind(cut)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err)?;
                if v.is_none() {
                    sqlx::query("DELETE FROM modu_memory_state WHERE key = $1 AND touched_ms < $2")
                        .bind(key)
                        .bind(cut)
                        .execute(&self.pool)
                        .await
                        .map_err(&err)?;
                }
                Ok(v)
            }
        }
    }

    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO modu_memory_state (key, value, touched_ms) VALUES ($1, $2, $3)
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, touched_ms = EXCLUDED.touched_ms",
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
        sqlx::query("DELETE FROM modu_memory_state WHERE key = $1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(query_err("memory.delete"))?;
        Ok(())
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

    #[test]
    fn schema_names_are_quoted_or_refused() {
        assert_eq!(quote_identifier("modu").unwrap(), "\"modu\"");
        assert_eq!(quote_identifier("a\"b; DROP").unwrap(), "\"a\"\"b; DROP\"");
        assert!(quote_identifier("").is_err());
        assert!(quote_identifier(&"x".repeat(64)).is_err());
        assert!(quote_identifier(&"x".repeat(63)).is_ok());
        assert!(quote_identifier("a\0b").is_err());
        assert_eq!(startup_option_value("\"a b\\c\td\""), "\"a\\ b\\\\c\\\td\"");
    }
}
