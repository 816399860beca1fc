//! [`Agent`]: configuration, builder, requests and results.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::context::RunContext;
use crate::error::AgentError;
use crate::event::EventSink;
use crate::memory::{ConversationMemoryPolicy, KeepAll};
use crate::middleware::{
    AgentLayerFn, AgentService, ChatLayerFn, ChatService, FunctionLayerFn, FunctionService, ToolInvocation,
};
use crate::model::ChatModel;
use crate::output::{JsonCodec, OutputCodec, TextCodec};
use crate::provider::{AllowAllAuthorizer, ContextProvider, ToolAuthorizer, ToolProvider};
use crate::store::{CheckpointStore, ConversationStore};
use crate::tool::{Tool, ToolSpec};

mod api;
mod build;
mod guard;
pub use guard::AgentGuardrail;
pub(crate) mod compose;
mod input;
mod recover;
pub(crate) mod request;
pub(crate) mod settings;

pub use request::AgentRequest;
pub(crate) use request::PauseSlot;
pub use settings::{FinalizationMode, ModelSettings, RetryConfig, RunLimits};

type InstructionFn<C> = Arc<dyn Fn(&RunContext<C>) -> String + Send + Sync>;

/// The agent's instructions: a fixed text, or a function of the run context.
pub enum Instructions<C> {
    /// A fixed text.
    Static(String),
    /// Computed for every model call from the run context.
    Dynamic(InstructionFn<C>),
}

impl<C> Clone for Instructions<C> {
    fn clone(&self) -> Self {
        match self {
            Instructions::Static(s) => Instructions::Static(s.clone()),
            Instructions::Dynamic(f) => Instructions::Dynamic(Arc::clone(f)),
        }
    }
}

impl<C> Instructions<C> {
    pub(crate) fn render(&self, ctx: &RunContext<C>) -> String {
        match self {
            Instructions::Static(s) => s.clone(),
            Instructions::Dynamic(f) => f(ctx),
        }
    }
}

/// A tool a run may call (the agent's own, or a tool provider's).
pub(crate) struct VisibleTool<C> {
    pub(crate) entry: ToolEntry<C>,
}

/// A run's tools by name, and their names in order (shared: an agent without tool providers
/// indexes its tools once, in [`AgentInner::tool_index`]).
pub(crate) type ToolIndex<C> = (Arc<std::collections::HashMap<String, VisibleTool<C>>>, Arc<Vec<String>>);

pub(crate) struct ToolEntry<C> {
    pub(crate) tool: Arc<dyn Tool<C>>,
    pub(crate) validator: Arc<crate::tool::ArgumentValidator>,
}

impl<C> Clone for ToolEntry<C> {
    fn clone(&self) -> Self {
        ToolEntry {
            tool: Arc::clone(&self.tool),
            validator: Arc::clone(&self.validator),
        }
    }
}

pub(crate) fn compile_tool<C>(tool: Arc<dyn Tool<C>>) -> Result<ToolEntry<C>, AgentError> {
    let spec = tool.spec();
    if spec.name.is_empty()
        || !spec
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    {
        return Err(AgentError::Configuration {
            message: format!(
                "tool name {:?} is invalid: use letters, digits, '_', '-' or '.'",
                spec.name
            ),
        });
    }
    let validator = crate::tool::ArgumentValidator::new(&spec.parameters).map_err(|e| AgentError::Configuration {
        message: format!("tool {} has an invalid parameter schema: {e}", spec.name),
    })?;
    Ok(ToolEntry {
        tool,
        validator: Arc::new(validator),
    })
}

pub(crate) struct AgentInner<C, O> {
    pub(crate) name: String,
    pub(crate) instructions: Option<Instructions<C>>,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) tools: Vec<ToolEntry<C>>,
    /// `tools` indexed by name, built by the first run that has no tool provider's tools.
    pub(crate) tool_index: std::sync::OnceLock<ToolIndex<C>>,
    pub(crate) tool_providers: Vec<Arc<dyn ToolProvider<C>>>,
    pub(crate) context_providers: Vec<Arc<dyn ContextProvider<C>>>,
    pub(crate) codec: Arc<dyn OutputCodec<Output = O>>,
    pub(crate) retry: RetryConfig,
    pub(crate) limits: RunLimits,
    pub(crate) finalization: FinalizationMode,
    pub(crate) policy: crate::plan::DecisionPolicy,
    pub(crate) settings: ModelSettings,
    pub(crate) sink: Option<Arc<dyn EventSink>>,
    pub(crate) conversations: Option<Arc<dyn ConversationStore>>,
    pub(crate) memory: Arc<dyn ConversationMemoryPolicy>,
    pub(crate) checkpoints: Option<Arc<dyn CheckpointStore>>,
    pub(crate) leases: Option<crate::lease::SessionLeases>,
    pub(crate) authorizer: Arc<dyn ToolAuthorizer>,
    pub(crate) fingerprint: String,
    /// The agent model's chat stack (user chat layers, retry, per-attempt events, the model).
    pub(crate) chat: ChatService,
    /// The planner model's chat stack, when a strict policy names its own planner model.
    pub(crate) planner_chat: Option<ChatService>,
    /// The function stack (user function layers, retry, timeout, the tool).
    pub(crate) function_service: FunctionService<C>,
    /// The agent stack (agent layers around one run), built once; `None` without layers.
    pub(crate) agent_service: Option<AgentService<C, O>>,
    pub(crate) handoffs: Vec<compose::Handoff<C, O>>,
    pub(crate) guardrails: crate::guardrail::Guardrails<C>,
    pub(crate) compaction: Option<crate::compaction::RunCompaction>,
}

/// An agent: a model, instructions, tools and the policies that drive a run.
///
/// `C` is the application's context type handed to tools ([`RunContext<C>`]); `O` is the
/// output type (`String` for text, any `T: JsonSchema + Deserialize` with
/// [`AgentBuilder::output`]). Cloning is cheap; one agent serves any number of concurrent runs.
///
/// ```
/// use modu_core::{Agent, FunctionTool};
/// use modu_testing::ScriptedModel;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct AddArgs { a: i64, b: i64 }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let add = FunctionTool::<()>::typed("add", "Add two integers", |_ctx, a: AddArgs| async move { Ok(a.a + a.b) });
/// let model = ScriptedModel::new()
///     .tool_call("add", serde_json::json!({"a": 2, "b": 3}))
///     .text("2 + 3 = 5");
/// let agent = Agent::builder(model).instructions("Use the tools.").tool(add).build()?;
/// let outcome = agent.run("What is 2 + 3?").await;
/// assert_eq!(outcome.messages().len(), 4); // user, tool call, tool result, answer
/// assert_eq!(outcome.into_result()?, "2 + 3 = 5");
/// # Ok(()) }
/// ```
pub struct Agent<C = (), O = String> {
    pub(crate) inner: Arc<AgentInner<C, O>>,
}

impl<C, O> Clone for Agent<C, O> {
    fn clone(&self) -> Self {
        Agent {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C, O> fmt::Debug for Agent<C, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.inner.name)
            .field("model", &self.inner.model.model_name())
            .field(
                "tools",
                &self
                    .inner
                    .tools
                    .iter()
                    .map(|t| t.tool.spec().name.clone())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<C: Send + Sync + 'static> Agent<C, String> {
    /// Starts building an agent around a model.
    pub fn builder(model: impl ChatModel + 'static) -> AgentBuilder<C, String> {
        Self::builder_arc(Arc::new(model))
    }

    /// Starts building an agent around a shared model.
    pub fn builder_arc(model: Arc<dyn ChatModel>) -> AgentBuilder<C, String> {
        AgentBuilder {
            name: "agent".to_owned(),
            instructions: None,
            model,
            tools: Vec::new(),
            tool_providers: Vec::new(),
            context_providers: Vec::new(),
            codec: Arc::new(TextCodec),
            retry: RetryConfig::default(),
            limits: RunLimits::default(),
            finalization: FinalizationMode::default(),
            policy: crate::plan::DecisionPolicy::Standard,
            settings: ModelSettings::default(),
            sink: None,
            conversations: None,
            memory: Arc::new(KeepAll),
            checkpoints: None,
            leases: None,
            authorizer: Arc::new(AllowAllAuthorizer),
            chat_layers: Vec::new(),
            function_layers: Vec::new(),
            agent_layers: Vec::new(),
            layers_lost: false,
            handoffs: Vec::new(),
            guardrails: crate::guardrail::Guardrails::default(),
            compaction: None,
        }
    }
}

impl<C, O> Agent<C, O> {
    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The specs of the agent's own tools (not those of tool providers).
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.inner.tools.iter().map(|t| t.tool.spec().clone()).collect()
    }

    /// A fingerprint of what a checkpoint depends on (tools, output schema, policy); resuming
    /// with an agent whose fingerprint differs fails.
    pub fn fingerprint(&self) -> &str {
        &self.inner.fingerprint
    }

    /// The conversation store, if any.
    pub fn conversation_store(&self) -> Option<&Arc<dyn ConversationStore>> {
        self.inner.conversations.as_ref()
    }

    /// The checkpoint store, if any.
    pub fn checkpoint_store(&self) -> Option<&Arc<dyn CheckpointStore>> {
        self.inner.checkpoints.as_ref()
    }
}

/// Builds an [`Agent`].
pub struct AgentBuilder<C, O> {
    name: String,
    instructions: Option<Instructions<C>>,
    model: Arc<dyn ChatModel>,
    tools: Vec<Arc<dyn Tool<C>>>,
    tool_providers: Vec<Arc<dyn ToolProvider<C>>>,
    context_providers: Vec<Arc<dyn ContextProvider<C>>>,
    codec: Arc<dyn OutputCodec<Output = O>>,
    retry: RetryConfig,
    limits: RunLimits,
    finalization: FinalizationMode,
    policy: crate::plan::DecisionPolicy,
    settings: ModelSettings,
    sink: Option<Arc<dyn EventSink>>,
    conversations: Option<Arc<dyn ConversationStore>>,
    memory: Arc<dyn ConversationMemoryPolicy>,
    checkpoints: Option<Arc<dyn CheckpointStore>>,
    leases: Option<crate::lease::SessionLeases>,
    authorizer: Arc<dyn ToolAuthorizer>,
    chat_layers: Vec<ChatLayerFn>,
    function_layers: Vec<FunctionLayerFn<C>>,
    agent_layers: Vec<AgentLayerFn<C, O>>,
    layers_lost: bool,
    handoffs: Vec<compose::Handoff<C, O>>,
    guardrails: crate::guardrail::Guardrails<C>,
    compaction: Option<crate::compaction::RunCompaction>,
}

impl<C: Send + Sync + 'static, O: Send + 'static> AgentBuilder<C, O> {
    /// Adds chat middleware around every model call (a tower layer over
    /// [`ChatService`]); the first added is outermost.
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
        self.chat_layers.push(crate::middleware::chat_layer_fn(layer));
        self
    }

    /// Adds function middleware around every tool call attempt (a tower layer over
    /// [`FunctionService`]); the first added is outermost.
    pub fn function_layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<FunctionService<C>> + Send + Sync + 'static,
        L::Service: tower::Service<ToolInvocation<C>, Response = serde_json::Value, Error = crate::ToolError>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<ToolInvocation<C>>>::Future: Send + 'static,
    {
        self.function_layers.push(crate::middleware::function_layer_fn(layer));
        self
    }

    /// Lets the model hand the conversation to another agent (same context and output types).
    /// Add handoffs after choosing the output type.
    pub fn handoff(mut self, handoff: compose::Handoff<C, O>) -> Self {
        self.handoffs.push(handoff);
        self
    }

    /// Adds agent middleware around every run (a tower layer over [`AgentService`]); the first
    /// added is outermost. Add it after choosing the output type.
    pub fn agent_layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<AgentService<C, O>> + Send + Sync + 'static,
        L::Service: tower::Service<AgentRequest<C>, Response = crate::outcome::RunOutcome<O>, Error = std::convert::Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<AgentRequest<C>>>::Future: Send + 'static,
    {
        self.agent_layers.push(crate::middleware::agent_layer_fn(layer));
        self
    }

    /// The agent's name (events, telemetry, results).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Fixed instructions (the system message).
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(Instructions::Static(text.into()));
        self
    }

    /// Instructions computed from the run context before every model call.
    pub fn instructions_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&RunContext<C>) -> String + Send + Sync + 'static,
    {
        self.instructions = Some(Instructions::Dynamic(Arc::new(f)));
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: impl Tool<C> + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds a shared tool.
    pub fn tool_arc(mut self, tool: Arc<dyn Tool<C>>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a provider that opens tools per run (MCP servers, skills).
    pub fn tool_provider(mut self, provider: impl ToolProvider<C> + 'static) -> Self {
        self.tool_providers.push(Arc::new(provider));
        self
    }

    /// Adds a shared tool provider.
    pub fn tool_provider_arc(mut self, provider: Arc<dyn ToolProvider<C>>) -> Self {
        self.tool_providers.push(provider);
        self
    }

    /// Adds a context provider; providers run before every model call in the order added.
    pub fn context_provider(mut self, provider: impl ContextProvider<C> + 'static) -> Self {
        self.context_providers.push(Arc::new(provider));
        self
    }

    /// Adds a shared context provider.
    pub fn context_provider_arc(mut self, provider: Arc<dyn ContextProvider<C>>) -> Self {
        self.context_providers.push(provider);
        self
    }

    /// Structured output: the final answer is parsed into `T`.
    pub fn output<T>(self) -> AgentBuilder<C, T>
    where
        T: serde::de::DeserializeOwned + Serialize + schemars::JsonSchema + Send + 'static,
    {
        self.codec(JsonCodec::<T>::new())
    }

    /// A custom output codec.
    pub fn codec<K: OutputCodec>(self, codec: K) -> AgentBuilder<C, K::Output> {
        AgentBuilder {
            name: self.name,
            instructions: self.instructions,
            model: self.model,
            tools: self.tools,
            tool_providers: self.tool_providers,
            context_providers: self.context_providers,
            codec: Arc::new(codec),
            retry: self.retry,
            limits: self.limits,
            finalization: self.finalization,
            policy: self.policy,
            settings: self.settings,
            sink: self.sink,
            conversations: self.conversations,
            memory: self.memory,
            checkpoints: self.checkpoints,
            leases: self.leases,
            authorizer: self.authorizer,
            chat_layers: self.chat_layers,
            function_layers: self.function_layers,
            layers_lost: self.layers_lost || !self.agent_layers.is_empty() || !self.handoffs.is_empty(),
            agent_layers: Vec::new(),
            handoffs: Vec::new(),
            guardrails: self.guardrails,
            compaction: self.compaction,
        }
    }

    /// Retry settings.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Run limits.
    pub fn limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// When to make a separate final request.
    pub fn finalization_mode(mut self, mode: FinalizationMode) -> Self {
        self.finalization = mode;
        self
    }

    /// How the agent decides what to do next: the standard tool loop (default) or strict
    /// Plan-and-Execute ([`crate::plan::PlanAndExecutePolicy`]). A strict policy needs a
    /// finalization step: `build` rejects it with [`FinalizationMode::Disabled`].
    pub fn decision_policy(mut self, policy: impl Into<crate::plan::DecisionPolicy>) -> Self {
        self.policy = policy.into();
        self
    }

    /// Sampling settings.
    pub fn model_settings(mut self, settings: ModelSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Sets the temperature.
    pub fn temperature(mut self, t: f32) -> Self {
        self.settings.temperature = Some(t);
        self
    }

    /// How hard a reasoning model should think, in every request ([`crate::model::ReasoningEffort`]).
    pub fn reasoning_effort(mut self, effort: crate::model::ReasoningEffort) -> Self {
        self.settings.reasoning_effort = Some(effort);
        self
    }

    /// Whether and which tool the model must call ([`ModelSettings::tool_choice`]): sent with
    /// the run's acting requests until the model's first tool call, then reset to the
    /// server's default unless [`ModelSettings::keep_tool_choice`] is set.
    pub fn tool_choice(mut self, choice: crate::model::ToolChoice) -> Self {
        self.settings.tool_choice = Some(choice);
        self
    }

    /// Sends every event to this sink.
    pub fn event_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Keeps conversations (sessions) in this store.
    pub fn conversation_store(mut self, store: Arc<dyn ConversationStore>) -> Self {
        self.conversations = Some(store);
        self
    }

    /// Chooses the model's view of a session's history (default: all of it).
    pub fn memory_policy(mut self, policy: Arc<dyn ConversationMemoryPolicy>) -> Self {
        self.memory = policy;
        self
    }

    /// Checkpoints runs in this store, so that `Agent::resume` can finish them.
    pub fn checkpoint_store(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.checkpoints = Some(store);
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
        self.leases = Some(crate::lease::SessionLeases {
            store: Arc::new(leases),
            options,
        });
        self
    }

    /// Checks every tool call against this authorizer right before it runs.
    pub fn authorizer(mut self, authorizer: Arc<dyn ToolAuthorizer>) -> Self {
        self.authorizer = authorizer;
        self
    }
}
