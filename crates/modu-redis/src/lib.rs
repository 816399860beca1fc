#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use modu_core::StoreError;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;

mod checkpoint;
mod connection;
mod conversation;
mod error;
mod lease;
#[cfg(feature = "mcp")]
mod mcp;
mod memory;

pub use checkpoint::{MAX_LIST_PAGE, PURGE_BATCH, RedisCheckpointStore, SAVE_PRUNE_BATCH};
use connection::with_retry;
pub use connection::{connect, connect_with_config, default_config};
pub use conversation::{APPEND_BATCH_TTL, RedisConversationStore};
pub use error::{RedisStoreError, redact_credentials};
pub use lease::RedisLeaseStore;
#[cfg(feature = "mcp")]
pub use mcp::RedisMcpTokenStore;
pub use memory::RedisMemoryStateStore;
pub use redis;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "modu";

/// A TTL in milliseconds, capped ([`modu_core::Lease::ttl_millis`]): Redis refuses an expiry
/// past its clock's range (`invalid expire time`), as `Duration::MAX` would be.
fn ttl_ms(ttl: Duration) -> i64 {
    modu_core::Lease::ttl_millis(ttl)
}

/// The TTL as the scripts take it: milliseconds, 0 for none.
fn script_ttl(ttl: Option<Duration>) -> i64 {
    ttl.map_or(0, ttl_ms)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn time_of_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A stored millisecond timestamp; a missing or unreadable one reads as the epoch (data
/// written before this version kept none).
fn parse_ms(raw: Option<&[u8]>) -> SystemTime {
    let ms = raw
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or(0);
    time_of_ms(ms)
}

/// `EVAL script numkeys keys… args…` as a command.
fn eval(script: &str, keys: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len()).arg(keys);
    cmd
}

/// Reads a string key; with a TTL, the read and the new expiry are one transaction.
async fn get_value(
    conn: &ConnectionManager,
    key: &str,
    ttl: Option<Duration>,
    operation: &'static str,
) -> Result<Option<Vec<u8>>, StoreError> {
    match ttl {
        Some(ttl) => {
            let mut pipe = redis::pipe();
            pipe.atomic().get(key).pexpire(key, ttl_ms(ttl)).ignore();
            let (value,): (Option<Vec<u8>>,) = with_retry(conn, operation, |mut conn| {
                let pipe = &pipe;
                async move { pipe.query_async(&mut conn).await }
            })
            .await?;
            Ok(value)
        }
        None => with_retry(conn, operation, |mut conn| async move { conn.get(key).await }).await,
    }
}
