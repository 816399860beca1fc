//! RECOVERING: a failed tool call's recovery (retry, fallback, replan or a terminal failure).

use super::super::Run;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::plan::{PlanAndExecutePolicy, PlanFailure, RecoveryFallback, sanitize_id};

use super::*;

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Saves the decision to recover (the batch's results with it), then leaves the recovery
    /// to the RECOVERING phase.
    pub(super) async fn recover(
        &mut self,
        failure: PlanFailure,
        call_id: &str,
        tool: &str,
        replan_requested: bool,
    ) -> Result<(), AgentError> {
        self.st().phase = StrictPhase::Recovering {
            failure,
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            replan_requested,
        };
        self.checkpoint().await
    }

    /// Replan (when the configuration or the tool asks for it and replans remain), else fail.
    pub(super) async fn fallback(
        &mut self,
        policy: &PlanAndExecutePolicy,
        mut failure: PlanFailure,
        call_id: &str,
        tool: &str,
        tool_asked_replan: bool,
    ) -> Result<(), AgentError> {
        let wants_replan = tool_asked_replan || policy.recovery.fallback == RecoveryFallback::Replan;
        if !wants_replan {
            return self.terminal(failure, call_id, tool).await;
        }
        if self.st().replans >= self.env.agent.limits.max_replans {
            failure.cause = "replan_limit".into();
            return self.terminal(failure, call_id, tool).await;
        }
        self.st().set_trace_recovery(call_id, "replan");
        let step_id = self.st().current_step_id();
        let run_id = self.run_id();
        self.emit(AgentEvent::ToolRecovery {
            run_id,
            step_id,
            call_id: sanitize_id(call_id),
            tool: sanitize_id(tool),
            action: "replan".into(),
            reason: failure.reason.clone(),
        })
        .await;
        self.replan(policy, failure).await
    }

    /// Ends the run: the failure is recorded and the step fails.
    pub(super) async fn terminal(&mut self, failure: PlanFailure, call_id: &str, tool: &str) -> Result<(), AgentError> {
        let st = self.st();
        st.set_trace_recovery(call_id, "fail");
        let step_id = failure.step_id.clone();
        let cause = failure.cause.clone();
        st.failure = Some(failure.clone());
        let run_id = self.run_id();
        self.emit(AgentEvent::ToolRecovery {
            run_id,
            step_id: step_id.clone().unwrap_or_default(),
            call_id: sanitize_id(call_id),
            tool: sanitize_id(tool),
            action: "fail".into(),
            reason: failure.reason.clone(),
        })
        .await;
        Err(AgentError::PlanFailed { cause, step_id })
    }

    pub(super) fn record_failure(&mut self, failure: PlanFailure) -> AgentError {
        let cause = failure.cause.clone();
        let step_id = failure.step_id.clone();
        self.st().failure = Some(failure);
        AgentError::PlanFailed { cause, step_id }
    }

    // ----- STEP_RESULT, STEP_VALIDATE/COMMIT -----
}
