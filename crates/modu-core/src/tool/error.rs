//! [`ToolErrorKind`]'s names and [`ToolError`]'s constructors, setters and the JSON the model
//! receives.

use std::fmt;
use std::time::Duration;

use super::{RecoveryAction, ToolError, ToolErrorKind};

impl ToolErrorKind {
    /// The snake_case name (`"validation"`, `"timeout"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorKind::Validation => "validation",
            ToolErrorKind::Execution => "execution",
            ToolErrorKind::Timeout => "timeout",
            ToolErrorKind::Authorization => "authorization",
            ToolErrorKind::NotFound => "not_found",
            ToolErrorKind::Rejected => "rejected",
            ToolErrorKind::LimitExceeded => "limit_exceeded",
            ToolErrorKind::InputRequired => "input_required",
        }
    }
}

impl fmt::Display for ToolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToolError {
    /// An error of this kind with a reason.
    pub fn new(kind: ToolErrorKind, reason: impl Into<String>) -> Self {
        ToolError {
            kind,
            reason: reason.into(),
            message: None,
            retryable: false,
            recovery: None,
        }
    }

    /// A validation error with a message for the model.
    pub fn validation(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Validation, reason).with_message(message)
    }

    /// An execution error.
    pub fn execution(reason: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Execution, reason)
    }

    /// A timeout error (retryable).
    pub fn timeout(after: Duration) -> Self {
        Self::new(ToolErrorKind::Timeout, "timeout")
            .with_message(format!("the tool did not answer within {:.3}s", after.as_secs_f64()))
            .retryable(true)
    }

    /// Sets the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// Sets retryable.
    pub fn retryable(mut self, yes: bool) -> Self {
        self.retryable = yes;
        self
    }

    /// Sets the recovery action.
    pub fn with_recovery(mut self, action: RecoveryAction) -> Self {
        self.recovery = Some(action);
        self
    }

    /// The JSON the model receives for this error (the tool message's content):
    /// `{"error":{"type":…,"reason":…,"message":…}}`; `message` only when `with_message`.
    pub fn model_content(&self, with_message: bool) -> String {
        let mut err = serde_json::Map::new();
        err.insert("type".into(), self.kind.as_str().into());
        err.insert("reason".into(), self.reason.clone().into());
        if with_message && let Some(m) = &self.message {
            err.insert("message".into(), m.clone().into());
        }
        if self.retryable {
            err.insert("retryable".into(), true.into());
        }
        serde_json::json!({ "error": err }).to_string()
    }
}
