//! A run's hold on its session's lease: taken before the run reads anything, renewed while it
//! runs, released when it ends (see [`crate::lease`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::AgentError;
use crate::lease::{Fence, Lease, LeaseStore, SessionLeases};
use crate::store::StoreError;

/// A lease a run holds, with the task that renews it.
pub(super) struct HeldLease {
    lease: Lease,
    store: Arc<dyn LeaseStore>,
    renewer: Option<JoinHandle<()>>,
}

impl HeldLease {
    pub(super) fn fence(&self) -> Fence {
        self.lease.fence()
    }

    /// Stops renewing and gives the lease up.
    pub(super) async fn release(mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
        if let Err(e) = self.store.release(&self.lease).await {
            // It expires by its ttl.
            tracing::warn!(session_id = %self.lease.key, error = %e, "could not release the session's lease");
        }
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        // A run dropped mid-way (its caller went away) stops renewing; the lease expires.
        if let Some(renewer) = self.renewer.take() {
            renewer.abort();
        }
    }
}

/// How long a decision (approve, reject, answer) waits at least for its session's lease: it
/// holds the lease only to rewrite a checkpoint, so two reviewers deciding calls of one paused
/// run at once wait for each other instead of one failing with `SessionBusy` (a running run that
/// holds the session longer still makes it fail once this has passed).
pub(super) const EDIT_WAIT: Duration = Duration::from_secs(2);

/// How long a taker of a session's lease waits for it.
pub(super) enum Wait {
    /// A run: the configured time ([`crate::lease::LeaseOptions::wait`]).
    Configured,
    /// A claim of an orphaned run: not at all (a busy session means its run may be alive).
    No,
    /// A checkpoint edit: the configured time, and at least [`EDIT_WAIT`].
    Edit,
}

/// Takes `session`'s lease, waiting for it as `wait` says.
pub(super) async fn take(leases: &SessionLeases, session: &str, wait: Wait) -> Result<HeldLease, AgentError> {
    let options = &leases.options;
    let wait = match wait {
        Wait::Configured => options.wait,
        Wait::No => Duration::ZERO,
        Wait::Edit => options.wait.max(EDIT_WAIT),
    };
    let until = Instant::now() + wait;
    let mut pause = Duration::from_millis(10);
    let lease = loop {
        match leases.store.acquire(session, &options.holder, options.ttl).await {
            Ok(Some(lease)) => break lease,
            Ok(None) => {}
            Err(e) => return Err(AgentError::from_store("lease.acquire", &e)),
        }
        let now = Instant::now();
        if now >= until {
            return Err(AgentError::SessionBusy {
                session_id: session.to_owned(),
            });
        }
        tokio::time::sleep(pause.min(until - now)).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    };
    let renewer = tokio::spawn(renew(Arc::clone(&leases.store), lease.clone()));
    Ok(HeldLease {
        lease,
        store: Arc::clone(&leases.store),
        renewer: Some(renewer),
    })
}

/// Renews every third of the ttl until the lease is lost; a failed renewal is retried until
/// the lease would have expired, after which the store refuses the run's writes.
async fn renew(store: Arc<dyn LeaseStore>, lease: Lease) {
    let every = lease.ttl / 3;
    loop {
        tokio::time::sleep(every).await;
        match store.renew(&lease).await {
            Ok(()) => {}
            Err(StoreError::Fenced { .. }) => {
                tracing::warn!(session_id = %lease.key, token = lease.token, "the session's lease was lost");
                return;
            }
            Err(e) => tracing::warn!(session_id = %lease.key, error = %e, "could not renew the session's lease"),
        }
    }
}
