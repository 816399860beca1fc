//! Run checkpoints in Redis ([`RedisCheckpointStore`]), their Lua scripts and the batch sizes
//! of their listing and expiry.

use std::time::Duration;

use async_trait::async_trait;
use modu_core::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStatus, CheckpointStore, CheckpointSummary, Fence,
    StoreError,
};
use redis::aio::ConnectionManager;

use crate::lease::{self, FENCED_REPLY, HELD_FUNCTION, lease_key};
use crate::{DEFAULT_PREFIX, connect, eval, get_value, now_ms, parse_ms, script_ttl, ttl_ms, with_retry};

/// The most checkpoints one [`CheckpointStore::list`] page of this store holds, whatever the
/// query asks (a page is one server-side script, which blocks Redis while it runs).
pub const MAX_LIST_PAGE: usize = 1000;

/// How many index entries of expired checkpoints one [`CheckpointStore::purge_expired`] call
/// examines (and removes, at most).
pub const PURGE_BATCH: u32 = 500;

/// How many index entries of expired checkpoints a [`CheckpointStore::save`] with a TTL
/// examines (and removes) on the side, so the index stays bounded without `purge_expired`.
pub const SAVE_PRUNE_BATCH: u32 = 8;

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
/// a [`RedisLeaseStore`](crate::RedisLeaseStore) with the same prefix in the same script. The scripts
/// name keys that are not declared
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
        // Every save (fenced or not) comes here: the ids are checked once, before the backend.
        StoreError::check_id(run_id)?;
        if let Some(session_id) = &meta.session_id {
            StoreError::check_id(session_id)?;
        }
        // An agent name is not a key (any length), but no store may take a NUL in it.
        if meta.agent.contains('\0') {
            StoreError::check_id(&meta.agent)?;
        }
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
        StoreError::check_id(run_id)?;
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
        lease::run_fenced(&self.conn, "checkpoint.delete_fenced", &cmd, fence).await
    }

    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        StoreError::check_id(run_id)?;
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
        StoreError::check_id(run_id)?;
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
        // A cursor is not a new key: one longer than MAX_ID_BYTES (a run stored before that
        // rule) still pages on; only a NUL, which no stored id holds, is refused.
        if let Some(after) = query.after.as_deref().filter(|a| a.contains('\0')) {
            StoreError::check_id(after)?;
        }
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
