//! Session leases in SQLite ([`SqliteLeaseStore`]) and the fence check the fenced writes of
//! the conversation and checkpoint stores run in their transactions.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use modu_core::{Fence, Lease, LeaseStore, StoreError};
use sqlx::sqlite::SqlitePool;
use sqlx::{Sqlite, Transaction};

use crate::{migrate, open, query_err};

/// The current time in ms since the Unix epoch, read by SQLite inside the statement (so a
/// statement that waited for the write lock compares against the time it runs, not the time it
/// was sent). `julianday('now')` works on every SQLite version; 2440587.5 is the Unix epoch.
macro_rules! now_ms_sql {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

fn fenced(fence: &Fence) -> StoreError {
    StoreError::Fenced {
        key: fence.key.clone(),
        token: fence.token,
    }
}

fn token_of(raw: i64, key: &str) -> Result<u64, StoreError> {
    u64::try_from(raw).map_err(|_| StoreError::Corrupted {
        message: format!("the lease on {key:?} has the negative token {raw}"),
    })
}

fn token_arg(token: u64) -> i64 {
    // A token above i64::MAX was never handed out: it matches no row.
    i64::try_from(token).unwrap_or(-1)
}

/// Fails with [`StoreError::Fenced`] unless `fence` is its key's live lease. Call it first in a
/// `BEGIN IMMEDIATE` transaction: the transaction holds the write lock, so no take-over commits
/// between this check and the writes that follow it.
pub(crate) async fn check_fence(
    tx: &mut Transaction<'static, Sqlite>,
    fence: &Fence,
    operation: &'static str,
) -> Result<(), StoreError> {
    let live: Option<i64> = sqlx::query_scalar(concat!(
        "SELECT 1 FROM modu_leases WHERE key = ?1 AND token = ?2 AND expires_ms > ",
        now_ms_sql!()
    ))
    .bind(fence.key.as_str())
    .bind(token_arg(fence.token))
    .fetch_optional(&mut **tx)
    .await
    .map_err(query_err(operation))?;
    match live {
        Some(_) => Ok(()),
        None => Err(fenced(fence)),
    }
}

/// Session leases in SQLite (`modu_leases`: key, holder, token, expiry), in the database of the
/// conversation and checkpoint stores whose fenced writes check them.
///
/// `acquire` is one statement (`INSERT … ON CONFLICT DO UPDATE … WHERE expires_ms <= now
/// RETURNING token`), so of concurrent takers (connections or processes) exactly one gets a
/// free key. The row stays after release and expiry, and each take adds one to its token, so
/// tokens grow for good. A fenced write (`append_fenced`, `save_fenced`, `delete_fenced`) is one
/// `BEGIN IMMEDIATE` transaction that checks the row (same token, not expired) and then writes:
/// SQLite's write lock keeps a take-over out until it commits. Times are SQLite's `'now'`, the
/// clock of the machine: processes sharing the file share it.
///
/// ```
/// use std::sync::Arc;
/// use modu_agent::{Agent, AgentRequest};
/// use modu_core::LeaseOptions;
/// use modu_sqlite::{SqliteCheckpointStore, SqliteConversationStore, SqliteLeaseStore};
/// use modu_testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let pool = modu_sqlite::open(dir.path().join("agent.db")).await?;
/// let agent = Agent::builder(ScriptedModel::new().text("hello"))
///     .conversation_store(Arc::new(SqliteConversationStore::from_pool(pool.clone()).await?))
///     .checkpoint_store(Arc::new(SqliteCheckpointStore::from_pool(pool.clone()).await?))
///     .session_leases(SqliteLeaseStore::from_pool(pool).await?, LeaseOptions::new())
///     .build()?;
/// let answer = agent.run(AgentRequest::new((), "hi").session("session-42")).await.into_result()?;
/// assert_eq!(answer, "hello");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteLeaseStore {
    pool: SqlitePool,
}

impl SqliteLeaseStore {
    /// Opens (and creates) the database at `path` (see [`open`]).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(SqliteLeaseStore {
            pool: open(path).await?,
        })
    }

    /// Leases on an existing pool (the stores' pool); applies the migrations.
    pub async fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(SqliteLeaseStore { pool })
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

#[async_trait]
impl LeaseStore for SqliteLeaseStore {
    async fn acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        StoreError::check_id(key)?;
        // A holder name is not a key (any length), but no store may take a NUL in it.
        if holder.contains('\0') {
            StoreError::check_id(holder)?;
        }
        let token: Option<i64> = sqlx::query_scalar(concat!(
            "INSERT INTO modu_leases (key, holder, token, expires_ms) VALUES (?1, ?2, 1, ",
            now_ms_sql!(),
            " + ?3)
             ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, token = modu_leases.token + 1,
                expires_ms = excluded.expires_ms
             WHERE modu_leases.expires_ms <= ",
            now_ms_sql!(),
            " RETURNING token"
        ))
        .bind(key)
        .bind(holder)
        .bind(Lease::ttl_millis(ttl))
        .fetch_optional(&self.pool)
        .await
        .map_err(query_err("lease.acquire"))?;
        token
            .map(|raw| Ok(Lease::new(key, holder, token_of(raw, key)?, ttl)))
            .transpose()
    }

    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let renewed = sqlx::query(concat!(
            "UPDATE modu_leases SET expires_ms = ",
            now_ms_sql!(),
            " + ?4 WHERE key = ?1 AND token = ?2 AND holder = ?3 AND expires_ms > ",
            now_ms_sql!()
        ))
        .bind(lease.key.as_str())
        .bind(token_arg(lease.token))
        .bind(lease.holder.as_str())
        .bind(Lease::ttl_millis(lease.ttl))
        .execute(&self.pool)
        .await
        .map_err(query_err("lease.renew"))?
        .rows_affected();
        if renewed == 0 {
            return Err(fenced(&lease.fence()));
        }
        Ok(())
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        // The row stays (its token is the floor of the next take's), expired.
        sqlx::query("UPDATE modu_leases SET expires_ms = 0 WHERE key = ?1 AND token = ?2")
            .bind(lease.key.as_str())
            .bind(token_arg(lease.token))
            .execute(&self.pool)
            .await
            .map_err(query_err("lease.release"))?;
        Ok(())
    }
}
