//! [`BuildError`]: why [`AgentBuilder::build`](crate::AgentBuilder::build) refused a configuration.

use modu_core::AgentError;

/// Why [`AgentBuilder::build`](crate::AgentBuilder::build) refused a configuration. A function returning [`AgentError`]
/// can use `?` on it: it converts to [`AgentError::Configuration`] with the same message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A tool's name is empty or has characters other than letters, digits, `_`, `-` and `.`.
    #[error("tool name {name:?} is invalid: use letters, digits, '_', '-' or '.'")]
    InvalidToolName {
        /// The name.
        name: String,
    },
    /// A tool's parameter schema is not a JSON Schema that compiles.
    #[error("tool {tool} has an invalid parameter schema: {message}")]
    InvalidToolSchema {
        /// The tool's name.
        tool: String,
        /// Why the schema does not compile.
        message: String,
    },
    /// Two tools have the same name.
    #[error("two tools are named {name:?}")]
    DuplicateTool {
        /// The name.
        name: String,
    },
    /// A handoff's tool name is the name of a tool or of another handoff.
    #[error("the handoff tool {name:?} has the name of another tool or handoff")]
    HandoffNameTaken {
        /// The handoff's tool name.
        name: String,
    },
    /// `retry.max_attempts` is 0 (it counts the first attempt).
    #[error("retry.max_attempts must be at least 1")]
    ZeroRetryAttempts,
    /// A strict Plan-and-Execute policy with [`FinalizationMode::Disabled`](crate::FinalizationMode::Disabled).
    #[error("a strict Plan-and-Execute policy always finalizes: finalization_mode must not be Disabled")]
    StrictPolicyWithoutFinalization,
    /// A strict Plan-and-Execute policy with `max_steps` 0 (the agent's limits or the plan
    /// generator's).
    #[error("a strict Plan-and-Execute policy needs max_steps of at least 1")]
    StrictPolicyZeroSteps,
    /// A strict Plan-and-Execute policy with `limits.max_step_attempts` 0.
    #[error("a strict Plan-and-Execute policy needs max_step_attempts of at least 1")]
    StrictPolicyZeroStepAttempts,
    /// A strict Plan-and-Execute policy with handoffs (it does not support them).
    #[error("handoffs are not supported with a strict Plan-and-Execute policy ({count} handoff(s) added)")]
    StrictPolicyWithHandoffs {
        /// How many handoffs were added.
        count: usize,
    },
    /// A handoff to an agent with a strict Plan-and-Execute policy: a handed-over run goes on
    /// under the policy it started with, so the target would run without its plan.
    #[error(
        "the handoff {name:?} goes to agent {target:?}, whose strict Plan-and-Execute policy a handoff cannot keep"
    )]
    HandoffToStrictPolicy {
        /// The handoff's tool name.
        name: String,
        /// The target agent's name.
        target: String,
    },
}

impl From<BuildError> for AgentError {
    fn from(e: BuildError) -> Self {
        AgentError::Configuration { message: e.to_string() }
    }
}
