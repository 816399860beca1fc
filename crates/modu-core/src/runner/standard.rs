//! The standard decision policy: ask, run the tools the model calls, ask again, and finalize
//! the answer (separately when the configuration says so), with one corrective request when a
//! structured answer does not parse.

use super::ask::{Ask, Format};
use super::{DeltaRoute, Phase, Run};
use crate::agent::FinalizationMode;
use crate::error::AgentError;
use crate::message::Message;
use crate::model::ResponseFormat;
use crate::provider::Stage;

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    pub(super) async fn standard_loop(&mut self) -> Result<O, AgentError> {
        loop {
            match self.state.phase() {
                Phase::Act => {
                    if let Some(calls) = self.unanswered_tool_calls() {
                        self.run_tools(calls).await?;
                        continue;
                    }
                    if self.state.turns >= self.env.agent.limits.max_turns {
                        return Err(AgentError::MaxTurnsExceeded {
                            limit: self.env.agent.limits.max_turns,
                        });
                    }
                    let format = match self.env.agent.finalization {
                        FinalizationMode::Always => None,
                        _ => self.env.agent.codec.response_format(),
                    };
                    let answer = self
                        .ask(Ask::new(Stage::Act).format(Format::WhenNoTools(format)))
                        .await?;
                    let separate_final = self.needs_separate_finalization(answer.offered_tools);
                    let (response, format) = (answer.response, answer.format);
                    self.state.turns += 1;
                    if response.message.has_tool_calls() {
                        self.count_tool_calls(&response.message)?;
                        self.state.messages.push(response.message);
                        self.checkpoint().await?;
                        continue;
                    }
                    let text = response.message.text();
                    if separate_final {
                        self.state.set_phase(Phase::Finalize { draft: text });
                        self.checkpoint().await?;
                        continue;
                    }
                    return self.accept_final(response.message, format, DeltaRoute::Answer).await;
                }
                Phase::Finalize { draft } => {
                    let mut extra = Vec::new();
                    if !draft.is_empty() {
                        extra.push(Message::assistant(draft));
                    }
                    extra.push(Message::user(
                        "Write the final answer to the request above now, in the requested format, without calling tools.",
                    ));
                    let format = self.env.agent.codec.response_format();
                    let answer = self
                        .ask(Ask::new(Stage::Finalize).extra(extra).format(Format::Fixed(format)))
                        .await?;
                    return self
                        .accept_final(answer.response.message, answer.format, DeltaRoute::Answer)
                        .await;
                }
            }
        }
    }

    /// Counts an answer's tool calls toward `RunLimits::max_tool_calls` (calls of exempt tools
    /// do not count); over the limit the run ends.
    pub(super) fn count_tool_calls(&mut self, answer: &Message) -> Result<(), AgentError> {
        let n = answer
            .tool_calls
            .iter()
            .filter(|c| {
                self.env
                    .tools
                    .get(&c.name)
                    .is_none_or(|t| !t.entry.tool.spec().exempt_from_tool_limit)
            })
            .count() as u32;
        let limit = self.env.agent.limits.max_tool_calls;
        if self.state.tool_calls + n > limit {
            return Err(AgentError::MaxToolCallsExceeded { limit });
        }
        self.state.tool_calls += n;
        Ok(())
    }

    pub(super) fn needs_separate_finalization(&self, has_tools: bool) -> bool {
        match self.env.agent.finalization {
            FinalizationMode::Disabled => false,
            FinalizationMode::Always => true,
            FinalizationMode::StructuredOnly => has_tools && self.env.agent.codec.response_format().is_some(),
        }
    }

    /// Parses the final answer; one corrective request on failure.
    pub(super) async fn accept_final(
        &mut self,
        answer: Message,
        format: Option<ResponseFormat>,
        route: DeltaRoute,
    ) -> Result<O, AgentError> {
        let text = answer.text();
        match self.env.agent.codec.parse(&text) {
            Ok(output) => {
                self.state.messages.push(answer);
                Ok(output)
            }
            Err(first) => {
                let extra = vec![
                    answer,
                    Message::user(format!(
                        "Your answer could not be parsed: {}. Answer again with only a JSON value that fits the required schema.",
                        first.message
                    )),
                ];
                let answer = self
                    .ask(
                        Ask::new(Stage::Finalize)
                            .extra(extra)
                            .format(Format::Fixed(format))
                            .route(route),
                    )
                    .await?;
                let response = answer.response;
                let text = response.message.text();
                match self.env.agent.codec.parse(&text) {
                    Ok(output) => {
                        self.state.messages.push(response.message);
                        Ok(output)
                    }
                    Err(second) => Err(AgentError::Output {
                        message: second.message,
                    }),
                }
            }
        }
    }
}
