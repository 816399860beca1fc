//! Orphaned runs: runs whose worker died mid-way, found and continued by another worker.

use std::sync::Arc;

use crate::agent::Agent;
use crate::error::AgentError;
use crate::outcome::RunOutcome;
use crate::runner::start::{resume_request, run_through_layers};
use crate::store::{CheckpointQuery, CheckpointStatus};

use futures::StreamExt;

use super::settings::RECOVER_CONCURRENCY;

impl<C, O> Agent<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Continues this agent's orphaned runs: runs with a session whose checkpoint says
    /// `running` while nobody holds the session's lease, which happens when the worker that
    /// ran them died (a live run renews its lease; a run that ends removes or re-marks its
    /// checkpoint before it releases the lease).
    ///
    /// Each candidate is claimed by taking its session's lease without waiting, so of many
    /// workers calling this at once exactly one continues a run; the others skip it. Under the
    /// lease the checkpoint is read again, and a run that is no longer `running` is skipped.
    /// Claimed runs continue concurrently with `context`, at most [`RECOVER_CONCURRENCY`] at a
    /// time (a later candidate is claimed once an earlier one has ended, and another worker
    /// may take it over meanwhile); their results are returned (runs that were skipped are
    /// not). Call it periodically on every worker, at an interval shorter than the lease's ttl
    /// for a quick take-over.
    ///
    /// A run without a session takes no lease and is never recovered here (resume it by id).
    /// A run killed before its first checkpoint (written right after its lease is taken) is
    /// lost: its caller sees no result and submits it again.
    ///
    /// ```
    /// use modu_agent::Agent;
    /// use modu_core::{InMemoryCheckpointStore, InMemoryConversationStore, InMemoryLeaseStore, LeaseOptions};
    /// use modu_testing::ScriptedModel;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let leases = InMemoryLeaseStore::new();
    /// let worker = Agent::builder(ScriptedModel::new().text("hi"))
    ///     .conversation_store(std::sync::Arc::new(leases.fence_conversations(InMemoryConversationStore::new())))
    ///     .checkpoint_store(std::sync::Arc::new(leases.fence_checkpoints(InMemoryCheckpointStore::new())))
    ///     .session_leases(leases.clone(), LeaseOptions::new().holder("worker-1"))
    ///     .build()
    ///     .unwrap();
    /// // Nothing is orphaned here; a worker calls this every few seconds.
    /// assert!(worker.recover_orphans(()).await.unwrap().is_empty());
    /// # }
    /// ```
    pub async fn recover_orphans(&self, context: impl Into<Arc<C>>) -> Result<Vec<RunOutcome<O>>, AgentError> {
        let (Some(store), Some(_)) = (&self.inner.checkpoints, &self.inner.leases) else {
            return Err(AgentError::Configuration {
                message: "recovering orphaned runs needs a checkpoint store and session leases".into(),
            });
        };
        let context = context.into();
        let mut candidates = Vec::new();
        let mut query = CheckpointQuery::default();
        loop {
            let page = store
                .list(&query)
                .await
                .map_err(|e| AgentError::from_store("checkpoint.list", &e))?;
            candidates.extend(page.items.into_iter().filter(|item| {
                item.meta.agent == self.inner.name
                    && item.meta.status == CheckpointStatus::Running
                    && item.meta.session_id.is_some()
            }));
            match page.next {
                Some(next) => query = query.after(Some(next)),
                None => break,
            }
        }
        let claims = candidates.into_iter().map(|item| {
            let context = Arc::clone(&context);
            async move {
                let checkpoint = match crate::runner::panics::unwound(self.load_checkpoint(&item.run_id)).await {
                    Ok(checkpoint) => checkpoint,
                    // Finished (and removed) since it was listed.
                    Err(AgentError::CheckpointNotFound { .. }) => return None,
                    Err(e) => return Some(RunOutcome::failed(item.run_id, self.inner.name.clone(), e)),
                };
                let mut request = resume_request(checkpoint, context, tokio::time::Instant::now());
                request.claim = true;
                let result = run_through_layers(&self.inner, request).await;
                match result.error() {
                    // Alive elsewhere, or claimed by another worker first.
                    Some(AgentError::SessionBusy { .. } | AgentError::CheckpointNotFound { .. }) => None,
                    _ => Some(result),
                }
            }
        });
        // Bounded: a worker that found hundreds of orphans would otherwise run them all at once,
        // and their lease renewals and store calls starve each other (a store pool of ten
        // connections under 150 runs lost a run's lease with no other worker running).
        let outcomes: Vec<Option<RunOutcome<O>>> = futures::stream::iter(claims)
            .buffered(RECOVER_CONCURRENCY)
            .collect()
            .await;
        Ok(outcomes.into_iter().flatten().collect())
    }
}
