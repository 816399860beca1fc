//! Conversations in PostgreSQL ([`PostgresConversationStore`]).

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{ConversationStore, Fence, Message, SessionSummary, StoreError};
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row, Transaction};

use crate::lease::check_fence;
use crate::{begin, connect, cutoff, migrate, now_ms, query_err, time_of_ms};

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
    pub(crate) pool: PgPool,
    pub(crate) ttl: Option<Duration>,
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
        if encoded.is_empty() {
            // Nothing to append: no session is created and `last_used` stays; a live session
            // counts it as an access.
            sqlx::query("UPDATE modu_sessions SET touched_ms = $1 WHERE session_id = $2")
                .bind(now)
                .bind(session_id)
                .execute(&mut *tx)
                .await
                .map_err(&err)?;
            return tx.commit().await.map_err(&err);
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
        StoreError::check_id(session_id)?;
        self.append_checked(session_id, messages, None).await
    }

    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        self.append_checked(session_id, messages, Some(fence)).await
    }

    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        StoreError::check_id(session_id)?;
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
        StoreError::check_id(session_id)?;
        const OP: &str = "conversation.delete";
        let mut tx = begin(&self.pool, OP).await?;
        drop_session(&mut tx, session_id, None, OP).await?;
        tx.commit().await.map_err(query_err(OP))
    }

    async fn delete_fenced(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        const OP: &str = "conversation.delete_fenced";
        // The lease check and the delete are one transaction, as in a fenced append.
        let mut tx = begin(&self.pool, OP).await?;
        check_fence(&mut tx, fence, OP).await?;
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
