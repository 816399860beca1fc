//! The in-memory stores at work: [`InMemoryConversationStore`], [`InMemoryCheckpointStore`]
//! and [`InMemoryMemoryStateStore`], the embedded default (lost when the process ends).

use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;

use super::ttl::{Entry, TtlMap};
use super::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStore, CheckpointSummary, ConversationStore, Fence,
    FenceCheck, InMemoryCheckpointStore, InMemoryConversationStore, InMemoryMemoryStateStore, MemoryStateStore,
    SessionSummary, StoreError, StoredCheckpoint,
};
use crate::message::Message;

impl InMemoryConversationStore {
    /// A store whose sessions never expire.
    pub fn new() -> Self {
        InMemoryConversationStore {
            inner: TtlMap::new(None),
            fence_check: None,
        }
    }

    /// A store whose sessions expire `ttl` after their last access.
    pub fn with_ttl(ttl: Duration) -> Self {
        InMemoryConversationStore {
            inner: TtlMap::new(Some(ttl)),
            fence_check: None,
        }
    }

    pub(crate) fn with_fence_check(mut self, check: FenceCheck) -> Self {
        self.fence_check = Some(check);
        self
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
        StoreError::check_id(session_id)?;
        self.append_now(session_id, messages);
        Ok(())
    }

    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        match &self.fence_check {
            Some(check) => check(fence, &mut || self.append_now(session_id, messages)),
            None => Err(StoreError::Unsupported {
                operation: "conversation.append_fenced",
            }),
        }
    }

    async fn delete_fenced(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        match &self.fence_check {
            Some(check) => check(fence, &mut || {
                self.inner.with(|m| m.remove(session_id));
            }),
            None => Err(StoreError::Unsupported {
                operation: "conversation.delete_fenced",
            }),
        }
    }

    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        StoreError::check_id(session_id)?;
        Ok(self.inner.with(|m| match m.get_mut(session_id) {
            Some(e) => {
                e.touched = Instant::now();
                e.value.0.clone()
            }
            None => Vec::new(),
        }))
    }

    async fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        StoreError::check_id(session_id)?;
        self.inner.with(|m| m.remove(session_id));
        Ok(())
    }

    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let mut sessions: Vec<SessionSummary> = self.inner.with(|m| {
            m.iter()
                .map(|(id, e)| SessionSummary::new(id.clone(), e.value.1))
                .collect()
        });
        sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        Ok(sessions)
    }
}

impl InMemoryConversationStore {
    fn append_now(&self, session_id: &str, messages: &[Message]) {
        self.inner.with(|m| {
            if messages.is_empty() {
                // Nothing to append: no session is created and `last_used` stays; a live
                // session counts it as an access.
                if let Some(e) = m.get_mut(session_id) {
                    e.touched = Instant::now();
                }
                return;
            }
            let e = m.entry(session_id.to_owned()).or_insert_with(|| Entry {
                value: (Vec::new(), SystemTime::now()),
                touched: Instant::now(),
            });
            e.value.0.extend_from_slice(messages);
            e.value.1 = SystemTime::now();
            e.touched = Instant::now();
        });
    }
}

impl InMemoryCheckpointStore {
    /// A store whose checkpoints never expire.
    pub fn new() -> Self {
        InMemoryCheckpointStore {
            inner: TtlMap::new(None),
            fence_check: None,
        }
    }

    /// A store whose checkpoints expire `ttl` after they were last saved or read.
    pub fn with_ttl(ttl: Duration) -> Self {
        InMemoryCheckpointStore {
            inner: TtlMap::new(Some(ttl)),
            fence_check: None,
        }
    }

    pub(crate) fn with_fence_check(mut self, check: FenceCheck) -> Self {
        self.fence_check = Some(check);
        self
    }

    fn save_now(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) {
        self.inner.with(|m| {
            m.insert(
                run_id.to_owned(),
                Entry {
                    value: StoredCheckpoint {
                        meta: meta.clone(),
                        state: state.to_vec(),
                        updated_at: SystemTime::now(),
                    },
                    touched: Instant::now(),
                },
            )
        });
    }

    fn fenced(&self, fence: &Fence, operation: &'static str, write: &mut dyn FnMut()) -> Result<(), StoreError> {
        match &self.fence_check {
            Some(check) => check(fence, write),
            None => Err(StoreError::Unsupported { operation }),
        }
    }
}

impl Default for InMemoryCheckpointStore {
    fn default() -> Self {
        Self::new()
    }
}

/// The ids a checkpoint save writes (its run's and its session's), checked before it.
fn check_save_ids(run_id: &str, meta: &CheckpointMeta) -> Result<(), StoreError> {
    StoreError::check_id(run_id)?;
    // An agent name is not a key (any length), but no store may take a NUL in it.
    if meta.agent.contains('\0') {
        StoreError::check_id(&meta.agent)?;
    }
    meta.session_id.as_deref().map_or(Ok(()), StoreError::check_id)
}

#[async_trait]
impl CheckpointStore for InMemoryCheckpointStore {
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
        check_save_ids(run_id, meta)?;
        self.save_now(run_id, meta, state);
        Ok(())
    }

    async fn save_fenced(
        &self,
        run_id: &str,
        meta: &CheckpointMeta,
        state: &[u8],
        fence: &Fence,
    ) -> Result<(), StoreError> {
        check_save_ids(run_id, meta)?;
        self.fenced(fence, "checkpoint.save_fenced", &mut || {
            self.save_now(run_id, meta, state)
        })
    }

    async fn delete_fenced(&self, run_id: &str, fence: &Fence) -> Result<(), StoreError> {
        StoreError::check_id(run_id)?;
        self.fenced(fence, "checkpoint.delete_fenced", &mut || {
            self.inner.with(|m| m.remove(run_id));
        })
    }

    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        StoreError::check_id(run_id)?;
        Ok(self.inner.with(|m| {
            m.get_mut(run_id).map(|e| {
                e.touched = Instant::now();
                e.value.state.clone()
            })
        }))
    }

    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        StoreError::check_id(run_id)?;
        self.inner.with(|m| m.remove(run_id));
        Ok(())
    }

    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        // A cursor is not a new key: one longer than MAX_ID_BYTES (a run stored before that
        // rule) still pages on; only a NUL, which no stored id holds, is refused.
        if let Some(after) = query.after.as_deref().filter(|a| a.contains('\0')) {
            StoreError::check_id(after)?;
        }
        let limit = query.effective_limit();
        Ok(self.inner.with(|m| {
            let mut ids: Vec<&String> = m
                .keys()
                .filter(|id| query.after.as_ref().is_none_or(|after| id.as_str() > after.as_str()))
                .collect();
            ids.sort();
            let more = ids.len() > limit;
            let items: Vec<CheckpointSummary> = ids
                .into_iter()
                .take(limit)
                .filter_map(|id| {
                    m.get(id)
                        .map(|e| CheckpointSummary::new(id.clone(), e.value.meta.clone(), e.value.updated_at))
                })
                .collect();
            let next = if more {
                items.last().map(|s| s.run_id.clone())
            } else {
                None
            };
            CheckpointPage::new(items, next)
        }))
    }

    async fn purge_expired(&self) -> Result<u64, StoreError> {
        Ok(self.inner.purge())
    }
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
        StoreError::check_memory_key(key)?;
        Ok(self.inner.with(|m| {
            m.get_mut(key).map(|e| {
                e.touched = Instant::now();
                e.value.clone()
            })
        }))
    }

    async fn put(&self, key: &str, value: &str) -> Result<(), StoreError> {
        StoreError::check_memory_key(key)?;
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
        StoreError::check_memory_key(key)?;
        self.inner.with(|m| m.remove(key));
        Ok(())
    }
}
