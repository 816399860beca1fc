//! STEP_RESULT, VERIFY and FINALIZE: the step's result, the plan's check, the final answer.

use super::super::Run;
use super::super::ask::{Ask, Format, Offer};
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::{Message, Role};
use crate::output::OutputCodec;
use crate::plan::{PlanFailure, PlanStep, StepOutcome, StepStatus, sanitize_id};
use crate::provider::Stage;

use super::*;

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    pub(super) async fn strict_step_result(&mut self, feedback: Option<String>) -> Result<(), AgentError> {
        let Some(step) = self.st().current_step().cloned() else {
            self.st().phase = StrictPhase::Verify;
            return Ok(());
        };
        let codec = step_result_codec();
        let format = codec.response_format();
        let mut extra = vec![Message::user(self.plan_context())];
        extra.extend(self.st().step_messages.iter().cloned());
        extra.push(Message::user(format!(
            "Report the outcome of step {} now, as JSON that fits the schema: status \"completed\" \
             when the step's goal was reached, \"failed\" otherwise, and result: the facts later steps \
             need. Do not call tools.",
            step.id
        )));
        if let Some(feedback) = feedback {
            extra.push(Message::user(feedback));
        }
        let response = self
            .ask(
                Ask::new(Stage::Act)
                    .extra(extra)
                    .offer(Offer::Only(Vec::new()))
                    .format(Format::Fixed(format))
                    .route(super::super::DeltaRoute::Step(step.id.clone())),
            )
            .await?
            .response;
        let text = response.message.text();
        let max_attempts = self.env.agent.limits.max_step_attempts;
        let st = self.st();
        let attempt = {
            let Some(s) = st.plan.steps.get_mut(st.current) else {
                return Ok(());
            };
            s.attempts += 1;
            s.attempts
        };
        let verdict = match codec.parse(&text) {
            Ok(result) if result.status == StepOutcome::Completed && !result.result.trim().is_empty() => {
                Ok(result.result)
            }
            Ok(result) if result.status == StepOutcome::Completed => Err((
                "invalid_step_result",
                "Your step result could not be used: result is empty. Answer again with only the JSON step result."
                    .to_owned(),
            )),
            Ok(_) => Err((
                "step_reported_failed",
                format!(
                    "Step {} is not complete. Work on it again: use the step's tools if they help, then report.",
                    step.id
                ),
            )),
            Err(e) => Err((
                "invalid_step_result",
                format!(
                    "Your step result could not be used: {}. Answer again with only the JSON step result.",
                    e.message
                ),
            )),
        };
        match verdict {
            Ok(result) => {
                // STEP_VALIDATE passed: COMMIT.
                if let Some(s) = st.plan.steps.get_mut(st.current) {
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
                let run_id = self.run_id();
                self.emit(AgentEvent::StepCommitted {
                    run_id,
                    step_id: step.id.clone(),
                })
                .await;
                self.checkpoint().await
            }
            Err((reason, message)) => {
                let reported_failed = reason == "step_reported_failed";
                if attempt >= max_attempts {
                    let f = PlanFailure {
                        step_id: Some(sanitize_id(&step.id)),
                        tool_name: None,
                        call_id: None,
                        error_class: Some("step_result".into()),
                        reason: Some(reason.into()),
                        cause: "step_attempts_exhausted".into(),
                    };
                    let run_id = self.run_id();
                    self.emit(AgentEvent::StepResultRejected {
                        run_id,
                        step_id: step.id.clone(),
                        reason: reason.into(),
                        attempt,
                    })
                    .await;
                    return Err(self.record_failure(f));
                }
                if reported_failed {
                    st.step_messages.push(Message::assistant(text));
                    st.step_messages.push(Message::user(message));
                    st.phase = StrictPhase::Act;
                } else {
                    st.phase = StrictPhase::StepResult {
                        feedback: Some(message),
                    };
                }
                let run_id = self.run_id();
                self.emit(AgentEvent::StepResultRejected {
                    run_id: run_id.clone(),
                    step_id: step.id.clone(),
                    reason: reason.into(),
                    attempt,
                })
                .await;
                if reported_failed {
                    let index = self.st().current;
                    self.emit(AgentEvent::StepStarted {
                        run_id,
                        step_id: step.id.clone(),
                        index,
                        attempt: attempt + 1,
                    })
                    .await;
                }
                self.checkpoint().await
            }
        }
    }

    // ----- VERIFY -----

    pub(super) async fn strict_verify(&mut self) -> Result<(), AgentError> {
        let st = self.st();
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
            let f = PlanFailure {
                step_id: pending.as_deref().map(sanitize_id),
                tool_name: None,
                call_id: None,
                error_class: Some("plan".into()),
                reason: None,
                cause: "verify_failed".into(),
            };
            return Err(self.record_failure(f));
        }
        let steps = active.len();
        st.phase = StrictPhase::Finalize;
        let run_id = self.run_id();
        self.emit(AgentEvent::PlanVerified { run_id, steps }).await;
        self.checkpoint().await
    }

    // ----- FINALIZE, DONE -----

    pub(super) async fn strict_finalize(&mut self) -> Result<O, AgentError> {
        let mut summary = String::from("Verified results of the plan's steps:\n");
        for step in self
            .st()
            .plan
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
        {
            summary.push_str(&format!(
                "- {}: {} — {}\n",
                step.id,
                step.description,
                step.result.as_deref().unwrap_or("")
            ));
        }
        summary.push_str(
            "\nWrite the final answer to the request above now, using only these results, in the requested format, without calling tools.",
        );
        let format = self.env.agent.codec.response_format();
        let structured = format.is_some();
        // Text streams as FinalDelta as it arrives. A structured answer may fail to parse and
        // be corrected, so it streams as internal work, and the answer that is returned goes
        // out as one FinalDelta once it parsed: `FinalDelta` never shows a rejected answer.
        let route = if structured {
            super::super::DeltaRoute::Step("finalize".into())
        } else {
            super::super::DeltaRoute::Final
        };
        let answer = self
            .ask(
                Ask::new(Stage::Finalize)
                    .extra(vec![Message::user(summary)])
                    .format(Format::Fixed(format))
                    .route(route),
            )
            .await?;
        let output = self
            .accept_final(
                answer.response.message,
                answer.format,
                super::super::DeltaRoute::Step("finalize".into()),
            )
            .await?;
        let text = self
            .state
            .messages
            .last()
            .filter(|m| m.role == Role::Assistant)
            .map(Message::text)
            .unwrap_or_default();
        if structured && self.env.emitter.active() && !text.is_empty() {
            self.env
                .emitter
                .emit(AgentEvent::FinalDelta {
                    run_id: self.env.ctx.run_id().to_owned(),
                    text: text.clone(),
                })
                .await;
        }
        let st = self.st();
        st.final_text = Some(text);
        st.final_emitted = true;
        st.phase = StrictPhase::Done;
        // DONE is saved before the answer leaves: resuming this run again returns it instead of
        // finalizing a second time.
        self.checkpoint().await?;
        Ok(output)
    }

    /// A DONE run's stored answer (no model call, no deltas); `None` when it cannot be parsed.
    pub(super) fn strict_replay(&mut self) -> Option<Result<O, AgentError>> {
        let st = self.st();
        if !st.final_emitted {
            return None;
        }
        let text = st.final_text.clone()?;
        st.replayed = true;
        match self.env.agent.codec.parse(&text) {
            Ok(output) => Some(Ok(output)),
            Err(e) => Some(Err(AgentError::Output { message: e.message })),
        }
    }
}
