//! Typed codes: why a model call failed ([`ModelErrorKind`]) and why a strict Plan-and-Execute
//! run ended or changed course ([`PlanFailureCause`]).
//!
//! Each is a `#[non_exhaustive]` enum stored as its snake_case code, so events, errors and
//! checkpoints serialise exactly as the plain strings did. A code this version does not know
//! (written by a newer one) reads as `Other` with its text kept, and writes back unchanged.
//! Each compares with a `&str` (`kind == "rate_limited"`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! codes {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
            /// A code this version does not know, kept as it was written.
            Other(String),
        }

        impl $name {
            /// The snake_case code, as stored and sent.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $code,)*
                    Self::Other(code) => code,
                }
            }

            /// What a code names (`Other` for a code this version does not know).
            pub fn from_code(code: &str) -> Self {
                match code {
                    $($code => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<&str> for $name {
            fn from(code: &str) -> Self {
                Self::from_code(code)
            }
        }

        // Equal when the codes are: `Other("timeout")` read from elsewhere is `Timeout`.
        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.as_str() == other.as_str()
            }
        }

        impl Eq for $name {}

        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.as_str().hash(state)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let code = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
                Ok(Self::from_code(&code))
            }
        }
    };
}

codes! {
    /// The kind of a [`ModelError`](crate::ModelError) ([`ModelError::kind`](crate::ModelError::kind)),
    /// as events, metrics and [`AgentError::Model`](crate::AgentError::Model) carry it.
    ModelErrorKind {
        /// The connection failed or broke.
        Transport = "transport",
        /// The request took too long.
        Timeout = "timeout",
        /// The server refused for now (429).
        RateLimited = "rate_limited",
        /// The credentials were refused (401/403).
        Authentication = "authentication",
        /// The server does not serve the model.
        ModelNotFound = "model_not_found",
        /// The request is longer than the model's context.
        ContextLengthExceeded = "context_length_exceeded",
        /// Another error status.
        Status = "status",
        /// The answer could not be understood.
        InvalidResponse = "invalid_response",
        /// The request was invalid before it was sent.
        InvalidRequest = "invalid_request",
        /// The request holds content the model cannot take.
        UnsupportedContent = "unsupported_content",
    }
}

codes! {
    /// Why a strict Plan-and-Execute run ended, or why its plan was revised: the `cause` of
    /// [`PlanFailure`](crate::plan::PlanFailure), [`AgentError::PlanFailed`](crate::AgentError::PlanFailed)
    /// and the plan events.
    PlanFailureCause {
        /// A tool failed and its fallback was `fail`.
        ToolFailed = "tool_failed",
        /// The tool's error asked to fail the run.
        ToolRequestedFail = "tool_requested_fail",
        /// The tool's error asked for a new plan.
        ToolRequestedReplan = "tool_requested_replan",
        /// A blocking tool timed out and may still be running: never replanned.
        UncancellableTimeout = "uncancellable_timeout",
        /// A call of a batch failed after others had succeeded (their side effects happened).
        PartialBatchFailure = "partial_batch_failure",
        /// The replan limit was reached.
        ReplanLimit = "replan_limit",
        /// A repair was asked for a tool that is not repair-safe.
        RepairNotSafe = "repair_not_safe",
        /// The repair limit of the step was reached.
        RepairLimit = "repair_limit",
        /// The model declined to repair the call.
        RepairDeclined = "repair_declined",
        /// The repair sent the same arguments.
        RepairSameArguments = "repair_same_arguments",
        /// The repair's arguments are the same once defaults are applied.
        RepairSameEffectiveArguments = "repair_same_effective_arguments",
        /// The repair called another tool.
        RepairOtherTool = "repair_other_tool",
        /// A repair must be a single call.
        RepairNotSingleCall = "repair_not_single_call",
        /// The repair reused the failed call's id.
        RepairSameCallId = "repair_same_call_id",
        /// The repair's arguments are invalid.
        RepairInvalidArguments = "repair_invalid_arguments",
        /// The step's result attempts ran out.
        StepAttemptsExhausted = "step_attempts_exhausted",
        /// The planner's answer is not a valid plan.
        PlanInvalid = "plan_invalid",
        /// The plan has more steps than allowed.
        MaxSteps = "max_steps",
        /// The final verification failed.
        VerifyFailed = "verify_failed",
        /// `RunLimits::max_tool_calls` was reached.
        MaxToolCalls = "max_tool_calls",
        /// `RunLimits::max_turns` was reached.
        MaxTurns = "max_turns",
        /// The final answer did not parse.
        OutputInvalid = "output_invalid",
        /// A model call failed.
        ModelError = "model_error",
        /// The conversation did not fit its memory budget.
        MemoryOverflow = "memory_overflow",
        /// A context provider failed.
        ContextProvider = "context_provider",
        /// The configuration was refused.
        Configuration = "configuration",
        /// Any other failure of the run.
        RunFailed = "run_failed",
    }
}
