//! One model request of a run: [`Ask`] names the stage, the extra messages, the tools on offer,
//! the response format, where text deltas go and which model slot answers; [`Run::ask`] runs
//! the context pipeline, builds the request, sends it through the slot's chat stack and gives
//! every tool call of the answer an id unique within the run.

use std::collections::HashSet;
use std::sync::Arc;

use super::chat::{DeltaSink, RunCall, with_deadline};
use super::policy::{Answer, Ask, Format, ModelSlot, Offer, View};
use super::{Run, unique_call_ids};
use crate::agent::settings::ModelSettings;
use crate::context_provider::{ModelContext, Stage};
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::memory::MemoryInput;
use crate::message::{Message, Role, ToolCall, Usage};
use crate::model::{ChatRequest, ResponseFormat, ToolChoice, ToolDefinition};

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// One model request: the context pipeline, the request, the slot's chat stack (retries and
    /// per-attempt events inside it) within the run's deadline, unique call ids, and the
    /// context providers told of the answer.
    pub(super) async fn ask(&mut self, ask: Ask) -> Result<Answer, AgentError> {
        let only = match ask.offer {
            Offer::Stage => None,
            Offer::Only(definitions) => Some(definitions),
        };
        let (messages, tools) = self.prepare(ask.stage, ask.extra, only).await?;
        let offered_tools = !tools.is_empty();
        let format = match ask.format {
            Format::Fixed(format) => format,
            Format::WhenNoTools(format) => format.filter(|_| !offered_tools),
        };
        let mut request = self.build_request(ask.stage, messages, tools, format.clone());
        let agent = Arc::clone(&self.env.agent);
        let service = match ask.model {
            ModelSlot::Planner => agent.planner_chat.as_ref().unwrap_or(&agent.chat),
            ModelSlot::Agent => &agent.chat,
        };
        let delta = self.env.emitter.deltas_wanted().then(|| DeltaSink {
            emitter: self.env.emitter.clone(),
            run_id: Arc::clone(&self.env.run_id),
            route: ask.route,
        });
        request.extensions.deadline = self.env.deadline;
        request.extensions.run = Some(RunCall::slot(delta, Arc::clone(&self.env.attempts)));
        let call = tower::ServiceExt::oneshot(service.clone(), request);
        let outcome = with_deadline(self.env.deadline, agent.limits.timeout, call).await;
        self.state.model_calls = self.env.attempts.calls();
        let mut response = outcome?.map_err(|e| AgentError::from_model(&e))?;
        if response.message.has_tool_calls() && self.call_ids_collide(&response.message.tool_calls) {
            let mut used = self.used_call_ids();
            let rewritten = unique_call_ids(&mut response.message, &mut used);
            if rewritten > 0 {
                tracing::debug!(rewritten, "the model server sent repeated tool-call ids; renamed");
            }
        }
        self.notify(&response.message).await?;
        Ok(Answer {
            response,
            offered_tools,
            format,
        })
    }

    pub(super) fn visible_definitions(&self) -> Vec<ToolDefinition> {
        let mut definitions = self.env.enabled_tools();
        definitions.extend(
            self.env
                .agent
                .handoffs
                .iter()
                .filter(|h| h.is_enabled(&self.env.ctx))
                .map(|h| h.definition()),
        );
        definitions
    }

    /// The context pipeline: the model's view (instructions, history, the run's messages, the
    /// stage's tools), shaped by every context provider in order. Returns the request's
    /// messages (system first) and tool definitions, and records which tools were offered.
    /// `only` (when given) is offered instead of every visible tool; providers may narrow that
    /// set, never widen it.
    async fn prepare(
        &mut self,
        stage: Stage,
        extra: Vec<Message>,
        only: Option<Vec<ToolDefinition>>,
    ) -> Result<(Vec<Message>, Vec<ToolDefinition>), AgentError> {
        let mut context = ModelContext::default();
        context.stage = Some(stage);
        if let Some(instructions) = &self.env.agent.instructions {
            let text = instructions.render(&self.env.ctx);
            if !text.is_empty() {
                context.instructions.push(text);
            }
        }
        let restricted: Option<HashSet<String>> = only.as_ref().map(|d| d.iter().map(|t| t.name.clone()).collect());
        match only {
            Some(definitions) => context.tools = definitions,
            None if stage == Stage::Act => context.tools = self.visible_definitions(),
            None => {}
        }
        context.meta_tools = context
            .tools
            .iter()
            .filter(|t| self.env.tools.get(&t.name).is_some_and(|v| v.entry.tool.spec().meta))
            .map(|t| t.name.clone())
            .collect();
        // The run's messages as the memory policy sees them: the state's own when the stage
        // adds nothing (no copy), else with the stage's messages after them.
        let joined;
        let current: &[Message] = if extra.is_empty() {
            &self.state.messages
        } else {
            joined = self.state.messages.iter().cloned().chain(extra).collect::<Vec<_>>();
            &joined
        };
        let view = {
            let agent = Arc::clone(&self.env.agent);
            let input = MemoryInput {
                session_id: self.env.ctx.session_id(),
                instructions: &context.instructions,
                history: &self.env.history,
                current,
                tools: &context.tools,
            };
            with_deadline(self.env.deadline, agent.limits.timeout, agent.memory.select(input)).await??
        };
        if view.usage != Usage::default() {
            self.env.ctx.add_usage(view.usage);
        }
        if self.env.emitter.active() && (view.dropped_turns > 0 || view.summarized_turns > 0 || view.summary_failed) {
            self.env
                .emitter
                .emit(AgentEvent::MemoryApplied {
                    run_id: self.env.ctx.run_id().to_owned(),
                    policy: self.env.agent.memory.name().to_owned(),
                    kept_turns: view.kept_turns,
                    dropped_turns: view.dropped_turns,
                    summarized_turns: view.summarized_turns,
                    summary_cached: view.summary_cached,
                    summary_failed: view.summary_failed,
                })
                .await;
        }
        // One vector for the request, with room for the system message in front.
        let mut messages = Vec::with_capacity(1 + view.messages.len() + current.len());
        messages.extend(view.messages);
        messages.extend(current.iter().cloned());
        context.messages = messages;
        for provider in &self.env.agent.context_providers {
            provider
                .invoking(&self.env.ctx, &mut context)
                .await
                .map_err(|e| AgentError::ContextProvider {
                    provider: e.provider,
                    message: e.message,
                })?;
        }
        // Providers may narrow the tools, never invent executable ones.
        context.tools.retain(|t| {
            (self.env.tools.contains_key(&t.name) || self.env.agent.handoffs.iter().any(|h| h.tool_name == t.name))
                && restricted.as_ref().is_none_or(|r| r.contains(&t.name))
        });
        if stage == Stage::Act {
            // The sets are rebuilt only when the offer changed since the last request.
            let tools = &context.tools;
            if !self
                .offered
                .as_ref()
                .is_some_and(|o| offers_exactly(tools, o.len(), |n| o.contains(n)))
            {
                self.offered = Some(context.tools.iter().map(|t| t.name.clone()).collect());
            }
            self.allowed = context.allowed_identities.take();
            if self.state.strict().is_none() {
                if !self
                    .state
                    .offered
                    .as_ref()
                    .is_some_and(|o| offers_exactly(tools, o.len(), |n| o.contains(n)))
                {
                    self.state.offered = Some(context.tools.iter().map(|t| t.name.clone()).collect());
                }
                self.state.admitted.clone_from(&self.allowed);
            }
        }
        let mut messages = context.messages;
        let mut instructions = context.instructions;
        let system = match instructions.len() {
            0 => None,
            1 => instructions.pop(),
            _ => Some(instructions.join("\n\n")),
        };
        if let Some(system) = system {
            messages.insert(0, Message::system(system));
        }
        self.compact(&mut messages, &context.tools).await?;
        Ok((messages, context.tools))
    }

    /// Fits the request into the run compaction's budget, if the agent has one.
    async fn compact(&mut self, messages: &mut Vec<Message>, tools: &[ToolDefinition]) -> Result<(), AgentError> {
        let agent = Arc::clone(&self.env.agent);
        let Some(compaction) = &agent.compaction else {
            return Ok(());
        };
        let run_calls: HashSet<&str> = self
            .state
            .messages
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
            .collect();
        let Some(done) = compaction.apply(messages, tools, &run_calls, &mut self.summary).await? else {
            return Ok(());
        };
        if done.usage != Usage::default() {
            self.env.ctx.add_usage(done.usage);
        }
        if self.env.emitter.active() {
            self.env
                .emitter
                .emit(AgentEvent::RunCompacted {
                    run_id: self.env.ctx.run_id().to_owned(),
                    trimmed: done.trimmed,
                    summarized_rounds: done.summarized_rounds,
                    tokens_before: done.tokens_before,
                    tokens_after: done.tokens_after,
                })
                .await;
        }
        Ok(())
    }

    /// Tells every context provider about the model's new message.
    pub(super) async fn notify(&self, message: &Message) -> Result<(), AgentError> {
        for provider in &self.env.agent.context_providers {
            provider
                .invoked(&self.env.ctx, std::slice::from_ref(message))
                .await
                .map_err(|e| AgentError::ContextProvider {
                    provider: e.provider,
                    message: e.message,
                })?;
        }
        Ok(())
    }

    fn build_request(
        &self,
        stage: Stage,
        messages: Vec<Message>,
        tools: Vec<ToolDefinition>,
        format: Option<ResponseFormat>,
    ) -> ChatRequest {
        let merged;
        let s = match &self.state.settings {
            Some(own) => {
                merged = own.over(&self.env.agent.settings);
                &merged
            }
            None => &self.env.agent.settings,
        };
        let has_tools = !tools.is_empty();
        let mut request = ChatRequest::new(messages).with_tools(tools);
        request.response_format = format;
        request.temperature = s.temperature;
        request.max_tokens = s.max_tokens;
        request.seed = s.seed;
        request.reasoning_effort = s.reasoning_effort;
        request.stop = s.stop.clone();
        if has_tools {
            request.parallel_tool_calls = s.parallel_tool_calls;
            request.tool_choice = self.tool_choice(stage, s, &request.tools);
        }
        request
    }

    /// The tool choice of a standard run's acting request: the settings' choice until the
    /// model's first tool call of the run (then the server's default, unless
    /// `keep_tool_choice`), and a named tool only when the request offers it.
    fn tool_choice(&self, stage: Stage, s: &ModelSettings, tools: &[ToolDefinition]) -> Option<ToolChoice> {
        let choice = s.tool_choice.as_ref()?;
        if stage != Stage::Act || self.state.strict().is_some() {
            return None;
        }
        let called = self
            .state
            .messages
            .iter()
            .any(|m| m.role == Role::Assistant && m.has_tool_calls());
        if called && !s.keep_tool_choice {
            return None;
        }
        match choice {
            ToolChoice::Named(name) if !tools.iter().any(|t| &t.name == name) => None,
            other => Some(other.clone()),
        }
    }

    /// Whether an id of `calls` repeats one of them or one the run has used (then the answer's
    /// ids are made unique). Checked without copying any id: the usual answer repeats none.
    fn call_ids_collide(&self, calls: &[ToolCall]) -> bool {
        calls.iter().enumerate().any(|(i, call)| {
            let id = call.id.as_str();
            calls[..i].iter().any(|c| c.id == id) || self.used_ids().any(|used| used == id)
        })
    }

    /// The tool-call ids the run has used so far (its messages, its decisions and a strict
    /// step's messages and trace), as a set to make new ids unique against.
    pub(super) fn used_call_ids(&self) -> HashSet<String> {
        self.used_ids().map(str::to_owned).collect()
    }

    /// The ids behind [`Run::used_call_ids`], borrowed.
    fn used_ids(&self) -> impl Iterator<Item = &str> {
        self.state
            .messages
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
            .chain(self.state.decisions.keys().map(String::as_str))
            .chain(self.state.strict().into_iter().flat_map(|s| s.used_call_ids()))
    }
}

/// Whether a recorded offer of `len` names, answering `contains`, names exactly `tools`.
fn offers_exactly(tools: &[ToolDefinition], len: usize, contains: impl Fn(&str) -> bool) -> bool {
    len == tools.len() && tools.iter().all(|t| contains(&t.name))
}
