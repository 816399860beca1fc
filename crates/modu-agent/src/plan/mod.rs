//! Plan-and-Execute: the strict decision policy, with recovery from failed tool calls.
//!
//! A strict run is an explicit state machine over a serialisable state:
//!
//! ```text
//! PLAN → ACT_TOOL → STEP_RESULT → STEP_VALIDATE/COMMIT → (next step: ACT_TOOL) … → VERIFY → FINALIZE → DONE
//!                         ↑ repair / retry          │ replan (tool failure fallback)
//! ```
//!
//! - **PLAN**: the [`LlmPlanGenerator`] asks a model for the steps, each with the tools it may
//!   use (structured output, no tools in the request).
//! - **ACT_TOOL**: requests carry only the current step's allowed tool schemas. Once a batch of
//!   calls ran, STEP_RESULT follows; calls refused before running (unknown tool, invalid
//!   arguments) are fed back and the model acts again; a plain answer is kept as a draft.
//! - **STEP_RESULT**: no tools, only the internal [`StepResult`] schema. A plain ACT answer never
//!   completes a step: only a step result that validates and is committed does.
//! - **VERIFY**: a runtime check (no model call) that every step of the plan is committed.
//! - **FINALIZE**: no tools, and either no schema (text) or the agent's output schema. Its tokens
//!   stream as [`AgentEvent::FinalDelta`](crate::AgentEvent::FinalDelta); everything before it
//!   streams only to [`Agent::stream_all`](crate::Agent::stream_all) and event sinks.
//! - **DONE** with `final_emitted`: the state stays in the checkpoint store, so resuming the same
//!   run returns the stored answer instead of finalizing twice (give the store a TTL).
//!
//! Tool failures are recovered as [`ToolFailureRecoveryConfig`] says: `retry_call` (same call,
//! same arguments; idempotent tools with a retryable error while [`RetryConfig`] attempts remain;
//! a timed-out blocking tool only when `timeout_retry_safe`), `repair_call` (the model calls the
//! same `repair_safe` tool exactly once more with a new call id and different effective
//! arguments), `replan` (the unfinished part of the plan is revised) and `fail`.
//! What reaches the model, the [`tool_trace`](ToolTraceEntry), events and the
//! [`failure`](PlanFailure) metadata of a failed tool is its error type and reason (plus its
//! sanitised message in [`FeedbackMode::SafeMessage`]) — never a raw error, never a result.
//!
//! ```
//! use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy, StepStatus};
//! use modu_agent::{Agent, RunLimits};
//! use modu_core::FunctionTool;
//! use modu_testing::ScriptedModel;
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct AddArgs { a: i64, b: i64 }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let add = FunctionTool::<()>::typed("add", "Add two integers", |_ctx, a: AddArgs| async move { Ok(a.a + a.b) });
//! let model = ScriptedModel::new()
//!     // PLAN
//!     .text(json!({"steps": [{"description": "Add 2 and 3", "allowed_tools": ["add"]}]}).to_string())
//!     // ACT_TOOL: only the step's tools are offered
//!     .tool_call("add", json!({"a": 2, "b": 3}))
//!     // STEP_RESULT: no tools, the step-result schema
//!     .text(json!({"status": "completed", "result": "2 + 3 = 5"}).to_string())
//!     // FINALIZE
//!     .text("2 + 3 = 5");
//! let agent = Agent::builder(model)
//!     .tool(add)
//!     .limits(RunLimits::default().max_steps(4))
//!     .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
//!     .build()?;
//! let outcome = agent.run("What is 2 + 3?").await;
//! let report = outcome.plan().expect("a strict run reports its plan");
//! assert_eq!(report.plan.steps[0].status, StepStatus::Completed);
//! assert_eq!(report.tool_trace[0].tool_name, "add");
//! assert_eq!(outcome.into_result()?, "2 + 3 = 5");
//! # Ok(()) }
//! ```
//!
//! [`RetryConfig`]: crate::RetryConfig

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::ChatModel;

/// How an agent decides what to do next.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum DecisionPolicy {
    /// Ask the model, run the tools it calls, repeat, then finalize (the default).
    #[default]
    Standard,
    /// Strict Plan-and-Execute.
    PlanAndExecute(Arc<PlanAndExecutePolicy>),
}

impl std::fmt::Debug for DecisionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecisionPolicy::Standard => f.write_str("Standard"),
            DecisionPolicy::PlanAndExecute(p) => f.debug_tuple("PlanAndExecute").field(p).finish(),
        }
    }
}

impl From<PlanAndExecutePolicy> for DecisionPolicy {
    fn from(policy: PlanAndExecutePolicy) -> Self {
        DecisionPolicy::PlanAndExecute(Arc::new(policy))
    }
}

/// The strict Plan-and-Execute policy: a plan from a [`LlmPlanGenerator`], steps completed only
/// by committed [`StepResult`]s, tool failures recovered per [`ToolFailureRecoveryConfig`].
///
/// The run limits that apply are [`RunLimits`](crate::RunLimits)' `max_steps` (plan steps, not
/// model calls), `max_step_attempts`, `max_replans`, `max_tool_calls`,
/// `max_tool_repair_attempts`, `max_turns` (ACT answers that call tools) and the one `timeout`.
#[derive(Clone, Debug)]
pub struct PlanAndExecutePolicy {
    pub(crate) generator: LlmPlanGenerator,
    pub(crate) recovery: ToolFailureRecoveryConfig,
    pub(crate) trace_mode: ToolTraceMode,
}

impl PlanAndExecutePolicy {
    /// A strict policy planning with `generator`, default recovery and a summary tool trace.
    pub fn new(generator: LlmPlanGenerator) -> Self {
        PlanAndExecutePolicy {
            generator,
            recovery: ToolFailureRecoveryConfig::default(),
            trace_mode: ToolTraceMode::default(),
        }
    }

    /// How tool failures are recovered.
    pub fn tool_failure_recovery(mut self, config: ToolFailureRecoveryConfig) -> Self {
        self.recovery = config;
        self
    }

    /// What [`PlanReport::tool_trace`](crate::PlanReport::tool_trace) records.
    pub fn tool_trace_mode(mut self, mode: ToolTraceMode) -> Self {
        self.trace_mode = mode;
        self
    }

    pub(crate) fn fingerprint_tag(&self) -> &'static str {
        "strict/1"
    }
}

/// Produces plans (and revisions) with a model, as structured output without tools.
#[derive(Clone)]
pub struct LlmPlanGenerator {
    pub(crate) model: Option<Arc<dyn ChatModel>>,
    pub(crate) max_steps: u32,
    pub(crate) instructions: Option<String>,
}

impl std::fmt::Debug for LlmPlanGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmPlanGenerator")
            .field(
                "model",
                &self.model.as_ref().map_or("<the agent's model>", |m| m.model_name()),
            )
            .field("max_steps", &self.max_steps)
            .finish_non_exhaustive()
    }
}

impl LlmPlanGenerator {
    /// Plans with this model (which may differ from the agent's; chat middleware does not apply
    /// to it).
    /// An `Arc<dyn ChatModel>` works too.
    pub fn new(model: impl ChatModel + 'static) -> Self {
        LlmPlanGenerator {
            model: Some(Arc::new(model)),
            max_steps: 8,
            instructions: None,
        }
    }

    /// Plans with the agent's own model (through its chat middleware).
    pub fn agent_model() -> Self {
        LlmPlanGenerator {
            model: None,
            max_steps: 8,
            instructions: None,
        }
    }

    /// The most steps a plan may have (default 8; `RunLimits::max_steps` also applies).
    pub fn max_steps(mut self, n: u32) -> Self {
        self.max_steps = n;
        self
    }

    /// Extra planning instructions, added to the planner's prompt.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }
}

/// What to do when a tool failure cannot be retried or repaired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryFallback {
    /// Revise the unfinished plan (while `max_replans` allows).
    #[default]
    Replan,
    /// End the run.
    Fail,
}

/// What the model is told about a failed tool call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackMode {
    /// The error's type and reason only.
    #[default]
    TypeOnly,
    /// Also [`ToolError::message`](crate::ToolError::message), which the tool's author vouches is
    /// safe to show a model, with control characters removed and its length capped. This does
    /// not detect or redact secrets.
    SafeMessage,
}

/// Tool failure recovery for the strict policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolFailureRecoveryConfig {
    /// What happens when neither retry nor repair applies.
    pub fallback: RecoveryFallback,
    /// Repair only tools that declare `repair_safe` (default `true`).
    pub require_repair_safe: bool,
    /// What the model sees of a failed call.
    pub feedback_mode: FeedbackMode,
}

impl Default for ToolFailureRecoveryConfig {
    fn default() -> Self {
        ToolFailureRecoveryConfig {
            fallback: RecoveryFallback::Replan,
            require_repair_safe: true,
            feedback_mode: FeedbackMode::TypeOnly,
        }
    }
}

impl ToolFailureRecoveryConfig {
    /// Sets `fallback`.
    pub fn fallback(mut self, fallback: RecoveryFallback) -> Self {
        self.fallback = fallback;
        self
    }
    /// Sets `require_repair_safe`.
    pub fn require_repair_safe(mut self, yes: bool) -> Self {
        self.require_repair_safe = yes;
        self
    }
    /// Sets `feedback_mode`.
    pub fn feedback_mode(mut self, mode: FeedbackMode) -> Self {
        self.feedback_mode = mode;
        self
    }
}

/// What [`PlanReport::tool_trace`](crate::PlanReport::tool_trace) records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolTraceMode {
    /// No trace.
    Off,
    /// Step, call id, tool, ok, attempts, duration and the sanitised error (the default).
    #[default]
    Summary,
    /// The summary plus the call's arguments with secret keys masked.
    Arguments,
}

pub(crate) mod machine;
mod planning;
pub(crate) mod prompts;
mod recovery;
pub(crate) mod state;
mod steps;
#[cfg(test)]
mod test_support;

pub use modu_core::plan::{
    ArgumentsSource, Plan, PlanFailure, PlanStep, StepOutcome, StepResult, StepStatus, ToolTraceEntry, TraceError,
};

/// What the planner answers (internal schema).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanDraft {
    /// The steps, in order.
    pub(crate) steps: Vec<PlanDraftStep>,
}

/// One planned step (internal schema).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanDraftStep {
    /// What to do in this step.
    pub(crate) description: String,
    /// Names of the tools this step may call (empty: no tools).
    pub(crate) allowed_tools: Vec<String>,
}
