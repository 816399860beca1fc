//! RECOVERING: what a failed tool call means for the step (retry already happened in the tool
//! gate; repair, replan or fail), the repair check, and the terminal failures. Pure functions
//! of the strict state: no IO.

use super::state::{PendingRepair, StrictPhase, StrictState, failure, trace_arguments};
use super::{ArgumentsSource, PlanFailure, PlanStep, ToolTraceEntry, TraceError};
use super::{PlanAndExecutePolicy, RecoveryFallback, ToolTraceMode};
use crate::canonical::{canonical_json, effective_arguments, json_hash, sanitize_id};
use crate::codes::PlanFailureCause;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::{Message, ToolCall};
use crate::runner::policy::{Next, Out, View};
use crate::tool::{RecoveryAction, ToolErrorKind};

/// Checks a repair answer before anything runs: one call, the same tool, a new call id,
/// different canonical arguments and different effective arguments.
pub(crate) fn check_repair(view: &dyn View, repair: &PendingRepair, answer: &Message) -> Result<(), PlanFailureCause> {
    let call = match answer.tool_calls.as_slice() {
        [] => return Err(PlanFailureCause::RepairDeclined),
        [call] => call,
        _ => return Err(PlanFailureCause::RepairNotSingleCall),
    };
    if call.name != repair.tool {
        return Err(PlanFailureCause::RepairOtherTool);
    }
    if call.id == repair.call_id {
        return Err(PlanFailureCause::RepairSameCallId);
    }
    let args = call
        .parse_arguments()
        .map_err(|_| PlanFailureCause::RepairInvalidArguments)?;
    if canonical_json(&args) == repair.canonical {
        return Err(PlanFailureCause::RepairSameArguments);
    }
    let spec = view.spec(&call.name).ok_or(PlanFailureCause::RepairOtherTool)?;
    if !view.valid_arguments(&call.name, &args) {
        return Err(PlanFailureCause::RepairInvalidArguments);
    }
    let effective = effective_arguments(&spec.parameters, &args);
    if json_hash(&effective) == repair.effective_hash {
        return Err(PlanFailureCause::RepairSameEffectiveArguments);
    }
    Ok(())
}

/// A repair answer that failed the checks: traced, not run, then the fallback.
pub(crate) fn reject_repair(
    st: &mut StrictState,
    mode: ToolTraceMode,
    step: &PlanStep,
    repair: &PendingRepair,
    answer: &Message,
    reason: PlanFailureCause,
) -> Next {
    for call in &answer.tool_calls {
        let requested = call
            .parse_arguments()
            .unwrap_or_else(|_| serde_json::Value::String("<invalid JSON>".into()));
        let mut error = TraceError::new("validation", false);
        error.reason = Some(reason.as_str().to_owned());
        let mut entry = ToolTraceEntry::new(sanitize_id(&step.id), sanitize_id(&call.id), sanitize_id(&call.name));
        entry.error = Some(error);
        entry.recovery_of_call_id = Some(sanitize_id(&repair.call_id));
        entry.arguments = (mode == ToolTraceMode::Arguments).then(|| trace_arguments(&requested));
        entry.arguments_source = (mode == ToolTraceMode::Arguments).then_some(ArgumentsSource::Requested);
        st.push_trace(entry);
    }
    let failure = failure(reason, Some(&step.id), Some(&repair.tool), Some(&repair.call_id), None);
    // The fallback is recorded on the rejected call's entry; the failed call keeps its
    // `repair_call`.
    let traced = answer
        .tool_calls
        .first()
        .map_or_else(|| repair.call_id.clone(), |c| c.id.clone());
    recover(st, failure, &traced, &repair.tool, false)
}

/// Saves the decision to recover (the batch's results with it); the RECOVERING phase recovers.
pub(crate) fn recover(
    st: &mut StrictState,
    failure: PlanFailure,
    call_id: &str,
    tool: &str,
    replan_requested: bool,
) -> Next {
    st.phase = StrictPhase::Recovering {
        failure,
        call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        replan_requested,
    };
    Next::Save
}

/// RECOVERING: `Ok(failure)` to replan (when the configuration or the tool asks for it and
/// replans remain), else the terminal error.
pub(crate) fn fallback(
    st: &mut StrictState,
    policy: &PlanAndExecutePolicy,
    view: &dyn View,
    mut failure: PlanFailure,
    (call_id, tool): (&str, &str),
    tool_asked_replan: bool,
    out: &mut Out,
) -> Result<PlanFailure, AgentError> {
    let run_id = view.run_id();
    let wants_replan = tool_asked_replan || policy.recovery.fallback == RecoveryFallback::Replan;
    if !wants_replan {
        return Err(terminal(st, failure, call_id, tool, out, run_id));
    }
    if st.replans >= view.limits().max_replans {
        failure.cause = PlanFailureCause::ReplanLimit;
        return Err(terminal(st, failure, call_id, tool, out, run_id));
    }
    st.set_trace_recovery(call_id, "replan");
    let step_id = st.current_step_id();
    out.push(|| AgentEvent::ToolRecovery {
        run_id: run_id.to_owned(),
        step_id,
        call_id: sanitize_id(call_id),
        tool: sanitize_id(tool),
        action: "replan".into(),
        reason: failure.reason.clone(),
    });
    Ok(failure)
}

/// Ends the run: the failure is recorded and the step fails.
pub(crate) fn terminal(
    st: &mut StrictState,
    failure: PlanFailure,
    call_id: &str,
    tool: &str,
    out: &mut Out,
    run_id: &str,
) -> AgentError {
    st.set_trace_recovery(call_id, "fail");
    let step_id = failure.step_id.clone();
    let cause = failure.cause.clone();
    out.push(|| AgentEvent::ToolRecovery {
        run_id: run_id.to_owned(),
        step_id: step_id.clone().unwrap_or_default(),
        call_id: sanitize_id(call_id),
        tool: sanitize_id(tool),
        action: "fail".into(),
        reason: failure.reason.clone(),
    });
    st.failure = Some(failure);
    AgentError::PlanFailed { cause, step_id }
}

/// Records a failure that ends the run.
pub(crate) fn record_failure(st: &mut StrictState, failure: PlanFailure) -> AgentError {
    let cause = failure.cause.clone();
    let step_id = failure.step_id.clone();
    st.failure = Some(failure);
    AgentError::PlanFailed { cause, step_id }
}

/// A finished ACT_TOOL batch: its results join the step's conversation in call order, and
/// how its calls ended decides what follows (STEP_RESULT, act again, repair, recover, fail).
pub(crate) fn classify_batch(
    st: &mut StrictState,
    pending: &mut crate::runner::state::CallResults,
    view: &dyn View,
    policy: &PlanAndExecutePolicy,
    step: &PlanStep,
    calls: &[ToolCall],
    out: &mut Out,
) -> Next {
    let recovery = policy.recovery;
    let run_id = view.run_id();
    let mut verdicts = Vec::with_capacity(calls.len());
    for call in calls {
        if let Some(m) = pending.remove(&call.id) {
            st.step_messages.push(m);
        }
        if let Some(v) = st.batch.remove(&call.id) {
            verdicts.push((call, v));
        }
    }
    st.batch.clear();
    st.repairing = None;
    let succeeded = verdicts.iter().filter(|(_, v)| v.ok).count();
    let failed: Vec<_> = verdicts.iter().filter(|(_, v)| v.ran && !v.ok).collect();
    let Some((call, verdict)) = failed.first().map(|(c, v)| (*c, v.clone())) else {
        if succeeded > 0 {
            // ACT_TOOL → STEP_RESULT: the step's outcome is asked for next.
            st.phase = StrictPhase::StepResult { feedback: None };
        }
        // Calls refused before running were fed back: the model acts again.
        return Next::Save;
    };
    let error = verdict.error.clone();
    let fail =
        |cause: PlanFailureCause| failure(cause, Some(&step.id), Some(&call.name), Some(&call.id), error.as_ref());
    if succeeded > 0 {
        // Side effects already happened in this batch: never re-run them.
        let f = fail(PlanFailureCause::PartialBatchFailure);
        return Next::Fail(terminal(st, f, &call.id, &call.name, out, run_id));
    }
    match error.as_ref().and_then(|e| e.recovery) {
        Some(RecoveryAction::Fail) => {
            let cause = if error.as_ref().is_some_and(|e| e.kind == ToolErrorKind::Timeout) {
                // A timed-out blocking tool may still be running: never replanned.
                PlanFailureCause::UncancellableTimeout
            } else {
                PlanFailureCause::ToolRequestedFail
            };
            Next::Fail(terminal(st, fail(cause), &call.id, &call.name, out, run_id))
        }
        Some(RecoveryAction::Replan) => recover(
            st,
            fail(PlanFailureCause::ToolRequestedReplan),
            &call.id,
            &call.name,
            true,
        ),
        Some(RecoveryAction::RepairCall) => {
            let repair_safe = view.spec(&call.name).is_some_and(|s| s.repair_safe);
            let cause = if failed.len() > 1 || calls.len() > 1 {
                Some(PlanFailureCause::RepairNotSingleCall)
            } else if recovery.require_repair_safe && !repair_safe {
                Some(PlanFailureCause::RepairNotSafe)
            } else if st.step_repairs >= view.limits().max_tool_repair_attempts {
                Some(PlanFailureCause::RepairLimit)
            } else {
                None
            };
            if let Some(cause) = cause {
                return recover(st, fail(cause), &call.id, &call.name, false);
            }
            st.repair = Some(PendingRepair {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                canonical: verdict.canonical.clone(),
                effective_hash: verdict.effective_hash.clone().unwrap_or_default(),
            });
            st.set_trace_recovery(&call.id, "repair_call");
            out.push(|| AgentEvent::ToolRecovery {
                run_id: run_id.to_owned(),
                step_id: step.id.clone(),
                call_id: sanitize_id(&call.id),
                tool: sanitize_id(&call.name),
                action: "repair_call".into(),
                reason: error.as_ref().map(|e| sanitize_id(&e.reason)),
            });
            Next::Save
        }
        // Retry already happened where allowed (same call, same arguments); what is left is
        // the fallback.
        // A recovery this version does not know takes the fallback too.
        _ => recover(st, fail(PlanFailureCause::ToolFailed), &call.id, &call.name, false),
    }
}
