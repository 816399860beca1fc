//! The context pipeline: a [`ContextProvider`] adds instructions, messages and tools to each
//! model request ([`ModelContext`]) for the [`Stage`] the request is for.

use std::sync::Arc;

use async_trait::async_trait;

use crate::context::RunContext;
use crate::message::Message;

/// Which kind of model request a context is being prepared for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Stage {
    /// Producing a plan (plan-and-execute).
    Plan,
    /// Acting: the model may call tools.
    Act,
    /// Writing the final answer, without tools.
    Finalize,
}

impl Stage {
    /// Its snake_case name (`plan`, `act`, `finalize`), as it serialises.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Plan => "plan",
            Stage::Act => "act",
            Stage::Finalize => "finalize",
        }
    }
}

/// What the model will see in the next request, as context providers shape it.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ModelContext {
    /// The stage the request belongs to (`None` only in a default value).
    pub stage: Option<Stage>,
    /// Instruction blocks, joined into the system message in this order.
    pub instructions: Vec<String>,
    /// The conversation: history, then the run's messages.
    pub messages: Vec<Message>,
    /// The tools offered. Providers may remove tools (a removed tool is refused if called);
    /// tools are added through [`ToolProvider`](crate::ToolProvider)s, not here: a tool put
    /// here that the request did not offer is dropped (a request without tools, such as the
    /// final one with the output schema, stays without).
    pub tools: Vec<crate::model::ToolDefinition>,
    /// The names of the offered tools that stand for other tools ([`crate::ToolSpec::meta`]),
    /// filled in by the run loop.
    pub meta_tools: std::collections::BTreeSet<String>,
    /// The tool identities ([`crate::Tool::identity`]) the gate admits this turn; `None`
    /// admits every offered tool. A provider that narrows tools by identity (skills'
    /// `allowed-tools`) sets it, so a meta tool can stay offered while only the listed external
    /// tools run through it; a call outside the set is refused with `tool_not_allowed`.
    pub allowed_identities: Option<std::collections::BTreeSet<String>>,
}

/// A context provider failed; the run ends with [`crate::AgentError::ContextProvider`].
#[derive(Debug, thiserror::Error)]
#[error("context provider {provider} failed: {message}")]
#[non_exhaustive]
pub struct ContextProviderError {
    /// The provider's name.
    pub provider: String,
    /// What happened, without secrets.
    pub message: String,
}

impl ContextProviderError {
    /// The provider `provider` failed with this message (no secrets).
    pub fn new(provider: impl Into<String>, message: impl Into<String>) -> Self {
        ContextProviderError {
            provider: provider.into(),
            message: message.into(),
        }
    }
}

/// Runs before every model call, in the order the agent lists them, each receiving the
/// previous one's output; all are told about the model's new messages after it answers.
///
/// Use it to add instructions (skills, retrieved documents, per-user rules) or messages, or to
/// narrow the tools offered in a stage.
#[async_trait]
pub trait ContextProvider<C>: Send + Sync {
    /// A name for errors and events.
    fn name(&self) -> &str;

    /// Shapes the next request.
    async fn invoking(&self, ctx: &RunContext<C>, context: &mut ModelContext) -> Result<(), ContextProviderError>;

    /// Sees the messages the model just produced.
    async fn invoked(&self, _ctx: &RunContext<C>, _new_messages: &[Message]) -> Result<(), ContextProviderError> {
        Ok(())
    }

    /// Called once when the run ends, whatever the outcome (release per-run state here).
    async fn run_finished(&self, _ctx: &RunContext<C>) {}
}

#[async_trait]
impl<C: Send + Sync, T: ContextProvider<C> + ?Sized> ContextProvider<C> for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn invoking(&self, ctx: &RunContext<C>, context: &mut ModelContext) -> Result<(), ContextProviderError> {
        (**self).invoking(ctx, context).await
    }
    async fn invoked(&self, ctx: &RunContext<C>, new_messages: &[Message]) -> Result<(), ContextProviderError> {
        (**self).invoked(ctx, new_messages).await
    }
    async fn run_finished(&self, ctx: &RunContext<C>) {
        (**self).run_finished(ctx).await
    }
}
