//! Run checkpoints in PostgreSQL ([`PostgresCheckpointStore`]) and the batch sizes of their
//! expiry.

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStatus, CheckpointStore, CheckpointSummary, Fence,
    StoreError,
};
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row, Transaction};

use crate::lease::check_fence;
use crate::{begin, connect, cutoff, migrate, now_ms, query_err, time_of_ms};

/// The most expired checkpoints one [`CheckpointStore::purge_expired`] call deletes.
pub const PURGE_BATCH: u32 = 500;

/// The most expired checkpoints a [`CheckpointStore::save`] deletes on the side (with a TTL),
/// so the table stays bounded even when nobody calls `purge_expired`: every save removes up
/// to this many expired rows, more than the one row it may add.
pub const SAVE_PRUNE_BATCH: u32 = 8;

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
    pub(crate) pool: PgPool,
    pub(crate) ttl: Option<Duration>,
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
        // Every save (fenced or not) comes here: the ids are checked once, before the backend.
        StoreError::check_id(run_id)?;
        if let Some(session_id) = &meta.session_id {
            StoreError::check_id(session_id)?;
        }
        // An agent name is not a key (any length), but no store may take a NUL in it.
        if meta.agent.contains('\0') {
            StoreError::check_id(&meta.agent)?;
        }
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
        StoreError::check_id(run_id)?;
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
        StoreError::check_id(run_id)?;
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
        StoreError::check_id(run_id)?;
        sqlx::query("DELETE FROM modu_checkpoints WHERE run_id = $1")
            .bind(run_id)
            .execute(&self.pool)
            .await
            .map_err(query_err("checkpoint.delete"))?;
        Ok(())
    }

    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        // A cursor is not a new key: one longer than MAX_ID_BYTES (a run stored before that
        // rule) still pages on; only a NUL, which no stored id holds, is refused.
        if let Some(after) = query.after.as_deref().filter(|a| a.contains('\0')) {
            StoreError::check_id(after)?;
        }
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
