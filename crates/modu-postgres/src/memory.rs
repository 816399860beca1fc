//! Memory state in PostgreSQL ([`PostgresMemoryStateStore`]).

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{MemoryStateStore, StoreError};
use sqlx::postgres::PgPool;

use crate::{connect, cutoff, migrate, now_ms, query_err};

/// Memory state (cached summaries, …) in PostgreSQL (`modu_memory_state`, each value as its
/// UTF-8 bytes, so any string, NUL characters included, round-trips). With a TTL, a value not
/// put or read for `ttl` reads as missing and is deleted lazily.
#[derive(Clone, Debug)]
pub struct PostgresMemoryStateStore {
    pub(crate) pool: PgPool,
    pub(crate) ttl: Option<Duration>,
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
        StoreError::check_memory_key(key)?;
        let err = query_err("memory.get");
        let value: Option<Vec<u8>> = match self.ttl {
            None => sqlx::query_scalar("SELECT value FROM modu_memory_state WHERE key = $1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(&err)?,
            Some(ttl) => {
                let now = now_ms();
                let cut = cutoff(now, ttl);
                let v: Option<Vec<u8>> = sqlx::query_scalar(
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
                v
            }
        };
        value
            .map(|bytes| {
                String::from_utf8(bytes).map_err(|e| StoreError::Corrupted {
                    message: format!("the memory value under {key:?} is not UTF-8: {e}"),
                })
            })
            .transpose()
    }

    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError> {
        StoreError::check_memory_key(key)?;
        sqlx::query(
            "INSERT INTO modu_memory_state (key, value, touched_ms) VALUES ($1, $2, $3)
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, touched_ms = EXCLUDED.touched_ms",
        )
        .bind(key)
        .bind(value.as_bytes())
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(query_err("memory.put"))?;
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        StoreError::check_memory_key(key)?;
        sqlx::query("DELETE FROM modu_memory_state WHERE key = $1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(query_err("memory.delete"))?;
        Ok(())
    }
}
