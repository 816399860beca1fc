#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use modu_core::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStatus, CheckpointStore, CheckpointSummary,
    ConversationStore, Fence, MemoryStateStore, Message, SessionSummary, StoreError,
};
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

mod lease;
#[cfg(feature = "mcp")]
mod mcp;

pub use lease::RedisLeaseStore;
use lease::{FENCED_REPLY, HELD_FUNCTION, lease_key};
#[cfg(feature = "mcp")]
pub use mcp::RedisMcpTokenStore;
pub use redis;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "modu";

/// What went wrong talking to Redis, with any password removed from the text. It is the
/// `source` of the [`StoreError::Backend`] the stores return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The URL could not be parsed or the first connection failed.
    #[error("cannot connect to redis: {message}")]
    Connect {
        /// The cause, redacted.
        message: String,
    },
    /// A command failed (connection lost or refused, timeout, server error).
    #[error("redis {operation} failed ({kind}): {message}")]
    Command {
        /// The store operation (`"conversation.append"`, …).
        operation: &'static str,
        /// The error class, e.g. `io error`, `timeout`, `response error`.
        kind: String,
        /// The cause, redacted.
        message: String,
    },
}

/// Removes the user-info part (`user:password@`) of any URL in `text` (for messages and logs).
pub fn redact_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '/' || c == '"' || c == '\'' || c == ')')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***@");
                out.push_str(&authority[at + 1..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn error_kind(e: &redis::RedisError) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connection_refusal() {
        "connection refused".into()
    } else if e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() {
        "connection lost".into()
    } else {
        format!("{:?}", e.kind()).to_lowercase()
    }
}

fn backend(operation: &'static str, e: redis::RedisError) -> StoreError {
    if e.is_timeout() {
        tracing::debug!(operation, "redis command timed out");
        return StoreError::Timeout;
    }
    let err = RedisStoreError::Command {
        operation,
        kind: error_kind(&e),
        message: redact_credentials(&e.to_string()),
    };
    StoreError::Backend {
        message: err.to_string(),
        source: Some(Box::new(err)),
    }
}

/// The connection settings [`connect`] uses: 1 s to connect, 2 retries with a short backoff,
/// 5 s per response. A request made while Redis is down fails after the reconnection attempts
/// (about half a second per try when the port refuses connections) instead of waiting for the
/// server.
///
/// The stores add one retry on top: an operation that fails because the connection was lost
/// (the first request after a Redis restart finds the old connection broken) is sent once
/// more on a new connection. See the crate documentation for what that means for each
/// operation.
pub fn default_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(100))
        .set_max_delay(Duration::from_millis(500))
}

/// Connects to Redis (`redis://[user:password@]host:port/db`, `rediss://…` needs a TLS feature
/// of the `redis` crate) with [`default_config`]. The connection is multiplexed and reconnects
/// by itself; clone it to share it between stores.
pub async fn connect(url: &str) -> Result<ConnectionManager, StoreError> {
    connect_with_config(url, default_config()).await
}

/// [`connect`] with your own connection settings.
pub async fn connect_with_config(url: &str, config: ConnectionManagerConfig) -> Result<ConnectionManager, StoreError> {
    let connect_err = |e: redis::RedisError| {
        let err = RedisStoreError::Connect {
            message: redact_credentials(&e.to_string()),
        };
        StoreError::Backend {
            message: err.to_string(),
            source: Some(Box::new(err)),
        }
    };
    let client = redis::Client::open(url).map_err(connect_err)?;
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(connect_err)
}

/// How long the id of an append batch is remembered (see
/// [`RedisConversationStore::append_with_batch_id`]). It must outlast the gap between a
/// batch reaching the server and its retry reaching the server after the connection broke: a
/// reconnection (at most a few seconds with [`default_config`]) plus a response timeout.
pub const APPEND_BATCH_TTL: Duration = Duration::from_secs(120);

/// The most checkpoints one [`CheckpointStore::list`] page of this store holds, whatever the
/// query asks (a page is one server-side script, which blocks Redis while it runs).
pub const MAX_LIST_PAGE: usize = 1000;

/// How many index entries of expired checkpoints one [`CheckpointStore::purge_expired`] call
/// examines (and removes, at most).
pub const PURGE_BATCH: u32 = 500;

/// How many index entries of expired checkpoints a [`CheckpointStore::save`] with a TTL
/// examines (and removes) on the side, so the index stays bounded without `purge_expired`.
pub const SAVE_PRUNE_BATCH: u32 = 8;

/// Whether a failed request may be sent again on a new connection: the connection was lost,
/// refused or unusable (the manager replaces it), not a timeout and not a server error.
fn connection_lost(e: &redis::RedisError) -> bool {
    !e.is_timeout() && (e.is_unrecoverable_error() || e.is_io_error())
}

/// Runs `op` on a clone of `conn`; when it fails because the connection was lost, runs it once
/// more (the connection manager reconnects in between). Only for operations that are safe to
/// repeat: reads, overwrites, deletes, and appends guarded by a batch id.
async fn with_retry<T, F, Fut>(conn: &ConnectionManager, operation: &'static str, op: F) -> Result<T, StoreError>
where
    F: Fn(ConnectionManager) -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    match op(conn.clone()).await {
        Ok(v) => Ok(v),
        Err(e) if connection_lost(&e) => {
            tracing::debug!(
                operation,
                kind = %error_kind(&e),
                "redis connection lost; retrying once on a new connection"
            );
            op(conn.clone()).await.map_err(|e| backend(operation, e))
        }
        Err(e) => Err(backend(operation, e)),
    }
}

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

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
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

/// Appends a batch once per batch id. KEYS: list, last-append key, batch-id key, and for a
/// fenced append the lease key. ARGV: TTL ms (0: none), batch-id TTL ms, now ms, the fence's
/// token ('' when not fenced), messages…. Returns 1 when applied, 0 when the batch id was seen
/// before (nothing done), -1 when the fence is not the live lease (nothing done). The batch id
/// is checked first: the retry of a fenced batch that was applied answers 0 even when the
/// lease ended in between. An empty batch only refreshes an existing session.
const APPEND_SCRIPT_BODY: &str = r#"
if redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
if KEYS[4] and not held(KEYS[4], ARGV[4]) then
  return -1
end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
local n = #ARGV
if n < 5 and redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
local i = 5
while i <= n do
  local j = math.min(i + 999, n)
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('SET', KEYS[2], ARGV[3])
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
"#;

/// Removes up to `n` index entries of checkpoints due to expire by `now` whose data key is gone;
/// an entry whose key still lives (its deadline moved, or the clocks differ) gets the key's
/// real deadline, an entry whose key no longer expires leaves the expiry index. Returns how
/// many it removed. Shared by the save and purge scripts.
const PRUNE_FUNCTION: &str = r#"
local function prune(index, expiry, data_prefix, meta_prefix, now, n)
  local due = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, n)
  local removed = 0
  for _, id in ipairs(due) do
    local pttl = redis.call('PTTL', data_prefix .. id)
    if pttl == -2 then
      redis.call('ZREM', index, id)
      redis.call('ZREM', expiry, id)
      redis.call('DEL', meta_prefix .. id)
      removed = removed + 1
    elseif pttl == -1 then
      redis.call('ZREM', expiry, id)
    else
      redis.call('ZADD', expiry, now + pttl, id)
    end
  end
  return removed
end
"#;

/// KEYS: data, meta, index, expiry, and for a fenced save the lease key. ARGV: state, run id,
/// TTL ms (0: none), now ms, agent, status, has session ('1'/'0'), session, data key prefix,
/// meta key prefix, prune batch, and for a fenced save the fence's token. Returns how many
/// expired entries it pruned, or -1 (nothing done) when the fence is not the live lease.
const SAVE_SCRIPT_BODY: &str = r#"
if KEYS[5] and not held(KEYS[5], ARGV[12]) then
  return -1
end
local ttl = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'agent', ARGV[5], 'status', ARGV[6], 'saved_ms', ARGV[4])
if ARGV[7] == '1' then
  redis.call('HSET', KEYS[2], 'session', ARGV[8])
end
redis.call('ZADD', KEYS[3], 0, ARGV[2])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('ZADD', KEYS[4], now + ttl, ARGV[2])
  return prune(KEYS[3], KEYS[4], ARGV[9], ARGV[10], now, tonumber(ARGV[11]))
end
redis.call('ZREM', KEYS[4], ARGV[2])
return 0
"#;

/// A fenced delete. KEYS: data, meta, index, expiry, lease. ARGV: run id, the fence's token.
/// Returns 1 when done, -1 (nothing done) when the fence is not the live lease.
const DELETE_FENCED_SCRIPT_BODY: &str = r#"
if not held(KEYS[5], ARGV[2]) then
  return -1
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return 1
"#;

/// KEYS: index, expiry. ARGV: data key prefix, meta key prefix, now ms, batch.
const PURGE_SCRIPT_BODY: &str = r#"
return prune(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
"#;

/// Reads a checkpoint and restarts its TTL. KEYS: data, meta, expiry. ARGV: TTL ms, now ms,
/// run id.
const LOAD_TTL_SCRIPT: &str = r#"
local v = redis.call('GET', KEYS[1])
if v then
  local ttl = tonumber(ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('ZADD', KEYS[3], tonumber(ARGV[2]) + ttl, ARGV[3])
end
return v
"#;

/// A page of live checkpoints in run-id order. KEYS: index. ARGV: `-` or `(after`, limit,
/// data key prefix, meta key prefix, most index entries to examine. Returns the next cursor
/// (nil on the last page) followed by run id, agent, status, session, saved ms per checkpoint.
/// Index entries whose data key is gone (expired, not yet purged) are skipped.
const LIST_SCRIPT: &str = r#"
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[5])
local out = {false}
local found = 0
local examined = 0
local cursor = ARGV[1]
local last = false
local more = false
local exhausted = false
while not more and not exhausted and examined < budget do
  local batch = redis.call('ZRANGEBYLEX', KEYS[1], cursor, '+', 'LIMIT', 0, limit + 1)
  if #batch < limit + 1 then
    exhausted = true
  end
  for _, id in ipairs(batch) do
    if redis.call('EXISTS', ARGV[3] .. id) == 1 then
      if found == limit then
        more = true
        break
      end
      local m = redis.call('HMGET', ARGV[4] .. id, 'agent', 'status', 'session', 'saved_ms')
      out[#out + 1] = id
      out[#out + 1] = m[1]
      out[#out + 1] = m[2]
      out[#out + 1] = m[3]
      out[#out + 1] = m[4]
      found = found + 1
    end
    examined = examined + 1
    last = id
    if examined >= budget then
      break
    end
  end
  if last then
    cursor = '(' .. last
  end
end
if more then
  out[1] = out[#out - 4]
elseif not exhausted and last then
  out[1] = last
end
return out
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
/// [`RedisLeaseStore`] with the same prefix first.
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
    /// [`RedisLeaseStore`] must use the same one.
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
        let batch_id = uuid::Uuid::new_v4().to_string();
        self.append_with_batch_id(session_id, &batch_id, messages).await?;
        Ok(())
    }

    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        let batch_id = uuid::Uuid::new_v4().to_string();
        self.append_fenced_with_batch_id(session_id, &batch_id, messages, fence)
            .await?;
        Ok(())
    }

    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
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
        let keys = [self.key(session_id), self.used_key(session_id)];
        let _: i64 = with_retry(&self.conn, "conversation.delete", |mut conn| {
            let keys = &keys;
            async move { conn.del(keys).await }
        })
        .await?;
        Ok(())
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

/// Run checkpoints in Redis: the bytes as they are at `{prefix}:checkpoint:{run_id}`, the
/// metadata in a hash at `{prefix}:checkpoint-meta:{run_id}` (same TTL), the run id in a
/// sorted set `{prefix}:checkpoints` (all scores 0, so `ZRANGEBYLEX` pages by run id in byte
/// order) and, with a TTL, in a sorted set `{prefix}:checkpoints-expiry` scored by the time it
/// is due to expire.
///
/// Expiry is Redis's: every save and load sets the keys' expiry again (a checkpoint lives
/// `ttl` after its last save or load). The index entry of an expired checkpoint stays behind
/// until [`CheckpointStore::purge_expired`] (at most [`PURGE_BATCH`] entries per call) or a
/// later save (at most [`SAVE_PRUNE_BATCH`] entries) removes it; [`CheckpointStore::list`]
/// never shows it, because it checks every entry against the live key in the same script.
///
/// Save, load with a TTL, list, purge and fenced delete are Lua scripts and delete is a `MULTI`
/// transaction, so index, metadata and bytes always agree. The fenced writes
/// ([`CheckpointStore::save_fenced`], [`CheckpointStore::delete_fenced`]) check the lease of
/// a [`RedisLeaseStore`] with the same prefix in the same script. The scripts name keys that are not declared
/// (the index names them): this store needs a standalone Redis (or a cluster where one prefix
/// maps to one slot, with a `{hash tag}` in the prefix).
#[derive(Clone)]
pub struct RedisCheckpointStore {
    conn: ConnectionManager,
    prefix: String,
    ttl: Option<Duration>,
}

impl std::fmt::Debug for RedisCheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCheckpointStore")
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl RedisCheckpointStore {
    /// A store on a connection, with the key prefix [`DEFAULT_PREFIX`] and no TTL.
    pub fn new(conn: ConnectionManager) -> Self {
        RedisCheckpointStore {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
            ttl: None,
        }
    }

    /// Connects to `url` (see [`connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(connect(url).await?))
    }

    /// Uses `prefix` for keys (`{prefix}:checkpoint:{run_id}`, …).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Checkpoints expire `ttl` after they were last saved or loaded (independent of the
    /// conversation TTL).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    fn data_prefix(&self) -> String {
        format!("{}:checkpoint:", self.prefix)
    }

    fn meta_prefix(&self) -> String {
        format!("{}:checkpoint-meta:", self.prefix)
    }

    fn key(&self, run_id: &str) -> String {
        format!("{}{run_id}", self.data_prefix())
    }

    fn meta_key(&self, run_id: &str) -> String {
        format!("{}{run_id}", self.meta_prefix())
    }

    fn index_key(&self) -> String {
        format!("{}:checkpoints", self.prefix)
    }

    fn expiry_key(&self) -> String {
        format!("{}:checkpoints-expiry", self.prefix)
    }

    /// A save, fenced when `fence` is given (the lease key is then the script's fifth key).
    async fn save_checked(
        &self,
        run_id: &str,
        meta: &CheckpointMeta,
        state: &[u8],
        fence: Option<&Fence>,
    ) -> Result<(), StoreError> {
        let (key, meta_key, index, expiry) = (
            self.key(run_id),
            self.meta_key(run_id),
            self.index_key(),
            self.expiry_key(),
        );
        let script = format!("{HELD_FUNCTION}{PRUNE_FUNCTION}{SAVE_SCRIPT_BODY}");
        let (mut cmd, operation) = match fence {
            Some(fence) => {
                let lease = lease_key(&self.prefix, &fence.key);
                (
                    eval(&script, &[&key, &meta_key, &index, &expiry, &lease]),
                    "checkpoint.save_fenced",
                )
            }
            None => (eval(&script, &[&key, &meta_key, &index, &expiry]), "checkpoint.save"),
        };
        cmd.arg(state)
            .arg(run_id)
            .arg(script_ttl(self.ttl))
            .arg(now_ms())
            .arg(&meta.agent)
            .arg(meta.status.as_str())
            .arg(if meta.session_id.is_some() { "1" } else { "0" })
            .arg(meta.session_id.as_deref().unwrap_or(""))
            .arg(self.data_prefix())
            .arg(self.meta_prefix())
            .arg(SAVE_PRUNE_BATCH);
        if let Some(fence) = fence {
            cmd.arg(fence.token);
        }
        let pruned: i64 = with_retry(&self.conn, operation, |mut conn| {
            let cmd = &cmd;
            async move { cmd.query_async(&mut conn).await }
        })
        .await?;
        match fence {
            Some(fence) if pruned == FENCED_REPLY => Err(lease::fenced(fence)),
            _ => Ok(()),
        }
    }
}

/// One checkpoint of a list script's reply: run id, agent, status, session, saved ms.
fn summary_of(fields: &[Option<Vec<u8>>]) -> Result<CheckpointSummary, StoreError> {
    let text = |i: usize| -> Option<String> {
        fields
            .get(i)
            .and_then(Option::as_ref)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    let run_id = text(0).ok_or_else(|| StoreError::Corrupted {
        message: "checkpoint index entry without a run id".into(),
    })?;
    // A checkpoint without metadata (saved before this version kept any) lists as a running
    // run of an unnamed agent, saved at the epoch.
    let status = match text(2) {
        None => CheckpointStatus::Running,
        Some(s) => CheckpointStatus::parse(&s).ok_or_else(|| StoreError::Corrupted {
            message: format!("checkpoint {run_id:?} has the unknown status {s:?}"),
        })?,
    };
    let meta = CheckpointMeta::new(text(1).unwrap_or_default(), status).with_session(text(3));
    let saved = parse_ms(fields.get(4).and_then(Option::as_deref));
    Ok(CheckpointSummary::new(run_id, meta, saved))
}

#[async_trait]
impl CheckpointStore for RedisCheckpointStore {
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
        let (key, meta_key, index, expiry, lease) = (
            self.key(run_id),
            self.meta_key(run_id),
            self.index_key(),
            self.expiry_key(),
            lease_key(&self.prefix, &fence.key),
        );
        let script = format!("{HELD_FUNCTION}{DELETE_FENCED_SCRIPT_BODY}");
        let mut cmd = eval(&script, &[&key, &meta_key, &index, &expiry, &lease]);
        cmd.arg(run_id).arg(fence.token);
        let done: i64 = with_retry(&self.conn, "checkpoint.delete_fenced", |mut conn| {
            let cmd = &cmd;
            async move { cmd.query_async(&mut conn).await }
        })
        .await?;
        if done == FENCED_REPLY {
            return Err(lease::fenced(fence));
        }
        Ok(())
    }

    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = self.key(run_id);
        match self.ttl {
            Some(ttl) => {
                let (meta_key, expiry) = (self.meta_key(run_id), self.expiry_key());
                let mut cmd = eval(LOAD_TTL_SCRIPT, &[&key, &meta_key, &expiry]);
                cmd.arg(ttl_ms(ttl)).arg(now_ms()).arg(run_id);
                with_retry(&self.conn, "checkpoint.load", |mut conn| {
                    let cmd = &cmd;
                    async move { cmd.query_async(&mut conn).await }
                })
                .await
            }
            None => get_value(&self.conn, &key, None, "checkpoint.load").await,
        }
    }

    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(&[self.key(run_id), self.meta_key(run_id)])
            .ignore()
            .zrem(self.index_key(), run_id)
            .ignore()
            .zrem(self.expiry_key(), run_id)
            .ignore();
        with_retry(&self.conn, "checkpoint.delete", |mut conn| {
            let pipe = &pipe;
            async move { pipe.query_async::<()>(&mut conn).await }
        })
        .await
    }

    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        let limit = query.effective_limit().min(MAX_LIST_PAGE);
        let min = match &query.after {
            Some(after) => {
                let mut m = Vec::with_capacity(after.len() + 1);
                m.push(b'(');
                m.extend_from_slice(after.as_bytes());
                m
            }
            None => b"-".to_vec(),
        };
        let index = self.index_key();
        let mut cmd = eval(LIST_SCRIPT, &[&index]);
        cmd.arg(min)
            .arg(limit)
            .arg(self.data_prefix())
            .arg(self.meta_prefix())
            // Entries of expired checkpoints are skipped; this bounds how many one page walks.
            .arg(limit.saturating_mul(4).saturating_add(1000));
        let reply: Vec<Option<Vec<u8>>> = with_retry(&self.conn, "checkpoint.list", |mut conn| {
            let cmd = &cmd;
            async move { cmd.query_async(&mut conn).await }
        })
        .await?;
        let Some((next, rest)) = reply.split_first() else {
            return Err(StoreError::Corrupted {
                message: "checkpoint.list: empty reply from the list script".into(),
            });
        };
        let items = rest.chunks(5).map(summary_of).collect::<Result<Vec<_>, _>>()?;
        let next = next.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
        Ok(CheckpointPage::new(items, next))
    }

    async fn purge_expired(&self) -> Result<u64, StoreError> {
        // Also without a TTL: entries a previous configuration with a TTL left behind.
        let (index, expiry) = (self.index_key(), self.expiry_key());
        let script = format!("{PRUNE_FUNCTION}{PURGE_SCRIPT_BODY}");
        let mut cmd = eval(&script, &[&index, &expiry]);
        cmd.arg(self.data_prefix())
            .arg(self.meta_prefix())
            .arg(now_ms())
            .arg(PURGE_BATCH);
        let removed: i64 = with_retry(&self.conn, "checkpoint.purge_expired", |mut conn| {
            let cmd = &cmd;
            async move { cmd.query_async(&mut conn).await }
        })
        .await?;
        Ok(u64::try_from(removed).unwrap_or(0))
    }
}

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
        let raw = get_value(&self.conn, &self.key(key), self.ttl, "memory.get").await?;
        raw.map(|bytes| {
            String::from_utf8(bytes).map_err(|e| StoreError::Corrupted {
                message: format!("memory value {key:?} is not UTF-8: {e}"),
            })
        })
        .transpose()
    }

    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError> {
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
        let key = self.key(key);
        let _: i64 = with_retry(&self.conn, "memory.delete", |mut conn| {
            let key = &key;
            async move { conn.del(key).await }
        })
        .await?;
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_removes_passwords() {
        assert_eq!(
            redact_credentials("failed to connect to redis://user:s3cret@host:6379/0 (refused)"),
            "failed to connect to redis://***@host:6379/0 (refused)"
        );
        assert_eq!(redact_credentials("rediss://:pw@h/1"), "rediss://***@h/1");
        assert_eq!(
            redact_credentials("redis://host:1/ no secret"),
            "redis://host:1/ no secret"
        );
        assert_eq!(redact_credentials("no url at all"), "no url at all");
    }

    #[test]
    fn glob_escape_escapes_pattern_chars() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
