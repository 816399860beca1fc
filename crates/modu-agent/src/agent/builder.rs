//! [`AgentBuilder`]: the untyped configuration ([`AgentConfig`]), the parts typed by the
//! context and output types ([`Typed`]), and the typestate ([`Open`], [`Fixed`]) that makes
//! choosing those types after adding typed parts a compile error.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;

use super::compose;
use super::{AgentRequest, FinalizationMode, InstructionFn, ModelSettings, RetryConfig, RunLimits};
use crate::context::RunContext;
use crate::event::EventSink;
use crate::guardrail::GuardrailMode;
use crate::memory::{ConversationMemoryPolicy, KeepAll};
use crate::middleware::{
    AgentLayerFn, AgentService, ChatLayerFn, ChatService, FunctionLayerFn, FunctionService, ToolInvocation,
};
use crate::model::ChatModel;
use crate::output::{JsonCodec, OutputCodec, TextCodec};
use crate::store::{CheckpointStore, ConversationStore};
use crate::tool::Tool;
use crate::{
    authorize::{AllowAllAuthorizer, ToolAuthorizer},
    context_provider::ContextProvider,
    tool_provider::ToolProvider,
};

/// The builder state in which the context and output types may still change
/// ([`AgentBuilder::context`], [`AgentBuilder::output`], [`AgentBuilder::codec`]): nothing typed
/// by them has been added yet. [`Agent::builder`](super::Agent::builder) starts here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Open;

/// The builder state after something typed by the context or output type was added (a tool, a
/// provider, dynamic instructions, a function or agent layer, a handoff, a guardrail): the
/// types are fixed, and `.context()`, `.output()` and `.codec()` no longer compile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fixed;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Open {}
}

/// The builder states in which the context and output types may still change: only [`Open`]
/// (sealed). It bounds [`AgentBuilder::context`], [`AgentBuilder::output`] and
/// [`AgentBuilder::codec`], so that calling them on a [`Fixed`] builder fails to compile with a
/// message saying what to reorder.
#[diagnostic::on_unimplemented(
    message = "the agent's context and output types are already fixed",
    label = "a tool, layer, handoff, guardrail, provider or dynamic instructions were added before this call",
    note = "call `.context::<C>()` and `.output::<T>()` (or `.codec(..)`) before adding tools, layers, handoffs, guardrails, providers or dynamic instructions"
)]
pub trait TypesOpen: sealed::Sealed {}

impl TypesOpen for Open {}

/// The builder's configuration that depends neither on the context nor on the output type; it
/// moves in one piece when either type changes.
pub(crate) struct AgentConfig {
    pub(crate) name: String,
    pub(crate) instructions: Option<String>,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) retry: RetryConfig,
    pub(crate) limits: RunLimits,
    pub(crate) finalization: FinalizationMode,
    pub(crate) policy: crate::plan::DecisionPolicy,
    pub(crate) settings: ModelSettings,
    pub(crate) sink: Option<Arc<dyn EventSink>>,
    pub(crate) conversations: Option<Arc<dyn ConversationStore>>,
    pub(crate) memory: Arc<dyn ConversationMemoryPolicy>,
    /// Whether `memory` is the default ([`KeepAll`]), whose view of no history is empty.
    pub(crate) memory_is_default: bool,
    pub(crate) checkpoints: Option<Arc<dyn CheckpointStore>>,
    pub(crate) leases: Option<crate::lease::SessionLeases>,
    pub(crate) authorizer: Arc<dyn ToolAuthorizer>,
    pub(crate) chat_layers: Vec<ChatLayerFn>,
    pub(crate) guardrail_mode: GuardrailMode,
    pub(crate) compaction: Option<crate::compaction::RunCompaction>,
}

/// What the builder holds typed by the context type `C` or the output type `O`. Empty while the
/// builder is [`Open`], except for the codec.
pub(crate) struct Typed<C, O> {
    pub(crate) instructions_fn: Option<InstructionFn<C>>,
    pub(crate) tools: Vec<Arc<dyn Tool<C>>>,
    pub(crate) tool_providers: Vec<Arc<dyn ToolProvider<C>>>,
    pub(crate) context_providers: Vec<Arc<dyn ContextProvider<C>>>,
    pub(crate) function_layers: Vec<FunctionLayerFn<C>>,
    pub(crate) guardrails: crate::guardrail::Guardrails<C>,
    pub(crate) codec: Arc<dyn OutputCodec<Output = O>>,
    pub(crate) agent_layers: Vec<AgentLayerFn<C, O>>,
    pub(crate) handoffs: Vec<compose::Handoff<C, O>>,
}

impl<C, O> Typed<C, O> {
    fn new(codec: Arc<dyn OutputCodec<Output = O>>) -> Self {
        Typed {
            instructions_fn: None,
            tools: Vec::new(),
            tool_providers: Vec::new(),
            context_providers: Vec::new(),
            function_layers: Vec::new(),
            guardrails: crate::guardrail::Guardrails::default(),
            codec,
            agent_layers: Vec::new(),
            handoffs: Vec::new(),
        }
    }
}

/// Builds an [`Agent`](super::Agent).
///
/// `C` is the context type, `O` the output type, and `S` the state: [`Open`] while `C` and `O`
/// may still change, [`Fixed`] once something typed by them was added. Choose the types first:
///
/// ```
/// use modu_agent::Agent;
/// use modu_core::FunctionTool;
/// # use modu_testing::ScriptedModel;
/// struct Ctx { user: String }
///
/// #[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
/// struct Answer { text: String }
///
/// let whoami = FunctionTool::<Ctx>::typed("whoami", "The user's name", |ctx, _: serde_json::Value| async move {
///     Ok(ctx.context().user.clone())
/// });
/// let agent = Agent::builder(ScriptedModel::new())
///     .context::<Ctx>()
///     .output::<Answer>()
///     .instructions("Greet the user.")
///     .tool(whoami)
///     .build()?;
/// # Ok::<(), modu_agent::BuildError>(())
/// ```
///
/// Calling `.context()`, `.output()` or `.codec()` after `.tool()` (or another typed addition)
/// does not compile.
pub struct AgentBuilder<C = (), O = String, S = Open> {
    pub(crate) config: AgentConfig,
    pub(crate) typed: Typed<C, O>,
    state: PhantomData<S>,
}

impl super::Agent<(), String> {
    /// Starts building an agent around a model (an `Arc<dyn ChatModel>` works too), with the
    /// context `()` and text output; change them with [`AgentBuilder::context`] and
    /// [`AgentBuilder::output`] before adding tools.
    pub fn builder(model: impl ChatModel + 'static) -> AgentBuilder<(), String, Open> {
        AgentBuilder {
            config: AgentConfig {
                name: "agent".to_owned(),
                instructions: None,
                model: Arc::new(model),
                retry: RetryConfig::default(),
                limits: RunLimits::default(),
                finalization: FinalizationMode::default(),
                policy: crate::plan::DecisionPolicy::Standard,
                settings: ModelSettings::default(),
                sink: None,
                conversations: None,
                memory: Arc::new(KeepAll),
                memory_is_default: true,
                checkpoints: None,
                leases: None,
                authorizer: Arc::new(AllowAllAuthorizer),
                chat_layers: Vec::new(),
                guardrail_mode: GuardrailMode::default(),
                compaction: None,
            },
            typed: Typed::new(Arc::new(TextCodec)),
            state: PhantomData,
        }
    }
}

impl<C, O, S> AgentBuilder<C, O, S> {
    /// The context type handed to tools and providers ([`RunContext<C2>`]).
    pub fn context<C2>(self) -> AgentBuilder<C2, O, Open>
    where
        S: TypesOpen,
        C2: Send + Sync + 'static,
    {
        AgentBuilder {
            config: self.config,
            typed: Typed::new(self.typed.codec),
            state: PhantomData,
        }
    }

    /// Structured output: the final answer is parsed into `T`.
    pub fn output<T>(self) -> AgentBuilder<C, T, Open>
    where
        S: TypesOpen,
        T: serde::de::DeserializeOwned + Serialize + schemars::JsonSchema + Send + 'static,
    {
        self.codec(JsonCodec::<T>::new())
    }

    /// A custom output codec.
    pub fn codec<K: OutputCodec>(self, codec: K) -> AgentBuilder<C, K::Output, Open>
    where
        S: TypesOpen,
    {
        AgentBuilder {
            config: self.config,
            typed: Typed::new(Arc::new(codec)),
            state: PhantomData,
        }
    }

    /// Fixes the context and output types without adding anything: a builder kept in one
    /// variable across conditional additions (`builder = builder.tool(..)`) needs its final
    /// type from the start.
    pub fn fix_types(self) -> AgentBuilder<C, O, Fixed> {
        AgentBuilder {
            config: self.config,
            typed: self.typed,
            state: PhantomData,
        }
    }
}

impl<C: Send + Sync + 'static, O: Send + 'static, S> AgentBuilder<C, O, S> {
    /// Adds chat middleware around every model call (a tower layer over
    /// [`ChatService`]); the first added is outermost.
    ///
    /// The stack is built once, at `build()`; a run clones it once per model slot (and again
    /// for the agent it hands over to) and sends all of its requests through that clone
    /// (`poll_ready`, then `call`). State a layer keeps in its service value (a counter in its
    /// fields) therefore lasts one run; state its clones share (`ConcurrencyLimit`'s
    /// semaphore, the worker behind a `Buffer`, so a `RateLimit` behind a `Buffer`) spans
    /// every run of the agent. The request's messages are shared with the run during the
    /// call: a layer that edits them (`Arc::make_mut`) edits its own copy.
    ///
    /// Each layer's service must answer with [`ModelError`](crate::ModelError). A tower layer
    /// with an error of its own (`Buffer`, `Timeout`: `BoxError`) goes in one `ServiceBuilder`
    /// with `MapErrLayer` and [`into_model_error`](crate::middleware::into_model_error) after
    /// it, not as two `chat_layer` calls:
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use modu_agent::Agent;
    /// use modu_agent::middleware::into_model_error;
    /// use tower::ServiceBuilder;
    ///
    /// # fn main() -> Result<(), modu_agent::BuildError> {
    /// # let model = modu_testing::ScriptedModel::new().text("hi");
    /// let agent: Agent = Agent::builder(model)
    ///     .chat_layer(ServiceBuilder::new().map_err(into_model_error).timeout(Duration::from_secs(30)))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn chat_layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<ChatService> + Send + Sync + 'static,
        L::Service: tower::Service<crate::ChatRequest, Response = crate::ChatResponse, Error = crate::ModelError>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<crate::ChatRequest>>::Future: Send + 'static,
    {
        self.config.chat_layers.push(crate::middleware::chat_layer_fn(layer));
        self
    }

    /// Adds function middleware around every tool call attempt (a tower layer over
    /// [`FunctionService`]); the first added is outermost.
    pub fn function_layer<L>(self, layer: L) -> AgentBuilder<C, O, Fixed>
    where
        L: tower::Layer<FunctionService<C>> + Send + Sync + 'static,
        L::Service: tower::Service<ToolInvocation<C>, Response = serde_json::Value, Error = crate::ToolError>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<ToolInvocation<C>>>::Future: Send + 'static,
    {
        let mut b = self.fix_types();
        b.typed
            .function_layers
            .push(crate::middleware::function_layer_fn(layer));
        b
    }

    /// Lets the model hand the conversation to another agent (same context and output types).
    pub fn handoff(self, handoff: compose::Handoff<C, O>) -> AgentBuilder<C, O, Fixed> {
        let mut b = self.fix_types();
        b.typed.handoffs.push(handoff);
        b
    }

    /// Adds agent middleware around every run (a tower layer over [`AgentService`]); the first
    /// added is outermost.
    pub fn agent_layer<L>(self, layer: L) -> AgentBuilder<C, O, Fixed>
    where
        L: tower::Layer<AgentService<C, O>> + Send + Sync + 'static,
        L::Service: tower::Service<AgentRequest<C>, Response = crate::outcome::RunOutcome<O>, Error = std::convert::Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<AgentRequest<C>>>::Future: Send + 'static,
    {
        let mut b = self.fix_types();
        b.typed.agent_layers.push(crate::middleware::agent_layer_fn(layer));
        b
    }

    /// The agent's name (events, telemetry, results).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.config.name = name.into();
        self
    }

    /// Fixed instructions (the system message); they replace earlier instructions, fixed or
    /// dynamic.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.config.instructions = Some(text.into());
        self.typed.instructions_fn = None;
        self
    }

    /// Instructions computed from the run context before every model call; they replace
    /// earlier instructions.
    pub fn instructions_fn<F>(self, f: F) -> AgentBuilder<C, O, Fixed>
    where
        F: Fn(&RunContext<C>) -> String + Send + Sync + 'static,
    {
        let mut b = self.fix_types();
        b.config.instructions = None;
        b.typed.instructions_fn = Some(Arc::new(f));
        b
    }

    /// Adds a tool (an `Arc<dyn Tool<C>>` works too).
    pub fn tool(self, tool: impl Tool<C> + 'static) -> AgentBuilder<C, O, Fixed> {
        let mut b = self.fix_types();
        b.typed.tools.push(Arc::new(tool));
        b
    }

    /// Adds a provider that opens tools per run (MCP servers, skills); an `Arc` of one works
    /// too.
    pub fn tool_provider(self, provider: impl ToolProvider<C> + 'static) -> AgentBuilder<C, O, Fixed> {
        let mut b = self.fix_types();
        b.typed.tool_providers.push(Arc::new(provider));
        b
    }

    /// Adds a context provider (an `Arc` of one works too); providers run before every model
    /// call in the order added.
    pub fn context_provider(self, provider: impl ContextProvider<C> + 'static) -> AgentBuilder<C, O, Fixed> {
        let mut b = self.fix_types();
        b.typed.context_providers.push(Arc::new(provider));
        b
    }

    /// Retry settings.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.config.retry = retry;
        self
    }

    /// Run limits.
    pub fn limits(mut self, limits: RunLimits) -> Self {
        self.config.limits = limits;
        self
    }

    /// When to make a separate final request.
    pub fn finalization_mode(mut self, mode: FinalizationMode) -> Self {
        self.config.finalization = mode;
        self
    }

    /// How the agent decides what to do next: the standard tool loop (default) or strict
    /// Plan-and-Execute ([`crate::plan::PlanAndExecutePolicy`]). A strict policy needs a
    /// finalization step: `build` rejects it with [`FinalizationMode::Disabled`].
    pub fn decision_policy(mut self, policy: impl Into<crate::plan::DecisionPolicy>) -> Self {
        self.config.policy = policy.into();
        self
    }

    /// Sampling settings.
    pub fn model_settings(mut self, settings: ModelSettings) -> Self {
        self.config.settings = settings;
        self
    }

    /// Sets the temperature.
    pub fn temperature(mut self, t: f32) -> Self {
        self.config.settings.temperature = Some(t);
        self
    }

    /// How hard a reasoning model should think, in every request ([`crate::model::ReasoningEffort`]).
    pub fn reasoning_effort(mut self, effort: crate::model::ReasoningEffort) -> Self {
        self.config.settings.reasoning_effort = Some(effort);
        self
    }

    /// Whether and which tool the model must call ([`ModelSettings::tool_choice`]): sent with
    /// the run's acting requests until the model's first tool call, then reset to the
    /// server's default unless [`ModelSettings::keep_tool_choice`] is set.
    pub fn tool_choice(mut self, choice: crate::model::ToolChoice) -> Self {
        self.config.settings.tool_choice = Some(choice);
        self
    }

    /// Sends every event to this sink (an `Arc` of one works too).
    ///
    /// The run awaits the sink's `publish` for each event: a failing or panicking sink is
    /// logged and the run goes on, but a slow one slows the run (and is not bounded by its
    /// timeout). Give a sink that may be slow (a network exporter) a queue of its own with
    /// [`CompositeEventSink`](crate::sinks::CompositeEventSink), which drops and counts what
    /// it cannot keep up with.
    pub fn event_sink(mut self, sink: impl EventSink + 'static) -> Self {
        self.config.sink = Some(Arc::new(sink));
        self
    }

    /// Keeps conversations (sessions) in this store (an `Arc` of one works too).
    pub fn conversation_store(mut self, store: impl ConversationStore + 'static) -> Self {
        self.config.conversations = Some(Arc::new(store));
        self
    }

    /// Chooses the model's view of a session's history (default: all of it).
    pub fn memory_policy(mut self, policy: impl ConversationMemoryPolicy + 'static) -> Self {
        self.config.memory = Arc::new(policy);
        self.config.memory_is_default = false;
        self
    }

    /// Checkpoints runs in this store (an `Arc` of one works too), so that `Agent::resume`
    /// can finish them.
    pub fn checkpoint_store(mut self, store: impl CheckpointStore + 'static) -> Self {
        self.config.checkpoints = Some(Arc::new(store));
        self
    }

    /// Runs each session on one worker at a time, across processes ([`crate::lease`]): a run
    /// with a session takes the session's lease before it reads the conversation, renews it
    /// while it runs, and writes its conversation and checkpoints fenced by it. The stores must
    /// share the leases' backend (`append_fenced`, `save_fenced`); a store without fenced
    /// writes fails the run's first write with [`crate::StoreError::Unsupported`].
    pub fn session_leases(
        mut self,
        leases: impl crate::lease::LeaseStore + 'static,
        options: crate::lease::LeaseOptions,
    ) -> Self {
        self.config.leases = Some(crate::lease::SessionLeases {
            store: Arc::new(leases),
            options,
        });
        self
    }

    /// Checks every tool call against this authorizer right before it runs.
    pub fn authorizer(mut self, authorizer: impl ToolAuthorizer + 'static) -> Self {
        self.config.authorizer = Arc::new(authorizer);
        self
    }
}
