//! The data of guardrail checks (`modu_agent::guardrail`): apart from the guardrail traits so that a
//! tool call's scope can record checks without depending on them.

use serde::{Deserialize, Serialize};

/// Why a guardrail stopped the run: a stable code, a message, and anything else it wants to
/// report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Tripwire {
    /// A stable, snake_case reason (`secret_in_input`).
    pub code: String,
    /// For people.
    pub message: String,
    /// Details for the application (not sent to the model).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub info: serde_json::Value,
}

impl Tripwire {
    /// A tripwire with this code and message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Tripwire {
            code: code.into(),
            message: message.into(),
            info: serde_json::Value::Null,
        }
    }

    /// The same tripwire with details for the application.
    pub fn with_info(mut self, info: serde_json::Value) -> Self {
        self.info = info;
        self
    }
}

/// Which check a guardrail made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GuardrailKind {
    /// On the run's input.
    Input,
    /// On the final output.
    Output,
    /// On a tool call's arguments.
    ToolArguments,
    /// On a tool call's result.
    ToolResult,
}

/// One guardrail's check as the run records it.
#[derive(Clone, Debug)]
#[doc(hidden)]
pub struct Checked {
    #[doc(hidden)]
    pub guardrail: String,
    #[doc(hidden)]
    pub kind: GuardrailKind,
    #[doc(hidden)]
    pub tripped: Option<Tripwire>,
    #[doc(hidden)]
    pub replaced: bool,
}
