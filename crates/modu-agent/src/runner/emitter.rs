//! Where a run's events go: the agent's sink and the caller's stream.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::event::{AgentEvent, EventSink};

/// Sends events to the sink and to the caller's stream.
#[derive(Clone)]
pub(crate) struct Emitter {
    pub(crate) sink: Option<Arc<dyn EventSink>>,
    /// The caller's stream (events boxed: see `RunStream`).
    pub(crate) stream: Option<mpsc::Sender<Box<AgentEvent>>>,
}

impl Emitter {
    pub(crate) fn active(&self) -> bool {
        self.sink.is_some() || self.stream.is_some()
    }

    /// Whether anyone consumes text deltas (a caller's stream, or a sink that wants them):
    /// otherwise the model is asked for whole answers.
    pub(crate) fn deltas_wanted(&self) -> bool {
        self.stream.is_some() || self.sink.as_ref().is_some_and(|s| s.wants_deltas())
    }

    /// Whether the caller reads the run as a stream.
    pub(crate) fn has_stream(&self) -> bool {
        self.stream.is_some()
    }

    /// Sends an event to the caller's stream only. For raw fragments no sink may see: secret
    /// masking needs whole JSON, and a fragment can split a key from its value.
    ///
    /// Boxed, like [`Emitter::emit`].
    pub(crate) fn emit_to_stream(&self, event: AgentEvent) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(tx) = &self.stream {
                let _ = tx.send(Box::new(event)).await;
            }
        })
    }

    /// Sends an event to the sink and, unless it is terminal, to the caller's stream.
    ///
    /// Boxed: an unboxed send (the event and the sink's future, about a kilobyte) would sit in
    /// the state of every run-loop future that emits, and be copied each time one of them is
    /// created, whether or not anyone listens. Boxed, it costs one allocation per event sent,
    /// and only when someone listens (callers check [`Emitter::active`] first).
    pub(crate) fn emit(&self, event: AgentEvent) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(sink) = &self.sink
                && let Err(err) = sink.publish(&event).await
            {
                tracing::warn!(error = %err, event = event.kind(), "event sink failed");
            }
            if let Some(tx) = &self.stream
                && !event.is_terminal()
            {
                // A caller that dropped its stream no longer listens; the run goes on.
                let _ = tx.send(Box::new(event)).await;
            }
        })
    }
}

impl crate::context::CallReports for Emitter {
    fn progress(
        &self,
        run_id: String,
        call_id: String,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> crate::context::Reported<'_> {
        self.emit(AgentEvent::ToolProgress {
            run_id,
            call_id,
            progress,
            total,
            message,
        })
    }

    fn model_call(
        &self,
        run_id: String,
        call_id: String,
        model: String,
        usage: crate::message::Usage,
        purpose: String,
    ) -> crate::context::Reported<'_> {
        self.emit(AgentEvent::ToolModelCall {
            run_id,
            call_id,
            model,
            usage,
            purpose,
        })
    }
}
