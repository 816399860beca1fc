//! ACT_TOOL: one step's model request, the repair check, and the step's tool calls classified.

use std::collections::HashSet;

use super::super::Run;
use super::super::ask::{Ask, Offer};
use super::super::gate::ToolCallOutcome;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::{Message, Role, ToolCall};
use crate::model::ToolDefinition;
use crate::plan::{
    ArgumentsSource, PlanAndExecutePolicy, PlanStep, StepStatus, ToolTraceEntry, ToolTraceMode, TraceError,
    canonical_json, effective_arguments, json_hash, sanitize_id, trace_arguments,
};
use crate::provider::Stage;
use crate::tool::RecoveryAction;

use super::*;

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    pub(super) async fn strict_act(&mut self, policy: &PlanAndExecutePolicy) -> Result<(), AgentError> {
        let run_id = self.run_id();
        let (step, repair) = {
            let st = self.st();
            let Some(step) = st.plan.steps.get_mut(st.current) else {
                st.phase = StrictPhase::Verify;
                return Ok(());
            };
            let started = step.status == StepStatus::Pending;
            if started {
                step.status = StepStatus::InProgress;
            }
            let snapshot = step.clone();
            let repair = st.repair.clone();
            if started {
                let index = st.current;
                self.emit(AgentEvent::StepStarted {
                    run_id: run_id.clone(),
                    step_id: snapshot.id.clone(),
                    index,
                    attempt: snapshot.attempts + 1,
                })
                .await;
            }
            (snapshot, repair)
        };
        // Calls of the last answer without results (also after a resume): run them.
        let unanswered = self
            .st()
            .step_messages
            .last()
            .filter(|m| m.role == Role::Assistant && m.has_tool_calls())
            .map(|m| m.tool_calls.clone());
        if let Some(calls) = unanswered {
            return self.strict_run_tools(policy, &step, calls).await;
        }
        let names: Vec<String> = match &repair {
            Some(r) => vec![r.tool.clone()],
            None => step.allowed_tools.clone(),
        };
        let definitions: Vec<ToolDefinition> = names
            .iter()
            .filter_map(|n| self.env.tools.get(n))
            .filter(|t| t.entry.tool.is_enabled(&self.env.ctx))
            .map(|t| t.entry.tool.spec().definition())
            .collect();
        if definitions.is_empty() && repair.is_none() {
            // Nothing to act with: the step's result is next.
            self.st().phase = StrictPhase::StepResult { feedback: None };
            return self.checkpoint().await;
        }
        if self.state.turns >= self.env.agent.limits.max_turns {
            return Err(AgentError::MaxTurnsExceeded {
                limit: self.env.agent.limits.max_turns,
            });
        }
        let mut extra = vec![Message::user(self.plan_context())];
        extra.extend(self.st().step_messages.iter().cloned());
        if let Some(r) = &repair {
            extra.push(Message::user(format!(
                "The call {} to {} failed (see its error). Call {} exactly once more with corrected \
                 arguments, or answer without calling a tool if it cannot be corrected.",
                r.call_id, r.tool, r.tool
            )));
        }
        let response = self
            .ask(
                Ask::new(Stage::Act)
                    .extra(extra)
                    .offer(Offer::Only(definitions))
                    .route(super::super::DeltaRoute::Step(step.id.clone())),
            )
            .await?
            .response;
        self.state.turns += 1;
        if let Some(r) = repair {
            self.st().repair = None;
            if let Err(reason) = self.check_repair(&r, &response.message) {
                return self.reject_repair(policy, &step, &r, &response.message, reason).await;
            }
            let st = self.st();
            if let Some(call) = response.message.tool_calls.first() {
                st.repairing = Some((call.id.clone(), r.call_id.clone()));
            }
            st.tool_repairs += 1;
            st.step_repairs += 1;
        }
        if response.message.has_tool_calls() {
            self.count_tool_calls(&response.message)?;
            self.st().step_messages.push(response.message);
            return self.checkpoint().await;
        }
        // A plain answer is a draft: it does not complete the step; its step result does.
        let st = self.st();
        st.step_messages.push(response.message);
        st.phase = StrictPhase::StepResult { feedback: None };
        self.checkpoint().await
    }

    /// Checks a repair answer before anything runs: one call, the same tool, a new call id,
    /// different canonical arguments and different effective arguments.
    pub(super) fn check_repair(&self, repair: &PendingRepair, answer: &Message) -> Result<(), &'static str> {
        let call = match answer.tool_calls.as_slice() {
            [] => return Err("repair_declined"),
            [call] => call,
            _ => return Err("repair_not_single_call"),
        };
        if call.name != repair.tool {
            return Err("repair_other_tool");
        }
        if call.id == repair.call_id {
            return Err("repair_same_call_id");
        }
        let args = call.parse_arguments().map_err(|_| "repair_invalid_arguments")?;
        if canonical_json(&args) == repair.canonical {
            return Err("repair_same_arguments");
        }
        let tool = self.env.tools.get(&call.name).ok_or("repair_other_tool")?;
        if !tool.entry.validator.problems(&args).is_empty() {
            return Err("repair_invalid_arguments");
        }
        let effective = effective_arguments(&tool.entry.tool.spec().parameters, &args);
        if json_hash(&effective) == repair.effective_hash {
            return Err("repair_same_effective_arguments");
        }
        Ok(())
    }

    /// A repair answer that failed the checks: traced, not run, then the fallback.
    pub(super) async fn reject_repair(
        &mut self,
        policy: &PlanAndExecutePolicy,
        step: &PlanStep,
        repair: &PendingRepair,
        answer: &Message,
        reason: &'static str,
    ) -> Result<(), AgentError> {
        let mode = policy.trace_mode;
        let st = self.st();
        for call in &answer.tool_calls {
            let requested = call
                .parse_arguments()
                .unwrap_or_else(|_| serde_json::Value::String("<invalid JSON>".into()));
            st.push_trace(ToolTraceEntry {
                step_id: sanitize_id(&step.id),
                call_id: sanitize_id(&call.id),
                tool_name: sanitize_id(&call.name),
                ok: false,
                attempts: 0,
                duration_ms: 0,
                error: Some(TraceError {
                    kind: "validation".into(),
                    retryable: false,
                    reason: Some(reason.to_owned()),
                    recovery: None,
                }),
                recovery_of_call_id: Some(sanitize_id(&repair.call_id)),
                arguments: (mode == ToolTraceMode::Arguments).then(|| trace_arguments(&requested)),
                arguments_source: (mode == ToolTraceMode::Arguments).then_some(ArgumentsSource::Requested),
            });
        }
        let failure = failure(reason, Some(&step.id), Some(&repair.tool), Some(&repair.call_id), None);
        // The fallback is recorded on the rejected call's entry; the failed call keeps its
        // `repair_call`.
        let traced = answer
            .tool_calls
            .first()
            .map_or_else(|| repair.call_id.clone(), |c| c.id.clone());
        self.recover(failure, &traced, &repair.tool, false).await
    }

    /// Runs a batch of the current step's calls and classifies how it ended.
    pub(super) async fn strict_run_tools(
        &mut self,
        policy: &PlanAndExecutePolicy,
        step: &PlanStep,
        calls: Vec<ToolCall>,
    ) -> Result<(), AgentError> {
        let recovery = policy.recovery;
        let mode = policy.trace_mode;
        // Only the step's tools (or the tool under repair) may run, also after a resume.
        let repairing = self.st().repairing.clone();
        let mut allowed: HashSet<String> = step.allowed_tools.iter().cloned().collect();
        if let Some((new_id, _)) = &repairing
            && let Some(call) = calls.iter().find(|c| &c.id == new_id)
        {
            allowed = HashSet::from([call.name.clone()]);
        }
        self.offered = Some(allowed);
        let step_id = sanitize_id(&step.id);
        self.run_batch(&calls, true, |env, state, call, report| {
            let requested = call.parse_arguments().ok();
            let (content, is_error, error) = match report.outcome {
                ToolCallOutcome::Ok(value) => (env.result_content(&call.name, value), false, None),
                ToolCallOutcome::Err(e) => (strict_error_content(&e, recovery.feedback_mode), true, Some(e)),
            };
            let recovery_of = repairing
                .as_ref()
                .filter(|(new_id, _)| new_id == &call.id)
                .map(|(_, old)| sanitize_id(old));
            let (arguments, arguments_source) = match (mode, &report.validated) {
                (ToolTraceMode::Arguments, Some(v)) => (Some(trace_arguments(v)), Some(ArgumentsSource::Validated)),
                (ToolTraceMode::Arguments, None) => (
                    Some(trace_arguments(
                        requested
                            .as_ref()
                            .unwrap_or(&serde_json::Value::String("<invalid JSON>".into())),
                    )),
                    Some(ArgumentsSource::Requested),
                ),
                _ => (None, None),
            };
            let verdict = CallVerdict {
                ran: report.validated.is_some(),
                ok: !is_error,
                error: error.clone(),
                canonical: requested.as_ref().map(canonical_json).unwrap_or_default(),
                effective_hash: report.validated.as_ref().map(json_hash),
            };
            let entry = ToolTraceEntry {
                step_id: step_id.clone(),
                call_id: sanitize_id(&call.id),
                tool_name: sanitize_id(&report.identity),
                ok: !is_error,
                attempts: report.attempts,
                duration_ms: report.duration_ms,
                error: error.as_ref().map(trace_error),
                recovery_of_call_id: recovery_of,
                arguments,
                arguments_source,
            };
            // Recorded with the call's result, so a checkpoint taken mid-batch keeps both.
            let st = state.strict_or_init();
            st.batch.insert(call.id.clone(), verdict);
            st.push_trace(entry);
            Message::tool_result(call.id.clone(), call.name.clone(), content, is_error)
        })
        .await?;
        // The batch is complete: its results join the step's conversation in call order.
        let mut verdicts = Vec::with_capacity(calls.len());
        for call in &calls {
            if let Some(m) = self.state.pending_results.remove(&call.id) {
                self.st().step_messages.push(m);
            }
            if let Some(v) = self.st().batch.remove(&call.id) {
                verdicts.push((call.clone(), v));
            }
        }
        let st = self.st();
        st.batch.clear();
        st.repairing = None;
        let succeeded = verdicts.iter().filter(|(_, v)| v.ok).count();
        let failed: Vec<&(ToolCall, CallVerdict)> = verdicts.iter().filter(|(_, v)| v.ran && !v.ok).collect();
        let Some((call, verdict)) = failed.first().map(|(c, v)| (c.clone(), v.clone())) else {
            if succeeded > 0 {
                // ACT_TOOL → STEP_RESULT: the step's outcome is asked for next.
                st.phase = StrictPhase::StepResult { feedback: None };
            }
            // Calls refused before running were fed back: the model acts again.
            return self.checkpoint().await;
        };
        let error = verdict.error.clone();
        if succeeded > 0 {
            // Side effects already happened in this batch: never re-run them.
            let f = failure(
                "partial_batch_failure",
                Some(&step.id),
                Some(&call.name),
                Some(&call.id),
                error.as_ref(),
            );
            return self.terminal(f, &call.id, &call.name).await;
        }
        let action = error.as_ref().and_then(|e| e.recovery);
        match action {
            Some(RecoveryAction::Fail) => {
                let cause = if error
                    .as_ref()
                    .is_some_and(|e| e.kind == crate::tool::ToolErrorKind::Timeout)
                {
                    // A timed-out blocking tool may still be running: never replanned.
                    "uncancellable_timeout"
                } else {
                    "tool_requested_fail"
                };
                let f = failure(cause, Some(&step.id), Some(&call.name), Some(&call.id), error.as_ref());
                self.terminal(f, &call.id, &call.name).await
            }
            Some(RecoveryAction::Replan) => {
                let f = failure(
                    "tool_requested_replan",
                    Some(&step.id),
                    Some(&call.name),
                    Some(&call.id),
                    error.as_ref(),
                );
                self.recover(f, &call.id, &call.name, true).await
            }
            Some(RecoveryAction::RepairCall) => {
                let repair_safe = self
                    .env
                    .tools
                    .get(&call.name)
                    .is_some_and(|t| t.entry.tool.spec().repair_safe);
                let cause = if failed.len() > 1 || calls.len() > 1 {
                    Some("repair_not_single_call")
                } else if recovery.require_repair_safe && !repair_safe {
                    Some("repair_not_safe")
                } else if self.st().step_repairs >= self.env.agent.limits.max_tool_repair_attempts {
                    Some("repair_limit")
                } else {
                    None
                };
                if let Some(cause) = cause {
                    let f = failure(cause, Some(&step.id), Some(&call.name), Some(&call.id), error.as_ref());
                    return self.recover(f, &call.id, &call.name, false).await;
                }
                let st = self.st();
                st.repair = Some(PendingRepair {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    canonical: verdict.canonical.clone(),
                    effective_hash: verdict.effective_hash.clone().unwrap_or_default(),
                });
                st.set_trace_recovery(&call.id, "repair_call");
                let run_id = self.run_id();
                self.emit(AgentEvent::ToolRecovery {
                    run_id,
                    step_id: step.id.clone(),
                    call_id: sanitize_id(&call.id),
                    tool: sanitize_id(&call.name),
                    action: "repair_call".into(),
                    reason: error.as_ref().map(|e| sanitize_id(&e.reason)),
                })
                .await;
                self.checkpoint().await
            }
            // Retry already happened where allowed (same call, same arguments); what is left
            // is the fallback.
            Some(RecoveryAction::RetryCall) | None => {
                let f = failure(
                    "tool_failed",
                    Some(&step.id),
                    Some(&call.name),
                    Some(&call.id),
                    error.as_ref(),
                );
                self.recover(f, &call.id, &call.name, false).await
            }
        }
    }
}
