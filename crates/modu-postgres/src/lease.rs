//! Session leases in PostgreSQL ([`PostgresLeaseStore`]) and the fence check the fenced writes
//! of the conversation and checkpoint stores run in their transactions.

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{Fence, Lease, LeaseStore, StoreError};
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Transaction};

use crate::{connect, migrate, query_err};

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

/// Fails with [`StoreError::Fenced`] unless `fence` is its key's live lease, and keeps the
/// lease row share-locked until the transaction ends. Call it first in the write's
/// transaction: a take-over (an `UPDATE` of the row) waits until the write commits or rolls
/// back, and a check that meets a take-over in flight waits for it and then sees the new token.
pub(crate) async fn check_fence(
    tx: &mut Transaction<'static, Postgres>,
    fence: &Fence,
    operation: &'static str,
) -> Result<(), StoreError> {
    let live: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM modu_leases WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() FOR SHARE",
    )
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

/// Session leases in PostgreSQL (`modu_leases`: key, holder, token, expiry), in the schema of
/// the conversation and checkpoint stores whose fenced writes check them.
///
/// `acquire` is one statement (`INSERT … ON CONFLICT DO UPDATE … WHERE expires_at <=
/// clock_timestamp() RETURNING token`): of concurrent takers of a free key (connections,
/// processes, machines) exactly one gets it, since the upsert locks the row and checks the
/// expiry against its latest version. The row stays after release and expiry and each take
/// adds one to its token, so tokens grow for good. Expiry is the database's clock
/// (`clock_timestamp()`), never a client's: workers on machines whose clocks differ still agree
/// on when a lease ends.
///
/// A fenced write (`append_fenced`, `save_fenced`, `delete_fenced`) is one transaction that
/// first reads the lease row `FOR SHARE` (same token, `expires_at > clock_timestamp()`) and then
/// writes: a take-over's `UPDATE` of the row waits until the write commits, so a write is never
/// applied after the lease it carries was taken over.
///
/// ```no_run
/// use std::sync::Arc;
/// use modu_agent::{Agent, AgentRequest};
/// use modu_core::LeaseOptions;
/// use modu_postgres::PostgresStores;
/// use modu_testing::ScriptedModel;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let stores = PostgresStores::connect("postgres://modu@127.0.0.1:5432/modu").await?;
/// let agent = Agent::builder(ScriptedModel::new().text("hello"))
///     .conversation_store(Arc::new(stores.conversations.clone()))
///     .checkpoint_store(Arc::new(stores.checkpoints.clone()))
///     .session_leases(stores.leases.clone(), LeaseOptions::new())
///     .build()?;
/// agent.run(AgentRequest::new((), "hi").session("session-42")).await;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresLeaseStore {
    pub(crate) pool: PgPool,
}

impl PostgresLeaseStore {
    /// Connects to the database at `url` (see [`connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresLeaseStore {
            pool: connect(url).await?,
        })
    }

    /// Leases on an existing pool (the stores' pool); applies the migrations.
    pub async fn from_pool(pool: PgPool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(PostgresLeaseStore { pool })
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl LeaseStore for PostgresLeaseStore {
    async fn acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        StoreError::check_id(key)?;
        // A holder name is not a key (any length), but no store may take a NUL in it.
        if holder.contains('\0') {
            StoreError::check_id(holder)?;
        }
        // The expiry is computed again in the update: the upsert may have waited for the row.
        let token: Option<i64> = sqlx::query_scalar(
            "INSERT INTO modu_leases (key, holder, token, expires_at)
             VALUES ($1, $2, 1, clock_timestamp() + $3::float8 * interval '1 millisecond')
             ON CONFLICT (key) DO UPDATE SET holder = EXCLUDED.holder, token = modu_leases.token + 1,
                expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond'
             WHERE modu_leases.expires_at <= clock_timestamp()
             RETURNING token",
        )
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
        let renewed = sqlx::query(
            "UPDATE modu_leases SET expires_at = clock_timestamp() + $4::float8 * interval '1 millisecond'
             WHERE key = $1 AND token = $2 AND holder = $3 AND expires_at > clock_timestamp()",
        )
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
        sqlx::query("UPDATE modu_leases SET expires_at = to_timestamp(0) WHERE key = $1 AND token = $2")
            .bind(lease.key.as_str())
            .bind(token_arg(lease.token))
            .execute(&self.pool)
            .await
            .map_err(query_err("lease.release"))?;
        Ok(())
    }
}
