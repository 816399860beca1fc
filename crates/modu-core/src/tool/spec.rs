//! [`ToolSpec`]'s constructors and flag setters, and the definition the model sees.

use std::sync::Arc;
use std::time::Duration;

use super::{ToolSpec, schema_for};
use crate::model::ToolDefinition;

impl ToolSpec {
    /// A spec with a name, a description and a parameter schema; every flag off.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: serde_json::Value) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: Arc::new(parameters),
            idempotent: false,
            repair_safe: false,
            timeout_retry_safe: false,
            blocking: false,
            timeout: None,
            max_result_bytes: None,
            needs_approval: false,
            exempt_from_tool_limit: false,
            meta: false,
        }
    }

    /// A spec whose parameter schema comes from `A`'s [`schemars::JsonSchema`].
    pub fn for_args<A: schemars::JsonSchema>(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self::new(name, description, schema_for::<A>())
    }

    /// Marks the tool idempotent.
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// Marks the tool repair-safe.
    pub fn repair_safe(mut self, yes: bool) -> Self {
        self.repair_safe = yes;
        self
    }

    /// Marks a blocking tool's timeout as safe to retry.
    pub fn timeout_retry_safe(mut self, yes: bool) -> Self {
        self.timeout_retry_safe = yes;
        self
    }

    /// Marks the tool as blocking (synchronous).
    pub fn blocking(mut self, yes: bool) -> Self {
        self.blocking = yes;
        self
    }

    /// Sets the per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Requires a person's approval before every call.
    pub fn needs_approval(mut self, yes: bool) -> Self {
        self.needs_approval = yes;
        self
    }

    /// Marks the tool as one that stands for other tools (see [`ToolSpec::meta`]).
    pub fn meta(mut self, yes: bool) -> Self {
        self.meta = yes;
        self
    }

    /// Exempts the tool's calls from `RunLimits::max_tool_calls`.
    pub fn exempt_from_tool_limit(mut self, yes: bool) -> Self {
        self.exempt_from_tool_limit = yes;
        self
    }

    /// Sets the result size cap.
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = Some(bytes);
        self
    }

    /// The tool as the model sees it.
    pub fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
        }
    }
}
