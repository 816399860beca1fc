//! [`AuditEventSink`]: masked JSON lines to an injected writer.

use std::io::Write;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::event::{AgentEvent, EventSink, SinkError};
use modu_core::mask::SecretMasker;

/// Writes every event as one line of JSON to a writer (a file, a pipe, a buffer).
///
/// Each line is the event's JSON (`{"type":"tool_call_started","run_id":…}`, the same shape
/// as `AgentEvent`'s serde form) with an added `"ts_ms"` (Unix milliseconds when the sink
/// received the event), masked by the [`SecretMasker`] (recursively, JSON-in-strings and
/// `key=value` text included). The writer is guarded by a mutex and flushed after every
/// line, so a line is either fully written or not at all from the sink's point of view.
///
/// `model_delta` events are skipped unless [`with_deltas`](Self::with_deltas): the final
/// text is in `run_completed`.
///
/// Writes are blocking I/O; wrap the sink in a [`CompositeEventSink`](super::CompositeEventSink)
/// so a slow disk never holds up a run.
///
/// ```
/// use modu_agent::sinks::AuditEventSink;
/// use modu_core::{AgentEvent, EventSink};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let audit = AuditEventSink::new(Vec::<u8>::new());
/// audit.publish(&AgentEvent::ToolCallStarted {
///     run_id: "r1".into(), call_id: "c1".into(), tool: "login".into(),
///     arguments: serde_json::json!({"user": "kim", "password": "hunter2"}),
/// }).await.unwrap();
/// let text = String::from_utf8(audit.into_inner()).unwrap();
/// assert!(text.contains(r#""password":"***""#) && !text.contains("hunter2"));
/// # }
/// ```
#[derive(Debug)]
pub struct AuditEventSink<W: Write + Send> {
    writer: Mutex<W>,
    masker: SecretMasker,
    deltas: bool,
}

impl<W: Write + Send> AuditEventSink<W> {
    /// A sink writing to `writer`, with the default masker.
    pub fn new(writer: W) -> Self {
        AuditEventSink {
            writer: Mutex::new(writer),
            masker: SecretMasker::default(),
            deltas: false,
        }
    }

    /// Uses this masker.
    pub fn with_masker(mut self, masker: SecretMasker) -> Self {
        self.masker = masker;
        self
    }

    /// Writes `model_delta` events too.
    pub fn with_deltas(mut self, yes: bool) -> Self {
        self.deltas = yes;
        self
    }

    /// Runs `f` on the writer (for example to read an in-memory buffer).
    pub fn with_writer<R>(&self, f: impl FnOnce(&mut W) -> R) -> R {
        f(&mut self.writer.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Gives the writer back.
    pub fn into_inner(self) -> W {
        self.writer.into_inner().unwrap_or_else(PoisonError::into_inner)
    }

    /// The masked JSON line for an event (without the newline); `None` for skipped events.
    pub fn line(&self, event: &AgentEvent) -> Result<Option<String>, SinkError> {
        if !self.deltas && matches!(event, AgentEvent::ModelDelta { .. }) {
            return Ok(None);
        }
        let mut value = serde_json::to_value(event)
            .map_err(|e| SinkError::new(format!("audit: cannot serialise {} event: {e}", event.kind())))?;
        self.masker.mask_value_in_place(&mut value);
        if let Some(obj) = value.as_object_mut() {
            let ts = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            obj.insert("ts_ms".into(), ts.into());
        }
        Ok(Some(value.to_string()))
    }
}

#[async_trait]
impl<W: Write + Send> EventSink for AuditEventSink<W> {
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        let Some(mut line) = self.line(event)? else {
            return Ok(());
        };
        line.push('\n');
        let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        w.write_all(line.as_bytes())
            .and_then(|()| w.flush())
            .map_err(|e| SinkError::new(format!("audit: write failed: {e}")))
    }
    /// Only when it writes them: a sink that wants deltas makes every run stream its model
    /// requests (see [`EventSink::wants_deltas`]).
    fn wants_deltas(&self) -> bool {
        self.deltas
    }
}
