//! The data of a strict Plan-and-Execute run that events, errors, results and checkpoints carry
//! (serde and schemars only).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A step's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Being worked on (also after a resumable interruption).
    InProgress,
    /// Its step result was validated and committed.
    Completed,
    /// The policy ended the run in this step.
    Failed,
    /// A replan replaced it.
    Superseded,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanStep {
    /// Its id (`s1`, `s2`, …; stable across replans).
    pub id: String,
    /// What to do.
    pub description: String,
    /// The tools the step may call (what it could use, not what it called: see the tool trace).
    pub allowed_tools: Vec<String>,
    /// Its state.
    pub status: StepStatus,
    /// The committed result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Step-result attempts made.
    #[serde(default)]
    pub attempts: u32,
}

/// A plan: its steps and how often it was revised.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Plan {
    /// The steps, in order (superseded steps stay, for the record).
    pub steps: Vec<PlanStep>,
    /// 0 for the first plan, +1 per replan.
    pub revision: u32,
}

/// The outcome of a step, as the model reports it in STEP_RESULT.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepResult {
    /// `completed` when the step's goal was reached, `failed` otherwise.
    pub status: StepOutcome,
    /// The step's result: the facts later steps and the final answer may use.
    pub result: String,
}

/// A step result's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// The step's goal was reached.
    Completed,
    /// It was not.
    Failed,
}

/// The sanitised error of a traced call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TraceError {
    /// The error type (`execution`, `timeout`, `validation`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether the error was retryable.
    pub retryable: bool,
    /// The machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The recovery action taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
}

/// Where a traced call's arguments come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgumentsSource {
    /// The arguments the tool ran with (validated, defaults applied).
    Validated,
    /// The arguments the model sent (the call was refused before it ran).
    Requested,
}

/// One tool call attempt of a strict run ([`PlanReport::tool_trace`](crate::PlanReport::tool_trace)). Never holds a
/// tool's result or raw error message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolTraceEntry {
    /// The step.
    pub step_id: String,
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub tool_name: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// How often it ran (0: refused before running).
    pub attempts: u32,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// The sanitised error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TraceError>,
    /// The call this one repairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_of_call_id: Option<String>,
    /// The arguments with secret keys masked (`modu_agent::plan::ToolTraceMode::Arguments` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// Where `arguments` come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_source: Option<ArgumentsSource>,
}

/// Why a strict run failed ([`PlanReport::failure`](crate::PlanReport::failure)): sanitised, length-capped identifiers
/// and classifications only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanFailure {
    /// The step it failed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// The tool involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// The call involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The error class (a tool error type, `step_result`, `plan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    /// The tool error's reason; for a first plan that could not be used (`plan_invalid`, class
    /// `plan`), why: `invalid_json`, `schema_mismatch`, `no_steps`, `too_many_steps`,
    /// `empty_description`, `unknown_tool`, or `answer_cut` (the planner's answer stopped at the
    /// output limit before it was a plan; its corrective request asks for a shorter one instead
    /// of repeating it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the run ended: `tool_failed` (fallback `fail`), `tool_requested_fail`,
    /// `uncancellable_timeout`, `partial_batch_failure`, `replan_limit`, `repair_not_safe`,
    /// `repair_limit`, `repair_declined`, `repair_same_arguments`,
    /// `repair_same_effective_arguments`, `repair_other_tool`, `repair_not_single_call`,
    /// `repair_same_call_id`, `repair_invalid_arguments`, `step_attempts_exhausted`,
    /// `plan_invalid`, `max_steps`, `verify_failed`, or a limit (`max_tool_calls`, `max_turns`).
    pub cause: crate::codes::PlanFailureCause,
}

impl PlanStep {
    /// A pending step with no result and no attempts yet.
    pub fn new(id: impl Into<String>, description: impl Into<String>, allowed_tools: Vec<String>) -> Self {
        PlanStep {
            id: id.into(),
            description: description.into(),
            allowed_tools,
            status: StepStatus::Pending,
            result: None,
            attempts: 0,
        }
    }
}

impl TraceError {
    /// An error of type `kind` (`execution`, `validation`, …), with no reason or recovery yet.
    pub fn new(kind: impl Into<String>, retryable: bool) -> Self {
        TraceError {
            kind: kind.into(),
            retryable,
            reason: None,
            recovery: None,
        }
    }
}

impl ToolTraceEntry {
    /// A call of `tool_name` in step `step_id` that has not run (no attempts, not ok).
    pub fn new(step_id: impl Into<String>, call_id: impl Into<String>, tool_name: impl Into<String>) -> Self {
        ToolTraceEntry {
            step_id: step_id.into(),
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            ok: false,
            attempts: 0,
            duration_ms: 0,
            error: None,
            recovery_of_call_id: None,
            arguments: None,
            arguments_source: None,
        }
    }
}

impl PlanFailure {
    /// A failure for `cause`, naming no step, tool, call or error yet.
    pub fn new(cause: crate::codes::PlanFailureCause) -> Self {
        PlanFailure {
            step_id: None,
            tool_name: None,
            call_id: None,
            error_class: None,
            reason: None,
            cause,
        }
    }
}
