//! [`RunStream`]: a run's events as they happen, then its result.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::Stream;
use futures::future::BoxFuture;
use futures::task::AtomicWaker;
use sync_wrapper::SyncWrapper;
use tokio::sync::mpsc;

use crate::event::AgentEvent;
use crate::outcome::{CompletedRun, FailedRun, PausedRun, RunOutcome};

/// The events of a streamed run, then its result.
pub struct RunStream<O> {
    /// Boxed events: a channel allocates its slots in blocks of 32, and an unboxed event
    /// would make every streamed run's first block about 7 KB.
    rx: mpsc::Receiver<Box<AgentEvent>>,
    /// The run itself, polled by the stream (on the caller's task) until it ends. Only ever
    /// used through `&mut`, so the stream is `Sync` although the future is not.
    run: Option<SyncWrapper<BoxFuture<'static, RunOutcome<O>>>>,
    /// Whether the run was woken since it last returned `Pending`, and the reader's task to
    /// wake then.
    woken: Arc<RunWoken>,
    /// The waker the run is polled with (it sets `woken`).
    run_waker: Waker,
    /// Only the events a user sees (strict runs' `stream`).
    public_only: bool,
    /// The run's result, once the run has ended, handed out after the last event (boxed as
    /// its item will be: unboxed, it would be most of every in-flight stream's size).
    finished: Option<Ended<O>>,
}

/// A [`StreamItem`] that ends a stream.
enum Ended<O> {
    Completed(Box<CompletedRun<O>>),
    Paused(Box<PausedRun>),
    Failed(Box<FailedRun<O>>),
}

impl<O> From<RunOutcome<O>> for Ended<O> {
    fn from(outcome: RunOutcome<O>) -> Self {
        match outcome {
            RunOutcome::Completed(c) => Ended::Completed(Box::new(c)),
            RunOutcome::Paused(p) => Ended::Paused(Box::new(p)),
            RunOutcome::Failed(f) => Ended::Failed(Box::new(f)),
        }
    }
}

impl<O> From<Ended<O>> for StreamItem<O> {
    fn from(ended: Ended<O>) -> Self {
        match ended {
            Ended::Completed(c) => StreamItem::Completed(c),
            Ended::Paused(p) => StreamItem::Paused(p),
            Ended::Failed(f) => StreamItem::Failed(f),
        }
    }
}

/// The run's side of its stream's wake-ups: a reader that takes the events a poll of the run
/// sent comes back for more once they are read, and the run is polled again only when
/// something woke it (a deep poll of a waiting run finds nothing new).
struct RunWoken {
    woken: AtomicBool,
    reader: AtomicWaker,
}

impl Wake for RunWoken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.reader.wake();
    }
}

/// Whether a strict run's [`Agent::stream`] shows this event.
fn is_public(event: &AgentEvent) -> bool {
    matches!(
        event,
        AgentEvent::RunStarted { .. }
            | AgentEvent::FinalDelta { .. }
            | AgentEvent::ApprovalRequested { .. }
            | AgentEvent::ModelCallFailed { will_retry: true, .. }
    )
}

/// One item of a [`RunStream`].
#[derive(Debug)]
// Events are nearly every item; boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub enum StreamItem<O> {
    /// An event of the run.
    Event(AgentEvent),
    /// The run answered (always the last item).
    Completed(Box<CompletedRun<O>>),
    /// The run waits for a person (always the last item); not a failure.
    Paused(Box<PausedRun>),
    /// The run failed (always the last item).
    Failed(Box<FailedRun<O>>),
}

impl<O> StreamItem<O> {
    /// The run's outcome, if this is the last item.
    pub fn into_outcome(self) -> Option<RunOutcome<O>> {
        match self {
            StreamItem::Event(_) => None,
            StreamItem::Completed(c) => Some(RunOutcome::Completed(*c)),
            StreamItem::Paused(p) => Some(RunOutcome::Paused(*p)),
            StreamItem::Failed(f) => Some(RunOutcome::Failed(*f)),
        }
    }
}

impl<O> From<RunOutcome<O>> for StreamItem<O> {
    fn from(outcome: RunOutcome<O>) -> Self {
        Ended::from(outcome).into()
    }
}

impl<O> RunStream<O> {
    /// Whether the reader sees `event` (strict runs' `stream` skips internal ones).
    fn shows(&self, event: &AgentEvent) -> bool {
        !self.public_only || is_public(event)
    }

    /// The next event the reader sees, if one is in the channel; else `cx` is woken by the
    /// next one.
    fn next_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        loop {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(event)) if !self.shows(&event) => continue,
                Poll::Ready(Some(event)) => return Poll::Ready(Some(*event)),
                other => return other.map(|e| e.map(|e| *e)),
            }
        }
    }

    /// The next event the reader sees, if one is already waiting. Registers no waker: the
    /// events the run sends while it is polled are read right after it, so they need not wake
    /// the reader's task again.
    fn waiting_event(&mut self) -> Option<AgentEvent> {
        while let Ok(event) = self.rx.try_recv() {
            if self.shows(&event) {
                return Some(*event);
            }
        }
        None
    }
}

// Nothing of a `RunStream` is structurally pinned (the run is boxed, the result only moved out).
impl<O> Unpin for RunStream<O> {}

impl<O> Stream for RunStream<O> {
    type Item = StreamItem<O>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            // Events the run already sent come first (and make room for a run that waits).
            // Each one spends the task's cooperative budget, as a channel's receive does: a
            // reader that takes a long burst of events yields to the other tasks of its thread.
            let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
            if let Some(event) = this.waiting_event() {
                coop.made_progress();
                return Poll::Ready(Some(StreamItem::Event(event)));
            }
            drop(coop);
            let Some(run) = this.run.as_mut() else {
                return Poll::Ready(this.finished.take().map(Into::into));
            };
            this.woken.reader.register(cx.waker());
            // Polled only when something woke it since it last waited (else it has no news).
            if this.woken.woken.swap(false, Ordering::AcqRel) {
                let mut run_cx = Context::from_waker(&this.run_waker);
                // A panic of the run is its failure already (`runner::panics`).
                if let Poll::Ready(ended) = run.get_mut().as_mut().poll(&mut run_cx) {
                    this.run = None;
                    this.finished = Some(ended.into());
                    continue;
                }
            }
            // The run waits: registered for events sent meanwhile (a tool's task reporting
            // progress, say).
            return match this.next_event(cx) {
                Poll::Ready(Some(event)) => Poll::Ready(Some(StreamItem::Event(event))),
                // The run still holds a sender while it is pending.
                Poll::Ready(None) | Poll::Pending => Poll::Pending,
            };
        }
    }
}

impl<O> RunStream<O> {
    /// The stream of `run`, which sends its events to `rx`.
    pub(crate) fn new(
        rx: mpsc::Receiver<Box<AgentEvent>>,
        run: BoxFuture<'static, RunOutcome<O>>,
        public_only: bool,
    ) -> Self {
        // Woken to begin with: the first poll starts the run.
        let woken = Arc::new(RunWoken {
            woken: AtomicBool::new(true),
            reader: AtomicWaker::new(),
        });
        RunStream {
            rx,
            run: Some(SyncWrapper::new(run)),
            run_waker: Waker::from(Arc::clone(&woken)),
            woken,
            public_only,
            finished: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RunStream;

    /// A caller's future holds its stream across every await: the run and its result are
    /// boxed, so the stream itself stays a handful of pointers whatever the output type.
    #[test]
    fn a_stream_is_a_handful_of_pointers() {
        let size = std::mem::size_of::<RunStream<String>>();
        assert!(size <= 128, "RunStream<String> is {size} bytes");
    }
}
