//! The run API of [`Agent`]: run, stream, resume, export and import (approvals: `approvals`, asks for input: `input`).

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Agent, AgentRequest};
use crate::approval::NestedResume;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::outcome::RunOutcome;
use crate::runner::RunStream;
use crate::runner::chat::with_deadline;
use crate::runner::start::{resume_request, run_through_layers};

/// How many events a streamed run sends ahead of its reader. The stream polls its run, so a
/// larger buffer gains no parallelism: the run only runs further ahead before the reader sees
/// anything, and a burst (a model's deltas arriving together) keeps that many events alive at
/// once, which costs more in the allocator than the run's pause for its reader does.
const STREAM_BUFFER: usize = 8;

impl<C, O> Agent<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Runs the agent to its answer.
    ///
    /// Never panics: a failure is a [`RunOutcome::Failed`], a run that panicked (a tool, a model
    /// or a layer of yours) too, with [`AgentError::Panicked`].
    pub async fn run(&self, request: impl Into<AgentRequest<C>>) -> RunOutcome<O> {
        // The caller's future stays small: the run's state machine (a few KB) is boxed
        // where the run is set up, so moving this future (into `join_all`, a
        // `FuturesUnordered`, a spawned task) copies little.
        run_through_layers(&self.inner, request.into()).await
    }

    /// Runs the agent, yielding its events as they happen and the result at the end.
    ///
    /// The stream drives the run as it is polled, on the caller's task (no task is spawned):
    /// read it to its end, or drop it to stop the run (before the drop returns). A caller that
    /// stops polling pauses the run. Events sent from another task while the run waits (a
    /// tool's progress, say) wake the reader. A run that panics ends the stream with a
    /// `Failed` result whose error is [`AgentError::Panicked`], naming the run. The last item is
    /// always [`StreamItem::Completed`](crate::StreamItem::Completed), [`StreamItem::Paused`](crate::StreamItem::Paused) or [`StreamItem::Failed`](crate::StreamItem::Failed), carrying the outcome (the
    /// `RunCompleted` / `RunPaused` / `RunFailed` events go to event sinks). With a strict Plan-and-Execute
    /// policy this shows what a caller shows a user: `RunStarted`, `ApprovalRequested` and the
    /// FINALIZE tokens as `FinalDelta`, then the result; the internal PLAN / ACT / STEP_RESULT
    /// work is in [`Agent::stream_all`]. With the standard policy it is the same as `stream_all`.
    ///
    /// A model call that fails mid-answer and is retried (`ModelCallFailed { will_retry: true }`)
    /// streams its answer again from the start: drop the partial text of the failed attempt.
    pub fn stream(&self, request: impl Into<AgentRequest<C>>) -> RunStream<O> {
        let public_only = matches!(self.inner.policy, crate::plan::DecisionPolicy::PlanAndExecute(_));
        self.stream_inner(request.into(), public_only)
    }

    /// Runs the agent, yielding every event (plan, step, tool, validation and step-delta events
    /// of a strict run included) and the result at the end.
    pub fn stream_all(&self, request: impl Into<AgentRequest<C>>) -> RunStream<O> {
        self.stream_inner(request.into(), false)
    }

    fn stream_inner(&self, request: AgentRequest<C>, public_only: bool) -> RunStream<O> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let mut request = request;
        request.stream = Some(tx);
        let inner = Arc::clone(&self.inner);
        let run = Box::pin(async move { run_through_layers(&inner, request).await });
        RunStream::new(rx, run, public_only)
    }

    /// Continues a run from its last checkpoint: a paused run once its waiting calls are
    /// decided or answered, a cancelled one, or one that failed on a transient error.
    ///
    /// Tool calls whose results were checkpointed are not run again. Fails with a typed error
    /// when there is no checkpoint, when it cannot be read, or when it was written by an
    /// incompatible agent (other tools, output schema or policy).
    ///
    /// `context` is a `C`, or an `Arc<C>` shared with other runs (not cloned).
    pub async fn resume(&self, run_id: &str, context: impl Into<Arc<C>>) -> RunOutcome<O> {
        self.resume_with(run_id, context.into(), None, None).await
    }

    /// [`Agent::resume`], cancelled at the next boundary when `token` is (as
    /// [`AgentRequest::cancel_token`] does for a fresh run).
    pub async fn resume_cancellable(
        &self,
        run_id: &str,
        context: impl Into<Arc<C>>,
        token: tokio_util::sync::CancellationToken,
    ) -> RunOutcome<O> {
        self.resume_with(run_id, context.into(), None, Some(token)).await
    }

    /// [`Agent::resume`], yielding the resumed run's events and then its result, as
    /// [`Agent::stream`] does (a strict agent's stream shows only what a user sees).
    ///
    /// As with [`Agent::stream`], the stream drives the run as it is polled; dropping it stops
    /// the run.
    pub fn resume_stream(&self, run_id: &str, context: impl Into<Arc<C>>) -> RunStream<O> {
        self.resume_stream_with(run_id, context.into(), None)
    }

    /// [`Agent::resume_stream`], stopped at the next boundary when `token` is cancelled, with
    /// its checkpoint kept (as [`Agent::resume_cancellable`]): the stream ends with the
    /// `Cancelled` result. Dropping the stream still aborts the run at once.
    pub fn resume_stream_cancellable(
        &self,
        run_id: &str,
        context: impl Into<Arc<C>>,
        token: tokio_util::sync::CancellationToken,
    ) -> RunStream<O> {
        self.resume_stream_with(run_id, context.into(), Some(token))
    }

    fn resume_stream_with(
        &self,
        run_id: &str,
        context: Arc<C>,
        token: Option<tokio_util::sync::CancellationToken>,
    ) -> RunStream<O> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let agent = self.clone();
        let run_id = run_id.to_owned();
        let run = Box::pin(async move { agent.resume_with(&run_id, context, Some(tx), token).await });
        let public_only = matches!(self.inner.policy, crate::plan::DecisionPolicy::PlanAndExecute(_));
        RunStream::new(rx, run, public_only)
    }

    /// Resumes a nested run from the state its parent kept, with the decisions made on the
    /// parent; no checkpoint store is needed.
    pub(crate) async fn resume_nested(
        &self,
        resume: NestedResume,
        context: Arc<C>,
        approvals: Arc<std::sync::Mutex<crate::context::SharedApprovals>>,
        slot: crate::agent::PauseSlot,
    ) -> RunOutcome<O> {
        let run_id = resume.pause.run_id.clone();
        match self.decode_checkpoint(&run_id, resume.pause.state) {
            Ok(mut checkpoint) => {
                for (call_id, decision, always) in resume.decisions {
                    if always && let Some(r) = checkpoint.state.interruptions.iter().find(|r| r.call_id == call_id) {
                        checkpoint.state.always_approved.insert(r.tool_name.clone());
                    }
                    checkpoint.state.decisions.insert(call_id, decision);
                }
                let mut request = resume_request(checkpoint, context, Instant::now());
                request.approvals = Some(approvals);
                request.nested_pause = Some(slot);
                run_through_layers(&self.inner, request).await
            }
            Err(error) => RunOutcome::failed(run_id, self.inner.name.clone(), error),
        }
    }

    async fn resume_with(
        &self,
        run_id: &str,
        context: Arc<C>,
        stream: Option<mpsc::Sender<Box<AgentEvent>>>,
        cancel: Option<tokio_util::sync::CancellationToken>,
    ) -> RunOutcome<O> {
        let started = Instant::now();
        let deadline = self.inner.limits.timeout.map(|t| started + t);
        let load = crate::runner::panics::unwound(self.load_checkpoint(run_id));
        let loaded = match with_deadline(deadline, self.inner.limits.timeout, load).await {
            Ok(loaded) => loaded,
            Err(timeout) => Err(timeout),
        };
        match loaded {
            Ok(checkpoint) => {
                let mut request = resume_request(checkpoint, context, started);
                request.stream = stream;
                request.cancel = cancel;
                run_through_layers(&self.inner, request).await
            }
            Err(error) => RunOutcome::failed(run_id, self.inner.name.clone(), error),
        }
    }

    /// The saved state of an unfinished run as JSON (for moving a paused run to another
    /// process or storing it elsewhere). The application context is not part of it.
    pub async fn export_state(&self, run_id: &str) -> Result<serde_json::Value, AgentError> {
        let checkpoint = self.load_checkpoint(run_id).await?;
        serde_json::to_value(&checkpoint).map_err(|e| AgentError::CheckpointInvalid {
            run_id: run_id.to_owned(),
            message: e.to_string(),
        })
    }

    /// Stores a state produced by [`Agent::export_state`] in this agent's checkpoint store,
    /// after checking its version and that it belongs to a compatible agent; returns its run id.
    pub async fn import_state(&self, state: serde_json::Value) -> Result<String, AgentError> {
        let Some(run_id) = state
            .get("run_id")
            .and_then(serde_json::Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
        else {
            return Err(AgentError::CheckpointInvalid {
                run_id: String::new(),
                message: "the state has no run_id: it is not a state exported by Agent::export_state".into(),
            });
        };
        let checkpoint = self.decode_checkpoint(&run_id, state)?;
        self.store_checkpoint(&checkpoint, None).await?;
        Ok(run_id)
    }

    /// Whether a checkpoint exists for the run (it can be resumed).
    pub async fn has_checkpoint(&self, run_id: &str) -> Result<bool, AgentError> {
        let Some(store) = &self.inner.checkpoints else {
            return Ok(false);
        };
        store
            .load(run_id)
            .await
            .map(|c| c.is_some())
            .map_err(|e| AgentError::from_store("checkpoint.load", &e))
    }
}
