//! The strict Plan-and-Execute decision policy: a state machine over [`StrictState`], which is
//! part of every checkpoint of a strict run.
//!
//! PLAN → ACT_TOOL → STEP_RESULT → STEP_VALIDATE/COMMIT → … → VERIFY → FINALIZE → DONE. Each
//! transition is checkpointed. See [`crate::plan`] for the rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod act;
mod finish;
mod planning;
mod recovery;

use super::Run;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::Message;
use crate::output::JsonCodec;
use crate::plan::{
    FeedbackMode, MAX_TRACE_ENTRIES, Plan, PlanAndExecutePolicy, PlanFailure, PlanStep, StepResult, StepStatus,
    ToolTraceEntry, ToolTraceMode, TraceError, sanitize_id, sanitize_message,
};
use crate::tool::ToolError;

/// The version of [`StrictState`]'s layout inside a checkpoint.
const STRICT_STATE_VERSION: u32 = 1;

/// Where a strict run is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub(super) enum StrictPhase {
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
pub(super) struct PendingRepair {
    call_id: String,
    tool: String,
    /// Canonical JSON of the arguments the model sent.
    canonical: String,
    /// Hash of the effective arguments it ran with.
    effective_hash: String,
}

/// How one call of the current batch ended, for classification after the batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct CallVerdict {
    /// The tool body ran (not refused before running).
    ran: bool,
    ok: bool,
    #[serde(default)]
    error: Option<ToolError>,
    /// The arguments the model sent, canonical.
    canonical: String,
    /// Hash of the effective arguments (when it ran).
    #[serde(default)]
    effective_hash: Option<String>,
}

/// The serialisable state of a strict run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StrictState {
    version: u32,
    phase: StrictPhase,
    plan: Plan,
    /// Index of the current step in `plan.steps`.
    current: usize,
    /// The current step's ACT conversation (tool calls, results, the model's draft).
    step_messages: Vec<Message>,
    /// Repairs made in the current step.
    step_repairs: u32,
    replans: u32,
    /// Repairs made in the run.
    tool_repairs: u32,
    /// A failed call waiting for the model's one repair call.
    repair: Option<PendingRepair>,
    /// The repair call in flight: (its call id, the id of the call it repairs).
    repairing: Option<(String, String)>,
    /// Verdicts of the current batch's finished calls (by call id).
    batch: BTreeMap<String, CallVerdict>,
    trace: Vec<ToolTraceEntry>,
    trace_dropped: u32,
    failure: Option<PlanFailure>,
    final_emitted: bool,
    final_text: Option<String>,
    /// The answer was appended to the session (a replay must not append it again).
    pub(super) conversation_stored: bool,
    /// The number the next new step's id gets.
    next_step: u32,
    /// This process returned the stored answer of a DONE run.
    #[serde(skip)]
    replayed: bool,
}

impl StrictState {
    pub(super) fn new() -> Self {
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
    pub(super) fn used_call_ids(&self) -> impl Iterator<Item = &str> {
        self.step_messages
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
            .chain(self.trace.iter().map(|t| t.call_id.as_str()))
    }

    pub(super) fn is_done(&self) -> bool {
        self.phase == StrictPhase::Done && self.final_emitted
    }

    fn current_step(&self) -> Option<&PlanStep> {
        self.plan.steps.get(self.current)
    }

    fn current_step_id(&self) -> String {
        self.current_step().map_or_else(|| "plan".to_owned(), |s| s.id.clone())
    }

    fn push_trace(&mut self, entry: ToolTraceEntry) {
        if self.trace.len() < MAX_TRACE_ENTRIES {
            self.trace.push(entry);
        } else {
            self.trace_dropped += 1;
        }
    }

    fn set_trace_recovery(&mut self, call_id: &str, action: &str) {
        if let Some(entry) = self.trace.iter_mut().rev().find(|e| e.call_id == sanitize_id(call_id))
            && let Some(error) = entry.error.as_mut()
        {
            error.recovery = Some(action.to_owned());
        }
    }

    /// `plan`, `tool_trace`, `plan_usage` and `failure` for the result's metadata.
    pub(super) fn write_metadata(
        &self,
        metadata: &mut serde_json::Map<String, serde_json::Value>,
        mode: ToolTraceMode,
    ) {
        metadata.insert("policy".into(), "plan_and_execute".into());
        metadata.insert(
            "plan".into(),
            serde_json::to_value(&self.plan).unwrap_or(serde_json::Value::Null),
        );
        if mode != ToolTraceMode::Off {
            metadata.insert(
                "tool_trace".into(),
                serde_json::to_value(&self.trace).unwrap_or(serde_json::Value::Null),
            );
            if self.trace_dropped > 0 {
                metadata.insert("tool_trace_dropped".into(), self.trace_dropped.into());
            }
        }
        let completed = self
            .plan
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
            .count();
        metadata.insert(
            "plan_usage".into(),
            serde_json::json!({
                "steps_completed": completed,
                "replans": self.replans,
                "tool_repairs": self.tool_repairs,
            }),
        );
        if let Some(failure) = &self.failure {
            metadata.insert(
                "failure".into(),
                serde_json::to_value(failure).unwrap_or(serde_json::Value::Null),
            );
        }
        if self.replayed {
            metadata.insert("final_replayed".into(), true.into());
        }
    }
}

/// The STEP_RESULT codec (its schema is generated once per process).
fn step_result_codec() -> &'static JsonCodec<StepResult> {
    static CODEC: std::sync::OnceLock<JsonCodec<StepResult>> = std::sync::OnceLock::new();
    CODEC.get_or_init(JsonCodec::new)
}

/// A sanitised failure.
fn failure(
    cause: &str,
    step_id: Option<&str>,
    tool: Option<&str>,
    call_id: Option<&str>,
    error: Option<&ToolError>,
) -> PlanFailure {
    PlanFailure {
        step_id: step_id.map(sanitize_id),
        tool_name: tool.map(sanitize_id),
        call_id: call_id.map(sanitize_id),
        error_class: error.map(|e| e.kind.as_str().to_owned()),
        reason: error.map(|e| sanitize_id(&e.reason)),
        cause: sanitize_id(cause),
    }
}

/// What the model sees of a failed call in a strict run: type and reason, plus the sanitised
/// message in [`FeedbackMode::SafeMessage`]; never details, never a raw error.
fn strict_error_content(error: &ToolError, mode: FeedbackMode) -> String {
    ToolError {
        reason: sanitize_id(&error.reason),
        message: error.message.as_deref().map(sanitize_message),
        ..error.clone()
    }
    .model_content(mode == FeedbackMode::SafeMessage)
}

fn trace_error(error: &ToolError) -> TraceError {
    TraceError {
        kind: error.kind.as_str().to_owned(),
        retryable: error.retryable,
        reason: Some(sanitize_id(&error.reason)),
        recovery: None,
    }
}

/// A snake_case code for an error that ended a strict run.
fn error_code(error: &AgentError) -> String {
    match error {
        AgentError::PlanFailed { cause, .. } => cause.clone(),
        AgentError::MaxTurnsExceeded { .. } => "max_turns".into(),
        AgentError::MaxToolCallsExceeded { .. } => "max_tool_calls".into(),
        AgentError::Output { .. } => "output_invalid".into(),
        AgentError::Model { .. } => "model_error".into(),
        AgentError::MemoryOverflow { .. } => "memory_overflow".into(),
        AgentError::ContextProvider { .. } => "context_provider".into(),
        AgentError::Configuration { .. } => "configuration".into(),
        _ => "run_failed".into(),
    }
}

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    fn st(&mut self) -> &mut StrictState {
        self.state.strict_or_init()
    }

    async fn emit(&self, event: AgentEvent) {
        if self.env.emitter.active() {
            self.env.emitter.emit(event).await;
        }
    }

    fn run_id(&self) -> String {
        self.env.ctx.run_id().to_owned()
    }

    pub(super) async fn strict_loop(&mut self, policy: &PlanAndExecutePolicy) -> Result<O, AgentError> {
        let version = self.st().version;
        if version > STRICT_STATE_VERSION {
            return Err(AgentError::CheckpointInvalid {
                run_id: self.run_id(),
                message: format!(
                    "the strict state has version {version}; this build reads up to {STRICT_STATE_VERSION}"
                ),
            });
        }
        let outcome = self.strict_machine(policy).await;
        if let Err(error) = &outcome
            && !error.is_resumable()
            && !matches!(error, AgentError::Interrupted { .. })
        {
            // A terminal failure decided by the policy (or a limit) fails the step; a resumable
            // interruption leaves it in progress.
            let code = error_code(error);
            let st = self.st();
            let in_step = matches!(
                st.phase,
                StrictPhase::Act | StrictPhase::StepResult { .. } | StrictPhase::Recovering { .. }
            );
            let step_id = st.current_step().filter(|_| in_step).map(|s| s.id.clone());
            if let Some(step) = st.plan.steps.get_mut(st.current)
                && matches!(step.status, StepStatus::InProgress | StepStatus::Pending)
                && in_step
            {
                step.status = StepStatus::Failed;
            }
            if st.failure.is_none() {
                st.failure = Some(failure(&code, step_id.as_deref(), None, None, None));
            }
            if let Some(step_id) = step_id {
                let run_id = self.run_id();
                self.emit(AgentEvent::StepFailed {
                    run_id,
                    step_id,
                    cause: sanitize_id(&code),
                })
                .await;
            }
        }
        outcome
    }

    async fn strict_machine(&mut self, policy: &PlanAndExecutePolicy) -> Result<O, AgentError> {
        loop {
            let phase = self.st().phase.clone();
            match phase {
                StrictPhase::Plan => self.strict_plan(policy).await?,
                StrictPhase::Act => self.strict_act(policy).await?,
                StrictPhase::StepResult { feedback } => self.strict_step_result(feedback).await?,
                StrictPhase::Recovering {
                    failure,
                    call_id,
                    tool,
                    replan_requested,
                } => {
                    self.fallback(policy, failure, &call_id, &tool, replan_requested)
                        .await?
                }
                StrictPhase::Verify => self.strict_verify().await?,
                StrictPhase::Finalize => return self.strict_finalize().await,
                StrictPhase::Done => {
                    if let Some(output) = self.strict_replay() {
                        return output;
                    }
                    self.st().phase = StrictPhase::Finalize;
                }
            }
        }
    }

    /// The most steps a plan may have.
    fn max_steps(&self, policy: &PlanAndExecutePolicy) -> usize {
        self.env.agent.limits.max_steps.min(policy.generator.max_steps) as usize
    }
}
