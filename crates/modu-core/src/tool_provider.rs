//! Per-run tool providers: a [`ToolProvider`] opens a set of tools for one run and closes it
//! when the run ends, whatever the outcome: that is how MCP sessions and skill resource tools
//! live exactly as long as a run.

use std::sync::Arc;

use async_trait::async_trait;

use crate::BoxError;
use crate::context::RunContext;
use crate::tool::Tool;

/// A provider failed to open its tools.
#[derive(Debug, thiserror::Error)]
#[error("tool provider {provider} failed to open: {message}")]
#[non_exhaustive]
pub struct ToolProviderError {
    /// The provider's name.
    pub provider: String,
    /// What kind of failure it is: what a caller can do about it.
    pub kind: ToolProviderErrorKind,
    /// What happened, without secrets.
    pub message: String,
    /// The cause.
    #[source]
    pub source: Option<BoxError>,
}

impl ToolProviderError {
    /// An error of `kind` from `provider`, with a message safe to show.
    pub fn new(provider: impl Into<String>, kind: ToolProviderErrorKind, message: impl Into<String>) -> Self {
        ToolProviderError {
            provider: provider.into(),
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same error with its cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }
}

/// What kind of failure kept a [`ToolProvider`] from opening its tools, so a caller can tell a
/// bad selection from a bad token without matching text. Serialized in snake_case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolProviderErrorKind {
    /// The configuration or the run's selection is invalid (an unknown server name, a
    /// duplicate, a refused declaration): fix the request or the configuration.
    Configuration,
    /// Credentials were refused or could not be obtained: fix the credentials.
    Auth,
    /// A server could not be reached or its connection broke: trying again later may work, so
    /// a run that failed with it is resumable.
    Unavailable,
    /// A server answered but its tools could not be listed.
    Discovery,
    /// Anything else.
    Other,
}

impl ToolProviderErrorKind {
    /// Whether trying again later may succeed (only [`ToolProviderErrorKind::Unavailable`]).
    pub fn is_transient(self) -> bool {
        self == ToolProviderErrorKind::Unavailable
    }
}

/// The tools one provider opened for one run.
#[async_trait]
pub trait ToolSession<C>: Send + Sync {
    /// The tools of this session.
    fn tools(&self) -> Vec<Arc<dyn Tool<C>>>;

    /// Called before each model request of the run: brings the session up to date (an MCP
    /// server announced that its tools changed, say) and returns `true` when [`tools`] now
    /// returns a different list, which the run then offers from this request on. The default
    /// never changes.
    ///
    /// [`tools`]: ToolSession::tools
    async fn refresh(&self) -> bool {
        false
    }

    /// Closes the session (connections, child processes). Called once, when the run ends.
    async fn close(self: Box<Self>);
}

/// Opens tools for a run.
#[async_trait]
pub trait ToolProvider<C>: Send + Sync {
    /// A name for errors and events.
    fn name(&self) -> &str;

    /// Opens the tools for the run described by `ctx`.
    async fn open(&self, ctx: &RunContext<C>) -> Result<Box<dyn ToolSession<C>>, ToolProviderError>;
}

#[async_trait]
impl<C: Send + Sync, T: ToolProvider<C> + ?Sized> ToolProvider<C> for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn open(&self, ctx: &RunContext<C>) -> Result<Box<dyn ToolSession<C>>, ToolProviderError> {
        (**self).open(ctx).await
    }
}

/// A session with a fixed list of tools and nothing to close.
pub struct StaticToolSession<C> {
    tools: Vec<Arc<dyn Tool<C>>>,
}

impl<C> StaticToolSession<C> {
    /// A session with these tools.
    pub fn new(tools: Vec<Arc<dyn Tool<C>>>) -> Self {
        StaticToolSession { tools }
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> ToolSession<C> for StaticToolSession<C> {
    fn tools(&self) -> Vec<Arc<dyn Tool<C>>> {
        self.tools.clone()
    }
    async fn close(self: Box<Self>) {}
}
