//! [`Agent`]: configuration, builder, requests and results.

use std::fmt;
use std::sync::Arc;

use crate::context::RunContext;
use crate::event::EventSink;
use crate::memory::ConversationMemoryPolicy;
use crate::middleware::{AgentService, ChatService, FunctionService};
use crate::model::{ChatModel, ResponseFormat};
use crate::output::OutputCodec;
use crate::store::{CheckpointStore, ConversationStore};
use crate::tool::{Tool, ToolSpec};
use crate::{authorize::ToolAuthorizer, context_provider::ContextProvider, tool_provider::ToolProvider};

mod api;
mod approvals;
mod build;
mod build_error;
pub use build_error::BuildError;
mod builder;
pub use builder::{AgentBuilder, Fixed, Open, TypesOpen};
mod guard;
pub use guard::AgentGuardrail;
pub(crate) mod compose;
mod input;
mod recover;
pub(crate) mod request;
pub(crate) mod settings;

pub use request::AgentRequest;
pub(crate) use request::PauseSlot;
pub use settings::{FinalizationMode, ModelSettings, RECOVER_CONCURRENCY, RetryConfig, RunLimits};

pub(crate) type InstructionFn<C> = Arc<dyn Fn(&RunContext<C>) -> String + Send + Sync>;

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

/// A tool a run may call (the agent's own, or a tool provider's).
pub(crate) struct VisibleTool<C> {
    pub(crate) entry: ToolEntry<C>,
}

/// A run's tools by name, and their definitions in order (shared: an agent without tool providers
/// indexes its tools once, in [`AgentInner::tool_index`]).
pub(crate) type ToolIndex<C> = (
    Arc<foldhash::HashMap<String, VisibleTool<C>>>,
    Arc<Vec<crate::model::ToolDefinition>>,
);

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

pub(crate) fn compile_tool<C>(tool: Arc<dyn Tool<C>>) -> Result<ToolEntry<C>, BuildError> {
    let spec = tool.spec();
    if spec.name.is_empty()
        || !spec
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    {
        return Err(BuildError::InvalidToolName {
            name: spec.name.clone(),
        });
    }
    let validator =
        crate::tool::ArgumentValidator::new(&spec.parameters).map_err(|e| BuildError::InvalidToolSchema {
            tool: spec.name.clone(),
            message: e.to_string(),
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
    /// The names of `tool_index`'s definitions, as a request that offers them all records
    /// them: built by the first such request, shared by the agent's runs.
    pub(crate) offered_names: std::sync::OnceLock<crate::runner::state::ToolNames>,
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
    /// The memory is the default one: a run without history needs no call to it.
    pub(crate) memory_is_default: bool,
    pub(crate) checkpoints: Option<Arc<dyn CheckpointStore>>,
    pub(crate) leases: Option<crate::lease::SessionLeases>,
    /// Orders this process's edits of one run's checkpoint (decisions, answers).
    pub(crate) edits: crate::runner::edits::EditLocks,
    pub(crate) authorizer: Arc<dyn ToolAuthorizer>,
    pub(crate) fingerprint: Arc<str>,
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
/// use modu_agent::Agent;
/// use modu_core::FunctionTool;
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

impl<C, O> Agent<C, O> {
    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The agent's own model settings (a run's own, `AgentRequest::model_settings`, go over them).
    pub fn model_settings(&self) -> &ModelSettings {
        &self.inner.settings
    }

    /// The specs of the agent's own tools (not those of tool providers).
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.inner.tools.iter().map(|t| t.tool.spec().clone()).collect()
    }

    /// A fingerprint of what a checkpoint depends on (tools, output schema, policy, and the
    /// fingerprints of the agents it uses as tools or hands over to); resuming with an agent
    /// whose fingerprint differs fails.
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

impl<C, O: Send + 'static> Agent<C, O> {
    /// The format the agent's final answer is asked in: its output codec's schema for a
    /// structured agent ([`AgentBuilder::output`]), `None` for free text.
    pub fn response_format(&self) -> Option<ResponseFormat> {
        self.inner.codec.response_format()
    }
}
