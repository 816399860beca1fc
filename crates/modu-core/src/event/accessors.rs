//! What an [`AgentEvent`] says about itself: its run, its JSON type name, whether it ends the
//! run, and the partial output it carries.

use super::AgentEvent;

impl AgentEvent {
    /// The run the event belongs to.
    pub fn run_id(&self) -> &str {
        match self {
            AgentEvent::RunStarted { run_id, .. }
            | AgentEvent::ModelCallStarted { run_id, .. }
            | AgentEvent::ModelDelta { run_id, .. }
            | AgentEvent::ReasoningDelta { run_id, .. }
            | AgentEvent::ModelCallFinished { run_id, .. }
            | AgentEvent::ModelCallFailed { run_id, .. }
            | AgentEvent::ToolCallDelta { run_id, .. }
            | AgentEvent::OutputPartial { run_id, .. }
            | AgentEvent::ToolCallStarted { run_id, .. }
            | AgentEvent::ToolCallFinished { run_id, .. }
            | AgentEvent::ToolCallResult { run_id, .. }
            | AgentEvent::ToolProgress { run_id, .. }
            | AgentEvent::ToolModelCall { run_id, .. }
            | AgentEvent::MemoryApplied { run_id, .. }
            | AgentEvent::ApprovalRequested { run_id, .. }
            | AgentEvent::Handoff { run_id, .. }
            | AgentEvent::ApprovalResolved { run_id, .. }
            | AgentEvent::InputRequested { run_id, .. }
            | AgentEvent::RunCompacted { run_id, .. }
            | AgentEvent::GuardrailChecked { run_id, .. }
            | AgentEvent::InputAnswered { run_id, .. }
            | AgentEvent::CheckpointSaved { run_id }
            | AgentEvent::StoreFailed { run_id, .. }
            | AgentEvent::PlanCreated { run_id, .. }
            | AgentEvent::PlanRevised { run_id, .. }
            | AgentEvent::StepStarted { run_id, .. }
            | AgentEvent::StepModelDelta { run_id, .. }
            | AgentEvent::StepResultRejected { run_id, .. }
            | AgentEvent::StepCommitted { run_id, .. }
            | AgentEvent::StepFailed { run_id, .. }
            | AgentEvent::ToolRecovery { run_id, .. }
            | AgentEvent::PlanVerified { run_id, .. }
            | AgentEvent::FinalDelta { run_id, .. }
            | AgentEvent::RunCompleted { run_id, .. }
            | AgentEvent::RunPaused { run_id, .. }
            | AgentEvent::RunFailed { run_id, .. } => run_id,
        }
    }

    /// Whether this event ends its run (`RunCompleted`, `RunPaused` or `RunFailed`): the last
    /// event of a run, after which a sink may drop what it keeps per run.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            AgentEvent::RunCompleted { .. } | AgentEvent::RunPaused { .. } | AgentEvent::RunFailed { .. }
        )
    }

    /// The event's type name as it appears in JSON (`"run_started"`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            AgentEvent::RunStarted { .. } => "run_started",
            AgentEvent::ModelCallStarted { .. } => "model_call_started",
            AgentEvent::ModelDelta { .. } => "model_delta",
            AgentEvent::ToolCallDelta { .. } => "tool_call_delta",
            AgentEvent::OutputPartial { .. } => "output_partial",
            AgentEvent::ReasoningDelta { .. } => "reasoning_delta",
            AgentEvent::ModelCallFinished { .. } => "model_call_finished",
            AgentEvent::ModelCallFailed { .. } => "model_call_failed",
            AgentEvent::ToolCallStarted { .. } => "tool_call_started",
            AgentEvent::ToolCallFinished { .. } => "tool_call_finished",
            AgentEvent::ToolCallResult { .. } => "tool_call_result",
            AgentEvent::ToolProgress { .. } => "tool_progress",
            AgentEvent::ToolModelCall { .. } => "tool_model_call",
            AgentEvent::MemoryApplied { .. } => "memory_applied",
            AgentEvent::ApprovalRequested { .. } => "approval_requested",
            AgentEvent::Handoff { .. } => "handoff",
            AgentEvent::ApprovalResolved { .. } => "approval_resolved",
            AgentEvent::InputRequested { .. } => "input_requested",
            AgentEvent::RunCompacted { .. } => "run_compacted",
            AgentEvent::GuardrailChecked { .. } => "guardrail_checked",
            AgentEvent::InputAnswered { .. } => "input_answered",
            AgentEvent::CheckpointSaved { .. } => "checkpoint_saved",
            AgentEvent::StoreFailed { .. } => "store_failed",
            AgentEvent::PlanCreated { .. } => "plan_created",
            AgentEvent::PlanRevised { .. } => "plan_revised",
            AgentEvent::StepStarted { .. } => "step_started",
            AgentEvent::StepModelDelta { .. } => "step_model_delta",
            AgentEvent::StepResultRejected { .. } => "step_result_rejected",
            AgentEvent::StepCommitted { .. } => "step_committed",
            AgentEvent::StepFailed { .. } => "step_failed",
            AgentEvent::ToolRecovery { .. } => "tool_recovery",
            AgentEvent::PlanVerified { .. } => "plan_verified",
            AgentEvent::FinalDelta { .. } => "final_delta",
            AgentEvent::RunCompleted { .. } => "run_completed",
            AgentEvent::RunPaused { .. } => "run_paused",
            AgentEvent::RunFailed { .. } => "run_failed",
        }
    }
}

impl AgentEvent {
    /// For [`AgentEvent::OutputPartial`]: the snapshot read as `P`, a type whose fields may be
    /// missing (`Option`s or `#[serde(default)]`); `None` for other events or a snapshot that
    /// does not fit `P` yet.
    ///
    /// ```
    /// use modu_core::AgentEvent;
    ///
    /// #[derive(serde::Deserialize, Debug, PartialEq)]
    /// struct PartialAnswer {
    ///     result: Option<i64>,
    ///     explanation: Option<String>,
    /// }
    ///
    /// let event = AgentEvent::OutputPartial {
    ///     run_id: "r1".into(),
    ///     snapshot: serde_json::json!({"result": 5, "explanation": "2 + 3"}),
    /// };
    /// let partial: Option<PartialAnswer> = event.partial_output();
    /// assert_eq!(partial, Some(PartialAnswer { result: Some(5), explanation: Some("2 + 3".into()) }));
    /// ```
    pub fn partial_output<P: serde::de::DeserializeOwned>(&self) -> Option<P> {
        match self {
            AgentEvent::OutputPartial { snapshot, .. } => P::deserialize(snapshot).ok(),
            _ => None,
        }
    }
}
