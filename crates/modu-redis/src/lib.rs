#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{CheckpointStore, ConversationStore, MemoryStateStore, Message, StoreError};
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

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
/// 5 s per response. A request made while Redis is down fails after the retries (about 1.5 s)
/// instead of waiting for the server; the manager reconnects on a later request.
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

/// Conversations in Redis: one list per session at `{prefix}:conversation:{session_id}`, one
/// JSON message per element.
///
/// `append` is one `MULTI`/`RPUSH`/`PEXPIRE`/`EXEC` transaction, so concurrent appends (from any
/// number of processes) interleave whole batches and lose nothing. With a TTL, every append
/// and load sets the key's expiry again: sessions expire after `ttl` without access.
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
}

#[async_trait]
impl ConversationStore for RedisConversationStore {
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError> {
        let key = self.key(session_id);
        let mut conn = self.conn.clone();
        if messages.is_empty() {
            if let Some(ttl) = self.ttl {
                let _: bool = conn
                    .pexpire(&key, ttl_ms(ttl))
                    .await
                    .map_err(|e| backend("conversation.append", e))?;
            }
            return Ok(());
        }
        let mut encoded = Vec::with_capacity(messages.len());
        for m in messages {
            encoded.push(serde_json::to_string(m).map_err(|e| StoreError::Backend {
                message: format!("cannot encode a message: {e}"),
                source: Some(Box::new(e)),
            })?);
        }
        let mut pipe = redis::pipe();
        pipe.atomic().rpush(&key, &encoded).ignore();
        if let Some(ttl) = self.ttl {
            pipe.pexpire(&key, ttl_ms(ttl)).ignore();
        }
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(|e| backend("conversation.append", e))
    }

    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        let key = self.key(session_id);
        let mut conn = self.conn.clone();
        let raw: Vec<Vec<u8>> = match self.ttl {
            Some(ttl) => {
                let (items, _): (Vec<Vec<u8>>, bool) = redis::pipe()
                    .atomic()
                    .lrange(&key, 0, -1)
                    .pexpire(&key, ttl_ms(ttl))
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| backend("conversation.load", e))?;
                items
            }
            None => conn
                .lrange(&key, 0, -1)
                .await
                .map_err(|e| backend("conversation.load", e))?,
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
        let mut conn = self.conn.clone();
        let _: i64 = conn
            .del(self.key(session_id))
            .await
            .map_err(|e| backend("conversation.delete", e))?;
        Ok(())
    }

    async fn list_sessions(&self) -> Result<Vec<String>, StoreError> {
        let prefix = self.key_prefix();
        let pattern = format!("{}*", glob_escape(&prefix));
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut ids = Vec::new();
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| backend("conversation.list_sessions", e))?;
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
        Ok(ids)
    }
}

/// Run checkpoints in Redis: one string per run at `{prefix}:checkpoint:{run_id}`, the bytes as
/// they are. With a TTL, every save and load sets the expiry again.
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

    /// Uses `prefix` for keys (`{prefix}:checkpoint:{run_id}`).
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

    fn key(&self, run_id: &str) -> String {
        format!("{}:checkpoint:{run_id}", self.prefix)
    }
}

#[async_trait]
impl CheckpointStore for RedisCheckpointStore {
    async fn save(&self, run_id: &str, state: &[u8]) -> Result<(), StoreError> {
        set_value(&self.conn, &self.key(run_id), state, self.ttl, "checkpoint.save").await
    }

    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        get_value(&self.conn, &self.key(run_id), self.ttl, "checkpoint.load").await
    }

    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        delete_key(&self.conn, &self.key(run_id), "checkpoint.delete").await
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
        set_value(&self.conn, &self.key(key), value.as_bytes(), self.ttl, "memory.put").await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        delete_key(&self.conn, &self.key(key), "memory.delete").await
    }
}

/// Sets a string key, with its expiry when there is a TTL (checkpoints, memory state).
async fn set_value(
    conn: &ConnectionManager,
    key: &str,
    value: &[u8],
    ttl: Option<Duration>,
    operation: &'static str,
) -> Result<(), StoreError> {
    let mut conn = conn.clone();
    let result = match ttl {
        Some(ttl) => {
            let ms = u64::try_from(ttl_ms(ttl)).unwrap_or(u64::MAX);
            conn.pset_ex::<_, _, ()>(key, value, ms).await
        }
        None => conn.set::<_, _, ()>(key, value).await,
    };
    result.map_err(|e| backend(operation, e))
}

/// Reads a string key; with a TTL, the read and the new expiry are one transaction.
async fn get_value(
    conn: &ConnectionManager,
    key: &str,
    ttl: Option<Duration>,
    operation: &'static str,
) -> Result<Option<Vec<u8>>, StoreError> {
    let mut conn = conn.clone();
    match ttl {
        Some(ttl) => {
            let (value, _): (Option<Vec<u8>>, bool) = redis::pipe()
                .atomic()
                .get(key)
                .pexpire(key, ttl_ms(ttl))
                .query_async(&mut conn)
                .await
                .map_err(|e| backend(operation, e))?;
            Ok(value)
        }
        None => conn.get(key).await.map_err(|e| backend(operation, e)),
    }
}

async fn delete_key(conn: &ConnectionManager, key: &str, operation: &'static str) -> Result<(), StoreError> {
    let mut conn = conn.clone();
    let _: i64 = conn.del(key).await.map_err(|e| backend(operation, e))?;
    Ok(())
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
