//! Storage traits — conversations, checkpoints, memory state — and their in-memory
//! implementations, the embedded default. `modu-redis` and `modu-sqlite` implement the same
//! traits; every implementation passes the conformance suite in `modu-testing`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::BoxError;
use crate::message::Message;

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

/// Keeps the messages of conversations (sessions).
///
/// A run appends all its messages at once when it completes, so a turn (user message, tool
/// calls and results, answer) is stored together. Implementations must make `append`
/// atomic: concurrent appends to one session may interleave whole batches but lose nothing.
/// A TTL, when the implementation has one, counts from the last access.
#[async_trait]
pub trait ConversationStore: Send + Sync {
    /// Appends messages to a session, creating it if needed.
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError>;
    /// All messages of a session, oldest first; empty for an unknown or expired session.
    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError>;
    /// Deletes a session (no error when it does not exist).
    async fn delete(&self, session_id: &str) -> Result<(), StoreError>;
    /// The ids of the sessions stored, sorted.
    async fn list_sessions(&self) -> Result<Vec<String>, StoreError>;
}

/// Keeps the state of unfinished runs, by run id, as opaque bytes (the run loop encodes and
/// versions them).
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Saves (or overwrites) a run's state.
    async fn save(&self, run_id: &str, state: &[u8]) -> Result<(), StoreError>;
    /// A run's state, if any.
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Deletes a run's state (no error when it does not exist).
    async fn delete(&self, run_id: &str) -> Result<(), StoreError>;
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

struct Entry<T> {
    value: T,
    touched: Instant,
}

struct TtlMap<T> {
    ttl: Option<Duration>,
    map: Mutex<HashMap<String, Entry<T>>>,
}

impl<T> TtlMap<T> {
    fn new(ttl: Option<Duration>) -> Self {
        TtlMap {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, Entry<T>>) -> R) -> R {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ttl) = self.ttl {
            let now = Instant::now();
            map.retain(|_, e| now.duration_since(e.touched) < ttl);
        }
        f(&mut map)
    }
}

/// Conversations in process memory. Lost when the process ends.
pub struct InMemoryConversationStore {
    inner: TtlMap<Vec<Message>>,
}

impl InMemoryConversationStore {
    /// A store whose sessions never expire.
    pub fn new() -> Self {
        InMemoryConversationStore {
            inner: TtlMap::new(None),
        }
    }

    /// A store whose sessions expire `ttl` after their last access.
    pub fn with_ttl(ttl: Duration) -> Self {
        InMemoryConversationStore {
            inner: TtlMap::new(Some(ttl)),
        }
    }
}

impl Default for InMemoryConversationStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl ConversationStore for InMemoryConversationStore {
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError> {
        self.inner.with(|m| {
            let e = m.entry(session_id.to_owned()).or_insert_with(|| Entry {
                value: Vec::new(),
                touched: Instant::now(),
            });
            e.value.extend_from_slice(messages);
            e.touched = Instant::now();
        });
        Ok(())
    }

    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        Ok(self.inner.with(|m| match m.get_mut(session_id) {
            Some(e) => {
                e.touched = Instant::now();
                e.value.clone()
            }
            None => Vec::new(),
        }))
    }

    async fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.with(|m| m.remove(session_id));
        Ok(())
    }

    async fn list_sessions(&self) -> Result<Vec<String>, StoreError> {
        let mut ids: Vec<String> = self.inner.with(|m| m.keys().cloned().collect());
        ids.sort();
        Ok(ids)
    }
}

/// Checkpoints in process memory.
pub struct InMemoryCheckpointStore {
    inner: TtlMap<Vec<u8>>,
}

impl InMemoryCheckpointStore {
    /// A store whose checkpoints never expire.
    pub fn new() -> Self {
        InMemoryCheckpointStore {
            inner: TtlMap::new(None),
        }
    }

    /// A store whose checkpoints expire `ttl` after they were last saved or read.
    pub fn with_ttl(ttl: Duration) -> Self {
        InMemoryCheckpointStore {
            inner: TtlMap::new(Some(ttl)),
        }
    }
}

impl Default for InMemoryCheckpointStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl CheckpointStore for InMemoryCheckpointStore {
    async fn save(&self, run_id: &str, state: &[u8]) -> Result<(), StoreError> {
        self.inner.with(|m| {
            m.insert(
                run_id.to_owned(),
                Entry {
                    value: state.to_vec(),
                    touched: Instant::now(),
                },
            )
        });
        Ok(())
    }

    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.inner.with(|m| {
            m.get_mut(run_id).map(|e| {
                e.touched = Instant::now();
                e.value.clone()
            })
        }))
    }

    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        self.inner.with(|m| m.remove(run_id));
        Ok(())
    }
}

/// Memory state in process memory.
pub struct InMemoryMemoryStateStore {
    inner: TtlMap<String>,
}

impl InMemoryMemoryStateStore {
    /// A store whose values never expire.
    pub fn new() -> Self {
        InMemoryMemoryStateStore {
            inner: TtlMap::new(None),
        }
    }

    /// A store whose values expire `ttl` after their last access.
    pub fn with_ttl(ttl: Duration) -> Self {
        InMemoryMemoryStateStore {
            inner: TtlMap::new(Some(ttl)),
        }
    }
}

impl Default for InMemoryMemoryStateStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl MemoryStateStore for InMemoryMemoryStateStore {
    async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.inner.with(|m| {
            m.get_mut(key).map(|e| {
                e.touched = Instant::now();
                e.value.clone()
            })
        }))
    }

    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.inner.with(|m| {
            m.insert(
                key.to_owned(),
                Entry {
                    value: value.to_owned(),
                    touched: Instant::now(),
                },
            )
        });
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.with(|m| m.remove(key));
        Ok(())
    }
}
