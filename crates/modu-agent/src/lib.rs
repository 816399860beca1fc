#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The contract this runtime implements, under the paths the runtime's modules use
// (`crate::message::Message`, `crate::ChatRequest`); the runtime's own modules shadow these.
#[allow(unused_imports)]
pub(crate) use modu_core::*;

pub mod agent;
pub mod compaction;
/// Composing agents: an agent as another agent's tool, and handoffs.
pub mod compose {
    pub use crate::agent::compose::{AgentTool, Handoff};
}
pub mod fallback;
pub mod guardrail;
pub mod memory;
pub mod middleware;
pub mod partial;
pub mod plan;
mod runner;
pub mod session_queue;
pub mod sinks;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use agent::{
    Agent, AgentBuilder, AgentGuardrail, AgentRequest, BuildError, FinalizationMode, Fixed, Instructions,
    ModelSettings, Open, RECOVER_CONCURRENCY, RetryConfig, RunLimits, TypesOpen,
};
pub use compose::{AgentTool, Handoff};
pub use fallback::{CircuitBreaker, FallbackModel, SwitchPredicate};
pub use memory::{
    ConversationMemoryPolicy, ConversationSummarizer, KeepAll, MemoryInput, MemoryView, ModelConversationSummarizer,
    RecentTurns, SummarizingPolicy, TokenBudget, TokenBudgetPolicy,
};
pub use runner::panics::panic_message;
pub use runner::{CHECKPOINT_SCHEMA_VERSION, RunStream, StreamItem};
pub use session_queue::SessionQueue;
/// The token that cancels a run (`AgentRequest::cancel_token`, `Agent::resume_cancellable`):
/// tokio-util's, re-exported so a caller needs no dependency of its own.
pub use tokio_util::sync::CancellationToken;
