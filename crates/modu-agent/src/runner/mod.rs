//! The run loop: crate-private machinery behind [`Agent`](crate::Agent)'s run API
//! (`agent/api.rs`).
//!
//! One [`Run`] drives a run from its first model call to its result:
//!
//! - `start`: a fresh or resumed run enters the agent stack (built once with the agent), then
//!   [`start::execute_from`] sets up the run;
//! - `ask`: every model request is one [`ask::Ask`] through the model slot's chat stack
//!   (`chat`: user chat layers → retry → per-attempt events → the model);
//! - `batch` and `gate`: every tool batch (its calls concurrently, results in call order, a
//!   checkpoint after each finished call) and every call in it (lookup, validation, approval,
//!   authorization, the function stack, timeout, retry, result cap, events);
//! - `policy`: what a decision policy is (a sans-IO machine: [`policy::Policy::next`] is fed
//!   what the last step produced and answers the next step); `standard` is one, strict
//!   Plan-and-Execute (`crate::plan::machine`) the other; [`Run::drive`] is the one loop that
//!   does the IO both ask for;
//! - `state`: the serialisable run state a checkpoint holds;
//! - `journal`: everything a run writes outside itself (checkpoints, events, the end of a run);
//! - `stream`: the caller's [`RunStream`].
//!
//! The state is checkpointed after every step so `Agent::resume` can continue a run that
//! paused for approval or failed on a transient error.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use foldhash::HashMap;
use tokio::time::Instant;

use crate::agent::{AgentInner, VisibleTool};
use crate::context::RunContext;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::{ContentPart, Message};
use crate::model::{ResponseFormat, ToolDefinition};
use crate::outcome::RunOutcome;
use crate::plan::machine::Strict;
use crate::plan::{DecisionPolicy, PlanAndExecutePolicy};
use crate::tool::ToolSpec;
use crate::tool_provider::ToolSession;

mod ask;
mod batch;
pub(crate) mod chat;
pub(crate) mod edits;
pub(crate) mod emitter;
pub(crate) mod function;
mod gate;
mod guard;
mod handoff;
mod journal;
mod lease;
pub(crate) mod panics;
pub(crate) mod policy;
mod spans;
mod standard;
pub(crate) mod start;
pub(crate) mod state;
mod stream;
mod tools;

pub use state::CHECKPOINT_SCHEMA_VERSION;
pub use stream::{RunStream, StreamItem};

use chat::with_deadline;
use emitter::Emitter;
use policy::{Fed, Limits, Next, Out, Policy, View};
use standard::Standard;
use state::RunState;

/// Everything a run reads but does not change.
struct Env<C, O> {
    agent: Arc<AgentInner<C, O>>,
    /// The agent the run started with, whose stores keep the run (a handoff changes `agent`).
    root: Arc<AgentInner<C, O>>,
    ctx: RunContext<C>,
    /// The run's id, shared with the chat stack's per-request data.
    run_id: Arc<str>,
    /// The per-attempt side of model calls (events, the call counter, usage).
    attempts: Arc<chat::AttemptLog>,
    /// Cancels the run at its next boundary (`AgentRequest::cancel_token`).
    cancel: Option<tokio_util::sync::CancellationToken>,
    tools: Arc<HashMap<String, VisibleTool<C>>>,
    /// The definitions of the run's tools, in order (the agent's, then each session's): the
    /// order the model and refusals list them in, shared by the requests that offer them all.
    definitions: Arc<Vec<ToolDefinition>>,
    emitter: Emitter,
    deadline: Option<Instant>,
    started: Instant,
    fingerprint: Arc<str>,
    history: Vec<Message>,
    parent_run_id: Option<String>,
    /// A nested run leaves its state here when it pauses (agent-as-tool).
    nested_pause: Option<crate::agent::PauseSlot>,
    /// The session lease's fence its store writes carry, when the agent uses leases.
    fence: Option<crate::lease::Fence>,
}

impl<C, O> Env<C, O> {
    /// Whether the run's tool `name` is enabled now.
    fn tool_enabled(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(|t| t.entry.tool.is_enabled(&self.ctx))
    }

    /// Whether the run's state outlives it (a checkpoint store, or a parent that keeps a nested
    /// run's state): only then does the state carry a copy of the per-model usage.
    fn keeps_state(&self) -> bool {
        self.root.checkpoints.is_some() || self.nested_pause.is_some()
    }

    /// Whether the policy keeps each call's effective arguments (the strict tool trace).
    fn traces_arguments(&self) -> bool {
        matches!(self.agent.policy, DecisionPolicy::PlanAndExecute(_))
    }
}

struct Run<C, O> {
    env: Env<C, O>,
    state: RunState,
    /// The tools offered in the last request (`None` before the first request of this process).
    offered: Option<state::ToolNames>,
    /// The identities context providers admitted for the last request (`None`: all offered).
    allowed: Option<BTreeSet<String>>,
    /// The tool providers' sessions of this run, with the provider's name; `retired`, what the
    /// agents that handed the run over left (their sessions, closed with the run's).
    sessions: Vec<(String, Box<dyn ToolSession<C>>)>,
    retired: handoff::Retired<C, O>,
    resumed: bool,
    /// Whether the accepted final answer was cut at the model's output limit.
    cut: bool,
    /// The run's summary of its oldest tool rounds (summarizing compaction).
    summary: crate::compaction::RunSummary,
    /// What the run keeps of its agent between requests (cleared when it hands over).
    kept: Kept,
}

/// What a run keeps of its agent between model requests: the system message of static
/// instructions (each request borrows it), and its own clone of each model slot's chat stack
/// (one clone per run instead of one per request).
#[derive(Default)]
struct Kept {
    system: Option<Message>,
    chat: Option<crate::middleware::ChatService>,
    planner_chat: Option<crate::middleware::ChatService>,
}

impl<C, O> Drop for Run<C, O> {
    fn drop(&mut self) {
        // A run dropped while a panic unwinds names itself for the catch above it (see
        // `panics`): a nested run's panic is caught at the nested run's own catch.
        if std::thread::panicking() {
            panics::unwinding(self.env.ctx.run_id());
        }
    }
}

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// The run, start to outcome. Takes the run boxed: its future then holds a pointer, not
    /// the run itself (which an async fn's state would otherwise keep twice, as its argument
    /// and as the local it works on), so every in-flight run is smaller.
    async fn execute(mut self: Box<Self>) -> RunOutcome<O> {
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
        let mut unended = emitter::Unended::new(
            &env.emitter,
            env.ctx.run_id(),
            &env.agent.name,
            env.ctx.usage_handle(),
            env.started,
        );
        let outcome = self.drive().await;
        self.run_finished().await;
        // The tool sessions close after the run is recorded: a server slow to exit delays the
        // caller, never the run's own saves under its deadline.
        let mut sessions = std::mem::take(&mut self.retired.sessions);
        sessions.append(&mut self.sessions);
        let ended = self.finish(outcome).await;
        unended.disarm();
        if sessions.is_empty() {
            ended
        } else {
            Self::close_sessions(sessions, ended).await
        }
    }

    async fn drive(&mut self) -> Result<O, AgentError> {
        self.open_tools().await?;
        // A fresh run's first checkpoint, and a resumed run's again when its session moved on
        // since it was saved (see `load_history`).
        if self.load_history().await? || !self.resumed {
            self.checkpoint().await?;
        }
        // The policy the run started with, also for a resume after a handoff.
        match &self.env.root.policy {
            // Boxed: the strict driver's future would otherwise size every standard run's.
            DecisionPolicy::PlanAndExecute(policy) => {
                Box::pin(self.drive_policy(Strict::new(PlanAndExecutePolicy::clone(policy)))).await
            }
            _ => {
                let finalization = self.env.root.finalization;
                self.drive_policy(Standard::new(finalization)).await
            }
        }
    }

    /// The one driver loop: the policy decides, the driver does the IO it asks for (model
    /// requests, tool batches, checkpoints, events) and feeds back what came of it.
    async fn drive_policy<P: Policy>(&mut self, mut policy: P) -> Result<O, AgentError> {
        let mut out = Out::new(self.env.emitter.active());
        let outcome = self.steps(&mut policy, &mut out).await;
        if let Err(error) = &outcome {
            policy.failed(&mut self.state, &self.env, error, &mut out);
            self.emit_all(&mut out).await;
        }
        outcome
    }

    async fn steps<P: Policy>(&mut self, policy: &mut P, out: &mut Out) -> Result<O, AgentError> {
        let mut fed = Fed::Start;
        let mut accepted = None;
        let mut input_check = self.input_check();
        loop {
            let next = policy.next(&mut self.state, &self.env, fed, out);
            self.emit_all(out).await;
            if matches!(next, Next::Ask(_) | Next::RunTools { .. }) && self.env.cancelled() {
                return Err(AgentError::Cancelled);
            }
            fed = match next {
                Next::Ask(ask) => {
                    self.refresh_tools().await?;
                    Fed::Answer(self.ask_checked(ask, input_check.take()).await?)
                }
                Next::RunTools { calls, allowed: None } => {
                    self.run_tools(calls).await?;
                    Fed::Tools
                }
                Next::RunTools {
                    calls,
                    allowed: Some(allowed),
                } => {
                    self.offered = Some(allowed.into_iter().collect());
                    self.run_batch(&calls, true, |env, state, call, report| {
                        policy.tool_result(state, env, call, report)
                    })
                    .await?;
                    Fed::Tools
                }
                Next::Save => {
                    self.checkpoint().await?;
                    Fed::Saved
                }
                Next::Finish {
                    answer,
                    cut,
                    format,
                    route,
                } => {
                    accepted = Some(self.accept_final(answer, cut, format, route).await?);
                    Fed::Accepted
                }
                Next::Replay { text } => {
                    return self
                        .env
                        .agent
                        .codec
                        .parse(&text)
                        .map_err(|e| AgentError::Output { message: e.message });
                }
                Next::Done => {
                    return accepted.ok_or_else(|| AgentError::Configuration {
                        message: "the decision policy finished without an answer".into(),
                    });
                }
                Next::Fail(error) => return Err(error),
            };
        }
    }

    async fn emit_all(&self, out: &mut Out) {
        for event in out.take() {
            self.env.emitter.emit(event).await;
        }
    }

    /// Loads the session's history. Records where the run's messages will be appended (the
    /// history's end: under the session's lease nothing else writes there), and says whether
    /// a resumed run's place moved, so that its checkpoint is saved again: the session may
    /// have moved on while the run waited to be resumed, and a later claim of this run looks
    /// for its messages at that place (`start::already_stored`).
    async fn load_history(&mut self) -> Result<bool, AgentError> {
        let (Some(store), Some(session)) = (&self.env.root.conversations, self.env.ctx.session_id()) else {
            return Ok(false);
        };
        let load = tracing::Instrument::instrument(store.load(session), spans::store("conversation.load"));
        match with_deadline(self.env.deadline, self.env.agent.limits.timeout, load).await? {
            Ok(history) => {
                let moved = self.state.history_len != Some(history.len());
                self.state.history_len = Some(history.len());
                self.env.history = history;
                Ok(self.resumed && moved)
            }
            Err(e) => {
                self.store_failed("conversation.load", &e.to_string()).await;
                Err(AgentError::from_store("conversation.load", &e))
            }
        }
    }
}

impl<C, O> View for Env<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    fn run_id(&self) -> &str {
        &self.run_id
    }

    fn limits(&self) -> Limits {
        let l = &self.agent.limits;
        Limits {
            max_turns: l.max_turns,
            max_tool_calls: l.max_tool_calls,
            max_steps: l.max_steps,
            max_step_attempts: l.max_step_attempts,
            max_replans: l.max_replans,
            max_tool_repair_attempts: l.max_tool_repair_attempts,
        }
    }

    fn final_format(&self) -> Option<ResponseFormat> {
        self.agent.codec.response_format()
    }

    fn enabled_tools(&self) -> Vec<ToolDefinition> {
        self.definitions
            .iter()
            .filter(|d| self.tool_enabled(&d.name))
            .cloned()
            .collect()
    }

    fn enabled_tool(&self, name: &str) -> Option<ToolDefinition> {
        self.tools
            .get(name)
            .filter(|_| self.tool_enabled(name))
            .map(|t| t.entry.tool.spec().definition())
    }

    fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name).map(|t| t.entry.tool.spec())
    }

    fn valid_arguments(&self, name: &str, args: &serde_json::Value) -> bool {
        self.tools.get(name).is_some_and(|t| t.entry.validator.is_valid(args))
    }

    fn result_content(&self, name: &str, value: serde_json::Value) -> Vec<ContentPart> {
        let max = self.tools.get(name).and_then(|t| t.entry.tool.spec().max_result_bytes);
        crate::media::result_parts(value, max)
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
