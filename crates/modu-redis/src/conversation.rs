//! Conversations in Redis ([`RedisConversationStore`]) and their append script.

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{ConversationStore, Fence, Message, SessionSummary, StoreError};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;

use crate::lease::{self, FENCED_REPLY, HELD_FUNCTION, lease_key};
use crate::{DEFAULT_PREFIX, connect, eval, now_ms, parse_ms, script_ttl, ttl_ms, with_retry};

/// How long the id of an append batch is remembered (see
/// [`RedisConversationStore::append_with_batch_id`]). It must outlast the gap between a
/// batch reaching the server and its retry reaching the server after the connection broke: a
/// reconnection (at most a few seconds with [`default_config`](crate::default_config)) plus a response timeout.
pub const APPEND_BATCH_TTL: Duration = Duration::from_secs(120);

/// Escapes the glob characters of a `SCAN MATCH` pattern.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Appends a batch once per batch id. KEYS: list, last-append key, batch-id key, and for a
/// fenced append the lease key. ARGV: TTL ms (0: none), batch-id TTL ms, now ms, the fence's
/// token ('' when not fenced), messages…. Returns 1 when applied, 0 when the batch id was seen
/// before (nothing done), -1 when the fence is not the live lease (nothing done). The batch id
/// is checked first: the retry of a fenced batch that was applied answers 0 even when the
/// lease ended in between. An empty batch creates no session and leaves the last-append time;
/// with a TTL it refreshes an existing session's expiry (an access).
const APPEND_SCRIPT_BODY: &str = r#"
if redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
if KEYS[4] and not held(KEYS[4], ARGV[4]) then
  return -1
end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
local n = #ARGV
local ttl = tonumber(ARGV[1])
if n < 5 then
  if ttl > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  return 1
end
local i = 5
while i <= n do
  local j = math.min(i + 999, n)
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('SET', KEYS[2], ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
"#;

/// Deletes a session while a lease is held. KEYS: list, last-append key, lease key. ARGV: the
/// fence's token. Returns 1 when deleted, -1 when the fence is not the live lease (nothing
/// done).
const DELETE_FENCED_SCRIPT_BODY: &str = r#"
if not held(KEYS[3], ARGV[1]) then
  return -1
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"#;

/// Conversations in Redis: one list per session at `{prefix}:conversation:{session_id}`, one
/// JSON message per element, and the time of the last append (ms since the Unix epoch) at
/// `{prefix}:conversation-used:{session_id}`.
///
/// `append` is one Lua script that pushes the batch and stamps the last-append time, so
/// concurrent appends (from any number of processes) interleave whole batches and lose
/// nothing. Every call carries a fresh batch id that the script records (for
/// [`APPEND_BATCH_TTL`]) and refuses to apply twice: when the connection breaks after the
/// batch was sent, the retry on a new connection cannot store it a second time. With a TTL,
/// every append and load sets the keys' expiry again: sessions expire after `ttl` without
/// access. [`ConversationStore::append_fenced`] is the same script with the lease check of a
/// [`RedisLeaseStore`](crate::RedisLeaseStore) with the same prefix first;
/// [`ConversationStore::delete_fenced`] is a script that checks that lease and deletes.
#[derive(Clone)]
pub struct RedisConversationStore {
    conn: ConnectionManager,
    prefix: String,
    ttl: Option<Duration>,
}

impl std::fmt::Debug for RedisConversationStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConversationStore")
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl RedisConversationStore {
    /// A store on a connection, with the key prefix [`DEFAULT_PREFIX`] and no TTL.
    pub fn new(conn: ConnectionManager) -> Self {
        RedisConversationStore {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
            ttl: None,
        }
    }

    /// Connects to `url` (see [`connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(connect(url).await?))
    }

    /// Uses `prefix` for keys (`{prefix}:conversation:{session_id}`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sessions expire `ttl` after their last append or load.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    fn key_prefix(&self) -> String {
        format!("{}:conversation:", self.prefix)
    }

    fn key(&self, session_id: &str) -> String {
        format!("{}{session_id}", self.key_prefix())
    }

    fn used_key(&self, session_id: &str) -> String {
        format!("{}:conversation-used:{session_id}", self.prefix)
    }

    fn batch_key(&self, batch_id: &str) -> String {
        format!("{}:append-batch:{batch_id}", self.prefix)
    }

    /// Appends `messages` as the batch `batch_id`, at most once: while the id is remembered
    /// ([`APPEND_BATCH_TTL`] after its first use), another append with the same id does
    /// nothing and returns `Ok(false)`; the first returns `Ok(true)`. The check and the push
    /// are one script, so they are atomic. [`ConversationStore::append`] calls this with a
    /// new UUID per call; use it directly to make your own retries of one batch (across
    /// processes, for example) safe.
    pub async fn append_with_batch_id(
        &self,
        session_id: &str,
        batch_id: &str,
        messages: &[Message],
    ) -> Result<bool, StoreError> {
        self.append_batch(session_id, batch_id, messages, None).await
    }

    /// [`append_with_batch_id`](Self::append_with_batch_id), only while `fence` is the live
    /// lease of its key ([`StoreError::Fenced`] otherwise): the lease check, the batch-id check
    /// and the push are one script. The lease is looked up under this store's prefix, so the
    /// [`RedisLeaseStore`](crate::RedisLeaseStore) must use the same one.
    pub async fn append_fenced_with_batch_id(
        &self,
        session_id: &str,
        batch_id: &str,
        messages: &[Message],
        fence: &Fence,
    ) -> Result<bool, StoreError> {
        self.append_batch(session_id, batch_id, messages, Some(fence)).await
    }

    async fn append_batch(
        &self,
        session_id: &str,
        batch_id: &str,
        messages: &[Message],
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        let mut encoded = Vec::with_capacity(messages.len());
        for m in messages {
            encoded.push(serde_json::to_string(m).map_err(|e| StoreError::Backend {
                message: format!("cannot encode a message: {e}"),
                source: Some(Box::new(e)),
            })?);
        }
        let (key, used, batch) = (
            self.key(session_id),
            self.used_key(session_id),
            self.batch_key(batch_id),
        );
        let script = format!("{HELD_FUNCTION}{APPEND_SCRIPT_BODY}");
        let (mut cmd, operation) = match fence {
            Some(fence) => {
                let lease = lease_key(&self.prefix, &fence.key);
                (
                    eval(&script, &[&key, &used, &batch, &lease]),
                    "conversation.append_fenced",
                )
            }
            None => (eval(&script, &[&key, &used, &batch]), "conversation.append"),
        };
        cmd.arg(script_ttl(self.ttl))
            .arg(ttl_ms(APPEND_BATCH_TTL))
            .arg(now_ms())
            .arg(fence.map_or(String::new(), |f| f.token.to_string()))
            .arg(&encoded);
        let applied: i64 = with_retry(&self.conn, operation, |mut conn| {
            let cmd = &cmd;
            async move { cmd.query_async(&mut conn).await }
        })
        .await?;
        match (applied, fence) {
            (FENCED_REPLY, Some(fence)) => Err(lease::fenced(fence)),
            (applied, _) => Ok(applied == 1),
        }
    }
}

#[async_trait]
impl ConversationStore for RedisConversationStore {
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        let batch_id = uuid::Uuid::new_v4().to_string();
        self.append_with_batch_id(session_id, &batch_id, messages).await?;
        Ok(())
    }

    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        let batch_id = uuid::Uuid::new_v4().to_string();
        self.append_fenced_with_batch_id(session_id, &batch_id, messages, fence)
            .await?;
        Ok(())
    }

    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        StoreError::check_id(session_id)?;
        let (key, used) = (self.key(session_id), self.used_key(session_id));
        let raw: Vec<Vec<u8>> = match self.ttl {
            Some(ttl) => {
                let mut pipe = redis::pipe();
                pipe.atomic()
                    .lrange(&key, 0, -1)
                    .pexpire(&key, ttl_ms(ttl))
                    .ignore()
                    .pexpire(&used, ttl_ms(ttl))
                    .ignore();
                let (items,): (Vec<Vec<u8>>,) = with_retry(&self.conn, "conversation.load", |mut conn| {
                    let pipe = &pipe;
                    async move { pipe.query_async(&mut conn).await }
                })
                .await?;
                items
            }
            None => {
                with_retry(&self.conn, "conversation.load", |mut conn| {
                    let key = &key;
                    async move { conn.lrange(key, 0, -1).await }
                })
                .await?
            }
        };
        raw.iter()
            .enumerate()
            .map(|(i, item)| {
                serde_json::from_slice(item).map_err(|e| StoreError::Corrupted {
                    message: format!("message {i} of session {session_id:?} is not a valid message: {e}"),
                })
            })
            .collect()
    }

    async fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        let keys = [self.key(session_id), self.used_key(session_id)];
        let _: i64 = with_retry(&self.conn, "conversation.delete", |mut conn| {
            let keys = &keys;
            async move { conn.del(keys).await }
        })
        .await?;
        Ok(())
    }

    async fn delete_fenced(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        let (key, used, lease) = (
            self.key(session_id),
            self.used_key(session_id),
            lease_key(&self.prefix, &fence.key),
        );
        let script = format!("{HELD_FUNCTION}{DELETE_FENCED_SCRIPT_BODY}");
        let mut cmd = eval(&script, &[&key, &used, &lease]);
        cmd.arg(fence.token);
        lease::run_fenced(&self.conn, "conversation.delete_fenced", &cmd, fence).await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        const OP: &str = "conversation.list_sessions";
        let prefix = self.key_prefix();
        let pattern = format!("{}*", glob_escape(&prefix));
        let mut cursor: u64 = 0;
        let mut ids = Vec::new();
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = with_retry(&self.conn, OP, |mut conn| {
                let pattern = &pattern;
                async move {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await
                }
            })
            .await?;
            for key in keys {
                if let Some(id) = key.strip_prefix(prefix.as_bytes()) {
                    ids.push(String::from_utf8_lossy(id).into_owned());
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        ids.sort();
        ids.dedup();
        let mut sessions = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let used: Vec<String> = chunk.iter().map(|id| self.used_key(id)).collect();
            let times: Vec<Option<Vec<u8>>> = with_retry(&self.conn, OP, |mut conn| {
                let used = &used;
                async move { redis::cmd("MGET").arg(used).query_async(&mut conn).await }
            })
            .await?;
            for (id, time) in chunk.iter().zip(times) {
                sessions.push(SessionSummary::new(id.clone(), parse_ms(time.as_deref())));
            }
        }
        Ok(sessions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_escape_escapes_pattern_chars() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
