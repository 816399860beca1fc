//! The strict Plan-and-Execute policy as a sans-IO machine over [`StrictState`]: every
//! transition of the table in docs/architecture.md is a plain function of the state, the run's
//! facts and what the last step produced. The driver does the asking, the tools, the
//! checkpoints and the events.

use crate::codes::PlanFailureCause;
use std::collections::HashSet;

use super::planning::{Planning, check_draft, commit_plan, plan_invalid};
use super::recovery::{check_repair, classify_batch, fallback, record_failure, reject_repair};
use super::state::{
    CallVerdict, PendingRepair, STRICT_STATE_VERSION, StrictPhase, StrictState, error_code, failure, step_result_codec,
    strict_error_content, trace_arguments, trace_error,
};
use super::steps::{step_result, verify};
use super::{ArgumentsSource, PlanAndExecutePolicy, ToolTraceMode, prompts};
use super::{PlanFailure, PlanStep, StepStatus, ToolTraceEntry};
use crate::canonical::{canonical_json, json_hash, sanitize_id};
use crate::context_provider::Stage;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::{ContentPart, Message, Role, ToolCall};
use crate::model::ToolDefinition;
use crate::output::OutputCodec;
use crate::runner::policy::{
    Answer, Ask, CallReport, DeltaRoute, Fed, Format, ModelSlot, Next, Offer, Out, Policy, ToolCallOutcome, View,
    count_tool_calls,
};
use crate::runner::state::RunState;

/// The request in flight (what its answer means). Not saved: a run that stops between a
/// request and its answer asks again from the saved phase.
#[derive(Debug)]
enum Awaiting {
    Plan {
        why: Planning,
        attempt: u8,
        max: usize,
        known: HashSet<String>,
        format: Option<crate::model::ResponseFormat>,
        extra: Vec<Message>,
    },
    Act {
        step: PlanStep,
        repair: Option<PendingRepair>,
    },
    StepResult {
        step: PlanStep,
    },
    Finalize,
    /// A tool batch of this step.
    Tools {
        step: PlanStep,
        calls: Vec<ToolCall>,
    },
    /// DONE was saved: the accepted answer is the output.
    Returning,
}

/// The strict policy's machine.
pub(crate) struct Strict {
    policy: PlanAndExecutePolicy,
    asked: Option<Awaiting>,
}

impl Strict {
    pub(crate) fn new(policy: PlanAndExecutePolicy) -> Self {
        Strict { policy, asked: None }
    }

    /// The most steps a plan may have.
    fn max_steps(&self, view: &dyn View) -> usize {
        view.limits().max_steps.min(self.policy.generator.max_steps) as usize
    }

    /// What to do from the state alone (after a start, a save or a batch).
    fn decide(&mut self, state: &mut RunState, view: &dyn View, out: &mut Out) -> Next {
        loop {
            let phase = state.strict_or_init().phase.clone();
            let next = match phase {
                StrictPhase::Plan => {
                    let max = self.max_steps(view);
                    let tools = view.enabled_tools();
                    let prompt = prompts::plan(max, &prompts::catalogue(&tools, &self.policy));
                    self.ask_planner(Planning::First, &tools, prompt, max)
                }
                StrictPhase::Act => self.act(state, view, out),
                StrictPhase::StepResult { feedback } => self.ask_step_result(state.strict_or_init(), feedback),
                StrictPhase::Recovering {
                    failure,
                    call_id,
                    tool,
                    replan_requested,
                } => {
                    let st = state.strict_or_init();
                    match fallback(
                        st,
                        &self.policy,
                        view,
                        failure,
                        (&call_id, &tool),
                        replan_requested,
                        out,
                    ) {
                        Ok(failure) => self.replan(st, view, failure),
                        Err(e) => Some(Next::Fail(e)),
                    }
                }
                StrictPhase::Verify => Some(verify(state.strict_or_init(), view, out)),
                StrictPhase::Finalize => {
                    let st = state.strict_or_init();
                    let format = view.final_format();
                    // Text streams as FinalDelta as it arrives. A structured answer may fail to
                    // parse and be corrected, so it streams as internal work, and the answer that
                    // is returned goes out as one FinalDelta once it parsed: `FinalDelta` never
                    // shows a rejected answer.
                    let route = if format.is_some() {
                        DeltaRoute::Step("finalize".into())
                    } else {
                        DeltaRoute::Final
                    };
                    self.asked = Some(Awaiting::Finalize);
                    Some(Next::Ask(
                        Ask::new(Stage::Finalize)
                            .extra(vec![Message::user(prompts::finalize(st))])
                            .format(Format::Fixed(format))
                            .route(route),
                    ))
                }
                StrictPhase::Done => {
                    let st = state.strict_or_init();
                    match st.final_text.clone().filter(|_| st.final_emitted) {
                        Some(text) => {
                            st.replayed = true;
                            Some(Next::Replay { text })
                        }
                        None => {
                            st.phase = StrictPhase::Finalize;
                            None
                        }
                    }
                }
            };
            // `None`: the phase changed without IO; decide again.
            if let Some(next) = next {
                return next;
            }
        }
    }

    /// A PLAN request (the first of at most two).
    fn ask_planner(&mut self, why: Planning, tools: &[ToolDefinition], prompt: String, max: usize) -> Option<Next> {
        let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        let format = Some(prompts::plan_format(max, &names));
        let known = names.into_iter().collect();
        let extra = vec![Message::user(prompt)];
        let ask = planner_ask(extra.clone(), format.clone());
        self.asked = Some(Awaiting::Plan {
            why,
            attempt: 1,
            max,
            known,
            format,
            extra,
        });
        Some(Next::Ask(ask))
    }

    /// REPLAN: the planner revises the unfinished part of the plan.
    fn replan(&mut self, st: &mut StrictState, view: &dyn View, failure: PlanFailure) -> Option<Next> {
        let max = self.max_steps(view);
        let completed = st
            .plan
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
            .count();
        let room = max.saturating_sub(completed);
        if room == 0 {
            let mut f = failure;
            f.cause = PlanFailureCause::MaxSteps;
            return Some(Next::Fail(record_failure(st, f)));
        }
        let tools = view.enabled_tools();
        let prompt = prompts::replan(st, &failure, room, &prompts::catalogue(&tools, &self.policy));
        self.ask_planner(Planning::Replan(failure), &tools, prompt, room)
    }

    /// ACT_TOOL: the step's request (or its unanswered calls).
    fn act(&mut self, state: &mut RunState, view: &dyn View, out: &mut Out) -> Option<Next> {
        let turns = state.turns;
        let st = state.strict_or_init();
        let current = st.current;
        let Some(step) = st.plan.steps.get_mut(current) else {
            st.phase = StrictPhase::Verify;
            return None;
        };
        if step.status == StepStatus::Pending {
            step.status = StepStatus::InProgress;
            let (step_id, attempt) = (step.id.clone(), step.attempts + 1);
            out.push(|| AgentEvent::StepStarted {
                run_id: view.run_id().to_owned(),
                step_id,
                index: current,
                attempt,
            });
        }
        let step = step.clone();
        let repair = st.repair.clone();
        // Calls of the last answer without results (also after a resume): run them.
        let unanswered = st
            .step_messages
            .last()
            .filter(|m| m.role == Role::Assistant && m.has_tool_calls())
            .map(|m| m.tool_calls.clone());
        if let Some(calls) = unanswered {
            // Only the step's tools (or the tool under repair) may run, also after a resume.
            let mut allowed: HashSet<String> = step.allowed_tools.iter().cloned().collect();
            if let Some((new_id, _)) = &st.repairing
                && let Some(call) = calls.iter().find(|c| &c.id == new_id)
            {
                allowed = HashSet::from([call.name.clone()]);
            }
            self.asked = Some(Awaiting::Tools {
                step,
                calls: calls.clone(),
            });
            return Some(Next::RunTools {
                calls,
                allowed: Some(allowed),
            });
        }
        let names: Vec<&String> = match &repair {
            Some(r) => vec![&r.tool],
            None => step.allowed_tools.iter().collect(),
        };
        let definitions: Vec<ToolDefinition> = names.iter().filter_map(|n| view.enabled_tool(n)).collect();
        if definitions.is_empty() && repair.is_none() {
            // Nothing to act with: the step's result is next.
            st.phase = StrictPhase::StepResult { feedback: None };
            return Some(Next::Save);
        }
        let limit = view.limits().max_turns;
        if turns >= limit {
            return Some(Next::Fail(AgentError::MaxTurnsExceeded { limit }));
        }
        let mut extra = vec![Message::user(prompts::plan_context(st))];
        extra.extend(st.step_messages.iter().cloned());
        if let Some(r) = &repair {
            extra.push(Message::user(prompts::repair(&r.call_id, &r.tool)));
        }
        let route = DeltaRoute::Step(step.id.clone());
        self.asked = Some(Awaiting::Act { step, repair });
        Some(Next::Ask(
            Ask::new(Stage::Act)
                .extra(extra)
                .offer(Offer::Only(definitions))
                .route(route),
        ))
    }

    /// STEP_RESULT: the request for the current step's outcome.
    fn ask_step_result(&mut self, st: &mut StrictState, feedback: Option<String>) -> Option<Next> {
        let Some(step) = st.current_step().cloned() else {
            st.phase = StrictPhase::Verify;
            return None;
        };
        let mut extra = vec![Message::user(prompts::plan_context(st))];
        extra.extend(st.step_messages.iter().cloned());
        extra.push(Message::user(prompts::step_result(&step.id)));
        if let Some(feedback) = feedback {
            extra.push(Message::user(feedback));
        }
        let route = DeltaRoute::Step(step.id.clone());
        self.asked = Some(Awaiting::StepResult { step });
        Some(Next::Ask(
            Ask::new(Stage::Act)
                .extra(extra)
                .offer(Offer::Only(Vec::new()))
                .format(Format::Fixed(step_result_codec().response_format()))
                .route(route),
        ))
    }

    /// The planner's answer: steps that validate, or one corrective request, or `plan_invalid`.
    fn planned(
        &mut self,
        st: &mut StrictState,
        view: &dyn View,
        awaiting: Awaiting,
        answer: Answer,
        out: &mut Out,
    ) -> Next {
        let Awaiting::Plan {
            why,
            attempt,
            max,
            known,
            format,
            mut extra,
        } = awaiting
        else {
            return unexpected();
        };
        let text = answer.response.message.text();
        // A plan cut at the output limit is not sent back: it is as long as the limit allows,
        // and repeating it would only grow the corrective request.
        let cut = answer.cut();
        let (reason, problem) = match check_draft(&text, max, &known) {
            Ok(steps) => return commit_plan(st, view, why, steps, out),
            Err(_) if cut => ("answer_cut", String::new()),
            Err(rejected) => rejected,
        };
        if attempt >= 2 {
            return Next::Fail(record_failure(st, plan_invalid(why, reason)));
        }
        if cut {
            extra.push(Message::user(prompts::plan_cut(max)));
        } else {
            extra.push(Message::assistant(text));
            extra.push(Message::user(prompts::plan_rejected(&problem)));
        }
        let ask = planner_ask(extra.clone(), format.clone());
        self.asked = Some(Awaiting::Plan {
            why,
            attempt: attempt + 1,
            max,
            known,
            format,
            extra,
        });
        Next::Ask(ask)
    }

    /// The ACT_TOOL answer: tool calls to run (after the repair check), or a draft.
    fn acted(
        &mut self,
        state: &mut RunState,
        view: &dyn View,
        step: PlanStep,
        repair: Option<PendingRepair>,
        answer: Answer,
    ) -> Next {
        state.turns += 1;
        let message = answer.response.message;
        if let Some(r) = repair {
            let st = state.strict_or_init();
            st.repair = None;
            if let Err(reason) = check_repair(view, &r, &message) {
                return reject_repair(st, self.policy.trace_mode, &step, &r, &message, reason);
            }
            if let Some(call) = message.tool_calls.first() {
                st.repairing = Some((call.id.clone(), r.call_id.clone()));
            }
            st.tool_repairs += 1;
            st.step_repairs += 1;
        }
        if message.has_tool_calls() {
            if let Err(e) = count_tool_calls(state, view, &message) {
                return Next::Fail(e);
            }
            state.strict_or_init().step_messages.push(message);
            return Next::Save;
        }
        // A plain answer is a draft: it does not complete the step; its step result does.
        let st = state.strict_or_init();
        st.step_messages.push(message);
        st.phase = StrictPhase::StepResult { feedback: None };
        Next::Save
    }
}

impl Policy for Strict {
    fn next(&mut self, state: &mut RunState, view: &dyn View, fed: Fed, out: &mut Out) -> Next {
        match fed {
            Fed::Start => {
                let version = state.strict_or_init().version;
                if version > STRICT_STATE_VERSION {
                    return Next::Fail(AgentError::CheckpointInvalid {
                        run_id: view.run_id().to_owned(),
                        message: format!(
                            "the strict state has version {version}; this build reads up to {STRICT_STATE_VERSION}"
                        ),
                    });
                }
                self.decide(state, view, out)
            }
            Fed::Saved => match self.asked {
                Some(Awaiting::Returning) => Next::Done,
                _ => self.decide(state, view, out),
            },
            Fed::Tools => match self.asked.take() {
                Some(Awaiting::Tools { step, calls }) => {
                    let (strict, pending) = state.strict_and_pending();
                    classify_batch(strict, pending, view, &self.policy, &step, &calls, out)
                }
                _ => unexpected(),
            },
            Fed::Answer(answer) => match self.asked.take() {
                Some(awaiting @ Awaiting::Plan { .. }) => {
                    self.planned(state.strict_or_init(), view, awaiting, answer, out)
                }
                Some(Awaiting::Act { step, repair }) => self.acted(state, view, step, repair, answer),
                Some(Awaiting::StepResult { step }) => step_result(state.strict_or_init(), view, &step, answer, out),
                Some(Awaiting::Finalize) => Next::Finish {
                    cut: answer.cut(),
                    answer: answer.response.message,
                    format: answer.format,
                    route: DeltaRoute::Step("finalize".into()),
                },
                _ => unexpected(),
            },
            Fed::Accepted => {
                let text = state
                    .messages
                    .last()
                    .filter(|m| m.role == Role::Assistant)
                    .map(Message::text)
                    .unwrap_or_default();
                if view.final_format().is_some() && !text.is_empty() {
                    // The JSON that parsed, without thinking, prose or a fence around it.
                    let text = crate::output::json_answer_text(&text).to_owned();
                    out.push(|| AgentEvent::FinalDelta {
                        run_id: view.run_id().to_owned(),
                        text,
                    });
                }
                let st = state.strict_or_init();
                st.final_text = Some(text);
                st.final_emitted = true;
                st.phase = StrictPhase::Done;
                // DONE is saved before the answer leaves: resuming this run again returns it
                // instead of finalizing a second time.
                self.asked = Some(Awaiting::Returning);
                Next::Save
            }
        }
    }

    fn tool_result(&mut self, state: &mut RunState, view: &dyn View, call: &ToolCall, report: CallReport) -> Message {
        let recovery = self.policy.recovery;
        let mode = self.policy.trace_mode;
        let st = state.strict_or_init();
        let requested = call.parse_arguments().ok();
        let (content, is_error, error) = match report.outcome {
            ToolCallOutcome::Ok(value) => (view.result_content(&call.name, value), false, None),
            ToolCallOutcome::Err(e) => (
                vec![ContentPart::text(strict_error_content(&e, recovery.feedback_mode))],
                true,
                Some(e),
            ),
        };
        let recovery_of = st
            .repairing
            .as_ref()
            .filter(|(new_id, _)| new_id == &call.id)
            .map(|(_, old)| sanitize_id(old));
        let (arguments, arguments_source) = match (mode, report.validated.as_deref()) {
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
            effective_hash: report.validated.as_deref().map(json_hash),
        };
        let mut entry = ToolTraceEntry::new(
            sanitize_id(&st.current_step_id()),
            sanitize_id(&call.id),
            sanitize_id(&report.identity),
        );
        entry.ok = !is_error;
        entry.attempts = report.attempts;
        entry.duration_ms = report.duration_ms;
        entry.error = error.as_ref().map(trace_error);
        entry.recovery_of_call_id = recovery_of;
        entry.arguments = arguments;
        entry.arguments_source = arguments_source;
        // Recorded with the call's result, so a checkpoint taken mid-batch keeps both.
        st.batch.insert(call.id.clone(), verdict);
        st.push_trace(entry);
        Message::tool_result_parts(call.id.clone(), call.name.clone(), content, is_error)
    }

    fn failed(&mut self, state: &mut RunState, view: &dyn View, error: &AgentError, out: &mut Out) {
        if error.is_resumable() || matches!(error, AgentError::Interrupted { .. }) {
            // A resumable interruption leaves the step in progress.
            return;
        }
        // A terminal failure decided by the policy (or a limit) fails the step.
        let code = error_code(error);
        let st = state.strict_or_init();
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
            st.failure = Some(failure(code.clone(), step_id.as_deref(), None, None, None));
        }
        if let Some(step_id) = step_id {
            out.push(|| AgentEvent::StepFailed {
                run_id: view.run_id().to_owned(),
                step_id,
                cause: code,
            });
        }
    }
}

/// A feed the machine did not ask for (a driver bug): the run fails instead of guessing.
fn unexpected() -> Next {
    Next::Fail(AgentError::Configuration {
        message: "the strict policy was fed out of order".into(),
    })
}

fn planner_ask(extra: Vec<Message>, format: Option<crate::model::ResponseFormat>) -> Ask {
    Ask::new(Stage::Plan)
        .extra(extra)
        .offer(Offer::Only(Vec::new()))
        .format(Format::Fixed(format))
        .route(DeltaRoute::Step("plan".into()))
        .model(ModelSlot::Planner)
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
