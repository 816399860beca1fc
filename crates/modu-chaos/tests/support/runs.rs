//! The driver's book-keeping: each run's state, the kills, the ledger's executions, the
//! stored runs, and small helpers (the kill generator, percentiles, store look-ups).

use std::time::Instant;

use modu_chaos::Stores;
use modu_core::Role;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Queued,
    /// Given to the worker of this generation.
    On(usize),
    /// Its worker died (or lost the lease) with its checkpoint stored: another worker's
    /// `recover_orphans` owns it.
    Orphan,
    Done,
}

pub(super) struct Run {
    pub(super) id: String,
    pub(super) session: usize,
    pub(super) state: State,
    pub(super) first_sent: Option<Instant>,
    pub(super) done_at: Option<Instant>,
    /// `done` lines printed for it.
    pub(super) dones: u32,
    pub(super) resubmits: u32,
    /// Pids that reported it `lease_lost`.
    pub(super) lease_lost: Vec<u32>,
}

pub(super) struct Kill {
    pub(super) at_us: u128,
    pub(super) pid: u32,
    /// The runs in flight on it that had a checkpoint (orphans).
    pub(super) orphans: Vec<String>,
}

/// A small deterministic generator (the kills' times and targets).
pub(super) struct Lcg(pub(super) u64);
impl Lcg {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

pub(super) fn pct(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

pub(super) async fn has_checkpoint(stores: &Stores, run: &str) -> bool {
    stores.checkpoints.load(run).await.unwrap().is_some()
}

pub(super) async fn in_history(stores: &Stores, session: usize, run: &str) -> bool {
    stores
        .conversations
        .load(&format!("s{session}"))
        .await
        .unwrap()
        .iter()
        .any(|m| m.role == Role::User && m.text() == run)
}

/// The session of a run id (`s<n>-r<m>`).
pub(super) fn session_of(run: &str) -> String {
    run.split('-').next().unwrap_or_default().to_owned()
}

/// One execution of `record`, from the ledger.
pub(super) struct Execution {
    pub(super) exec: String,
    pub(super) pid: u32,
    pub(super) at_us: u128,
}

/// A run's messages in its session's history.
pub(super) struct Stored {
    pub(super) call_nonce: String,
    pub(super) exec: String,
    pub(super) answer_nonce: String,
}
