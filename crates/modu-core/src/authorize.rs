//! Tool authorization: a [`ToolAuthorizer`] is asked right before every execution, with the
//! roles of the run's authenticated [`UserContext`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::context::UserContext;
use crate::tool::{ToolError, ToolErrorKind};

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
