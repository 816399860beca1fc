//! STEP_RESULT (STEP_VALIDATE, COMMIT) and VERIFY.

use super::prompts;
use super::recovery::record_failure;
use super::state::{StrictPhase, StrictState, step_result_codec};
use super::{PlanFailure, PlanStep, StepOutcome, StepStatus};
use crate::canonical::sanitize_id;
use crate::codes::PlanFailureCause;
use crate::event::AgentEvent;
use crate::message::Message;
use crate::output::OutputCodec;
use crate::runner::policy::{Answer, Next, Out, View};

/// The STEP_RESULT answer: STEP_VALIDATE, then COMMIT (next step or VERIFY), or a rejection
/// (ask again, act again, or `step_attempts_exhausted`).
pub(crate) fn step_result(
    st: &mut StrictState,
    view: &dyn View,
    step: &PlanStep,
    answer: Answer,
    out: &mut Out,
) -> Next {
    let text = answer.response.message.text();
    let run_id = view.run_id();
    let attempt = {
        let current = st.current;
        let Some(s) = st.plan.steps.get_mut(current) else {
            return Next::Save;
        };
        s.attempts += 1;
        s.attempts
    };
    let verdict = match step_result_codec().parse(&text) {
        Ok(result) if result.status == StepOutcome::Completed && !result.result.trim().is_empty() => Ok(result.result),
        Ok(result) if result.status == StepOutcome::Completed => {
            Err(("invalid_step_result", prompts::STEP_RESULT_EMPTY.to_owned()))
        }
        Ok(_) => Err(("step_reported_failed", prompts::step_not_complete(&step.id))),
        Err(e) => Err(("invalid_step_result", prompts::step_result_invalid(&e.message))),
    };
    match verdict {
        Ok(result) => {
            // STEP_VALIDATE passed: COMMIT.
            let current = st.current;
            if let Some(s) = st.plan.steps.get_mut(current) {
                s.status = StepStatus::Completed;
                s.result = Some(result);
            }
            st.step_messages.clear();
            st.step_repairs = 0;
            st.repair = None;
            let next = st
                .plan
                .steps
                .iter()
                .enumerate()
                .skip(st.current + 1)
                .find(|(_, s)| s.status == StepStatus::Pending)
                .map(|(i, _)| i);
            match next {
                Some(i) => {
                    st.current = i;
                    st.phase = StrictPhase::Act;
                }
                None => st.phase = StrictPhase::Verify,
            }
            out.push(|| AgentEvent::StepCommitted {
                run_id: run_id.to_owned(),
                step_id: step.id.clone(),
            });
            Next::Save
        }
        Err((reason, message)) => {
            let reported_failed = reason == "step_reported_failed";
            out.push(|| AgentEvent::StepResultRejected {
                run_id: run_id.to_owned(),
                step_id: step.id.clone(),
                reason: reason.into(),
                attempt,
            });
            if attempt >= view.limits().max_step_attempts {
                let mut f = PlanFailure::new(PlanFailureCause::StepAttemptsExhausted);
                f.step_id = Some(sanitize_id(&step.id));
                f.error_class = Some("step_result".into());
                f.reason = Some(reason.into());
                return Next::Fail(record_failure(st, f));
            }
            if reported_failed {
                st.step_messages.push(Message::assistant(text));
                st.step_messages.push(Message::user(message));
                st.phase = StrictPhase::Act;
                let index = st.current;
                out.push(|| AgentEvent::StepStarted {
                    run_id: run_id.to_owned(),
                    step_id: step.id.clone(),
                    index,
                    attempt: attempt + 1,
                });
            } else {
                st.phase = StrictPhase::StepResult {
                    feedback: Some(message),
                };
            }
            Next::Save
        }
    }
}

/// VERIFY: every step that was not superseded is committed (no model call).
pub(crate) fn verify(st: &mut StrictState, view: &dyn View, out: &mut Out) -> Next {
    let active: Vec<&PlanStep> = st
        .plan
        .steps
        .iter()
        .filter(|s| s.status != StepStatus::Superseded)
        .collect();
    if active.is_empty() || active.iter().any(|s| s.status != StepStatus::Completed) {
        let pending = active
            .iter()
            .find(|s| s.status != StepStatus::Completed)
            .map(|s| s.id.clone());
        let mut f = PlanFailure::new(PlanFailureCause::VerifyFailed);
        f.step_id = pending.as_deref().map(sanitize_id);
        f.error_class = Some("plan".into());
        return Next::Fail(record_failure(st, f));
    }
    let steps = active.len();
    st.phase = StrictPhase::Finalize;
    out.push(|| AgentEvent::PlanVerified {
        run_id: view.run_id().to_owned(),
        steps,
    });
    Next::Save
}
