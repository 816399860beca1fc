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
use crate::tool::{Tool, ToolError, ToolErrorKind};

/// A provider failed to open its tools.
#[derive(Debug, thiserror::Error)]
#[error("tool provider {provider} failed to open: {message}")]
pub struct ToolProviderError {
    /// The provider's name.
    pub provider: String,
    /// What happened, without secrets.
    pub message: String,
    /// The cause.
    #[source]
    pub source: Option<BoxError>,
}

/// The tools one provider opened for one run.
#[async_trait]
pub trait ToolSession<C>: Send + Sync {
    /// The tools of this session.
    fn tools(&self) -> Vec<Arc<dyn Tool<C>>>;

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
