//! Memory state in Redis ([`RedisMemoryStateStore`]).

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{MemoryStateStore, StoreError};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;

use crate::{DEFAULT_PREFIX, connect, get_value, ttl_ms, with_retry};

/// Memory state (such as conversation summaries) in Redis: one string per key at
/// `{prefix}:memory:{key}`. With a TTL, every put and get sets the expiry again.
#[derive(Clone)]
pub struct RedisMemoryStateStore {
    conn: ConnectionManager,
    prefix: String,
    ttl: Option<Duration>,
}

impl std::fmt::Debug for RedisMemoryStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMemoryStateStore")
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl RedisMemoryStateStore {
    /// A store on a connection, with the key prefix [`DEFAULT_PREFIX`] and no TTL.
    pub fn new(conn: ConnectionManager) -> Self {
        RedisMemoryStateStore {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
            ttl: None,
        }
    }

    /// Connects to `url` (see [`connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(connect(url).await?))
    }

    /// Uses `prefix` for keys (`{prefix}:memory:{key}`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Values expire `ttl` after their last put or get.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    fn key(&self, key: &str) -> String {
        format!("{}:memory:{key}", self.prefix)
    }
}

#[async_trait]
impl MemoryStateStore for RedisMemoryStateStore {
    async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        StoreError::check_memory_key(key)?;
        let raw = get_value(&self.conn, &self.key(key), self.ttl, "memory.get").await?;
        raw.map(|bytes| {
            String::from_utf8(bytes).map_err(|e| StoreError::Corrupted {
                message: format!("memory value {key:?} is not UTF-8: {e}"),
            })
        })
        .transpose()
    }

    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError> {
        StoreError::check_memory_key(key)?;
        let key = self.key(key);
        let ttl = self.ttl;
        with_retry(&self.conn, "memory.put", |mut conn| {
            let key = &key;
            async move {
                match ttl {
                    Some(ttl) => {
                        let ms = u64::try_from(ttl_ms(ttl)).unwrap_or(u64::MAX);
                        conn.pset_ex::<_, _, ()>(key, value, ms).await
                    }
                    None => conn.set::<_, _, ()>(key, value).await,
                }
            }
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        StoreError::check_memory_key(key)?;
        let key = self.key(key);
        let _: i64 = with_retry(&self.conn, "memory.delete", |mut conn| {
            let key = &key;
            async move { conn.del(key).await }
        })
        .await?;
        Ok(())
    }
}
