//! Per-run tool providers and tool authorization.
//!
//! A [`ToolProvider`] opens a set of tools for one run and closes it when the run ends,
//! whatever the outcome: that is how MCP sessions and skill resource tools live exactly as long
//! as a run. A [`ToolAuthorizer`] is asked right before every execution.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;

use crate::BoxError;
use crate::context::{RunContext, UserContext};
use crate::message::Message;
use crate::tool::{Tool, ToolError, ToolErrorKind};

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

/// Decides whether a user may call a tool. Checked right before execution.
pub trait ToolAuthorizer: Send + Sync {
    /// `Ok` to allow; an `authorization` [`ToolError`] to deny (the model sees it).
    fn authorize(&self, user: &UserContext, tool: &str) -> Result<(), ToolError>;
}

impl<T: ToolAuthorizer + ?Sized> ToolAuthorizer for Arc<T> {
    fn authorize(&self, user: &UserContext, tool: &str) -> Result<(), ToolError> {
        (**self).authorize(user, tool)
    }
}

/// Allows every call (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAllAuthorizer;

impl ToolAuthorizer for AllowAllAuthorizer {
    fn authorize(&self, _user: &UserContext, _tool: &str) -> Result<(), ToolError> {
        Ok(())
    }
}

/// Role-based access: each role maps to the tool names it may call, or `"*"` for all.
///
/// Roles come from the run's [`UserContext`]. A user with no roles, or with only roles the
/// table does not know, may call nothing; a tool no role lists is denied.
///
/// ```
/// use modu_core::{RbacToolAuthorizer, ToolAuthorizer, UserContext};
/// let rbac = RbacToolAuthorizer::new()
///     .allow("calculator_user", ["add"])
///     .allow("admin", ["*"]);
/// assert!(rbac.authorize(&UserContext::with_roles(["calculator_user"]), "add").is_ok());
/// assert!(rbac.authorize(&UserContext::with_roles(["calculator_user"]), "delete").is_err());
/// assert!(rbac.authorize(&UserContext::with_roles(["admin"]), "delete").is_ok());
/// assert!(rbac.authorize(&UserContext::default(), "add").is_err());
/// ```
#[derive(Clone, Debug, Default)]
pub struct RbacToolAuthorizer {
    role_permissions: BTreeMap<String, BTreeSet<String>>,
}

impl RbacToolAuthorizer {
    /// An authorizer that denies everything until roles are added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets `role` call these tools (`"*"` for all).
    pub fn allow<I, S>(mut self, role: impl Into<String>, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.role_permissions
            .entry(role.into())
            .or_default()
            .extend(tools.into_iter().map(Into::into));
        self
    }
}

impl ToolAuthorizer for RbacToolAuthorizer {
    fn authorize(&self, user: &UserContext, tool: &str) -> Result<(), ToolError> {
        let allowed = user.roles.iter().any(|role| {
            self.role_permissions
                .get(role)
                .is_some_and(|tools| tools.contains("*") || tools.contains(tool))
        });
        if allowed {
            Ok(())
        } else {
            Err(ToolError::new(ToolErrorKind::Authorization, "not_permitted")
                .with_message(format!("the user's roles do not permit calling {tool}")))
        }
    }
}

/// Which kind of model request a context is being prepared for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Producing a plan (plan-and-execute).
    Plan,
    /// Acting: the model may call tools.
    Act,
    /// Writing the final answer, without tools.
    Finalize,
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
    /// tools are added through [`ToolProvider`]s, not here.
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
pub struct ContextProviderError {
    /// The provider's name.
    pub provider: String,
    /// What happened, without secrets.
    pub message: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rbac_rules() {
        let rbac = RbacToolAuthorizer::new()
            .allow("analyst", ["search", "read"])
            .allow("admin", ["*"]);
        let user = |roles: &[&str]| UserContext::with_roles(roles.iter().copied());
        assert!(rbac.authorize(&user(&["analyst"]), "search").is_ok(), "allowed");
        assert!(rbac.authorize(&user(&["analyst"]), "delete").is_err(), "denied");
        assert!(rbac.authorize(&user(&["admin"]), "delete").is_ok(), "wildcard");
        assert!(rbac.authorize(&user(&["intern"]), "search").is_err(), "unknown role");
        assert!(
            rbac.authorize(&user(&["analyst", "admin"]), "anything").is_ok(),
            "any role may allow"
        );
        assert!(
            rbac.authorize(&user(&["analyst"]), "no_such_tool").is_err(),
            "unknown tool"
        );
        let denied = rbac.authorize(&user(&[]), "search").unwrap_err();
        assert_eq!(denied.kind, ToolErrorKind::Authorization, "no roles");
        assert!(
            AllowAllAuthorizer.authorize(&user(&[]), "x").is_ok(),
            "the default allows all"
        );
    }
}
