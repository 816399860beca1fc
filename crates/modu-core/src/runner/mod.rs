//! The run loop: crate-private machinery behind [`Agent`](crate::Agent)'s run API
//! (`agent/api.rs`).
//!
//! One [`Run`] drives a run from its first model call to its result:
//!
//! - `start`: a fresh or resumed run enters the agent stack (built once with the agent), then
//!   [`start::execute_from`] sets up the run;
//! - `ask`: every model request is one [`ask::Ask`] through the model slot's chat stack
//!   (`chat`: user chat layers → retry → per-attempt events → the model);
//! - `gate`: every tool batch (lookup, validation, approval, authorization, the function stack,
//!   timeout, retry, result cap, events, a checkpoint after each finished call);
//! - `standard` and `strict`: the two decision policies;
//! - `journal`: everything a run writes outside itself (checkpoints, events, the end of a run);
//! - `stream`: the caller's [`RunStream`].
//!
//! The state is checkpointed after every step so `Agent::resume` can continue a run that
//! paused for approval or failed on a transient error.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::agent::{AgentInner, AgentResult, ToolEntry, compile_tool};
use crate::approval::{ApprovalDecision, ApprovalRequest, NestedPause};
use crate::context::RunContext;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::{Message, Role, Usage};
use crate::provider::ToolSession;
use crate::store::CheckpointStatus;

mod ask;
pub(crate) mod chat;
pub(crate) mod function;
mod gate;
mod journal;
mod standard;
mod start;
mod stream;
mod strict;

pub use journal::CHECKPOINT_SCHEMA_VERSION;
pub(crate) use start::{Resume, agent_stack, resume_request, run_through_layers};
pub use stream::{RunStream, StreamItem};

use journal::{Emitter, save_checkpoint};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub(crate) enum Phase {
    /// Asking the model, running the tools it calls.
    Act,
    /// The tool loop ended with this draft; the final request is next.
    Finalize { draft: String },
}

/// The serialisable state of a run (what a checkpoint holds besides its header).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunState {
    /// The run's messages: input, tool calls, tool results, answer.
    pub(crate) messages: Vec<Message>,
    /// The decision policy's own state: `{"id": "standard/1" | "plan_and_execute/1", "state"}`.
    pub(crate) policy: PolicyState,
    pub(crate) usage: Usage,
    pub(crate) model_calls: u32,
    pub(crate) turns: u32,
    pub(crate) tool_calls: u32,
    /// Results of the current tool batch that already finished (by call id).
    #[serde(default)]
    pub(crate) pending_results: BTreeMap<String, Message>,
    /// People's decisions on calls that need approval (by call id).
    #[serde(default)]
    pub(crate) decisions: BTreeMap<String, ApprovalDecision>,
    /// Tools approved for the rest of the run.
    #[serde(default)]
    pub(crate) always_approved: BTreeSet<String>,
    /// Calls waiting for a decision (the run is paused while this is not empty).
    #[serde(default)]
    pub(crate) interruptions: Vec<ApprovalRequest>,
    /// Nested runs (agent-as-tool) paused for approvals, by the parent's call id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) nested: BTreeMap<String, NestedPause>,
    /// The tools offered and the identities admitted in the last standard request, so a
    /// batch resumed in another process is checked as it would have been.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) offered: Option<BTreeSet<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) admitted: Option<BTreeSet<String>>,
    /// The agent answering after a handoff (`None`: the agent the run started with).
    #[serde(default)]
    pub(crate) active_agent: Option<String>,
}

/// A decision policy's state inside a checkpoint (schema 3: `state.policy`), tagged with the
/// policy and the version of its layout.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "id", content = "state")]
pub(crate) enum PolicyState {
    /// The standard policy: where its loop is.
    #[serde(rename = "standard/1")]
    Standard(Phase),
    /// Strict Plan-and-Execute: its state machine.
    #[serde(rename = "plan_and_execute/1")]
    PlanAndExecute(Box<strict::StrictState>),
}

impl RunState {
    /// The standard policy's phase (`Act` for a strict run).
    fn phase(&self) -> Phase {
        match &self.policy {
            PolicyState::Standard(phase) => phase.clone(),
            PolicyState::PlanAndExecute(_) => Phase::Act,
        }
    }

    fn set_phase(&mut self, phase: Phase) {
        self.policy = PolicyState::Standard(phase);
    }

    /// The strict state, once a strict run has started.
    fn strict(&self) -> Option<&strict::StrictState> {
        match &self.policy {
            PolicyState::PlanAndExecute(state) => Some(state),
            PolicyState::Standard(_) => None,
        }
    }

    fn strict_mut(&mut self) -> Option<&mut strict::StrictState> {
        match &mut self.policy {
            PolicyState::PlanAndExecute(state) => Some(state),
            PolicyState::Standard(_) => None,
        }
    }

    /// The strict state, started when there is none yet.
    fn strict_or_init(&mut self) -> &mut strict::StrictState {
        if let PolicyState::Standard(_) = self.policy {
            self.policy = PolicyState::PlanAndExecute(Box::new(strict::StrictState::new()));
        }
        match &mut self.policy {
            PolicyState::PlanAndExecute(state) => state,
            PolicyState::Standard(_) => unreachable!("set just above"),
        }
    }

    /// What a checkpoint of this state says about the run (a failure is recorded by the caller).
    fn status(&self) -> CheckpointStatus {
        if self.strict().is_some_and(|s| s.is_done()) {
            CheckpointStatus::Done
        } else if self.interruptions.is_empty() {
            CheckpointStatus::Running
        } else {
            CheckpointStatus::Paused
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

    /// The tool calls of the last assistant message that have no result yet.
    fn unanswered_tool_calls(&self) -> Option<Vec<crate::message::ToolCall>> {
        let last = self.state.messages.last()?;
        (last.role == Role::Assistant && last.has_tool_calls()).then(|| last.tool_calls.clone())
    }

    async fn checkpoint(&mut self) -> Result<(), AgentError> {
        self.state.usage = self.env.ctx.usage();
        save_checkpoint(&self.env, &self.state).await
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
pub(crate) async fn with_deadline<F: Future>(
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
