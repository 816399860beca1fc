#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use modu_core::StoreError;
use sqlx::sqlite::SqlitePool;
use sqlx::{Sqlite, Transaction};

mod checkpoint;
mod conversation;
mod error;
mod lease;
#[cfg(feature = "mcp")]
mod mcp;
mod memory;
mod pool;

pub use checkpoint::{PURGE_BATCH, SAVE_PRUNE_BATCH, SqliteCheckpointStore};
pub use conversation::SqliteConversationStore;
pub use error::SqliteStoreError;
use error::query_err;
pub use lease::SqliteLeaseStore;
#[cfg(feature = "mcp")]
pub use mcp::SqliteMcpTokenStore;
pub use memory::SqliteMemoryStateStore;
pub use pool::{BUSY_TIMEOUT, MIGRATIONS, migrate, open, open_in_memory};
pub use sqlx;

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

async fn write_tx(pool: &SqlitePool, operation: &'static str) -> Result<Transaction<'static, Sqlite>, StoreError> {
    // IMMEDIATE takes the write lock up front: no lock upgrade, so no SQLITE_BUSY halfway
    // through; waiting for the lock is bounded by the busy timeout.
    pool.begin_with("BEGIN IMMEDIATE").await.map_err(query_err(operation))
}
