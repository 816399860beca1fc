//! How a run ended: [`RunOutcome`], with the [`RunReport`] every ending carries.
//!
//! A run completes with an output, pauses for a person (approvals, input), or fails. A pause is
//! not a failure: it ends as [`RunOutcome::Paused`], and `Agent::resume`
//! continues it once the person has answered. [`RunOutcome::into_result`] turns the outcome into
//! a `Result` for `?`:
//!
//! ```
//! use modu_core::{CompletedRun, RunOutcome, RunReport};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // What `modu_agent::Agent::run` returns for a run that answered "4" in one model call.
//! let mut report = RunReport::new("run-1", "assistant");
//! report.stats.model_calls = 1;
//! let outcome = RunOutcome::Completed(CompletedRun::new("4".to_owned(), report));
//! assert_eq!(outcome.report().stats.model_calls, 1);
//! let answer: String = outcome.into_result()?;
//! assert_eq!(answer, "4");
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::approval::ApprovalRequest;
use crate::error::AgentError;
use crate::input::InputRequest;
use crate::message::{Message, Usage};
use crate::plan::{Plan, PlanFailure, ToolTraceEntry};

/// How a run ended. Each ending carries the run's [`RunReport`].
///
/// Serialised with a `status` tag (`completed`, `paused`, `failed`) beside the ending's fields
/// and the report's.
#[must_use = "a run's outcome says whether it completed, paused or failed"]
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[serde(bound(serialize = "O: Serialize", deserialize = "O: Deserialize<'de>"))]
pub enum RunOutcome<O = String> {
    /// The run answered.
    Completed(CompletedRun<O>),
    /// The run waits for a person: approve, reject or answer, then resume it.
    Paused(PausedRun),
    /// The run ended without an answer.
    Failed(FailedRun<O>),
}

/// A run that answered.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompletedRun<O = String> {
    /// The answer.
    pub output: O,
    /// What the run did.
    #[serde(flatten)]
    pub report: RunReport,
}

/// A run that waits for a person.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PausedRun {
    /// Tool calls waiting for approval ([`crate::approval`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalRequest>,
    /// Tool calls waiting for input ([`crate::input`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputRequest>,
    /// What the run did until it paused.
    #[serde(flatten)]
    pub report: RunReport,
}

/// A run that ended without an answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
#[serde(bound(serialize = "O: Serialize", deserialize = "O: Deserialize<'de>"))]
pub struct FailedRun<O = String> {
    /// Why.
    pub error: AgentError,
    /// The answer, when the run produced one but could not store it in the session's
    /// conversation (a store failure after the answer): the answer is not lost, but the
    /// conversation does not hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstored_output: Option<O>,
    /// What the run did until it failed.
    #[serde(flatten)]
    pub report: RunReport,
}

/// What a run did, whichever way it ended.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunReport {
    /// The run's id (also the checkpoint key).
    pub run_id: String,
    /// The agent that answered.
    pub agent: String,
    /// The run's messages: the input, every tool call and result, and the answer. History
    /// loaded from the session is not repeated here.
    pub messages: Vec<Message>,
    /// The run's usage (tokens and requests).
    pub usage: Usage,
    /// `usage` of the run's model calls by model: the model that answered each call (the
    /// member of a `FallbackModel` chain that answered, else
    /// the agent's or planner's model), or that was asked, for a failed call. The usage of
    /// nested agents' model calls is included. Usage only added to the total
    /// ([`RunContext::add_usage`](crate::context::RunContext::add_usage): memory summaries,
    /// compaction) is not broken down.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage_by_model: BTreeMap<String, Usage>,
    /// The run's counters.
    #[serde(default)]
    pub stats: RunStats,
    /// A strict Plan-and-Execute run's plan, tool trace and failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanReport>,
    /// The caller's own metadata (`AgentRequest::metadata`),
    /// as the run ended with it.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// A run's counters (over the whole run, across resumes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunStats {
    /// Model calls made (each retry counts).
    pub model_calls: u32,
    /// Tool calls executed.
    pub tool_calls: u32,
    /// Model turns: the model's answers in the run's loop (a separate finalizing request is
    /// not one).
    pub turns: u32,
    /// Whether this ending came from `Agent::resume`.
    #[serde(default)]
    pub resumed: bool,
    /// Whether the conversation store refused the answer (see [`FailedRun::unstored_output`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answer_not_stored: bool,
    /// Whether the answer was cut at the model's output limit: the model stopped with
    /// `finish_reason: "length"` (its `max_tokens`, or on servers such as llama.cpp the end of
    /// its context window). The answer is what the model wrote until then; raise `max_tokens`
    /// (or the server's context) for a whole one. A structured output that was cut rarely
    /// parses: that run fails with `AgentError::Output` saying so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answer_cut: bool,
}

/// What a strict Plan-and-Execute run planned and did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanReport {
    /// The plan as it ended (superseded steps included).
    pub plan: Plan,
    /// Every tool call attempt, in order, unless the policy's trace mode is off; capped (see
    /// `tool_trace_dropped`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_trace: Vec<ToolTraceEntry>,
    /// Attempts left out of `tool_trace` once it reached its cap.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_trace_dropped: u32,
    /// Steps completed, replans and tool repairs.
    pub usage: PlanUsage,
    /// Why the plan failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<PlanFailure>,
    /// Whether the final answer was replayed from a checkpoint instead of asked again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub final_replayed: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A strict run's plan counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanUsage {
    /// Steps completed.
    pub steps_completed: u32,
    /// Replans made.
    pub replans: u32,
    /// Tool calls repaired.
    pub tool_repairs: u32,
}

impl<O> RunOutcome<O> {
    /// The outcome of a run that ended with `error` before it did anything.
    #[doc(hidden)]
    pub fn failed(run_id: impl Into<String>, agent: impl Into<String>, error: AgentError) -> Self {
        RunOutcome::Failed(FailedRun {
            error,
            unstored_output: None,
            report: RunReport {
                run_id: run_id.into(),
                agent: agent.into(),
                ..RunReport::default()
            },
        })
    }

    /// What the run did.
    pub fn report(&self) -> &RunReport {
        match self {
            RunOutcome::Completed(c) => &c.report,
            RunOutcome::Paused(p) => &p.report,
            RunOutcome::Failed(f) => &f.report,
        }
    }

    /// What the run did, mutably (for agent middleware).
    pub fn report_mut(&mut self) -> &mut RunReport {
        match self {
            RunOutcome::Completed(c) => &mut c.report,
            RunOutcome::Paused(p) => &mut p.report,
            RunOutcome::Failed(f) => &mut f.report,
        }
    }

    /// The report, without the ending.
    pub fn into_report(self) -> RunReport {
        match self {
            RunOutcome::Completed(c) => c.report,
            RunOutcome::Paused(p) => p.report,
            RunOutcome::Failed(f) => f.report,
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.report().run_id
    }

    /// The run's messages ([`RunReport::messages`]).
    pub fn messages(&self) -> &[Message] {
        &self.report().messages
    }

    /// The run's usage.
    pub fn usage(&self) -> &Usage {
        &self.report().usage
    }

    /// The run's counters.
    pub fn stats(&self) -> RunStats {
        self.report().stats
    }

    /// A strict run's plan report.
    pub fn plan(&self) -> Option<&PlanReport> {
        self.report().plan.as_ref()
    }

    /// The answer of a completed run.
    pub fn output(&self) -> Option<&O> {
        match self {
            RunOutcome::Completed(c) => Some(&c.output),
            _ => None,
        }
    }

    /// Why a failed run failed.
    pub fn error(&self) -> Option<&AgentError> {
        match self {
            RunOutcome::Failed(f) => Some(&f.error),
            _ => None,
        }
    }

    /// The pause of a paused run.
    pub fn pause(&self) -> Option<&PausedRun> {
        match self {
            RunOutcome::Paused(p) => Some(p),
            _ => None,
        }
    }

    /// The tool calls waiting for approval (empty unless the run is paused).
    pub fn approvals(&self) -> &[ApprovalRequest] {
        self.pause().map_or(&[], |p| &p.approvals)
    }

    /// The tool calls waiting for input (empty unless the run is paused).
    pub fn inputs(&self) -> &[InputRequest] {
        self.pause().map_or(&[], |p| &p.inputs)
    }

    /// Whether the run answered.
    pub fn is_completed(&self) -> bool {
        matches!(self, RunOutcome::Completed(_))
    }

    /// Whether the run waits for a person.
    pub fn is_paused(&self) -> bool {
        matches!(self, RunOutcome::Paused(_))
    }

    /// Whether the run failed.
    pub fn is_failed(&self) -> bool {
        matches!(self, RunOutcome::Failed(_))
    }

    /// The answer, or why there is none: a [`RunError::Paused`] for a run that waits for a
    /// person, a [`RunError::Failed`] for one that failed (an unstored answer is dropped; match
    /// the outcome to keep it).
    pub fn into_result(self) -> Result<O, RunError> {
        match self {
            RunOutcome::Completed(c) => Ok(c.output),
            RunOutcome::Paused(p) => Err(RunError::Paused(Box::new(p))),
            RunOutcome::Failed(f) => Err(RunError::Failed {
                error: f.error,
                report: Box::new(f.report),
            }),
        }
    }

    /// The same outcome with its output (and unstored output) mapped by `f`.
    pub fn map<P>(self, f: impl FnOnce(O) -> P) -> RunOutcome<P> {
        match self {
            RunOutcome::Completed(c) => RunOutcome::Completed(CompletedRun {
                output: f(c.output),
                report: c.report,
            }),
            RunOutcome::Paused(p) => RunOutcome::Paused(p),
            RunOutcome::Failed(x) => RunOutcome::Failed(FailedRun {
                error: x.error,
                unstored_output: x.unstored_output.map(f),
                report: x.report,
            }),
        }
    }
}

impl<O> CompletedRun<O> {
    /// A completed run (for agent middleware and test doubles).
    pub fn new(output: O, report: RunReport) -> Self {
        CompletedRun { output, report }
    }
}

impl PausedRun {
    /// A paused run (for agent middleware and test doubles).
    pub fn new(approvals: Vec<ApprovalRequest>, inputs: Vec<InputRequest>, report: RunReport) -> Self {
        PausedRun {
            approvals,
            inputs,
            report,
        }
    }
}

impl<O> FailedRun<O> {
    /// A failed run (for agent middleware and test doubles).
    pub fn new(error: AgentError, report: RunReport) -> Self {
        FailedRun {
            error,
            unstored_output: None,
            report,
        }
    }
}

impl RunReport {
    /// An empty report of run `run_id` by `agent` (for agent middleware and test doubles).
    pub fn new(run_id: impl Into<String>, agent: impl Into<String>) -> Self {
        RunReport {
            run_id: run_id.into(),
            agent: agent.into(),
            ..RunReport::default()
        }
    }
}

/// Why [`RunOutcome::into_result`] has no answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The run waits for a person; it is not a failure ([`RunOutcome::Paused`]).
    Paused(Box<PausedRun>),
    /// The run failed.
    Failed {
        /// Why.
        error: AgentError,
        /// What the run did until it failed.
        report: Box<RunReport>,
    },
}

impl RunError {
    /// What the run did.
    pub fn report(&self) -> &RunReport {
        match self {
            RunError::Paused(p) => &p.report,
            RunError::Failed { report, .. } => report,
        }
    }

    /// The failure, unless the run is paused.
    pub fn agent_error(&self) -> Option<&AgentError> {
        match self {
            RunError::Paused(_) => None,
            RunError::Failed { error, .. } => Some(error),
        }
    }

    /// Whether the run waits for a person.
    pub fn is_paused(&self) -> bool {
        matches!(self, RunError::Paused(_))
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Paused(p) => write!(
                f,
                "run {} is paused: {} approval(s) and {} input(s) pending",
                p.report.run_id,
                p.approvals.len(),
                p.inputs.len()
            ),
            RunError::Failed { error, report } => write!(f, "run {} failed: {error}", report.run_id),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Paused(_) => None,
            RunError::Failed { error, .. } => Some(error),
        }
    }
}

impl From<RunError> for AgentError {
    /// The failure; a pause becomes [`AgentError::Interrupted`].
    fn from(e: RunError) -> Self {
        match e {
            RunError::Paused(p) => AgentError::Interrupted {
                pending: p.approvals.len() + p.inputs.len(),
            },
            RunError::Failed { error, .. } => error,
        }
    }
}
