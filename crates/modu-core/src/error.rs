//! The error a run ends with.

use serde::{Deserialize, Serialize};

use crate::model::ModelError;
use crate::store::StoreError;

/// Why a run ended without an answer. It is data (serialisable, cloneable) because it travels
/// in [`crate::RunOutcome`], in events and in checkpoints; causes are kept as text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentError {
    /// A model call failed (after any retries).
    #[error("model call failed ({kind}): {message}")]
    Model {
        /// The [`ModelError::kind`].
        kind: crate::codes::ModelErrorKind,
        /// The error's text.
        message: String,
        /// Whether the failure was transient (a resume may succeed).
        retryable: bool,
    },
    /// The run's shared timeout elapsed.
    #[error("the run timed out (RunLimits::timeout = {after_ms} ms)")]
    Timeout {
        /// The configured timeout, in milliseconds.
        after_ms: u64,
    },
    /// `RunLimits::max_turns` reached: the model kept calling tools.
    #[error("the run reached RunLimits::max_turns = {limit} (model turns that called tools)")]
    MaxTurnsExceeded {
        /// The limit.
        limit: u32,
    },
    /// `RunLimits::max_tool_calls` reached.
    #[error("the run reached RunLimits::max_tool_calls = {limit}")]
    MaxToolCallsExceeded {
        /// The limit.
        limit: u32,
    },
    /// The final answer did not parse, even after one corrective request.
    #[error("the final answer does not fit the output schema: {message}")]
    Output {
        /// The parse error.
        message: String,
    },
    /// A store (conversation, checkpoint) failed.
    #[error("store operation {operation} failed: {message}")]
    Store {
        /// The operation (`"checkpoint.save"`, …).
        operation: String,
        /// The error's text.
        message: String,
    },
    /// Another worker holds the session's lease ([`crate::lease`]), and it stayed busy for
    /// as long as the run was configured to wait.
    #[error("session {session_id} is busy: another worker holds its lease")]
    SessionBusy {
        /// The session.
        session_id: String,
    },
    /// The run lost its session's lease (it expired, or another worker took the session
    /// over), so its store writes were refused. The worker that holds the lease now owns the
    /// run; this worker must not continue it.
    #[error("the run lost the lease on session {session_id}; its writes were refused")]
    LeaseLost {
        /// The session.
        session_id: String,
    },
    /// No checkpoint exists for the run.
    #[error("no checkpoint for run {run_id}")]
    CheckpointNotFound {
        /// The run.
        run_id: String,
    },
    /// The checkpoint cannot be read (corrupted, or of an unknown schema version).
    #[error("checkpoint of run {run_id} cannot be read: {message}")]
    CheckpointInvalid {
        /// The run.
        run_id: String,
        /// What is wrong.
        message: String,
    },
    /// The checkpoint was written by an agent with other tools, policy or output.
    #[error("checkpoint of run {run_id} belongs to an incompatible agent ({message})")]
    ResumeIncompatible {
        /// The run.
        run_id: String,
        /// What differs.
        message: String,
    },
    /// The run has nothing left to resume.
    #[error("run {run_id} has already completed")]
    AlreadyCompleted {
        /// The run.
        run_id: String,
    },
    /// A tool provider (MCP, skills) could not open its tools.
    #[error("tool provider {provider} failed: {message}")]
    ToolProvider {
        /// The provider.
        provider: String,
        /// What kind of failure it is.
        kind: crate::tool_provider::ToolProviderErrorKind,
        /// The error's text.
        message: String,
    },
    /// A context provider (skills, retrieval, history) failed.
    #[error("context provider {provider} failed: {message}")]
    ContextProvider {
        /// The provider.
        provider: String,
        /// The error's text.
        message: String,
    },
    /// The run was configured wrongly.
    #[error("invalid configuration: {message}")]
    Configuration {
        /// What is wrong.
        message: String,
    },
    /// The history does not fit the model's context even after dropping all it may drop.
    #[error("conversation memory overflow: {message}")]
    MemoryOverflow {
        /// Details.
        message: String,
    },
    /// The run is paused: tool calls wait for a person's approval (see
    /// [`PausedRun::approvals`](crate::PausedRun::approvals)). Not a failure: a run
    /// outcome reports a pause as [`RunOutcome::Paused`](crate::RunOutcome::Paused), never as this error; it is
    /// what a [`RunError`](crate::RunError) converted to an `AgentError` carries (the events
    /// say `RunPaused`).
    #[error("the run is waiting for {pending} approval(s)")]
    Interrupted {
        /// Calls waiting.
        pending: usize,
    },
    /// An approval decision names a call that is not waiting for one.
    #[error("call {call_id} of run {run_id} is not waiting for approval")]
    UnknownApproval {
        /// The run.
        run_id: String,
        /// The call.
        call_id: String,
    },
    /// An answer names a call that is not waiting for input.
    #[error("call {call_id} of run {run_id} is not waiting for input")]
    UnknownInput {
        /// The run.
        run_id: String,
        /// The call.
        call_id: String,
    },
    /// An answer does not fit the schema the call asked with; nothing was recorded.
    #[error("the answer for call {call_id} does not fit the requested schema: {message}")]
    InvalidInput {
        /// The call.
        call_id: String,
        /// What does not fit.
        message: String,
    },
    /// A strict Plan-and-Execute policy ended the run (see [`PlanReport::failure`](crate::PlanReport::failure); the fields
    /// are sanitised identifiers, never a tool's raw error).
    #[error("the plan failed in step {}: {cause}", step_id.as_deref().unwrap_or("-"))]
    PlanFailed {
        /// Why the run ended: `tool_failed` (fallback `fail`), `tool_requested_fail`,
        /// `uncancellable_timeout`, `partial_batch_failure`, `replan_limit`, `repair_not_safe`,
        /// `repair_limit`, `repair_declined`, `repair_same_arguments`,
        /// `repair_same_effective_arguments`, `repair_other_tool`, `repair_not_single_call`,
        /// `repair_same_call_id`, `repair_invalid_arguments`, `step_attempts_exhausted`,
        /// `plan_invalid`, `max_steps`, `verify_failed`, or a limit (`max_tool_calls`, `max_turns`).
        cause: crate::codes::PlanFailureCause,
        /// The step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step_id: Option<String>,
    },
    /// The run was cancelled.
    #[error("the run was cancelled")]
    Cancelled,
    /// The run panicked (a tool, a layer or a model client it called). Every way of running
    /// reports it as the run's failure, naming the run (`modu_agent::Agent::run`, `resume`,
    /// `recover_orphans` and the streams): the panic does not unwind into the caller. Its
    /// checkpoint, if it saved one, is kept, but the failure is not
    /// [`AgentError::is_resumable`]: a resume would most likely panic the same way.
    #[error("the run panicked: {message}")]
    Panicked {
        /// The panic's message (its payload when that is text).
        message: String,
    },
    /// A guardrail fired its tripwire (`modu_agent::guardrail`); never resumable.
    #[error("the {kind:?} guardrail {guardrail} tripped: {}", tripwire.code)]
    GuardrailTripped {
        /// The guardrail's name.
        guardrail: String,
        /// Which check it made.
        kind: crate::tripwire::GuardrailKind,
        /// Its tripwire (boxed: it carries a JSON value, and every `Result` with an
        /// `AgentError` would otherwise be as large as it).
        tripwire: Box<crate::tripwire::Tripwire>,
    },
}

impl AgentError {
    /// The error's `type` tag, as its JSON carries it (`"max_turns_exceeded"`, …).
    #[doc(hidden)]
    pub fn type_tag(&self) -> Option<String> {
        let json = serde_json::to_value(self).ok()?;
        json.get("type")?.as_str().map(str::to_owned)
    }

    /// Whether `Agent::resume` may finish the run: transient model, store, timeout and
    /// tool-provider (a server unavailable) failures, and a cancelled run.
    pub fn is_resumable(&self) -> bool {
        match self {
            AgentError::Model { retryable, .. } => *retryable,
            AgentError::Timeout { .. } | AgentError::Store { .. } | AgentError::Cancelled => true,
            AgentError::ToolProvider { kind, .. } => kind.is_transient(),
            _ => false,
        }
    }

    #[doc(hidden)]
    pub fn from_model(err: &ModelError) -> Self {
        AgentError::Model {
            kind: err.kind(),
            message: err.to_string(),
            retryable: err.is_retryable(),
        }
    }

    #[doc(hidden)]
    pub fn from_store(operation: &str, err: &StoreError) -> Self {
        if let StoreError::Fenced { key, .. } = err {
            return AgentError::LeaseLost {
                session_id: key.clone(),
            };
        }
        // An id no store keeps (too long, a NUL) is the caller's: trying again cannot help.
        if let StoreError::InvalidId { .. } = err {
            return AgentError::Configuration {
                message: format!("{operation}: {err}"),
            };
        }
        AgentError::Store {
            operation: operation.to_owned(),
            message: err.to_string(),
        }
    }
}
