//! One model request of a run: [`Ask`] names the stage, the extra messages, the tools on offer,
//! the response format, where text deltas go and which model slot answers; [`Run::ask`] runs
//! the context pipeline, builds the request, sends it through the slot's chat stack and gives
//! every tool call of the answer an id unique within the run.

use std::collections::HashSet;
use std::sync::Arc;

use futures::FutureExt;

use super::chat::{DeltaSink, RunCall, with_deadline};
use super::policy::{Answer, Ask, DeltaRoute, Format, ModelSlot, Offer};
use super::{Run, unique_call_ids};
use crate::agent::Instructions;
use crate::agent::settings::ModelSettings;
use crate::compaction::RunCompaction;
use crate::context_provider::{ModelContext, Stage};
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::memory::{MemoryInput, MemoryView};
use crate::message::{Message, Role, ToolCall, Usage};
use crate::model::{ChatRequest, ChatResponse, ModelError, ResponseFormat, ToolChoice, ToolDefinition};

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// One model request: the context pipeline, the request, the slot's chat stack (retries and
    /// per-attempt events inside it) within the run's deadline, unique call ids, and the
    /// context providers told of the answer.
    ///
    /// An `async` block over `ask`'s parts, not an `async fn`: an `async fn` keeps its argument
    /// twice in its state (as the argument and as the local its body moves it into), and every
    /// in-flight run holds this future.
    pub(super) fn ask(&mut self, ask: Ask) -> impl Future<Output = Result<Answer, AgentError>> + Send + '_ {
        let Ask {
            stage,
            extra,
            offer,
            format,
            route,
            model,
        } = ask;
        let only = match offer {
            Offer::Stage => None,
            Offer::Only(definitions) => Some(definitions),
        };
        async move {
            let (messages, tools, lend) = self.prepare(stage, extra, only).await?;
            let offered_tools = !tools.is_empty();
            let format = match format {
                Format::Fixed(format) => format,
                Format::WhenNoTools(format) => format.filter(|_| !offered_tools),
            };
            let request = self.build_request(stage, messages, tools, format.clone());
            let outcome = self.send(request, lend, model, route).await;
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
    }

    /// Sends `request` through the chat stack of `model`'s slot within the run's deadline. The
    /// run's own messages go last; lent (`lend`), they are moved in and put back when the call
    /// is done (see [`Lent`]).
    ///
    /// A combinator: the request lives on in the call's future only, and the loan in the
    /// closure that ends it.
    fn send(
        &mut self,
        mut request: ChatRequest,
        lend: Option<Lend>,
        model: ModelSlot,
        route: DeltaRoute,
    ) -> impl Future<Output = Result<Result<ChatResponse, ModelError>, AgentError>> + Send + '_ {
        let lent = lend.map(|lend| {
            let system = lend.system.then_some(&mut self.kept.system);
            Lent::new(&mut request, &mut self.state.messages, system)
        });
        let env = &self.env;
        let (kept, shared) = match (model, &env.agent.planner_chat) {
            (ModelSlot::Planner, Some(planner)) => (&mut self.kept.planner_chat, planner),
            _ => (&mut self.kept.chat, &env.agent.chat),
        };
        let service = kept.get_or_insert_with(|| shared.clone());
        let delta = env.emitter.deltas_wanted().then(|| DeltaSink {
            emitter: env.emitter.clone(),
            run_id: Arc::clone(&env.run_id),
            route,
        });
        request.extensions.deadline = env.deadline;
        request.extensions.run = Some(RunCall::slot(delta, Arc::clone(&env.attempts)));
        let call = tower::ServiceExt::oneshot(service, request);
        with_deadline(env.deadline, env.agent.limits.timeout, call).map(move |outcome| {
            drop(lent);
            outcome
        })
    }

    /// The definitions of the run's tools and handoffs enabled now, in order: the index's
    /// shared list when that is all of them (the usual case: no copy), else a new list.
    pub(super) fn visible_definitions(&self) -> Arc<Vec<ToolDefinition>> {
        let env = &self.env;
        let mut own: Option<Vec<ToolDefinition>> = None;
        for (i, definition) in env.definitions.iter().enumerate() {
            let enabled = env.tool_enabled(&definition.name);
            match &mut own {
                Some(list) if enabled => list.push(definition.clone()),
                Some(_) => {}
                None if enabled => {}
                // The first disabled tool: the offer is the ones before it, and so on.
                None => own = Some(env.definitions[..i].to_vec()),
            }
        }
        for handoff in env.agent.handoffs.iter().filter(|h| h.is_enabled(&env.ctx)) {
            own.get_or_insert_with(|| env.definitions.to_vec())
                .push(handoff.definition());
        }
        own.map_or_else(|| Arc::clone(&env.definitions), Arc::new)
    }

    /// The context pipeline: the model's view (instructions, history, the run's messages, the
    /// stage's tools), shaped by every context provider in order. Returns the request's
    /// messages (system first) and tool definitions, and records which tools were offered.
    /// `only` (when given) is offered instead of every visible tool; providers may narrow that
    /// set, never widen it.
    ///
    /// When nothing can rewrite the request's messages (no context provider, no compaction)
    /// and the stage adds none, the run's own messages are left out and the third value says
    /// what the caller lends the request (see [`Lent`]): the run's messages, and the system
    /// message of static instructions, which the run keeps between its requests. Otherwise
    /// every message of the run would be copied into every request.
    async fn prepare(
        &mut self,
        stage: Stage,
        extra: Vec<Message>,
        only: Option<Vec<ToolDefinition>>,
    ) -> Result<(Vec<Message>, Arc<Vec<ToolDefinition>>, Option<Lend>), AgentError> {
        let mut context = ModelContext::default();
        context.stage = Some(stage);
        let agent = Arc::clone(&self.env.agent);
        let providers = !agent.context_providers.is_empty();
        let lend = extra.is_empty() && !providers && agent.compaction.is_none();
        // The agent's instructions: a static text is read in place, a dynamic one rendered.
        let rendered = match &agent.instructions {
            Some(Instructions::Dynamic(f)) => Some(f(&self.env.ctx)).filter(|t| !t.is_empty()),
            _ => None,
        };
        let instructions: &[String] = match &agent.instructions {
            Some(Instructions::Static(text)) if !text.is_empty() => std::slice::from_ref(text),
            _ => rendered.as_slice(),
        };
        let restricted: Option<HashSet<String>> = only.as_ref().map(|d| d.iter().map(|t| t.name.clone()).collect());
        // The offer stays shared (the index's list, usually) unless a provider or the check
        // below changes it.
        let mut offer = match only {
            Some(definitions) if definitions.is_empty() => no_tools(),
            Some(definitions) => Arc::new(definitions),
            None if stage == Stage::Act => self.visible_definitions(),
            None => no_tools(),
        };
        context.meta_tools = offer
            .iter()
            .filter(|t| self.env.tools.get(&t.name).is_some_and(|v| v.entry.tool.spec().meta))
            .map(|t| t.name.clone())
            .collect();
        // The run's messages as the memory policy sees them: the state's own when the stage
        // adds nothing (no copy), else with the stage's messages after them (one copy, which
        // then goes into the request as it is).
        let joined = (!extra.is_empty()).then(|| self.state.messages.iter().cloned().chain(extra).collect::<Vec<_>>());
        let current: &[Message] = joined.as_deref().unwrap_or(&self.state.messages);
        let view = if agent.memory_is_default && self.env.history.is_empty() {
            // The default memory's view of no history is empty: no call.
            MemoryView::default()
        } else {
            let input = MemoryInput {
                session_id: self.env.ctx.session_id(),
                instructions,
                history: &self.env.history,
                current,
                tools: &offer,
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
        match joined {
            Some(joined) => messages.extend(joined),
            None if lend => {}
            None => messages.extend(self.state.messages.iter().cloned()),
        }
        context.messages = messages;
        // The offer before the providers: they may narrow it, never widen it.
        let mut before: Option<Arc<Vec<ToolDefinition>>> = None;
        if providers {
            context.instructions = instructions.to_vec();
            context.tools = offer.as_ref().clone();
            for provider in &agent.context_providers {
                let invoking = provider.invoking(&self.env.ctx, &mut context);
                with_deadline(self.env.deadline, agent.limits.timeout, invoking)
                    .await?
                    .map_err(|e| AgentError::ContextProvider {
                        provider: e.provider,
                        message: e.message,
                    })?;
            }
            before = Some(std::mem::replace(
                &mut offer,
                Arc::new(std::mem::take(&mut context.tools)),
            ));
        }
        // Providers may narrow the tools, never widen the stage's offer (a request that offers
        // none, such as the final one with the output schema, stays without tools) or invent
        // executable ones.
        let keep = |t: &ToolDefinition| {
            (self.env.tools.contains_key(&t.name) || self.env.agent.handoffs.iter().any(|h| h.tool_name == t.name))
                && restricted.as_ref().is_none_or(|r| r.contains(&t.name))
                && before.as_ref().is_none_or(|b| b.iter().any(|d| d.name == t.name))
        };
        if !offer.iter().all(keep) {
            Arc::make_mut(&mut offer).retain(keep);
        }
        if stage == Stage::Act {
            // The set is rebuilt only when the offer changed since the last request; a standard
            // run's state shares it.
            if !self.offered.as_ref().is_some_and(|o| o.names_exactly(&offer)) {
                let names = || offer.iter().map(|t| t.name.clone()).collect();
                // The agent's own list (no provider changed it) has its set built once.
                let own = agent.tool_index.get().is_some_and(|(_, own)| Arc::ptr_eq(own, &offer));
                self.offered = Some(if own {
                    agent.offered_names.get_or_init(names).clone()
                } else {
                    names()
                });
            }
            self.allowed = context.allowed_identities.take();
            if self.state.strict().is_none() {
                self.state.offered.clone_from(&self.offered);
                self.state.admitted.clone_from(&self.allowed);
            }
        }
        let mut messages = context.messages;
        let mut lent_system = false;
        let system = if providers {
            let mut blocks = context.instructions;
            match blocks.len() {
                0 => None,
                1 => blocks.pop(),
                _ => Some(blocks.join("\n\n")),
            }
            .map(Message::system)
        } else {
            match (&agent.instructions, rendered) {
                (_, Some(text)) => Some(Message::system(text)),
                (Some(Instructions::Static(text)), None) if !text.is_empty() => {
                    lent_system = lend;
                    let kept = if lend { self.kept.system.take() } else { None };
                    Some(kept.unwrap_or_else(|| Message::system(text.clone())))
                }
                _ => None,
            }
        };
        if let Some(system) = system {
            messages.insert(0, system);
        }
        if let Some(compaction) = &agent.compaction {
            // Boxed: its summarizing call would otherwise size every request's future.
            Box::pin(self.compact(compaction, &mut messages, &offer)).await?;
        }
        Ok((messages, offer, lend.then_some(Lend { system: lent_system })))
    }

    /// Fits the request into the agent's run compaction budget.
    async fn compact(
        &mut self,
        compaction: &RunCompaction,
        messages: &mut Vec<Message>,
        tools: &[ToolDefinition],
    ) -> Result<(), AgentError> {
        // The run's own calls (a strict step's are in its step messages), not the history's.
        let steps = self.state.strict().map_or(&[][..], |s| s.step_messages.as_slice());
        let run_calls: HashSet<&str> = self
            .state
            .messages
            .iter()
            .chain(steps)
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
            let invoked = provider.invoked(&self.env.ctx, std::slice::from_ref(message));
            with_deadline(self.env.deadline, self.env.agent.limits.timeout, invoked)
                .await?
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
        tools: Arc<Vec<ToolDefinition>>,
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
        let mut request = ChatRequest::new(messages);
        request.tools = tools;
        request.response_format = format;
        request.temperature = s.temperature;
        request.top_p = s.top_p;
        request.frequency_penalty = s.frequency_penalty;
        request.presence_penalty = s.presence_penalty;
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
        // The run's own messages: a transcript given as input may hold earlier calls.
        let own = self
            .state
            .messages
            .get(self.state.input_len.unwrap_or(0)..)
            .unwrap_or_default();
        let called = own.iter().any(|m| m.role == Role::Assistant && m.has_tool_calls());
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

/// An empty offer, shared by every request that offers no tool.
fn no_tools() -> Arc<Vec<ToolDefinition>> {
    static NONE: std::sync::LazyLock<Arc<Vec<ToolDefinition>>> = std::sync::LazyLock::new(Arc::default);
    Arc::clone(&NONE)
}

/// What a request borrows from its run besides its messages (see [`Lent`]).
#[derive(Clone, Copy)]
struct Lend {
    /// The request's first message is the run's kept system message.
    system: bool,
}

/// The run's own messages (and its kept system message), lent to a model request: moved into
/// it instead of copied, and put back when the call is done, or dropped with it (a cancelled
/// request leaves the run its messages). When something still holds the request (a layer that
/// kept it past the call), they are copied back out of it.
struct Lent<'a> {
    owner: &'a mut Vec<Message>,
    system: Option<&'a mut Option<Message>>,
    request: Option<Arc<Vec<Message>>>,
    start: usize,
    len: usize,
}

impl<'a> Lent<'a> {
    /// Lends `owner`'s messages to `request`, after the ones it has (its messages are not
    /// shared yet, so no copy is made), and `system`'s message, already its first.
    fn new(request: &mut ChatRequest, owner: &'a mut Vec<Message>, system: Option<&'a mut Option<Message>>) -> Self {
        let messages = Arc::make_mut(&mut request.messages);
        let (start, len) = (messages.len(), owner.len());
        messages.append(owner);
        Lent {
            owner,
            system,
            request: Some(Arc::clone(&request.messages)),
            start,
            len,
        }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        let range = self.start..self.start + self.len;
        match Arc::try_unwrap(request) {
            Ok(mut messages) => {
                self.owner.extend(messages.drain(range));
                if let Some(system) = self.system.take() {
                    *system = messages.into_iter().next();
                }
            }
            Err(shared) => {
                self.owner.extend_from_slice(&shared[range]);
                if let Some(system) = self.system.take() {
                    *system = shared.first().cloned();
                }
            }
        }
    }
}
