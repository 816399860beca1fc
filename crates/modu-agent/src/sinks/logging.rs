//! [`LoggingEventSink`]: events as `tracing` events with structured, masked fields.

use async_trait::async_trait;

use crate::event::{AgentEvent, EventSink, SinkError};
use modu_core::mask::SecretMasker;

/// The `tracing` target of [`LoggingEventSink`].
pub const LOG_TARGET: &str = "modu::events";

/// Writes every event as a `tracing` event (target [`LOG_TARGET`]) with structured fields.
///
/// Fields: `event` (the kind), `run_id`, and per kind `agent`, `session_id`, `parent_run_id`,
/// `model`, `call`, `tool`, `call_id`, `ok`, `attempts`, `duration_ms`, `input_tokens`,
/// `output_tokens`, `error_kind`, `pending` (a paused run's waiting calls), and `detail`: the masked JSON of payloads (tool arguments,
/// tool error, run output, run error). Everything that may carry user data goes through the
/// [`SecretMasker`] first.
///
/// Levels: failures (`model_call_failed`, a failed tool call, `store_failed`, `run_failed`) at
/// WARN, the rest at INFO except `model_delta`, which is TRACE and off unless
/// [`with_deltas`](Self::with_deltas) (deltas are per chunk: a secret split across two deltas
/// cannot be recognised, see [`SecretMasker`]).
///
/// `tracing` never blocks on I/O itself, but a subscriber may: wrap the sink in a
/// [`CompositeEventSink`](super::CompositeEventSink) to keep it off the run loop.
#[derive(Clone, Debug)]
pub struct LoggingEventSink {
    masker: SecretMasker,
    deltas: bool,
    payloads: bool,
}

impl Default for LoggingEventSink {
    fn default() -> Self {
        Self::new()
    }
}

impl LoggingEventSink {
    /// A sink with the default masker, payloads on, deltas off.
    pub fn new() -> Self {
        LoggingEventSink {
            masker: SecretMasker::default(),
            deltas: false,
            payloads: true,
        }
    }

    /// Uses this masker.
    pub fn with_masker(mut self, masker: SecretMasker) -> Self {
        self.masker = masker;
        self
    }

    /// Logs `model_delta` events too (at TRACE, text masked).
    pub fn with_deltas(mut self, yes: bool) -> Self {
        self.deltas = yes;
        self
    }

    /// Logs payloads (tool arguments, outputs, errors) in the `detail` field (default on).
    pub fn with_payloads(mut self, yes: bool) -> Self {
        self.payloads = yes;
        self
    }

    fn detail(&self, value: &impl serde::Serialize) -> String {
        if !self.payloads {
            return String::new();
        }
        match serde_json::to_value(value) {
            Ok(v) => self.masker.mask_value(&v).to_string(),
            Err(_) => String::new(),
        }
    }

    /// Logs one event (synchronously).
    pub fn log(&self, event: &AgentEvent) {
        let kind = event.kind();
        let run_id = event.run_id();
        match event {
            AgentEvent::RunStarted {
                agent,
                session_id,
                parent_run_id,
                resumed,
                ..
            } => tracing::info!(
                target: LOG_TARGET, event = kind, run_id, agent = %agent,
                session_id = session_id.as_deref().unwrap_or(""),
                parent_run_id = parent_run_id.as_deref().unwrap_or(""),
                resumed, "run started"
            ),
            AgentEvent::ModelCallStarted {
                model,
                call,
                tools,
                structured,
                ..
            } => tracing::info!(
                target: LOG_TARGET, event = kind, run_id, model = %model, call, tools, structured,
                "model call started"
            ),
            AgentEvent::ModelDelta { text, .. } => {
                if self.deltas {
                    let text = self.masker.mask_text(text);
                    tracing::trace!(target: LOG_TARGET, event = kind, run_id, text = %text, "model delta");
                }
            }
            AgentEvent::ModelCallFinished {
                model,
                call,
                usage,
                finish_reason,
                tool_calls,
                duration_ms,
                ..
            } => tracing::info!(
                target: LOG_TARGET, event = kind, run_id, model = %model, call,
                input_tokens = usage.input_tokens, output_tokens = usage.output_tokens,
                finish_reason = ?finish_reason, tool_calls, duration_ms, "model call finished"
            ),
            AgentEvent::ModelCallFailed {
                model,
                call,
                error_kind,
                will_retry,
                ..
            } => tracing::warn!(
                target: LOG_TARGET, event = kind, run_id, model = %model, call, error_kind = %error_kind,
                will_retry, "model call failed"
            ),
            AgentEvent::ToolCallStarted {
                call_id,
                tool,
                arguments,
                ..
            } => {
                let detail = self.detail(arguments);
                tracing::info!(
                    target: LOG_TARGET, event = kind, run_id, tool = %tool, call_id = %call_id,
                    detail = %detail, "tool call started"
                )
            }
            AgentEvent::ToolCallFinished {
                call_id,
                tool,
                ok,
                attempts,
                duration_ms,
                error,
                ..
            } => {
                if *ok {
                    tracing::info!(
                        target: LOG_TARGET, event = kind, run_id, tool = %tool, call_id = %call_id, ok,
                        attempts, duration_ms, "tool call finished"
                    )
                } else {
                    let detail = self.detail(error);
                    let error_kind = error.as_ref().map(|e| e.kind.as_str()).unwrap_or("");
                    tracing::warn!(
                        target: LOG_TARGET, event = kind, run_id, tool = %tool, call_id = %call_id, ok,
                        attempts, duration_ms, error_kind, detail = %detail, "tool call failed"
                    )
                }
            }
            AgentEvent::CheckpointSaved { .. } => {
                tracing::info!(target: LOG_TARGET, event = kind, run_id, "checkpoint saved")
            }
            AgentEvent::StoreFailed { operation, message, .. } => {
                let message = self.masker.mask_text(message);
                tracing::warn!(
                    target: LOG_TARGET, event = kind, run_id, operation = %operation, detail = %message,
                    "store operation failed"
                )
            }
            AgentEvent::RunCompleted {
                agent,
                usage,
                output,
                duration_ms,
                ..
            } => {
                let detail = self.detail(output);
                tracing::info!(
                    target: LOG_TARGET, event = kind, run_id, agent = %agent,
                    input_tokens = usage.input_tokens, output_tokens = usage.output_tokens, duration_ms,
                    detail = %detail, "run completed"
                )
            }
            AgentEvent::RunPaused {
                agent,
                usage,
                pending,
                duration_ms,
                ..
            } => {
                tracing::info!(
                    target: LOG_TARGET, event = kind, run_id, agent = %agent,
                    input_tokens = usage.input_tokens, output_tokens = usage.output_tokens, duration_ms,
                    pending, "run paused for a person"
                )
            }
            AgentEvent::RunFailed {
                agent,
                usage,
                error,
                duration_ms,
                ..
            } => {
                let detail = self.detail(error);
                tracing::warn!(
                    target: LOG_TARGET, event = kind, run_id, agent = %agent,
                    input_tokens = usage.input_tokens, output_tokens = usage.output_tokens, duration_ms,
                    detail = %detail, "run failed"
                )
            }
            #[allow(unreachable_patterns)]
            other => {
                let detail = self.detail(other);
                tracing::info!(target: LOG_TARGET, event = kind, run_id, detail = %detail, "event")
            }
        }
    }
}

#[async_trait]
impl EventSink for LoggingEventSink {
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        self.log(event);
        Ok(())
    }
    /// Only when it logs them: a sink that wants deltas makes every run stream its model
    /// requests (see [`EventSink::wants_deltas`]).
    fn wants_deltas(&self) -> bool {
        self.deltas
    }
}
