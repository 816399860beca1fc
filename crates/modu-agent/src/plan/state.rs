//! The serialisable state of a strict run (`state.policy.state` of its checkpoints).

use crate::codes::PlanFailureCause;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{FeedbackMode, ToolTraceMode};
use super::{Plan, PlanFailure, PlanStep, StepResult, StepStatus, ToolTraceEntry, TraceError};
use crate::canonical::{mask_arguments, sanitize_id, sanitize_message};
use crate::error::AgentError;
use crate::message::Message;
use crate::output::JsonCodec;
use crate::tool::ToolError;

/// The most trace entries kept (later ones are counted, not kept).
pub(crate) const MAX_TRACE_ENTRIES: usize = 256;

/// The most bytes of one trace entry's arguments (as JSON); longer ones are cut with the same
/// marker as tool results, so one large argument cannot make a large trace and checkpoint.
pub(crate) const MAX_TRACE_ARGUMENT_BYTES: usize = 2048;

/// A call's arguments as the tool trace keeps them: secret keys masked, at most
/// [`MAX_TRACE_ARGUMENT_BYTES`] of JSON (then a string ending in a `…[truncated: …]` marker).
pub(crate) fn trace_arguments(value: &serde_json::Value) -> serde_json::Value {
    let masked = mask_arguments(value);
    let text = masked.to_string();
    if text.len() <= MAX_TRACE_ARGUMENT_BYTES {
        masked
    } else {
        serde_json::Value::String(crate::tool::truncate_result(text, Some(MAX_TRACE_ARGUMENT_BYTES)))
    }
}

/// The version of [`StrictState`]'s layout inside a checkpoint.
pub(crate) const STRICT_STATE_VERSION: u32 = 1;

/// Where a strict run is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub(crate) enum StrictPhase {
    /// Making the plan.
    Plan,
    /// ACT_TOOL for the current step.
    Act,
    /// Asking for the current step's result (with feedback on a rejected one).
    StepResult {
        #[serde(default)]
        feedback: Option<String>,
    },
    /// A tool failure is being recovered (replan or fail); saved before the planner is asked,
    /// so a resume after an interruption recovers again instead of re-running the tool.
    Recovering {
        failure: PlanFailure,
        call_id: String,
        tool: String,
        replan_requested: bool,
    },
    /// Every step committed; checking the plan.
    Verify,
    /// Writing the final answer.
    Finalize,
    /// The final answer was produced (`final_emitted`).
    Done,
}

/// A failed call the model may repair once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingRepair {
    pub(crate) call_id: String,
    pub(crate) tool: String,
    /// Canonical JSON of the arguments the model sent.
    pub(crate) canonical: String,
    /// Hash of the effective arguments it ran with.
    pub(crate) effective_hash: String,
}

/// How one call of the current batch ended, for classification after the batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallVerdict {
    /// The tool body ran (not refused before running).
    pub(crate) ran: bool,
    pub(crate) ok: bool,
    #[serde(default)]
    pub(crate) error: Option<ToolError>,
    /// The arguments the model sent, canonical.
    pub(crate) canonical: String,
    /// Hash of the effective arguments (when it ran).
    #[serde(default)]
    pub(crate) effective_hash: Option<String>,
}

/// The serialisable state of a strict run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StrictState {
    pub(crate) version: u32,
    pub(crate) phase: StrictPhase,
    pub(crate) plan: Plan,
    /// Index of the current step in `plan.steps`.
    pub(crate) current: usize,
    /// The current step's ACT conversation (tool calls, results, the model's draft).
    pub(crate) step_messages: Vec<Message>,
    /// Repairs made in the current step.
    pub(crate) step_repairs: u32,
    pub(crate) replans: u32,
    /// Repairs made in the run.
    pub(crate) tool_repairs: u32,
    /// A failed call waiting for the model's one repair call.
    pub(crate) repair: Option<PendingRepair>,
    /// The repair call in flight: (its call id, the id of the call it repairs).
    pub(crate) repairing: Option<(String, String)>,
    /// Verdicts of the current batch's finished calls (by call id).
    pub(crate) batch: BTreeMap<String, CallVerdict>,
    pub(crate) trace: Vec<ToolTraceEntry>,
    pub(crate) trace_dropped: u32,
    pub(crate) failure: Option<PlanFailure>,
    pub(crate) final_emitted: bool,
    pub(crate) final_text: Option<String>,
    /// The answer was appended to the session (a replay must not append it again).
    pub(crate) conversation_stored: bool,
    /// The number the next new step's id gets.
    pub(crate) next_step: u32,
    /// This process returned the stored answer of a DONE run.
    #[serde(skip)]
    pub(crate) replayed: bool,
}

impl StrictState {
    pub(crate) fn new() -> Self {
        StrictState {
            version: STRICT_STATE_VERSION,
            phase: StrictPhase::Plan,
            plan: Plan::default(),
            current: 0,
            step_messages: Vec::new(),
            step_repairs: 0,
            replans: 0,
            tool_repairs: 0,
            repair: None,
            repairing: None,
            batch: BTreeMap::new(),
            trace: Vec::new(),
            trace_dropped: 0,
            failure: None,
            final_emitted: false,
            final_text: None,
            conversation_stored: false,
            next_step: 1,
            replayed: false,
        }
    }

    /// The run produced its final answer.
    /// The call ids this strict run has used: the current step's calls and the traced ones.
    pub(crate) fn used_call_ids(&self) -> impl Iterator<Item = &str> {
        self.step_messages
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
            .chain(self.trace.iter().map(|t| t.call_id.as_str()))
    }

    pub(crate) fn is_done(&self) -> bool {
        self.phase == StrictPhase::Done && self.final_emitted
    }

    pub(crate) fn current_step(&self) -> Option<&PlanStep> {
        self.plan.steps.get(self.current)
    }

    pub(crate) fn current_step_id(&self) -> String {
        self.current_step().map_or_else(|| "plan".to_owned(), |s| s.id.clone())
    }

    pub(crate) fn push_trace(&mut self, entry: ToolTraceEntry) {
        if self.trace.len() < MAX_TRACE_ENTRIES {
            self.trace.push(entry);
        } else {
            self.trace_dropped += 1;
        }
    }

    pub(crate) fn set_trace_recovery(&mut self, call_id: &str, action: &str) {
        if let Some(entry) = self.trace.iter_mut().rev().find(|e| e.call_id == sanitize_id(call_id))
            && let Some(error) = entry.error.as_mut()
        {
            error.recovery = Some(action.to_owned());
        }
    }

    /// The plan, tool trace, counters and failure for the run's report.
    pub(crate) fn report(&self, mode: ToolTraceMode) -> crate::outcome::PlanReport {
        let traced = mode != ToolTraceMode::Off;
        let steps_completed = self
            .plan
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
            .count();
        let mut usage = crate::outcome::PlanUsage::default();
        usage.steps_completed = u32::try_from(steps_completed).unwrap_or(u32::MAX);
        usage.replans = self.replans;
        usage.tool_repairs = self.tool_repairs;
        let mut report = crate::outcome::PlanReport::default();
        report.plan = self.plan.clone();
        if traced {
            report.tool_trace = self.trace.clone();
            report.tool_trace_dropped = self.trace_dropped;
        }
        report.usage = usage;
        report.failure = self.failure.clone();
        report.final_replayed = self.replayed;
        report
    }
}

/// The STEP_RESULT codec (its schema is generated once per process).
pub(crate) fn step_result_codec() -> &'static JsonCodec<StepResult> {
    static CODEC: std::sync::OnceLock<JsonCodec<StepResult>> = std::sync::OnceLock::new();
    CODEC.get_or_init(JsonCodec::new)
}

/// A sanitised failure.
pub(crate) fn failure(
    cause: PlanFailureCause,
    step_id: Option<&str>,
    tool: Option<&str>,
    call_id: Option<&str>,
    error: Option<&ToolError>,
) -> PlanFailure {
    let mut failure = PlanFailure::new(cause);
    failure.step_id = step_id.map(sanitize_id);
    failure.tool_name = tool.map(sanitize_id);
    failure.call_id = call_id.map(sanitize_id);
    failure.error_class = error.map(|e| e.kind.as_str().to_owned());
    failure.reason = error.map(|e| sanitize_id(&e.reason));
    failure
}

/// What the model sees of a failed call in a strict run: type and reason, plus the sanitised
/// message in [`FeedbackMode::SafeMessage`]; never details, never a raw error.
pub(crate) fn strict_error_content(error: &ToolError, mode: FeedbackMode) -> String {
    let mut shown = error.clone();
    shown.reason = sanitize_id(&error.reason);
    shown.message = error.message.as_deref().map(sanitize_message);
    shown.model_content(mode == FeedbackMode::SafeMessage)
}

pub(crate) fn trace_error(error: &ToolError) -> TraceError {
    let mut traced = TraceError::new(error.kind.as_str(), error.retryable);
    traced.reason = Some(sanitize_id(&error.reason));
    traced
}

/// The cause of an error that ended a strict run.
pub(crate) fn error_code(error: &AgentError) -> PlanFailureCause {
    match error {
        // The one cause that may come from outside the policy (any `AgentError::PlanFailed`):
        // sanitised like every other field of the failure and its `StepFailed` event.
        AgentError::PlanFailed { cause, .. } => PlanFailureCause::from_code(&sanitize_id(cause.as_str())),
        AgentError::MaxTurnsExceeded { .. } => PlanFailureCause::MaxTurns,
        AgentError::MaxToolCallsExceeded { .. } => PlanFailureCause::MaxToolCalls,
        AgentError::Output { .. } => PlanFailureCause::OutputInvalid,
        AgentError::Model { .. } => PlanFailureCause::ModelError,
        AgentError::MemoryOverflow { .. } => PlanFailureCause::MemoryOverflow,
        AgentError::ContextProvider { .. } => PlanFailureCause::ContextProvider,
        AgentError::Configuration { .. } => PlanFailureCause::Configuration,
        _ => PlanFailureCause::RunFailed,
    }
}
