//! Where a run's events go: the agent's sink and the caller's stream.

use std::sync::Arc;

use futures::future::{BoxFuture, Either, Ready, ready};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

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

    /// Whether an event sink listens (the only reader of a run's terminal event).
    pub(crate) fn has_sink(&self) -> bool {
        self.sink.is_some()
    }

    /// Whether the caller reads the run as a stream.
    pub(crate) fn has_stream(&self) -> bool {
        self.stream.is_some()
    }

    /// Sends an event to the caller's stream only. For raw fragments no sink may see: secret
    /// masking needs whole JSON, and a fragment can split a key from its value.
    ///
    /// Like [`Emitter::emit`], a send that finds room in the stream needs no future.
    pub(crate) fn emit_to_stream(&self, event: AgentEvent) -> Emitted<'_> {
        match &self.stream {
            Some(tx) => send_to_stream(tx, Box::new(event)),
            None => Either::Left(ready(())),
        }
    }

    /// Sends an event to the sink and, unless it is terminal, to the caller's stream.
    ///
    /// Only a sink's publish, or a send that waits for room in the caller's stream, is a
    /// (boxed) future: an unboxed one (the event and the sink's future, about a kilobyte) would
    /// sit in the state of every run-loop future that emits, and be copied each time one of
    /// them is created, whether or not anyone listens. Callers check [`Emitter::active`] first.
    pub(crate) fn emit(&self, event: AgentEvent) -> Emitted<'_> {
        match (&self.sink, &self.stream) {
            (None, None) => Either::Left(ready(())),
            (None, Some(_)) if event.is_terminal() => Either::Left(ready(())),
            (None, Some(tx)) => send_to_stream(tx, Box::new(event)),
            (Some(sink), stream) => Either::Right(Box::pin(async move {
                use futures::FutureExt;
                // A sink's failure, or its panic, is logged; the run goes on.
                match std::panic::AssertUnwindSafe(sink.publish(&event)).catch_unwind().await {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => tracing::warn!(error = %err, event = event.kind(), "event sink failed"),
                    Err(_) => tracing::error!(event = event.kind(), "event sink panicked; the run goes on"),
                }
                if let Some(tx) = stream
                    && !event.is_terminal()
                {
                    // A caller that dropped its stream no longer listens; the run goes on.
                    let _ = tx.send(Box::new(event)).await;
                }
            })),
        }
    }
}

/// A run whose `RunStarted` went to a sink and whose terminal event has not gone yet.
///
/// Dropped while armed (the caller dropped the run's future or its stream, or the run
/// panicked), it sends the sink the `RunFailed` the run could no longer send: `Cancelled`, or
/// `Panicked` while a panic unwinds. A sink thus hears the end of every run it heard start (an
/// OpenTelemetry span is ended, a run counter counts it). The sink's `publish` is polled once
/// at the drop; one that does not finish at once goes on as a task on the current tokio
/// runtime (and is lost without one). Boxed: the run's future holds one pointer.
pub(crate) struct Unended(Option<Box<UnendedRun>>);

struct UnendedRun {
    sink: Arc<dyn EventSink>,
    run_id: String,
    agent: String,
    usage: Arc<std::sync::Mutex<modu_core::context::RunUsage>>,
    started: tokio::time::Instant,
}

impl Unended {
    /// Armed when the run has a sink.
    pub(crate) fn new(
        emitter: &Emitter,
        run_id: &str,
        agent: &str,
        usage: Arc<std::sync::Mutex<modu_core::context::RunUsage>>,
        started: tokio::time::Instant,
    ) -> Self {
        Unended(emitter.sink.as_ref().map(|sink| {
            Box::new(UnendedRun {
                sink: Arc::clone(sink),
                run_id: run_id.to_owned(),
                agent: agent.to_owned(),
                usage,
                started,
            })
        }))
    }

    /// The run sent its terminal event.
    pub(crate) fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Unended {
    fn drop(&mut self) {
        let Some(run) = self.0.take() else { return };
        let UnendedRun {
            sink,
            run_id,
            agent,
            usage,
            started,
        } = *run;
        let error = if std::thread::panicking() {
            crate::error::AgentError::Panicked {
                message: "the run panicked (its message is in the caller's outcome)".to_owned(),
            }
        } else {
            crate::error::AgentError::Cancelled
        };
        let event = AgentEvent::RunFailed {
            run_id,
            agent,
            usage: usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner).total,
            error,
            duration_ms: started.elapsed().as_millis() as u64,
        };
        let mut publish: BoxFuture<'static, ()> = Box::pin(async move {
            use futures::FutureExt;
            match std::panic::AssertUnwindSafe(sink.publish(&event)).catch_unwind().await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, event = event.kind(), "event sink failed"),
                Err(_) => tracing::error!(event = event.kind(), "event sink panicked"),
            }
        });
        let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
        if publish.as_mut().poll(&mut cx).is_pending() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(publish)),
                Err(_) => tracing::warn!("a dropped run's run_failed event is lost: no tokio runtime"),
            }
        }
    }
}

/// The future of one [`Emitter::emit`]: ready at once unless it waits for a sink or for room.
pub(crate) type Emitted<'a> = Either<Ready<()>, BoxFuture<'a, ()>>;

/// Sends to the caller's stream: at once when there is room (or nobody listens any more),
/// else a future that waits for room, so a slow consumer holds the run back, not its memory.
fn send_to_stream(tx: &mpsc::Sender<Box<AgentEvent>>, event: Box<AgentEvent>) -> Emitted<'_> {
    match tx.try_send(event) {
        Ok(()) | Err(TrySendError::Closed(_)) => Either::Left(ready(())),
        Err(TrySendError::Full(event)) => Either::Right(Box::pin(async move {
            let _ = tx.send(event).await;
        })),
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
        Box::pin(self.emit(AgentEvent::ToolProgress {
            run_id,
            call_id,
            progress,
            total,
            message,
        }))
    }

    fn model_call(
        &self,
        run_id: String,
        call_id: String,
        model: String,
        usage: crate::message::Usage,
        purpose: String,
    ) -> crate::context::Reported<'_> {
        Box::pin(self.emit(AgentEvent::ToolModelCall {
            run_id,
            call_id,
            model,
            usage,
            purpose,
        }))
    }
}
