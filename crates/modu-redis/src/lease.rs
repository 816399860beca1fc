//! Session leases in Redis ([`RedisLeaseStore`]) and the fence check the fenced writes of the
//! conversation and checkpoint stores run in their scripts.

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{Fence, Lease, LeaseStore, StoreError};
use redis::aio::ConnectionManager;

use crate::{DEFAULT_PREFIX, connect, eval, ttl_ms, with_retry};

/// The key of `key`'s lease under `prefix`: `{prefix}:lease:{key}`, holding `{token}:{holder}`.
pub(crate) fn lease_key(prefix: &str, key: &str) -> String {
    format!("{prefix}:lease:{key}")
}

/// A Lua function the fenced scripts start with: whether the lease key holds the take with
/// token `token` (its value starts with `{token}:`). An expired lease key reads as missing.
pub(crate) const HELD_FUNCTION: &str = r#"
local function held(lease_key, token)
  local v = redis.call('GET', lease_key)
  local p = token .. ':'
  return v and string.sub(v, 1, #p) == p
end
"#;

/// What the fenced scripts answer when the fence is not the key's live lease.
pub(crate) const FENCED_REPLY: i64 = -1;

/// The error of a refused fenced write.
pub(crate) fn fenced(fence: &Fence) -> StoreError {
    StoreError::Fenced {
        key: fence.key.clone(),
        token: fence.token,
    }
}

/// Runs a fenced script (retried like any command) that answers [`FENCED_REPLY`] when `fence`
/// is not its key's live lease: `Fenced` then.
pub(crate) async fn run_fenced(
    conn: &ConnectionManager,
    operation: &'static str,
    cmd: &redis::Cmd,
    fence: &Fence,
) -> Result<(), StoreError> {
    let done: i64 = with_retry(
        conn,
        operation,
        |mut conn| async move { cmd.query_async(&mut conn).await },
    )
    .await?;
    if done == FENCED_REPLY {
        return Err(fenced(fence));
    }
    Ok(())
}

/// Takes a free lease. KEYS: lease, token counter, take id. ARGV: holder, ttl ms. Returns the
/// token, or nil when a live lease holds the key. The take id makes a retry of the same call
/// (after the connection broke) return the token the first attempt took instead of finding
/// the key busy.
const ACQUIRE_SCRIPT: &str = r#"
local seen = redis.call('GET', KEYS[3])
if seen then
  if redis.call('GET', KEYS[1]) == seen .. ':' .. ARGV[1] then
    return tonumber(seen)
  end
  return false
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local token = string.format('%d', redis.call('INCR', KEYS[2]))
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], token, 'PX', ARGV[2])
return tonumber(token)
"#;

/// Extends a live lease. KEYS: lease. ARGV: `{token}:{holder}`, ttl ms. Returns 1 when
/// renewed, 0 when the lease expired or another take holds the key.
const RENEW_SCRIPT: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

/// Frees the key if this take still holds it. KEYS: lease. ARGV: token.
const RELEASE_SCRIPT_BODY: &str = r#"
if held(KEYS[1], ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

/// Session leases in Redis, on the same connection and key prefix as the conversation and
/// checkpoint stores whose fenced writes check them.
///
/// A lease is one key, `{prefix}:lease:{key}`, holding `{token}:{holder}` with the lease's ttl
/// as its Redis expiry (`PX`), so the server's clock decides when a lease ends. Tokens come from
/// a per-key counter `{prefix}:lease-token:{key}` (`INCR`, no expiry), so they grow across
/// expiry, release and restarts of the workers. `acquire`, `renew` and `release` are Lua
/// scripts with compare-and-set semantics, and so are the fenced writes of
/// [`RedisConversationStore`](crate::RedisConversationStore) and
/// [`RedisCheckpointStore`](crate::RedisCheckpointStore): they read the lease key and write in
/// one script, so a take-over cannot slip between the check and the write.
///
/// ```no_run
/// use std::{sync::Arc, time::Duration};
/// use modu_agent::Agent;
/// use modu_core::LeaseOptions;
/// use modu_redis::{RedisCheckpointStore, RedisConversationStore, RedisLeaseStore};
/// use modu_testing::ScriptedModel;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let conn = modu_redis::connect("redis://127.0.0.1:6379/0").await?;
/// // One prefix for the three: the fenced writes look for the leases under it.
/// let agent = Agent::builder(ScriptedModel::new().text("hello"))
///     .conversation_store(Arc::new(RedisConversationStore::new(conn.clone()).with_prefix("myapp")))
///     .checkpoint_store(Arc::new(RedisCheckpointStore::new(conn.clone()).with_prefix("myapp")))
///     .session_leases(
///         RedisLeaseStore::new(conn).with_prefix("myapp"),
///         LeaseOptions::new().ttl(Duration::from_secs(10)),
///     )
///     .build()?;
/// agent.run(modu_agent::AgentRequest::new((), "hi").session("session-42")).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLeaseStore {
    conn: ConnectionManager,
    prefix: String,
}

impl std::fmt::Debug for RedisLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLeaseStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLeaseStore {
    /// Leases on a connection, with the key prefix [`DEFAULT_PREFIX`].
    pub fn new(conn: ConnectionManager) -> Self {
        RedisLeaseStore {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }

    /// Connects to `url` (see [`connect`]).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(connect(url).await?))
    }

    /// Uses `prefix` for keys (`{prefix}:lease:{key}`, …): the prefix of the stores whose
    /// fenced writes check these leases.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    fn token_key(&self, key: &str) -> String {
        format!("{}:lease-token:{key}", self.prefix)
    }

    fn take_key(&self, take_id: &str) -> String {
        format!("{}:lease-take:{take_id}", self.prefix)
    }
}

#[async_trait]
impl LeaseStore for RedisLeaseStore {
    async fn acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        StoreError::check_id(key)?;
        // A holder name is not a key (any length), but no store may take a NUL in it.
        if holder.contains('\0') {
            StoreError::check_id(holder)?;
        }
        let take_id = uuid::Uuid::new_v4().to_string();
        let (lease, counter, take) = (
            lease_key(&self.prefix, key),
            self.token_key(key),
            self.take_key(&take_id),
        );
        let mut cmd = eval(ACQUIRE_SCRIPT, &[&lease, &counter, &take]);
        cmd.arg(holder).arg(ttl_ms(ttl));
        let token: Option<u64> = with_retry(&self.conn, "lease.acquire", |mut conn| {
            let cmd = &cmd;
            async move { cmd.query_async(&mut conn).await }
        })
        .await?;
        Ok(token.map(|token| Lease::new(key, holder, token, ttl)))
    }

    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = lease_key(&self.prefix, &lease.key);
        let mut cmd = eval(RENEW_SCRIPT, &[&key]);
        cmd.arg(format!("{}:{}", lease.token, lease.holder))
            .arg(ttl_ms(lease.ttl));
        let renewed: i64 = with_retry(&self.conn, "lease.renew", |mut conn| {
            let cmd = &cmd;
            async move { cmd.query_async(&mut conn).await }
        })
        .await?;
        if renewed == 1 {
            Ok(())
        } else {
            Err(fenced(&lease.fence()))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = lease_key(&self.prefix, &lease.key);
        let script = format!("{HELD_FUNCTION}{RELEASE_SCRIPT_BODY}");
        let mut cmd = eval(&script, &[&key]);
        cmd.arg(lease.token);
        let _: i64 = with_retry(&self.conn, "lease.release", |mut conn| {
            let cmd = &cmd;
            async move { cmd.query_async(&mut conn).await }
        })
        .await?;
        Ok(())
    }
}
