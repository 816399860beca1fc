//! Storage traits — conversations, checkpoints, memory state — and their in-memory
//! implementations, the embedded default. `modu-redis` and `modu-sqlite` implement the same
//! traits; every implementation passes the conformance suite in `modu-testing`.

use std::time::SystemTime;

use async_trait::async_trait;

use crate::BoxError;
use crate::message::Message;

mod key;
mod memory;
mod ttl;

use ttl::TtlMap;

/// The longest session id, run id or lease key every store accepts, in bytes of UTF-8.
/// Longer ones are refused by every store with [`StoreError::InvalidId`] before the backend is
/// touched (PostgreSQL could not index much longer ones).
pub const MAX_ID_BYTES: usize = 1024;

/// The longest memory-state key every store accepts, in bytes of UTF-8: room for a prefix
/// before an id of [`MAX_ID_BYTES`] (a summary's key is `modu:summary:{session id}`).
pub const MAX_MEMORY_KEY_BYTES: usize = 2 * MAX_ID_BYTES;

/// A storage failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend failed (connection refused or lost, I/O, a query error).
    #[error("store backend error: {message}")]
    Backend {
        /// What happened, without secrets.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// Stored data could not be decoded.
    #[error("stored data is corrupted: {message}")]
    Corrupted {
        /// What is wrong.
        message: String,
    },
    /// The operation did not finish in time.
    #[error("store operation timed out")]
    Timeout,
    /// A fenced write was refused: its lease expired or another worker took the key over.
    #[error("the lease on {key:?} (token {token}) is no longer held; the write was refused")]
    Fenced {
        /// The leased key (a session id).
        key: String,
        /// The token the refused write carried.
        token: u64,
    },
    /// An id or key no store accepts: longer than [`MAX_ID_BYTES`] ([`MAX_MEMORY_KEY_BYTES`]
    /// for a memory-state key) or with a NUL character. Every store refuses it the same way,
    /// before its backend is touched, so nothing was read or written.
    #[error("invalid store id {preview:?} ({len} bytes): {reason}")]
    InvalidId {
        /// The id's first bytes (at most 64).
        preview: String,
        /// The id's length in bytes.
        len: usize,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The store does not implement this operation (fenced writes, for a store without leases).
    #[error("this store does not support {operation}")]
    Unsupported {
        /// The operation, such as `conversation.append_fenced`.
        operation: &'static str,
    },
}

impl StoreError {
    /// A backend error with a cause.
    pub fn backend(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Backend {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// The proof a write carries that its writer holds a key's lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Fence {
    /// The leased key (a session id).
    pub key: String,
    /// The lease's token: larger than the token of every earlier take of this key.
    pub token: u64,
}

impl Fence {
    /// A fence (for store implementations and tests).
    pub fn new(key: impl Into<String>, token: u64) -> Self {
        Fence { key: key.into(), token }
    }
}

/// Checks a fenced write against leases (built by `InMemoryLeaseStore`) and runs it if allowed.
pub(crate) type FenceCheck = std::sync::Arc<dyn Fn(&Fence, &mut dyn FnMut()) -> Result<(), StoreError> + Send + Sync>;

/// Keeps the messages of conversations (sessions).
///
/// A run appends all its messages at once when it completes, so a turn (user message, tool
/// calls and results, answer) is stored together. Implementations must make `append`
/// atomic: concurrent appends to one session may interleave whole batches but lose nothing.
/// A TTL, when the implementation has one, counts from the last access.
///
/// Every store accepts session ids of up to [`MAX_ID_BYTES`] bytes without a NUL character
/// (the empty id included) and refuses others with [`StoreError::InvalidId`] before it touches
/// its backend ([`StoreError::check_id`]); the same holds for checkpoint run ids and lease keys,
/// and for memory-state keys up to [`MAX_MEMORY_KEY_BYTES`].
#[async_trait]
pub trait ConversationStore: Send + Sync {
    /// Appends messages to a session, creating it if needed.
    ///
    /// Appending no messages (`&[]`) stores nothing: it does not create a session (an unknown
    /// session stays unlisted) and does not move an existing session's
    /// [`last_used`](SessionSummary::last_used); it counts only as an access of an existing
    /// session (refreshing its TTL, when the store has one). A fenced empty append is still
    /// refused with [`StoreError::Fenced`] when its fence is not the live lease.
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError>;
    /// All messages of a session, oldest first; empty for an unknown or expired session.
    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError>;
    /// Deletes a session (no error when it does not exist).
    async fn delete(&self, session_id: &str) -> Result<(), StoreError>;
    /// The sessions stored, sorted by id, each with the time of its last append.
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError>;
    /// [`append`](Self::append), only while `fence` is the live lease of its key, checked
    /// atomically with the write ([`StoreError::Fenced`] otherwise, and nothing is written).
    /// Stores without leases answer [`StoreError::Unsupported`].
    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        let _ = (session_id, messages, fence);
        Err(StoreError::Unsupported {
            operation: "conversation.append_fenced",
        })
    }
    /// [`delete`](Self::delete), only while `fence` is the live lease of its key, checked
    /// atomically with the delete ([`StoreError::Fenced`] otherwise, and the session stays;
    /// a store that sends the delete again after a broken connection may answer `Fenced` for
    /// one it applied, if the lease ended in between).
    /// A worker holding a session's lease deletes with this, so a process whose lease expired
    /// or was taken over cannot wipe the history the new holder appends to.
    /// Stores without leases answer [`StoreError::Unsupported`] and delete nothing.
    async fn delete_fenced(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError> {
        let _ = (session_id, fence);
        Err(StoreError::Unsupported {
            operation: "conversation.delete_fenced",
        })
    }
}

#[async_trait]
impl<T: ConversationStore + ?Sized> ConversationStore for std::sync::Arc<T> {
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError> {
        (**self).append(session_id, messages).await
    }
    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        (**self).load(session_id).await
    }
    async fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        (**self).delete(session_id).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        (**self).list_sessions().await
    }
    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        (**self).append_fenced(session_id, messages, fence).await
    }
    async fn delete_fenced(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError> {
        (**self).delete_fenced(session_id, fence).await
    }
}

/// One stored session, as [`ConversationStore::list_sessions`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSummary {
    /// The session's id.
    pub session_id: String,
    /// When messages were last appended to it (a store keeps at least millisecond precision).
    pub last_used: SystemTime,
}

impl SessionSummary {
    /// A summary (for store implementations).
    pub fn new(session_id: impl Into<String>, last_used: SystemTime) -> Self {
        SessionSummary {
            session_id: session_id.into(),
            last_used,
        }
    }
}

/// Where a checkpointed run stands, as its last save said.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CheckpointStatus {
    /// The run was working when it saved (or its process died since).
    Running,
    /// The run waits for a person (approvals).
    Paused,
    /// The run ended on a resumable error; `Agent::resume` continues it.
    Failed,
    /// A strict Plan-and-Execute run finished; the state is kept so it is not finalized twice.
    Done,
}

impl CheckpointStatus {
    /// The snake_case name stores keep (`"running"`, `"paused"`, `"failed"`, `"done"`).
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointStatus::Running => "running",
            CheckpointStatus::Paused => "paused",
            CheckpointStatus::Failed => "failed",
            CheckpointStatus::Done => "done",
        }
    }

    /// The status named by [`CheckpointStatus::as_str`], if any.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "running" => CheckpointStatus::Running,
            "paused" => CheckpointStatus::Paused,
            "failed" => CheckpointStatus::Failed,
            "done" => CheckpointStatus::Done,
            _ => return None,
        })
    }
}

impl std::fmt::Display for CheckpointStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a checkpoint says about its run, saved beside the opaque state so a store can list
/// runs without decoding them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointMeta {
    /// The agent that runs it.
    pub agent: String,
    /// Where the run stands.
    pub status: CheckpointStatus,
    /// The session the run belongs to, if any.
    pub session_id: Option<String>,
}

impl CheckpointMeta {
    /// Metadata for a run of `agent` in `status`, without a session.
    pub fn new(agent: impl Into<String>, status: CheckpointStatus) -> Self {
        CheckpointMeta {
            agent: agent.into(),
            status,
            session_id: None,
        }
    }

    /// The same metadata with a session id.
    pub fn with_session(mut self, session_id: Option<impl Into<String>>) -> Self {
        self.session_id = session_id.map(Into::into);
        self
    }
}

/// One stored checkpoint, as [`CheckpointStore::list`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointSummary {
    /// The run's id.
    pub run_id: String,
    /// The agent, status and session of its last save.
    pub meta: CheckpointMeta,
    /// When it was last saved (a store keeps at least millisecond precision).
    pub updated_at: SystemTime,
}

impl CheckpointSummary {
    /// A summary (for store implementations).
    pub fn new(run_id: impl Into<String>, meta: CheckpointMeta, updated_at: SystemTime) -> Self {
        CheckpointSummary {
            run_id: run_id.into(),
            meta,
            updated_at,
        }
    }
}

/// Which page of checkpoints [`CheckpointStore::list`] returns: run ids in ascending byte
/// order, strictly after `after`, at most `limit` of them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointQuery {
    /// Start after this run id (the previous page's [`CheckpointPage::next`]).
    pub after: Option<String>,
    /// The most summaries one page holds (at least 1; 0 is read as 1).
    pub limit: usize,
}

impl Default for CheckpointQuery {
    fn default() -> Self {
        CheckpointQuery {
            after: None,
            limit: CheckpointQuery::DEFAULT_LIMIT,
        }
    }
}

impl CheckpointQuery {
    /// The page size of [`CheckpointQuery::default`].
    pub const DEFAULT_LIMIT: usize = 100;

    /// The first page, `limit` summaries at most.
    pub fn first(limit: usize) -> Self {
        CheckpointQuery { after: None, limit }
    }

    /// The page after run id `after`.
    pub fn after(mut self, after: Option<impl Into<String>>) -> Self {
        self.after = after.map(Into::into);
        self
    }

    /// `limit` with 0 read as 1.
    pub fn effective_limit(&self) -> usize {
        self.limit.max(1)
    }
}

/// A page of checkpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointPage {
    /// The summaries, ascending by run id.
    pub items: Vec<CheckpointSummary>,
    /// The `after` of the next page; `None` on the last page.
    pub next: Option<String>,
}

impl CheckpointPage {
    /// A page (for store implementations).
    pub fn new(items: Vec<CheckpointSummary>, next: Option<String>) -> Self {
        CheckpointPage { items, next }
    }
}

/// Keeps the state of unfinished runs, by run id, as opaque bytes (the run loop encodes and
/// versions them) with a [`CheckpointMeta`] beside them.
///
/// A TTL, when the implementation has one, counts from the last save or load. An expired
/// checkpoint is never loaded or listed; [`CheckpointStore::purge_expired`] removes what
/// expiry left behind, with bounded work per call.
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Saves (or overwrites) a run's state and metadata.
    /// `meta.agent` may be of any length; one with a NUL character is refused with
    /// [`StoreError::InvalidId`], as an invalid id is.
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError>;
    /// A run's state, if any.
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Deletes a run's state (no error when it does not exist).
    async fn delete(&self, run_id: &str) -> Result<(), StoreError>;
    /// A page of the stored, unexpired checkpoints, ascending by run id.
    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError>;
    /// Removes expired checkpoints, at most an implementation-defined batch per call, and
    /// returns how many it removed (call again while it returns more than 0). A store whose
    /// backend expires keys by itself (Redis) removes only what its index still names.
    async fn purge_expired(&self) -> Result<u64, StoreError>;
    /// [`save`](Self::save), only while `fence` is the live lease of its key, checked
    /// atomically with the write ([`StoreError::Fenced`] otherwise, and nothing is written).
    /// Stores without leases answer [`StoreError::Unsupported`].
    async fn save_fenced(
        &self,
        run_id: &str,
        meta: &CheckpointMeta,
        state: &[u8],
        fence: &Fence,
    ) -> Result<(), StoreError> {
        let _ = (run_id, meta, state, fence);
        Err(StoreError::Unsupported {
            operation: "checkpoint.save_fenced",
        })
    }
    /// [`delete`](Self::delete), only while `fence` is the live lease of its key.
    async fn delete_fenced(&self, run_id: &str, fence: &Fence) -> Result<(), StoreError> {
        let _ = (run_id, fence);
        Err(StoreError::Unsupported {
            operation: "checkpoint.delete_fenced",
        })
    }
}

#[async_trait]
impl<T: CheckpointStore + ?Sized> CheckpointStore for std::sync::Arc<T> {
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
        (**self).save(run_id, meta, state).await
    }
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        (**self).delete(run_id).await
    }
    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        (**self).list(query).await
    }
    async fn purge_expired(&self) -> Result<u64, StoreError> {
        (**self).purge_expired().await
    }
    async fn save_fenced(
        &self,
        run_id: &str,
        meta: &CheckpointMeta,
        state: &[u8],
        fence: &Fence,
    ) -> Result<(), StoreError> {
        (**self).save_fenced(run_id, meta, state, fence).await
    }
    async fn delete_fenced(&self, run_id: &str, fence: &Fence) -> Result<(), StoreError> {
        (**self).delete_fenced(run_id, fence).await
    }
}

/// Keeps derived memory state, such as cached conversation summaries, by key.
#[async_trait]
pub trait MemoryStateStore: Send + Sync {
    /// The value under `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// Stores a value under `key`.
    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError>;
    /// Deletes `key` (no error when it does not exist).
    async fn delete(&self, key: &str) -> Result<(), StoreError>;
}

#[async_trait]
impl<T: MemoryStateStore + ?Sized> MemoryStateStore for std::sync::Arc<T> {
    async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        (**self).get(key).await
    }
    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError> {
        (**self).put(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        (**self).delete(key).await
    }
}

/// Conversations in process memory. Lost when the process ends.
pub struct InMemoryConversationStore {
    inner: TtlMap<(Vec<Message>, SystemTime)>,
    fence_check: Option<FenceCheck>,
}

/// Checkpoints in process memory.
pub struct InMemoryCheckpointStore {
    inner: TtlMap<StoredCheckpoint>,
    fence_check: Option<FenceCheck>,
}

struct StoredCheckpoint {
    meta: CheckpointMeta,
    state: Vec<u8>,
    updated_at: SystemTime,
}

/// Memory state in process memory.
pub struct InMemoryMemoryStateStore {
    inner: TtlMap<String>,
}
