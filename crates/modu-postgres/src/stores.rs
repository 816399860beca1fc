//! [`PostgresStores`]: the stores and the session leases on one pool.

use std::time::Duration;

use modu_core::StoreError;
use sqlx::postgres::PgPool;

use crate::{
    PostgresCheckpointStore, PostgresConversationStore, PostgresLeaseStore, PostgresMemoryStateStore, connect,
    connect_in_schema, migrate,
};

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
