//! Session leases with fencing tokens: one worker at a time runs a session, across processes.
//!
//! A [`LeaseStore`] hands out a lease on a key (a session id) to one holder at a time, for a
//! time to live the holder renews while it works. Each take of a key returns a larger
//! [`Fence`] token than every take before it. The conversation and checkpoint stores of the
//! same backend accept a write that carries a fence only while that fence is the key's current,
//! unexpired lease, checked atomically with the write
//! ([`ConversationStore::append_fenced`], [`ConversationStore::delete_fenced`],
//! [`CheckpointStore::save_fenced`], [`CheckpointStore::delete_fenced`]). So a worker
//! that paused past its lease (a long GC pause, a partition) cannot write over the worker that
//! took the session over.
//!
//! An agent uses leases through `AgentBuilder::session_leases`: every run with a session takes
//! the session's lease before it reads the conversation, renews it while it runs, and releases
//! it when it ends. `Agent::recover_orphans` finds runs whose worker died and continues them,
//! at most one claimer per run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

pub use crate::store::Fence;
use crate::store::{
    CheckpointStore, ConversationStore, FenceCheck, InMemoryCheckpointStore, InMemoryConversationStore, StoreError,
};

/// A lease held on a key by one holder.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The leased key (a session id).
    pub key: String,
    /// Who holds it (a worker id).
    pub holder: String,
    /// The fencing token of this take.
    pub token: u64,
    /// How long the lease lives after it was taken or last renewed.
    pub ttl: Duration,
}

impl Lease {
    /// The longest ttl a lease store keeps (about 100 years): a longer one, up to
    /// `Duration::MAX`, is read as this, so it does not overflow a backend's clock.
    pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    /// A ttl as a backend takes it (for store implementations): whole milliseconds, at most
    /// [`Lease::MAX_TTL`]'s (a longer one, up to `Duration::MAX`, would overflow a database's
    /// or Redis's clock), at least 1.
    pub fn ttl_millis(ttl: Duration) -> i64 {
        i64::try_from(ttl.min(Self::MAX_TTL).as_millis())
            .unwrap_or(i64::MAX)
            .max(1)
    }

    /// A lease (for store implementations).
    pub fn new(key: impl Into<String>, holder: impl Into<String>, token: u64, ttl: Duration) -> Self {
        Lease {
            key: key.into(),
            holder: holder.into(),
            token,
            ttl,
        }
    }

    /// The fence writes under this lease carry.
    pub fn fence(&self) -> Fence {
        Fence::new(self.key.clone(), self.token)
    }
}

/// Hands out leases on keys, one live holder per key at a time.
///
/// Implementations must make `acquire` atomic (of concurrent takers of a free key exactly one
/// gets it) and keep tokens monotonic per key, across expiry, release and restarts of the
/// process (a lease row or counter in the backend, not a counter in memory).
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes the lease on `key` for `holder` for `ttl` (at most [`Lease::MAX_TTL`]: a longer
    /// one is read as that), if no live lease holds it; `None` when another lease is live (also
    /// when `holder` itself holds it: a lease is not re-entrant). `holder` may be of any length;
    /// one with a NUL character is refused with [`StoreError::InvalidId`], as an invalid key is.
    async fn acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, StoreError>;
    /// Extends a live lease by its ttl from now; [`StoreError::Fenced`] when it expired or was
    /// taken over.
    async fn renew(&self, lease: &Lease) -> Result<(), StoreError>;
    /// Gives a lease up (no error when it was already lost).
    async fn release(&self, lease: &Lease) -> Result<(), StoreError>;
}

#[async_trait]
impl<T: LeaseStore + ?Sized> LeaseStore for Arc<T> {
    async fn acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        (**self).acquire(key, holder, ttl).await
    }
    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        (**self).renew(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        (**self).release(lease).await
    }
}

/// How an agent's runs use session leases (`AgentBuilder::session_leases`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LeaseOptions {
    /// How long a lease lives without renewal (default 10 s). A run renews it every third
    /// of this; a worker that dies leaves its session busy for at most this long.
    pub ttl: Duration,
    /// How long a run waits for a busy session before it fails with
    /// `AgentError::SessionBusy` (default: it does not wait). A decision on a paused run
    /// (approve, reject, an answer) waits at least 2 s: it holds the session only to rewrite
    /// the run's checkpoint.
    pub wait: Duration,
    /// This worker's name in the leases it holds (default: a fresh UUID per agent).
    pub holder: String,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            ttl: Duration::from_secs(10),
            wait: Duration::ZERO,
            holder: uuid::Uuid::new_v4().to_string(),
        }
    }
}

impl LeaseOptions {
    /// The default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the lease's time to live (at least 30 ms).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.max(Duration::from_millis(30));
        self
    }

    /// Sets how long a run waits for a busy session.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Sets this worker's holder name.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }
}

/// An agent's leases and how its runs use them.
#[derive(Clone)]
#[doc(hidden)]
pub struct SessionLeases {
    #[doc(hidden)]
    pub store: Arc<dyn LeaseStore>,
    #[doc(hidden)]
    pub options: LeaseOptions,
}

struct Held {
    holder: String,
    token: u64,
    expires: Instant,
}

#[derive(Default)]
struct Leases {
    held: HashMap<String, Held>,
    /// The last token handed out per key (kept after release and expiry).
    tokens: HashMap<String, u64>,
}

/// Leases in process memory, for one process and for tests. The in-memory conversation and
/// checkpoint stores accept fenced writes checked against these leases when they come from
/// [`InMemoryLeaseStore::fence_conversations`] and [`InMemoryLeaseStore::fence_checkpoints`].
#[derive(Clone, Default)]
pub struct InMemoryLeaseStore {
    inner: Arc<Mutex<Leases>>,
}

impl InMemoryLeaseStore {
    /// Empty leases.
    pub fn new() -> Self {
        Self::default()
    }

    /// `store`, accepting fenced writes checked against these leases.
    pub fn fence_conversations(&self, store: InMemoryConversationStore) -> impl ConversationStore + use<> {
        store.with_fence_check(self.check())
    }

    /// `store`, accepting fenced writes checked against these leases.
    pub fn fence_checkpoints(&self, store: InMemoryCheckpointStore) -> impl CheckpointStore + use<> {
        store.with_fence_check(self.check())
    }

    /// Runs a write only while its fence is the key's live lease, holding the leases' lock so
    /// that no take-over interleaves.
    fn check(&self) -> FenceCheck {
        let inner = Arc::clone(&self.inner);
        Arc::new(move |fence: &Fence, write: &mut dyn FnMut()| {
            let leases = inner.lock().unwrap_or_else(PoisonError::into_inner);
            match leases.held.get(&fence.key) {
                Some(held) if held.token == fence.token && held.expires > Instant::now() => {
                    write();
                    Ok(())
                }
                _ => Err(StoreError::Fenced {
                    key: fence.key.clone(),
                    token: fence.token,
                }),
            }
        })
    }
}

#[async_trait]
impl LeaseStore for InMemoryLeaseStore {
    async fn acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        StoreError::check_id(key)?;
        // A holder name is not a key (any length), but no store may take a NUL in it.
        if holder.contains('\0') {
            StoreError::check_id(holder)?;
        }
        let mut leases = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if leases.held.get(key).is_some_and(|held| held.expires > now) {
            return Ok(None);
        }
        let token = leases.tokens.get(key).copied().unwrap_or(0) + 1;
        leases.tokens.insert(key.to_owned(), token);
        leases.held.insert(
            key.to_owned(),
            Held {
                holder: holder.to_owned(),
                token,
                expires: now + ttl.min(Lease::MAX_TTL),
            },
        );
        Ok(Some(Lease::new(key, holder, token, ttl)))
    }

    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut leases = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match leases.held.get_mut(&lease.key) {
            Some(held) if held.token == lease.token && held.holder == lease.holder && held.expires > now => {
                held.expires = now + lease.ttl.min(Lease::MAX_TTL);
                Ok(())
            }
            _ => Err(StoreError::Fenced {
                key: lease.key.clone(),
                token: lease.token,
            }),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut leases = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if leases
            .held
            .get(&lease.key)
            .is_some_and(|held| held.token == lease.token)
        {
            leases.held.remove(&lease.key);
        }
        Ok(())
    }
}
