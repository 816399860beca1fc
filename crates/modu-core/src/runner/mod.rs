//! The run loop.
//!
//! One [`Run`] drives a run from its first model call to its result. The standard decision
//! policy asks the model, runs the tools it calls (concurrently, results in call order), asks
//! again, and finalizes the answer. Every model call goes through [`Run::call_model`] (retry,
//! the run's shared deadline, events, usage), every tool batch through [`Run::run_tools`]
//! (lookup, validation, authorization, timeout, retry, result cap, events, a checkpoint after
//! each finished call), and the state is checkpointed after every step so `Agent::resume` can
//! continue a run that failed on a transient error.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::agent::{Agent, AgentInner, AgentRequest, AgentResult, FinalizationMode, ToolEntry, compile_tool};
use crate::approval::{ApprovalDecision, ApprovalRequest, NestedPause, NestedResume, nested_call_id};
use crate::context::CallScope;
use crate::context::{RunContext, UserContext};
use crate::error::AgentError;
use crate::event::{AgentEvent, EventSink};
use crate::message::{Message, Role, Usage};
use crate::middleware::{AgentService, ToolInvocation};
use crate::model::ResponseFormat;
use crate::provider::{Stage, ToolSession};
use crate::store::{CheckpointMeta, CheckpointStatus};
use crate::tool::{ToolError, ToolErrorKind, truncate_result};

type ToolCallOutcome = Result<serde_json::Value, ToolError>;

/// What the tool loop knows about approvals when it runs a batch.
#[derive(Clone, Copy)]
struct ApprovalGate<'a> {
    offered: Option<&'a HashSet<String>>,
    decisions: &'a BTreeMap<String, ApprovalDecision>,
    always_approved: &'a BTreeSet<String>,
    /// Nested runs paused by calls of this batch (by the parent's call id).
    nested: &'a BTreeMap<String, NestedPause>,
    /// The tool identities admitted this turn (`None`: every offered tool).
    allowed: Option<&'a BTreeSet<String>>,
}

/// Why a call did not run.
enum Refusal {
    Error(ToolError),
    Approval(ApprovalRequest),
}

/// How one call ended, in detail (the strict policy classifies it).
struct CallReport {
    outcome: ToolCallOutcome,
    /// How often it ran (0: refused before running).
    attempts: u32,
    /// The arguments it ran with, schema defaults filled in (`None`: refused before running).
    validated: Option<serde_json::Value>,
    /// The tool that ran or was refused ([`crate::Tool::identity`]; the called name when the
    /// call never got past lookup and argument checks).
    identity: String,
    duration_ms: u64,
}

/// How one call of a batch ended.
enum RawToolRun {
    Done(CallReport),
    NeedsApproval(ApprovalRequest),
    /// The call's nested run (agent-as-tool) paused for approvals.
    Nested(NestedPause),
}

mod ask;
pub(crate) mod chat;
mod strict;

use ask::{Ask, Format};

/// The version of the checkpoint format written by this crate.
///
/// 2 added the strict Plan-and-Execute state (`state.strict`); version 1 checkpoints (which
/// never hold one) are read as they are.
pub const CHECKPOINT_SCHEMA_VERSION: u32 = 2;

/// The oldest checkpoint format this crate reads.
const OLDEST_READABLE_SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum Phase {
    /// Asking the model, running the tools it calls.
    Act,
    /// The tool loop ended with this draft; the final request is next.
    Finalize { draft: String },
}

/// The serialisable state of a run (what a checkpoint holds besides its header).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct RunState {
    /// The run's messages: input, tool calls, tool results, answer.
    messages: Vec<Message>,
    phase: Phase,
    usage: Usage,
    model_calls: u32,
    turns: u32,
    tool_calls: u32,
    /// Results of the current tool batch that already finished (by call id).
    #[serde(default)]
    pending_results: BTreeMap<String, Message>,
    /// People's decisions on calls that need approval (by call id).
    #[serde(default)]
    decisions: BTreeMap<String, ApprovalDecision>,
    /// Tools approved for the rest of the run.
    #[serde(default)]
    always_approved: BTreeSet<String>,
    /// Calls waiting for a decision (the run is paused while this is not empty).
    #[serde(default)]
    interruptions: Vec<ApprovalRequest>,
    /// Nested runs (agent-as-tool) paused for approvals, by the parent's call id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    nested: BTreeMap<String, NestedPause>,
    /// The tools offered and the identities admitted in the last standard request, so a
    /// batch resumed in another process is checked as it would have been.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    offered: Option<BTreeSet<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    admitted: Option<BTreeSet<String>>,
    /// The agent answering after a handoff (`None`: the agent the run started with).
    #[serde(default)]
    active_agent: Option<String>,
    /// The strict Plan-and-Execute state (strict runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    strict: Option<Box<strict::StrictState>>,
}

impl RunState {
    /// What a checkpoint of this state says about the run (a failure is recorded by the caller).
    fn status(&self) -> CheckpointStatus {
        if self.strict.as_ref().is_some_and(|s| s.is_done()) {
            CheckpointStatus::Done
        } else if self.interruptions.is_empty() {
            CheckpointStatus::Running
        } else {
            CheckpointStatus::Paused
        }
    }
}

/// A checkpoint: the run state with what is needed to check and rebuild the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Checkpoint {
    schema_version: u32,
    run_id: String,
    agent: String,
    fingerprint: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    user: UserContext,
    #[serde(default)]
    metadata: serde_json::Map<String, serde_json::Value>,
    state: RunState,
}

/// Sends events to the sink and to the caller's stream.
#[derive(Clone)]
pub(crate) struct Emitter {
    sink: Option<Arc<dyn EventSink>>,
    stream: Option<mpsc::Sender<AgentEvent>>,
}

impl Emitter {
    pub(crate) fn active(&self) -> bool {
        self.sink.is_some() || self.stream.is_some()
    }

    /// Whether anyone consumes text deltas (a caller's stream, or a sink that wants them):
    /// otherwise the model is asked for whole answers.
    fn deltas_wanted(&self) -> bool {
        self.stream.is_some() || self.sink.as_ref().is_some_and(|s| s.wants_deltas())
    }

    pub(crate) async fn emit(&self, event: AgentEvent) {
        if let Some(sink) = &self.sink
            && let Err(err) = sink.publish(&event).await
        {
            tracing::warn!(error = %err, event = event.kind(), "event sink failed");
        }
        if let Some(tx) = &self.stream
            && !matches!(event, AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. })
        {
            // A caller that dropped its stream no longer listens; the run goes on.
            let _ = tx.send(event).await;
        }
    }
}

struct VisibleTool<C> {
    entry: ToolEntry<C>,
}

/// Everything a run reads but does not change.
struct Env<C, O> {
    agent: Arc<AgentInner<C, O>>,
    ctx: RunContext<C>,
    /// The run's id, shared with the chat stack's per-request data.
    run_id: Arc<str>,
    /// The per-attempt side of model calls (events, the call counter, usage).
    attempts: Arc<chat::AttemptLog>,
    tools: HashMap<String, VisibleTool<C>>,
    tool_order: Vec<String>,
    emitter: Emitter,
    deadline: Option<Instant>,
    started: Instant,
    fingerprint: String,
    metadata: serde_json::Map<String, serde_json::Value>,
    history: Vec<Message>,
    parent_run_id: Option<String>,
    /// A nested run leaves its state here when it pauses (agent-as-tool).
    nested_pause: Option<crate::agent::PauseSlot>,
}

struct Run<C, O> {
    env: Env<C, O>,
    state: RunState,
    /// The tools offered in the last request (`None` before the first request of this process).
    offered: Option<HashSet<String>>,
    /// The identities context providers admitted for the last request (`None`: all offered).
    allowed: Option<BTreeSet<String>>,
    sessions: Vec<Box<dyn ToolSession<C>>>,
    resumed: bool,
}

/// Which event carries the model's text deltas.
#[derive(Clone, Debug)]
pub(crate) enum DeltaRoute {
    /// `ModelDelta` (the standard policy).
    Answer,
    /// `StepModelDelta` for this step (strict PLAN, ACT, STEP_RESULT).
    Step(String),
    /// `FinalDelta` (strict FINALIZE).
    Final,
}

impl DeltaRoute {
    fn event(&self, run_id: &str, text: String) -> AgentEvent {
        let run_id = run_id.to_owned();
        match self {
            DeltaRoute::Answer => AgentEvent::ModelDelta { run_id, text },
            DeltaRoute::Step(step_id) => AgentEvent::StepModelDelta {
                run_id,
                step_id: step_id.clone(),
                text,
            },
            DeltaRoute::Final => AgentEvent::FinalDelta { run_id, text },
        }
    }
}

enum Start<C> {
    Fresh(Box<AgentRequest<C>>),
    Resume {
        checkpoint: Box<Checkpoint>,
        context: Arc<C>,
        /// For a nested run resumed by its parent: shared approvals and the pause slot.
        nested: Option<(
            Arc<std::sync::Mutex<crate::context::SharedApprovals>>,
            crate::agent::PauseSlot,
        )>,
    },
}

impl<C, O> Agent<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Runs the agent to its answer.
    ///
    /// Never panics on bad input: a failure ends up in [`AgentResult::error`].
    pub async fn run(&self, request: impl Into<AgentRequest<C>>) -> AgentResult<O> {
        run_through_layers(&self.inner, request.into()).await
    }

    /// Runs the agent, yielding its events as they happen and the result at the end.
    ///
    /// The run proceeds on a spawned task; dropping the stream cancels it. The last item is
    /// always [`StreamItem::Completed`] or [`StreamItem::Failed`] carrying the result (the
    /// `RunCompleted` / `RunFailed` events go to event sinks). With a strict Plan-and-Execute
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
        let (tx, rx) = mpsc::channel(256);
        let mut request = request;
        request.stream = Some(tx);
        let inner = Arc::clone(&self.inner);
        let handle = tokio::spawn(async move { run_through_layers(&inner, request).await });
        RunStream {
            rx,
            handle: Some(handle),
            agent: self.inner.name.clone(),
            public_only,
            finished: None,
        }
    }

    /// Continues a run that failed on a transient error from its last checkpoint.
    ///
    /// Tool calls whose results were checkpointed are not run again. Fails with a typed error
    /// when there is no checkpoint, when it cannot be read, or when it was written by an
    /// incompatible agent (other tools, output schema or policy).
    pub async fn resume(&self, run_id: &str, context: C) -> AgentResult<O> {
        self.resume_arc(run_id, Arc::new(context)).await
    }

    /// [`Agent::resume`] with a shared context.
    pub async fn resume_arc(&self, run_id: &str, context: Arc<C>) -> AgentResult<O> {
        self.resume_with(run_id, context, None).await
    }

    /// [`Agent::resume`], yielding the resumed run's events and then its result, as
    /// [`Agent::stream`] does (a strict agent's stream shows only what a user sees).
    ///
    /// The run proceeds on a spawned task; dropping the stream cancels it.
    pub fn resume_stream(&self, run_id: &str, context: C) -> RunStream<O> {
        let (tx, rx) = mpsc::channel(256);
        let agent = self.clone();
        let run_id = run_id.to_owned();
        let handle = tokio::spawn(async move { agent.resume_with(&run_id, Arc::new(context), Some(tx)).await });
        RunStream {
            rx,
            handle: Some(handle),
            agent: self.inner.name.clone(),
            public_only: matches!(self.inner.policy, crate::plan::DecisionPolicy::PlanAndExecute(_)),
            finished: None,
        }
    }

    /// Resumes a nested run from the state its parent kept, with the decisions made on the
    /// parent; no checkpoint store is needed.
    pub(crate) async fn resume_nested(
        &self,
        resume: NestedResume,
        context: Arc<C>,
        approvals: Arc<std::sync::Mutex<crate::context::SharedApprovals>>,
        slot: crate::agent::PauseSlot,
    ) -> AgentResult<O> {
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
            Err(error) => AgentResult {
                run_id,
                agent: self.inner.name.clone(),
                output: None,
                messages: Vec::new(),
                usage: Usage::default(),
                metadata: serde_json::Map::new(),
                error: Some(error),
                interruptions: Vec::new(),
            },
        }
    }

    async fn resume_with(
        &self,
        run_id: &str,
        context: Arc<C>,
        stream: Option<mpsc::Sender<AgentEvent>>,
    ) -> AgentResult<O> {
        let started = Instant::now();
        let deadline = self.inner.limits.timeout.map(|t| started + t);
        let loaded = match with_deadline(deadline, self.inner.limits.timeout, self.load_checkpoint(run_id)).await {
            Ok(loaded) => loaded,
            Err(timeout) => Err(timeout),
        };
        match loaded {
            Ok(checkpoint) => {
                let mut request = resume_request(checkpoint, context, started);
                request.stream = stream;
                run_through_layers(&self.inner, request).await
            }
            Err(error) => AgentResult {
                run_id: run_id.to_owned(),
                agent: self.inner.name.clone(),
                output: None,
                messages: Vec::new(),
                usage: Usage::default(),
                metadata: serde_json::Map::new(),
                error: Some(error),
                interruptions: Vec::new(),
            },
        }
    }

    /// The calls of a paused run that wait for a decision.
    pub async fn pending_approvals(&self, run_id: &str) -> Result<Vec<ApprovalRequest>, AgentError> {
        Ok(self.load_checkpoint(run_id).await?.state.interruptions)
    }

    /// Approves one waiting call; it runs once when the run resumes.
    pub async fn approve(&self, run_id: &str, call_id: &str) -> Result<(), AgentError> {
        self.decide(run_id, call_id, ApprovalDecision::Approved, false).await
    }

    /// Approves one waiting call and every later call of the same tool in this run.
    pub async fn approve_always(&self, run_id: &str, call_id: &str) -> Result<(), AgentError> {
        self.decide(run_id, call_id, ApprovalDecision::Approved, true).await
    }

    /// Rejects one waiting call: it does not run, and the model sees the rejection (with the
    /// message, if any).
    pub async fn reject(&self, run_id: &str, call_id: &str, message: Option<String>) -> Result<(), AgentError> {
        self.decide(run_id, call_id, ApprovalDecision::Rejected { message }, false)
            .await
    }

    async fn decide(
        &self,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
        always: bool,
    ) -> Result<(), AgentError> {
        let mut checkpoint = self.load_checkpoint(run_id).await?;
        let request = checkpoint
            .state
            .interruptions
            .iter()
            .find(|r| r.call_id == call_id)
            .cloned()
            .ok_or_else(|| AgentError::UnknownApproval {
                run_id: run_id.to_owned(),
                call_id: call_id.to_owned(),
            })?;
        let approved = decision == ApprovalDecision::Approved;
        checkpoint.state.decisions.insert(call_id.to_owned(), decision);
        if always {
            // By the name the approval showed: for MCP, the external tool, not mcp_call_tool.
            checkpoint.state.always_approved.insert(request.tool_name.clone());
        }
        self.store_checkpoint(&checkpoint).await?;
        if let Some(sink) = &self.inner.sink {
            let event = AgentEvent::ApprovalResolved {
                run_id: run_id.to_owned(),
                call_id: call_id.to_owned(),
                tool_name: request.tool_name,
                approved,
            };
            if let Err(err) = sink.publish(&event).await {
                tracing::warn!(error = %err, "event sink failed");
            }
        }
        Ok(())
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
        self.store_checkpoint(&checkpoint).await?;
        Ok(run_id)
    }

    async fn store_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), AgentError> {
        let Some(store) = &self.inner.checkpoints else {
            return Err(AgentError::Configuration {
                message: "approvals and resume need a checkpoint store".into(),
            });
        };
        let bytes = serde_json::to_vec(checkpoint).map_err(|e| AgentError::Store {
            operation: "checkpoint.encode".into(),
            message: e.to_string(),
        })?;
        let meta = CheckpointMeta::new(checkpoint.agent.clone(), checkpoint.state.status())
            .with_session(checkpoint.session_id.clone());
        store
            .save(&checkpoint.run_id, &meta, &bytes)
            .await
            .map_err(|e| AgentError::from_store("checkpoint.save", &e))
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

    async fn load_checkpoint(&self, run_id: &str) -> Result<Checkpoint, AgentError> {
        let Some(store) = &self.inner.checkpoints else {
            return Err(AgentError::Configuration {
                message: "resume needs a checkpoint store".into(),
            });
        };
        let bytes = store
            .load(run_id)
            .await
            .map_err(|e| AgentError::from_store("checkpoint.load", &e))?
            .ok_or_else(|| AgentError::CheckpointNotFound {
                run_id: run_id.to_owned(),
            })?;
        let raw: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| AgentError::CheckpointInvalid {
            run_id: run_id.to_owned(),
            message: format!("not valid JSON: {e}"),
        })?;
        let checkpoint = self.decode_checkpoint(run_id, raw)?;
        Ok(checkpoint)
    }

    fn decode_checkpoint(&self, run_id: &str, raw: serde_json::Value) -> Result<Checkpoint, AgentError> {
        let invalid = |message: String| AgentError::CheckpointInvalid {
            run_id: run_id.to_owned(),
            message,
        };
        let version = raw
            .get("schema_version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| invalid("no schema_version".into()))?;
        if !(u64::from(OLDEST_READABLE_SCHEMA_VERSION)..=u64::from(CHECKPOINT_SCHEMA_VERSION)).contains(&version) {
            return Err(invalid(format!(
                "schema_version {version} is not supported (this build reads {OLDEST_READABLE_SCHEMA_VERSION} to {CHECKPOINT_SCHEMA_VERSION})"
            )));
        }
        let checkpoint: Checkpoint =
            serde_json::from_value(raw).map_err(|e| invalid(format!("malformed state: {e}")))?;
        if checkpoint.run_id != run_id {
            return Err(invalid(format!("it belongs to run {}", checkpoint.run_id)));
        }
        if checkpoint.fingerprint != self.inner.fingerprint {
            return Err(AgentError::ResumeIncompatible {
                run_id: run_id.to_owned(),
                message: format!(
                    "the checkpoint was written by agent {:?} with fingerprint {}, this agent has {}",
                    checkpoint.agent, checkpoint.fingerprint, self.inner.fingerprint
                ),
            });
        }
        Ok(checkpoint)
    }
}

/// The events of a streamed run, then its result.
pub struct RunStream<O> {
    rx: mpsc::Receiver<AgentEvent>,
    handle: Option<tokio::task::JoinHandle<AgentResult<O>>>,
    agent: String,
    /// Only the events a user sees (strict runs' `stream`).
    public_only: bool,
    /// The run's result, once its task has ended, handed out after the last event.
    finished: Option<AgentResult<O>>,
}

/// Whether a strict run's [`Agent::stream`] shows this event.
fn is_public(event: &AgentEvent) -> bool {
    matches!(
        event,
        AgentEvent::RunStarted { .. }
            | AgentEvent::FinalDelta { .. }
            | AgentEvent::ApprovalRequested { .. }
            | AgentEvent::ModelCallFailed { will_retry: true, .. }
    )
}

/// One item of a [`RunStream`].
#[derive(Debug)]
pub enum StreamItem<O> {
    /// An event of the run.
    Event(AgentEvent),
    /// The run succeeded; its result (always the last item).
    Completed(Box<AgentResult<O>>),
    /// The run failed; its result (always the last item).
    Failed(Box<AgentResult<O>>),
}

impl<O> RunStream<O> {
    /// The next event to hand out, if any is waiting (strict runs' `stream` skips internal ones).
    fn next_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        loop {
            let polled = if self.handle.is_some() {
                self.rx.poll_recv(cx)
            } else {
                // The run has ended: everything it sent is in the channel already.
                Poll::Ready(self.rx.try_recv().ok())
            };
            match polled {
                Poll::Ready(Some(event)) if self.public_only && !is_public(&event) => continue,
                other => return other,
            }
        }
    }
}

// Nothing of a `RunStream` is structurally pinned (the result is only moved out).
impl<O> Unpin for RunStream<O> {}

impl<O> Stream for RunStream<O> {
    type Item = StreamItem<O>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match this.next_event(cx) {
                Poll::Ready(Some(event)) => return Poll::Ready(Some(StreamItem::Event(event))),
                Poll::Ready(None) if this.handle.is_none() => {
                    return Poll::Ready(this.finished.take().map(|result| {
                        if result.error.is_none() {
                            StreamItem::Completed(Box::new(result))
                        } else {
                            StreamItem::Failed(Box::new(result))
                        }
                    }));
                }
                // Every sender is gone, or none has sent yet: has the run ended?
                Poll::Ready(None) | Poll::Pending => {}
            }
            let Some(handle) = this.handle.as_mut() else {
                continue;
            };
            match Pin::new(handle).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(joined) => {
                    this.handle = None;
                    this.finished = Some(joined.unwrap_or_else(|e| AgentResult {
                        run_id: String::new(),
                        agent: this.agent.clone(),
                        output: None,
                        messages: Vec::new(),
                        usage: Usage::default(),
                        metadata: serde_json::Map::new(),
                        error: Some(if e.is_cancelled() {
                            AgentError::Cancelled
                        } else {
                            AgentError::Configuration {
                                message: "the run task panicked".into(),
                            }
                        }),
                        interruptions: Vec::new(),
                    }));
                }
            }
        }
    }
}

impl<O> Drop for RunStream<O> {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}

/// A run (fresh or resumed), through the agent stack when the agent has layers.
async fn run_through_layers<C, O>(inner: &Arc<AgentInner<C, O>>, request: AgentRequest<C>) -> AgentResult<O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    match &inner.agent_service {
        None => run_raw(Arc::clone(inner), request).await,
        Some(service) => match tower::ServiceExt::oneshot(service.clone(), request).await {
            Ok(result) => result,
            Err(never) => match never {},
        },
    }
}

/// What a resumed run's request carries: the checkpoint, and when the run's clock started
/// (before the checkpoint was loaded, so the load counts toward the run's one timeout).
#[derive(Clone)]
pub(crate) struct Resume {
    checkpoint: Checkpoint,
    started: Instant,
}

/// The agent stack, built once with the agent: its layers around the innermost [`RunService`].
pub(crate) fn agent_stack<C, O>(
    inner: &std::sync::Weak<AgentInner<C, O>>,
    layers: &[crate::middleware::AgentLayerFn<C, O>],
) -> Option<AgentService<C, O>>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    (!layers.is_empty()).then(|| {
        crate::middleware::apply(
            AgentService::new(RunService {
                inner: std::sync::Weak::clone(inner),
            }),
            layers,
        )
    })
}

/// One run, after the agent middleware: a fresh one, or the resumed one the request carries.
async fn run_raw<C, O>(inner: Arc<AgentInner<C, O>>, mut request: AgentRequest<C>) -> AgentResult<O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    let emitter = Emitter {
        sink: inner.sink.clone(),
        stream: request.stream.take(),
    };
    match request.resume.take() {
        None => execute(inner, Start::Fresh(Box::new(request)), emitter).await,
        Some(resume) => {
            let Resume {
                mut checkpoint,
                started,
            } = *resume;
            // The request may have been changed by agent middleware on its way in.
            checkpoint.session_id = request.session_id;
            checkpoint.user = request.user;
            checkpoint.metadata = request.metadata;
            let nested = request.approvals.zip(request.nested_pause);
            let start = Start::Resume {
                checkpoint: Box::new(checkpoint),
                context: request.context,
                nested,
            };
            execute_from(inner, start, emitter, started).await
        }
    }
}

/// The request that resumes `checkpoint`: its run id, session, user and metadata, no input.
fn resume_request<C>(mut checkpoint: Checkpoint, context: Arc<C>, started: Instant) -> AgentRequest<C> {
    let mut request = AgentRequest::with_context_arc(context, "");
    request.input = Vec::new();
    request.run_id = Some(checkpoint.run_id.clone());
    request.session_id = checkpoint.session_id.take();
    request.user = std::mem::take(&mut checkpoint.user);
    request.metadata = std::mem::take(&mut checkpoint.metadata);
    request.resume = Some(Box::new(Resume { checkpoint, started }));
    request
}

/// The innermost agent service: one run. It holds its agent weakly (the agent holds the stack).
struct RunService<C, O> {
    inner: std::sync::Weak<AgentInner<C, O>>,
}

impl<C, O> Clone for RunService<C, O> {
    fn clone(&self) -> Self {
        RunService {
            inner: std::sync::Weak::clone(&self.inner),
        }
    }
}

impl<C, O> tower::Service<AgentRequest<C>> for RunService<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    type Response = AgentResult<O>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<AgentResult<O>, std::convert::Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: AgentRequest<C>) -> Self::Future {
        let inner = self.inner.upgrade();
        Box::pin(async move {
            Ok(match inner {
                Some(inner) => run_raw(inner, request).await,
                // Only reachable by a layer that keeps the stack after the agent was dropped.
                None => AgentResult {
                    run_id: request.run_id.unwrap_or_default(),
                    agent: String::new(),
                    output: None,
                    messages: Vec::new(),
                    usage: Usage::default(),
                    metadata: serde_json::Map::new(),
                    error: Some(AgentError::Configuration {
                        message: "the agent was dropped while its middleware still held a run".into(),
                    }),
                    interruptions: Vec::new(),
                },
            })
        })
    }
}

async fn execute<C, O>(agent: Arc<AgentInner<C, O>>, start: Start<C>, emitter: Emitter) -> AgentResult<O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    execute_from(agent, start, emitter, Instant::now()).await
}

/// [`execute`] with the run's clock started at `started` (a resume starts it before it loads
/// the checkpoint, so the load counts toward the run's one timeout).
async fn execute_from<C, O>(
    agent: Arc<AgentInner<C, O>>,
    start: Start<C>,
    emitter: Emitter,
    started: Instant,
) -> AgentResult<O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    let deadline = agent.limits.timeout.map(|t| started + t);
    let (ctx, state, metadata, resumed, parent_run_id, nested_pause) = match start {
        Start::Fresh(req) => {
            let req = *req;
            let nested_pause = req.nested_pause.clone();
            let run_id = req.run_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let parent_run_id = req.parent_run_id.clone();
            let tool_input = req.tool_input.clone();
            let mut ctx = RunContext::new(req.context, run_id);
            if let Some(shared) = req.approvals.clone() {
                ctx = ctx.with_shared_approvals(shared);
            }
            let ctx = ctx
                .with_tool_input(tool_input)
                .with_session_id(req.session_id)
                .with_user(req.user)
                .with_metadata(req.metadata.clone())
                .with_agent_name(agent.name.clone());
            let state = RunState {
                messages: req.input,
                phase: Phase::Act,
                usage: Usage::default(),
                model_calls: 0,
                turns: 0,
                tool_calls: 0,
                pending_results: BTreeMap::new(),
                decisions: BTreeMap::new(),
                always_approved: BTreeSet::new(),
                interruptions: Vec::new(),
                nested: BTreeMap::new(),
                offered: None,
                admitted: None,
                active_agent: None,
                strict: None,
            };
            (ctx, state, req.metadata, false, parent_run_id, nested_pause)
        }
        Start::Resume {
            checkpoint,
            context,
            nested,
        } => {
            let cp = *checkpoint;
            let (approvals, nested_pause) = nested.unzip();
            let mut ctx = RunContext::new(context, cp.run_id);
            if let Some(shared) = approvals {
                ctx = ctx.with_shared_approvals(shared);
            }
            let ctx = ctx
                .with_session_id(cp.session_id)
                .with_user(cp.user)
                .with_metadata(cp.metadata.clone())
                .with_agent_name(agent.name.clone());
            ctx.set_usage(cp.state.usage);
            (ctx, cp.state, cp.metadata, true, None, nested_pause)
        }
    };
    let fingerprint = agent.fingerprint.clone();
    let run_id: Arc<str> = Arc::from(ctx.run_id());
    let attempts = chat::AttemptLog::new(
        emitter.clone(),
        ctx.run_id(),
        ctx.usage_handle(),
        state.model_calls,
        agent.retry.max_attempts,
    );
    let run = Run {
        env: Env {
            agent,
            ctx,
            run_id,
            attempts,
            tools: HashMap::new(),
            tool_order: Vec::new(),
            emitter,
            deadline,
            started,
            fingerprint,
            metadata,
            history: Vec::new(),
            parent_run_id,
            nested_pause,
        },
        offered: state.offered.as_ref().map(|o| o.iter().cloned().collect()),
        allowed: state.admitted.clone(),
        state,
        sessions: Vec::new(),
        resumed,
    };
    run.execute().await
}

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    async fn execute(mut self) -> AgentResult<O> {
        let env = &self.env;
        if env.emitter.active() {
            env.emitter
                .emit(AgentEvent::RunStarted {
                    run_id: env.ctx.run_id().to_owned(),
                    agent: env.agent.name.clone(),
                    session_id: env.ctx.session_id().map(str::to_owned),
                    parent_run_id: env.parent_run_id.clone(),
                    resumed: self.resumed,
                })
                .await;
        }
        let outcome = self.drive().await;
        for session in std::mem::take(&mut self.sessions) {
            session.close().await;
        }
        for provider in &self.env.agent.context_providers {
            provider.run_finished(&self.env.ctx).await;
        }
        self.finish(outcome).await
    }

    async fn drive(&mut self) -> Result<O, AgentError> {
        self.open_tools().await?;
        self.load_history().await?;
        if !self.resumed {
            self.checkpoint().await?;
        }
        match self.env.agent.policy.clone() {
            crate::plan::DecisionPolicy::PlanAndExecute(policy) => self.strict_loop(&policy).await,
            _ => self.standard_loop().await,
        }
    }

    async fn open_tools(&mut self) -> Result<(), AgentError> {
        // A resumed run continues with the agent it had handed over to.
        if let Some(active) = self.state.active_agent.clone()
            && active != self.env.agent.name
            && let Some(target) = find_agent(&self.env.agent, &active, 8)
        {
            self.env.agent = target;
            self.env.ctx = self.env.ctx.with_agent_name(active);
        }
        self.env.tools.clear();
        self.env.tool_order.clear();
        for entry in &self.env.agent.tools {
            let name = entry.tool.spec().name.clone();
            self.env.tool_order.push(name.clone());
            self.env.tools.insert(name, VisibleTool { entry: entry.clone() });
        }
        let providers = self.env.agent.tool_providers.clone();
        for provider in providers {
            let session = with_deadline(
                self.env.deadline,
                self.env.agent.limits.timeout,
                provider.open(&self.env.ctx),
            )
            .await?
            .map_err(|e| AgentError::ToolProvider {
                provider: e.provider.clone(),
                message: e.message.clone(),
            })?;
            for tool in session.tools() {
                let name = tool.spec().name.clone();
                if self.env.tools.contains_key(&name) {
                    self.sessions.push(session);
                    return Err(AgentError::Configuration {
                        message: format!(
                            "tool provider {} offers tool {name:?}, which already exists",
                            provider.name()
                        ),
                    });
                }
                let entry = compile_tool(tool)?;
                self.env.tool_order.push(name.clone());
                self.env.tools.insert(name, VisibleTool { entry });
            }
            self.sessions.push(session);
        }
        Ok(())
    }

    async fn load_history(&mut self) -> Result<(), AgentError> {
        let (Some(store), Some(session)) = (&self.env.agent.conversations, self.env.ctx.session_id()) else {
            return Ok(());
        };
        match with_deadline(self.env.deadline, self.env.agent.limits.timeout, store.load(session)).await? {
            Ok(history) => {
                self.env.history = history;
                Ok(())
            }
            Err(e) => {
                self.store_failed("conversation.load", &e.to_string()).await;
                Err(AgentError::from_store("conversation.load", &e))
            }
        }
    }

    async fn store_failed(&self, operation: &str, message: &str) {
        if self.env.emitter.active() {
            self.env
                .emitter
                .emit(AgentEvent::StoreFailed {
                    run_id: self.env.ctx.run_id().to_owned(),
                    operation: operation.to_owned(),
                    message: message.to_owned(),
                })
                .await;
        }
    }

    // ----- the standard decision policy -----

    async fn standard_loop(&mut self) -> Result<O, AgentError> {
        loop {
            match self.state.phase.clone() {
                Phase::Act => {
                    if let Some(calls) = self.unanswered_tool_calls() {
                        self.run_tools(calls).await?;
                        continue;
                    }
                    if self.state.turns >= self.env.agent.limits.max_turns {
                        return Err(AgentError::MaxTurnsExceeded {
                            limit: self.env.agent.limits.max_turns,
                        });
                    }
                    let format = match self.env.agent.finalization {
                        FinalizationMode::Always => None,
                        _ => self.env.agent.codec.response_format(),
                    };
                    let answer = self
                        .ask(Ask::new(Stage::Act).format(Format::WhenNoTools(format)))
                        .await?;
                    let separate_final = self.needs_separate_finalization(answer.offered_tools);
                    let (response, format) = (answer.response, answer.format);
                    self.state.turns += 1;
                    if response.message.has_tool_calls() {
                        self.count_tool_calls(&response.message)?;
                        self.state.messages.push(response.message);
                        self.checkpoint().await?;
                        continue;
                    }
                    let text = response.message.text();
                    if separate_final {
                        self.state.phase = Phase::Finalize { draft: text };
                        self.checkpoint().await?;
                        continue;
                    }
                    return self.accept_final(response.message, format, DeltaRoute::Answer).await;
                }
                Phase::Finalize { draft } => {
                    let mut extra = Vec::new();
                    if !draft.is_empty() {
                        extra.push(Message::assistant(draft));
                    }
                    extra.push(Message::user(
                        "Write the final answer to the request above now, in the requested format, without calling tools.",
                    ));
                    let format = self.env.agent.codec.response_format();
                    let answer = self
                        .ask(Ask::new(Stage::Finalize).extra(extra).format(Format::Fixed(format)))
                        .await?;
                    return self
                        .accept_final(answer.response.message, answer.format, DeltaRoute::Answer)
                        .await;
                }
            }
        }
    }

    /// Counts an answer's tool calls toward `RunLimits::max_tool_calls` (calls of exempt tools
    /// do not count); over the limit the run ends.
    fn count_tool_calls(&mut self, answer: &Message) -> Result<(), AgentError> {
        let n = answer
            .tool_calls
            .iter()
            .filter(|c| {
                self.env
                    .tools
                    .get(&c.name)
                    .is_none_or(|t| !t.entry.tool.spec().exempt_from_tool_limit)
            })
            .count() as u32;
        let limit = self.env.agent.limits.max_tool_calls;
        if self.state.tool_calls + n > limit {
            return Err(AgentError::MaxToolCallsExceeded { limit });
        }
        self.state.tool_calls += n;
        Ok(())
    }

    fn needs_separate_finalization(&self, has_tools: bool) -> bool {
        match self.env.agent.finalization {
            FinalizationMode::Disabled => false,
            FinalizationMode::Always => true,
            FinalizationMode::StructuredOnly => has_tools && self.env.agent.codec.response_format().is_some(),
        }
    }

    /// Parses the final answer; one corrective request on failure.
    async fn accept_final(
        &mut self,
        answer: Message,
        format: Option<ResponseFormat>,
        route: DeltaRoute,
    ) -> Result<O, AgentError> {
        let text = answer.text();
        match self.env.agent.codec.parse(&text) {
            Ok(output) => {
                self.state.messages.push(answer);
                Ok(output)
            }
            Err(first) => {
                let extra = vec![
                    answer,
                    Message::user(format!(
                        "Your answer could not be parsed: {}. Answer again with only a JSON value that fits the required schema.",
                        first.message
                    )),
                ];
                let answer = self
                    .ask(
                        Ask::new(Stage::Finalize)
                            .extra(extra)
                            .format(Format::Fixed(format))
                            .route(route),
                    )
                    .await?;
                let response = answer.response;
                let text = response.message.text();
                match self.env.agent.codec.parse(&text) {
                    Ok(output) => {
                        self.state.messages.push(response.message);
                        Ok(output)
                    }
                    Err(second) => Err(AgentError::Output {
                        message: second.message,
                    }),
                }
            }
        }
    }

    /// The tool calls of the last assistant message that have no result yet.
    fn unanswered_tool_calls(&self) -> Option<Vec<crate::message::ToolCall>> {
        let last = self.state.messages.last()?;
        (last.role == Role::Assistant && last.has_tool_calls()).then(|| last.tool_calls.clone())
    }

    /// Runs a batch of tool calls concurrently; results are appended in call order.
    async fn run_tools(&mut self, calls: Vec<crate::message::ToolCall>) -> Result<(), AgentError> {
        // Handoffs first: checks only, no side effects, at most one accepted per batch.
        let mut handed_to: Option<Arc<AgentInner<C, O>>> = None;
        for call in &calls {
            if self.state.pending_results.contains_key(&call.id) {
                continue;
            }
            let Some(handoff) = self
                .env
                .agent
                .handoffs
                .iter()
                .find(|h| h.tool_name == call.name)
                .cloned()
            else {
                continue;
            };
            let outcome = if !handoff.is_enabled(&self.env.ctx) {
                Err(ToolError::new(ToolErrorKind::NotFound, "unknown_tool")
                    .with_message(format!("the handoff {} is not available now", call.name)))
            } else if handed_to.is_some() {
                Err(ToolError::new(ToolErrorKind::Rejected, "handoff_already_done")
                    .with_message("the conversation was already handed over in this turn"))
            } else {
                handoff.accept(&self.env.ctx, &call.arguments)
            };
            let (content, is_error) = match outcome {
                Ok(()) => {
                    handed_to = Some(Arc::clone(&handoff.target.inner));
                    (
                        serde_json::json!({"transferred_to": handoff.target.name()}).to_string(),
                        false,
                    )
                }
                Err(e) => (e.model_content(true), true),
            };
            self.state.pending_results.insert(
                call.id.clone(),
                Message::tool_result(call.id.clone(), call.name.clone(), content, is_error),
            );
        }
        self.run_batch(&calls, false, |env, _state, call, report| {
            let (content, is_error) = match report.outcome {
                ToolCallOutcome::Ok(value) => (env.result_content(&call.name, value), false),
                ToolCallOutcome::Err(e) => (e.model_content(true), true),
            };
            Message::tool_result(call.id.clone(), call.name.clone(), content, is_error)
        })
        .await?;
        for call in &calls {
            if let Some(m) = self.state.pending_results.remove(&call.id) {
                self.state.messages.push(m);
            }
        }
        if let Some(target) = handed_to {
            let from = self.env.agent.name.clone();
            let to = target.name.clone();
            self.env.agent = target;
            self.env.ctx = self.env.ctx.with_agent_name(to.clone());
            self.state.active_agent = Some(to.clone());
            self.open_tools().await?;
            if self.env.emitter.active() {
                self.env
                    .emitter
                    .emit(AgentEvent::Handoff {
                        run_id: self.env.ctx.run_id().to_owned(),
                        from,
                        to,
                    })
                    .await;
            }
        }
        self.checkpoint().await
    }

    /// Runs the calls of a batch that have no result yet, concurrently, through the tool gate;
    /// `finished` turns each call's report into its tool message (and may record more in the
    /// state), which waits in `pending_results` until the caller takes the batch in call order.
    /// The state is checkpointed after each finished call while others still run. Calls that
    /// need approval pause the run (`AgentError::Interrupted`) once the rest finished. With
    /// `sanitized` (strict policy) events carry arguments with secret keys masked.
    async fn run_batch<F>(
        &mut self,
        calls: &[crate::message::ToolCall],
        sanitized: bool,
        mut finished: F,
    ) -> Result<(), AgentError>
    where
        F: FnMut(&Env<C, O>, &mut RunState, &crate::message::ToolCall, CallReport) -> Message,
    {
        self.state.interruptions.clear();
        // The gate reads decisions while `finished` writes the state: it gets its own copies.
        let decisions = self.state.decisions.clone();
        let always_approved = self.state.always_approved.clone();
        let nested = self.state.nested.clone();
        let mut waiting = Vec::new();
        {
            let env = &self.env;
            let state = &mut self.state;
            let gate = ApprovalGate {
                offered: self.offered.as_ref(),
                decisions: &decisions,
                always_approved: &always_approved,
                nested: &nested,
                allowed: self.allowed.as_ref(),
            };
            let mut running: FuturesUnordered<_> = calls
                .iter()
                .enumerate()
                .filter(|(_, c)| !state.pending_results.contains_key(&c.id))
                .map(|(index, call)| async move { (index, env.run_tool_raw(call, gate, sanitized).await) })
                .collect();
            while let Some((index, result)) = running.next().await {
                match result? {
                    RawToolRun::Done(report) => {
                        let call = &calls[index];
                        let message = finished(env, state, call, report);
                        state.nested.remove(&call.id);
                        state.pending_results.insert(call.id.clone(), message);
                        state.usage = env.ctx.usage();
                        if env.agent.checkpoints.is_some() && !running.is_empty() {
                            save_checkpoint(env, state).await?;
                        }
                    }
                    RawToolRun::NeedsApproval(request) => waiting.push((index, request)),
                    RawToolRun::Nested(pause) => {
                        let call = &calls[index];
                        for request in pause.parent_requests(&call.id) {
                            waiting.push((index, request));
                        }
                        state.nested.insert(call.id.clone(), pause);
                    }
                }
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        waiting.sort_by_key(|(index, _)| *index);
        let requests: Vec<ApprovalRequest> = waiting.into_iter().map(|(_, r)| r).collect();
        if self.env.emitter.active() {
            for r in &requests {
                let mut shown = r.clone();
                if sanitized {
                    // Events get the arguments with secret keys masked; the result's
                    // `interruptions` keep them, for the person who decides.
                    shown.arguments = crate::plan::mask_arguments(&shown.arguments);
                    for value in shown.metadata.values_mut() {
                        *value = crate::plan::mask_arguments(value);
                    }
                }
                self.env
                    .emitter
                    .emit(AgentEvent::ApprovalRequested {
                        run_id: self.env.ctx.run_id().to_owned(),
                        request: shown,
                    })
                    .await;
            }
        }
        self.state.interruptions = requests;
        self.checkpoint().await?;
        Err(AgentError::Interrupted {
            pending: self.state.interruptions.len(),
        })
    }

    async fn checkpoint(&mut self) -> Result<(), AgentError> {
        self.state.usage = self.env.ctx.usage();
        save_checkpoint(&self.env, &self.state).await
    }

    async fn finish(mut self, outcome: Result<O, AgentError>) -> AgentResult<O> {
        let strict_done = self.state.strict.as_ref().is_some_and(|s| s.is_done());
        let already_stored = self.state.strict.as_ref().is_some_and(|s| s.conversation_stored);
        let env = &self.env;
        let agent = &env.agent;
        let run_id = env.ctx.run_id().to_owned();
        let mut metadata = env.metadata.clone();
        metadata.insert("model_calls".into(), self.state.model_calls.into());
        metadata.insert("tool_calls".into(), self.state.tool_calls.into());
        metadata.insert("turns".into(), self.state.turns.into());
        if self.resumed {
            metadata.insert("resumed".into(), true.into());
        }
        if let (Some(strict), crate::plan::DecisionPolicy::PlanAndExecute(policy)) = (&self.state.strict, &agent.policy)
        {
            strict.write_metadata(&mut metadata, policy.trace_mode);
        }
        let (mut output, mut error) = match outcome {
            Ok(o) => (Some(o), None),
            Err(e) => (None, Some(e)),
        };
        let mut stored_now = false;
        if error.is_none()
            && !already_stored
            && let (Some(store), Some(session)) = (&agent.conversations, env.ctx.session_id())
        {
            let appended = match with_deadline(
                env.deadline,
                agent.limits.timeout,
                store.append(session, &self.state.messages),
            )
            .await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => {
                    self.store_failed("conversation.append", &e.to_string()).await;
                    Err(AgentError::from_store("conversation.append", &e))
                }
                Err(e) => Err(e),
            };
            match appended {
                Ok(()) => stored_now = true,
                Err(e) => {
                    // Keep the checkpoint so that a resume can append later.
                    error = Some(e);
                }
            }
        }
        let interruptions = if matches!(error, Some(AgentError::Interrupted { .. })) {
            metadata.insert("status".into(), "interrupted".into());
            if let Some(slot) = &env.nested_pause {
                // The parent keeps the nested run's state in its own checkpoint.
                match serde_json::to_value(checkpoint_ref(env, &self.state)) {
                    Ok(state) => *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(state),
                    Err(e) => tracing::warn!(error = %e, "could not hand the nested run's state to its parent"),
                }
            }
            self.state.interruptions.clone()
        } else {
            Vec::new()
        };
        if let Some(store) = &agent.checkpoints {
            // A strict run's terminal DONE state stays, so that resuming it again does not
            // finalize twice (give the store a TTL).
            let keep_done = strict_done && error.is_none();
            let keep = keep_done
                || error
                    .as_ref()
                    .is_some_and(|e| e.is_resumable() || matches!(e, AgentError::Interrupted { .. }));
            if keep_done && stored_now {
                if let Some(strict) = self.state.strict.as_mut() {
                    strict.conversation_stored = true;
                }
                if let Err(e) = save_checkpoint(env, &self.state).await {
                    // The answer is stored; only a later resume of this run could append it again.
                    tracing::warn!(error = %e, "could not record that the strict run's answer was stored");
                }
            }
            if keep
                && !keep_done
                && error.as_ref().is_some_and(AgentError::is_resumable)
                && let Err(e) = save_checkpoint_as(env, &self.state, CheckpointStatus::Failed).await
            {
                // The checkpoint of the last step stays (status `running`); resume still works.
                tracing::debug!(error = %e, "could not mark the checkpoint as failed");
            }
            if !keep {
                match with_deadline(env.deadline, agent.limits.timeout, store.delete(&run_id)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => self.store_failed("checkpoint.delete", &e.to_string()).await,
                    Err(timeout) => {
                        // The answer stands; the checkpoint stays until its TTL or a purge.
                        self.store_failed("checkpoint.delete", &timeout.to_string()).await;
                    }
                }
            }
        }
        if error.is_some() && output.is_some() {
            // The answer exists but was not stored: report both.
            metadata.insert("answer_not_stored".into(), true.into());
        }
        let usage = env.ctx.usage();
        let duration_ms = env.started.elapsed().as_millis() as u64;
        if env.emitter.active() {
            let event = match (&output, &error) {
                (Some(o), None) => AgentEvent::RunCompleted {
                    run_id: run_id.clone(),
                    agent: agent.name.clone(),
                    usage,
                    output: agent.codec.to_json(o),
                    duration_ms,
                },
                (_, Some(e)) => AgentEvent::RunFailed {
                    run_id: run_id.clone(),
                    agent: agent.name.clone(),
                    usage,
                    error: e.clone(),
                    duration_ms,
                },
                (None, None) => AgentEvent::RunFailed {
                    run_id: run_id.clone(),
                    agent: agent.name.clone(),
                    usage,
                    error: AgentError::Cancelled,
                    duration_ms,
                },
            };
            env.emitter.emit(event).await;
        }
        if output.is_none() && error.is_none() {
            error = Some(AgentError::Cancelled);
            output = None;
        }
        AgentResult {
            run_id,
            agent: agent.name.clone(),
            output,
            messages: self.state.messages,
            usage,
            metadata,
            error,
            interruptions,
        }
    }
}

/// Gives every call of `answer` an id unique within the run: the server's id when no earlier
/// call of the run (`used`) nor of this answer has it, otherwise `{id}_{n}` with the smallest
/// `n ≥ 2` still free. Deterministic, so a replay of the same answer gets the same ids; the
/// rewritten ids are what history, tool messages, approvals, events and checkpoints carry.
/// Returns how many ids were rewritten.
fn unique_call_ids(answer: &mut Message, used: &mut HashSet<String>) -> usize {
    let mut rewritten = 0;
    for call in &mut answer.tool_calls {
        if used.insert(call.id.clone()) {
            continue;
        }
        let mut n = 2u32;
        let fresh = loop {
            let candidate = format!("{}_{n}", call.id);
            if !used.contains(&candidate) {
                break candidate;
            }
            n += 1;
        };
        used.insert(fresh.clone());
        call.id = fresh;
        rewritten += 1;
    }
    rewritten
}

async fn save_checkpoint<C, O>(env: &Env<C, O>, state: &RunState) -> Result<(), AgentError> {
    save_checkpoint_as(env, state, state.status()).await
}

async fn save_checkpoint_as<C, O>(
    env: &Env<C, O>,
    state: &RunState,
    status: CheckpointStatus,
) -> Result<(), AgentError> {
    let Some(store) = &env.agent.checkpoints else {
        return Ok(());
    };
    let checkpoint = checkpoint_ref(env, state);
    let bytes = serde_json::to_vec(&checkpoint).map_err(|e| AgentError::Store {
        operation: "checkpoint.encode".into(),
        message: e.to_string(),
    })?;
    match with_deadline(
        env.deadline,
        env.agent.limits.timeout,
        store.save(
            env.ctx.run_id(),
            &CheckpointMeta::new(env.agent.name.clone(), status).with_session(env.ctx.session_id()),
            &bytes,
        ),
    )
    .await?
    {
        Ok(()) => {
            if env.emitter.active() {
                env.emitter
                    .emit(AgentEvent::CheckpointSaved {
                        run_id: env.ctx.run_id().to_owned(),
                    })
                    .await;
            }
            Ok(())
        }
        Err(e) => {
            if env.emitter.active() {
                env.emitter
                    .emit(AgentEvent::StoreFailed {
                        run_id: env.ctx.run_id().to_owned(),
                        operation: "checkpoint.save".into(),
                        message: e.to_string(),
                    })
                    .await;
            }
            Err(AgentError::from_store("checkpoint.save", &e))
        }
    }
}

fn checkpoint_ref<'a, C, O>(env: &'a Env<C, O>, state: &'a RunState) -> CheckpointRef<'a> {
    CheckpointRef {
        schema_version: CHECKPOINT_SCHEMA_VERSION,
        run_id: env.ctx.run_id(),
        agent: &env.agent.name,
        fingerprint: &env.fingerprint,
        session_id: env.ctx.session_id(),
        user: env.ctx.user(),
        metadata: &env.metadata,
        state,
    }
}

/// The borrowed form of [`Checkpoint`], so saving does not clone the state.
#[derive(Serialize)]
struct CheckpointRef<'a> {
    schema_version: u32,
    run_id: &'a str,
    agent: &'a str,
    fingerprint: &'a str,
    session_id: Option<&'a str>,
    user: &'a UserContext,
    metadata: &'a serde_json::Map<String, serde_json::Value>,
    state: &'a RunState,
}

impl<C, O> Env<C, O>
where
    C: Send + Sync + 'static,
{
    /// A tool's result as the model sees it: strings as they are, other JSON as text, capped
    /// at the tool's `max_result_bytes`.
    fn result_content(&self, tool: &str, value: serde_json::Value) -> String {
        let text = match value {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        let max = self.tools.get(tool).and_then(|t| t.entry.tool.spec().max_result_bytes);
        truncate_result(text, max)
    }

    /// One tool call: lookup, argument checks, approval, authorization, execution with timeout
    /// and retry, events; reported in detail (failures are data the caller turns into a tool
    /// message; only the run's own deadline ends the run). With `sanitized` (strict policy) the
    /// events carry the arguments with secret keys masked and errors without their message.
    async fn run_tool_raw(
        &self,
        call: &crate::message::ToolCall,
        gate: ApprovalGate<'_>,
        sanitized: bool,
    ) -> Result<RawToolRun, AgentError> {
        let started = Instant::now();
        let offered = gate.offered;
        let refused = Refusal::Error;
        let checked: Result<(&VisibleTool<C>, serde_json::Value), Refusal> = (|| {
            let tool = self
                .tools
                .get(&call.name)
                .filter(|_| offered.is_none_or(|o| o.contains(&call.name)))
                .filter(|t| t.entry.tool.is_enabled(&self.ctx))
                .ok_or_else(|| {
                    let available: Vec<&str> = self
                        .tool_order
                        .iter()
                        .filter(|n| offered.is_none_or(|o| o.contains(*n)))
                        .filter(|n| self.tools.get(*n).is_some_and(|t| t.entry.tool.is_enabled(&self.ctx)))
                        .map(String::as_str)
                        .collect();
                    refused(
                        ToolError::new(ToolErrorKind::NotFound, "unknown_tool").with_message(format!(
                            "there is no tool named {:?}; available tools: {}",
                            call.name,
                            available.join(", ")
                        )),
                    )
                })?;
            let args = call.parse_arguments().map_err(|e| {
                refused(ToolError::validation(
                    "invalid_json",
                    format!("the arguments are not valid JSON ({e}); send a JSON object"),
                ))
            })?;
            let problems = tool.entry.validator.problems(&args);
            if !problems.is_empty() {
                return Err(refused(ToolError::validation(
                    "invalid_arguments",
                    format!("the arguments do not fit the tool's schema: {}", problems.join("; ")),
                )));
            }
            if let Some(allowed) = gate.allowed {
                let identity = tool.entry.tool.identity(&args);
                if !allowed.contains(identity.as_ref()) {
                    return Err(refused(
                        ToolError::new(ToolErrorKind::NotFound, "tool_not_allowed").with_message(format!(
                            "{identity} is not among the tools allowed now; allowed: {}",
                            allowed.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
                        )),
                    ));
                }
            }
            // A decision recorded for this call (approve, approve_always or reject) binds it,
            // whatever `needs_approval` says now: the predicate is asked only for calls nobody
            // decided yet, each time such a call reaches the gate (first run and resumes).
            let recorded = gate.decisions.get(&call.id);
            let decision = match recorded {
                Some(d) => Some(d.clone()),
                None if tool.entry.tool.needs_approval(&self.ctx, &args) => {
                    // Decisions that cover a whole tool use the tool's identity (for a meta tool
                    // such as MCP's mcp_call_tool, the external tool), not the called name.
                    let request = tool.entry.tool.approval_request(&call.id, &args);
                    let in_code = self.ctx.tool_decision(&request.tool_name).map(|d| match d {
                        Ok(()) => ApprovalDecision::Approved,
                        Err(message) => ApprovalDecision::Rejected { message },
                    });
                    let always = gate
                        .always_approved
                        .contains(&request.tool_name)
                        .then_some(ApprovalDecision::Approved);
                    match always.or(in_code) {
                        Some(d) => Some(d),
                        None => return Err(Refusal::Approval(request)),
                    }
                }
                None => None,
            };
            if let Some(ApprovalDecision::Rejected { message }) = decision {
                return Err(refused(
                    ToolError::new(ToolErrorKind::Rejected, "rejected_by_user").with_message(
                        message.unwrap_or_else(|| "a person rejected this call; do not retry it".to_owned()),
                    ),
                ));
            }
            // Authorization comes last, right before execution (after approval), on the tool
            // that really runs (a meta tool's external tool).
            self.agent
                .authorizer
                .authorize(self.ctx.user(), &tool.entry.tool.identity(&args))
                .map_err(refused)?;
            Ok((tool, args))
        })();
        // A call whose nested run paused earlier goes on only when every one of the nested
        // calls has a decision; it then resumes the nested run with them.
        let mut nested_resume = None;
        if let (Ok(_), Some(pause)) = (&checked, gate.nested.get(&call.id)) {
            let mut decisions = Vec::with_capacity(pause.requests.len());
            for r in &pause.requests {
                match gate.decisions.get(&nested_call_id(&call.id, &r.call_id)) {
                    Some(d) => decisions.push((
                        r.call_id.clone(),
                        d.clone(),
                        gate.always_approved.contains(&r.tool_name),
                    )),
                    None if gate.always_approved.contains(&r.tool_name) => {
                        decisions.push((r.call_id.clone(), ApprovalDecision::Approved, true))
                    }
                    None => return Ok(RawToolRun::Nested(pause.clone())),
                }
            }
            nested_resume = Some(NestedResume {
                pause: pause.clone(),
                decisions,
            });
        }

        let (outcome, attempts, validated, identity) = match checked {
            Err(Refusal::Approval(request)) => return Ok(RawToolRun::NeedsApproval(request)),
            Err(Refusal::Error(error)) => {
                let identity = self
                    .tools
                    .get(&call.name)
                    .zip(call.parse_arguments().ok())
                    .map_or_else(|| call.name.clone(), |(t, a)| t.entry.tool.identity(&a).into_owned());
                (ToolCallOutcome::Err(error), 0, None, identity)
            }
            Ok((tool, args)) => {
                let identity = tool.entry.tool.identity(&args).into_owned();
                if self.emitter.active() {
                    self.emitter
                        .emit(AgentEvent::ToolCallStarted {
                            run_id: self.ctx.run_id().to_owned(),
                            call_id: call.id.clone(),
                            tool: identity.clone(),
                            arguments: if sanitized {
                                crate::plan::mask_arguments(&args)
                            } else {
                                args.clone()
                            },
                        })
                        .await;
                }
                let effective = crate::plan::effective_arguments(&tool.entry.tool.spec().parameters, &args);
                let scope = Arc::new(CallScope::new(&call.id, nested_resume));
                let (outcome, attempts) = self.execute_with_retry(&scope, tool, args).await?;
                if let Some(pause) = scope.take_pause() {
                    return Ok(RawToolRun::Nested(pause));
                }
                (outcome, attempts, Some(effective), identity)
            }
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        if self.emitter.active() {
            let error = outcome.as_ref().err().map(|e| {
                if sanitized {
                    ToolError {
                        message: None,
                        ..e.clone()
                    }
                } else {
                    e.clone()
                }
            });
            self.emitter
                .emit(AgentEvent::ToolCallFinished {
                    run_id: self.ctx.run_id().to_owned(),
                    call_id: call.id.clone(),
                    tool: identity.clone(),
                    ok: error.is_none(),
                    attempts,
                    duration_ms,
                    error,
                })
                .await;
        }
        Ok(RawToolRun::Done(CallReport {
            outcome,
            attempts,
            validated,
            identity,
            duration_ms,
        }))
    }

    async fn execute_with_retry(
        &self,
        scope: &Arc<CallScope>,
        tool: &VisibleTool<C>,
        args: serde_json::Value,
    ) -> Result<(ToolCallOutcome, u32), AgentError> {
        let call_id = scope.call_id.as_str();
        let ctx = self.ctx.for_call(Arc::clone(scope));
        let spec = tool.entry.tool.spec();
        let retry = &self.agent.retry;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let call: futures::future::BoxFuture<'_, Result<serde_json::Value, ToolError>> =
                match &self.agent.function_service {
                    Some(service) => Box::pin(tower::ServiceExt::oneshot(
                        service.clone(),
                        ToolInvocation {
                            call_id: call_id.to_owned(),
                            tool_name: spec.name.clone(),
                            arguments: args.clone(),
                            ctx: ctx.clone(),
                            tool: Arc::clone(&tool.entry.tool),
                        },
                    )),
                    None => tool.entry.tool.call(&ctx, args.clone()),
                };
            let result = match spec.timeout {
                Some(limit) => {
                    let remaining = self.deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    if remaining.is_some_and(|r| r < limit) {
                        // The run's deadline comes first: it ends the run.
                        with_deadline(self.deadline, self.agent.limits.timeout, call).await?
                    } else {
                        match tokio::time::timeout(limit, call).await {
                            Ok(r) => r,
                            Err(_) => Err(ToolError::timeout(limit)),
                        }
                    }
                }
                None => with_deadline(self.deadline, self.agent.limits.timeout, call).await?,
            };
            match result {
                Ok(value) => return Ok((ToolCallOutcome::Ok(value), attempt)),
                Err(error) => {
                    let uncancellable_timeout =
                        error.kind == ToolErrorKind::Timeout && spec.blocking && !spec.timeout_retry_safe;
                    // A tool that classified its error as something else than retry_call is not
                    // re-run, whatever `retryable` says.
                    let retry_wanted = error
                        .recovery
                        .is_none_or(|r| r == crate::tool::RecoveryAction::RetryCall);
                    let may_retry = spec.idempotent
                        && error.retryable
                        && retry_wanted
                        && !uncancellable_timeout
                        && attempt < retry.max_attempts;
                    if !may_retry {
                        let error = if uncancellable_timeout {
                            // The blocking work may still run: never retried, never replanned.
                            ToolError {
                                retryable: false,
                                recovery: Some(crate::tool::RecoveryAction::Fail),
                                ..error
                            }
                        } else {
                            error
                        };
                        return Ok((ToolCallOutcome::Err(error), attempt));
                    }
                    sleep_within(self.deadline, self.agent.limits.timeout, retry.backoff(attempt)).await?;
                }
            }
        }
    }
}

/// The agent named `name` among `agent`'s handoff targets (and theirs), depth-limited.
fn find_agent<C, O>(agent: &Arc<AgentInner<C, O>>, name: &str, depth: usize) -> Option<Arc<AgentInner<C, O>>> {
    if agent.name == name {
        return Some(Arc::clone(agent));
    }
    if depth == 0 {
        return None;
    }
    agent
        .handoffs
        .iter()
        .find_map(|h| find_agent(&h.target.inner, name, depth - 1))
}

/// Awaits `fut` within the run's deadline; elapsing ends the run with [`AgentError::Timeout`].
async fn with_deadline<F: Future>(
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    fut: F,
) -> Result<F::Output, AgentError> {
    match deadline {
        None => Ok(fut.await),
        Some(d) => tokio::time::timeout_at(d, fut).await.map_err(|_| AgentError::Timeout {
            after_ms: timeout.map_or(0, |t| t.as_millis() as u64),
        }),
    }
}

async fn sleep_within(deadline: Option<Instant>, timeout: Option<Duration>, wait: Duration) -> Result<(), AgentError> {
    if let Some(d) = deadline
        && Instant::now() + wait >= d
    {
        return Err(AgentError::Timeout {
            after_ms: timeout.map_or(0, |t| t.as_millis() as u64),
        });
    }
    tokio::time::sleep(wait).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ref_and_owned_forms_agree() -> Result<(), serde_json::Error> {
        let state = RunState {
            messages: vec![Message::user("hi")],
            phase: Phase::Finalize { draft: "d".into() },
            usage: Usage::new(1, 2),
            model_calls: 1,
            turns: 1,
            tool_calls: 0,
            pending_results: BTreeMap::new(),
            decisions: BTreeMap::new(),
            always_approved: BTreeSet::new(),
            interruptions: Vec::new(),
            nested: BTreeMap::new(),
            offered: None,
            admitted: None,
            active_agent: None,
            strict: None,
        };
        let user = UserContext::default();
        let meta = serde_json::Map::new();
        let r = CheckpointRef {
            schema_version: 1,
            run_id: "r",
            agent: "a",
            fingerprint: "f",
            session_id: Some("s"),
            user: &user,
            metadata: &meta,
            state: &state,
        };
        let bytes = serde_json::to_vec(&r)?;
        let back: Checkpoint = serde_json::from_slice(&bytes)?;
        assert_eq!(back.session_id.as_deref(), Some("s"));
        assert_eq!(back.state.phase, Phase::Finalize { draft: "d".into() });
        Ok(())
    }
}
