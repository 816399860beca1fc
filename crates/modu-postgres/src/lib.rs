#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use modu_core::StoreError;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Transaction};

mod checkpoint;
mod conversation;
mod error;
mod lease;
#[cfg(feature = "mcp")]
mod mcp;
mod memory;
mod pool;
mod stores;

pub use checkpoint::{PURGE_BATCH, PostgresCheckpointStore, SAVE_PRUNE_BATCH};
pub use conversation::PostgresConversationStore;
use error::query_err;
pub use error::{PostgresStoreError, redact_credentials};
pub use lease::PostgresLeaseStore;
#[cfg(feature = "mcp")]
pub use mcp::PostgresMcpTokenStore;
pub use memory::PostgresMemoryStateStore;
pub use pool::{ACQUIRE_TIMEOUT, MAX_CONNECTIONS, MIGRATIONS, connect, connect_in_schema, migrate};
pub use sqlx;
pub use stores::PostgresStores;

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

async fn begin(pool: &PgPool, operation: &'static str) -> Result<Transaction<'static, Postgres>, StoreError> {
    pool.begin().await.map_err(query_err(operation))
}
