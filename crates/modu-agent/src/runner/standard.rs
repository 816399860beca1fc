//! The standard decision policy, as a sans-IO machine: ask, run the tools the model calls, ask
//! again, and finalize the answer (separately when the configuration says so). Its state is
//! [`Phase`] inside `state.policy`; the corrective request for an answer that does not parse is
//! the driver's (`Next::Finish`), shared with the strict policy.

use crate::agent::FinalizationMode;
use crate::context_provider::Stage;
use crate::error::AgentError;
use crate::message::{ContentPart, Message, ToolCall};

use super::policy::{
    Ask, CallReport, DeltaRoute, Fed, Format, Next, Out, Policy, ToolCallOutcome, View, count_tool_calls,
};
use super::state::{Phase, RunState};

/// The standard policy.
pub(crate) struct Standard {
    finalization: FinalizationMode,
    /// The request in flight.
    asked: Option<Stage>,
}

impl Standard {
    pub(crate) fn new(finalization: FinalizationMode) -> Self {
        Standard {
            finalization,
            asked: None,
        }
    }

    fn needs_separate_finalization(&self, view: &dyn View, has_tools: bool) -> bool {
        match self.finalization {
            FinalizationMode::Disabled => false,
            FinalizationMode::Always => true,
            FinalizationMode::StructuredOnly => has_tools && view.final_format().is_some(),
        }
    }

    /// What to do from the state alone.
    fn decide(&mut self, state: &mut RunState, view: &dyn View) -> Next {
        match state.phase() {
            Phase::Act => {
                if let Some(calls) = state.unanswered_tool_calls() {
                    return Next::RunTools { calls, allowed: None };
                }
                let limit = view.limits().max_turns;
                if state.turns >= limit {
                    return Next::Fail(AgentError::MaxTurnsExceeded { limit });
                }
                let format = match self.finalization {
                    FinalizationMode::Always => None,
                    _ => view.final_format(),
                };
                self.asked = Some(Stage::Act);
                Next::Ask(Ask::new(Stage::Act).format(Format::WhenNoTools(format)))
            }
            Phase::Finalize { draft } => {
                let mut extra = Vec::new();
                if !draft.is_empty() {
                    extra.push(Message::assistant(draft));
                }
                extra.push(Message::user(
                    "Write the final answer to the request above now, in the requested format, without calling tools.",
                ));
                self.asked = Some(Stage::Finalize);
                Next::Ask(
                    Ask::new(Stage::Finalize)
                        .extra(extra)
                        .format(Format::Fixed(view.final_format())),
                )
            }
        }
    }
}

impl Policy for Standard {
    fn next(&mut self, state: &mut RunState, view: &dyn View, fed: Fed, _out: &mut Out) -> Next {
        match fed {
            Fed::Start | Fed::Saved | Fed::Tools => self.decide(state, view),
            Fed::Accepted => Next::Done,
            Fed::Answer(answer) => match self.asked.take() {
                Some(Stage::Finalize) => Next::Finish {
                    cut: answer.cut(),
                    answer: answer.response.message,
                    format: answer.format,
                    route: DeltaRoute::Answer,
                },
                _ => {
                    let separate_final = self.needs_separate_finalization(view, answer.offered_tools);
                    let cut = answer.cut();
                    let message = answer.response.message;
                    state.turns += 1;
                    if message.has_tool_calls() {
                        if let Err(e) = count_tool_calls(state, view, &message) {
                            return Next::Fail(e);
                        }
                        state.messages.push(message);
                        return Next::Save;
                    }
                    if separate_final {
                        state.set_phase(Phase::Finalize { draft: message.text() });
                        return Next::Save;
                    }
                    Next::Finish {
                        answer: message,
                        cut,
                        format: answer.format,
                        route: DeltaRoute::Answer,
                    }
                }
            },
        }
    }

    fn tool_result(&mut self, _state: &mut RunState, view: &dyn View, call: &ToolCall, report: CallReport) -> Message {
        let (content, is_error) = match report.outcome {
            ToolCallOutcome::Ok(value) => (view.result_content(&call.name, value), false),
            ToolCallOutcome::Err(e) => (vec![ContentPart::text(e.model_content(true))], true),
        };
        Message::tool_result_parts(call.id.clone(), call.name.clone(), content, is_error)
    }
}
