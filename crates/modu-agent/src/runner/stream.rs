//! [`RunStream`]: a run's events as they happen, then its result.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::outcome::{CompletedRun, FailedRun, PausedRun, RunOutcome};

/// The events of a streamed run, then its result.
pub struct RunStream<O> {
    /// Boxed events: a channel allocates its slots in blocks of 32, and an unboxed event
    /// would make every streamed run's first block about 7 KB.
    rx: mpsc::Receiver<Box<AgentEvent>>,
    handle: Option<tokio::task::JoinHandle<RunOutcome<O>>>,
    agent: String,
    /// Only the events a user sees (strict runs' `stream`).
    public_only: bool,
    /// The run's result, once its task has ended, handed out after the last event.
    finished: Option<RunOutcome<O>>,
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
        match outcome {
            RunOutcome::Completed(c) => StreamItem::Completed(Box::new(c)),
            RunOutcome::Paused(p) => StreamItem::Paused(Box::new(p)),
            RunOutcome::Failed(f) => StreamItem::Failed(Box::new(f)),
        }
    }
}

impl<O> RunStream<O> {
    /// The next event to hand out, if any is waiting (strict runs' `stream` skips internal ones).
    fn next_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        loop {
            let polled = if self.handle.is_some() {
                self.rx.poll_recv(cx).map(|e| e.map(|e| *e))
            } else {
                // The run has ended: everything it sent is in the channel already.
                Poll::Ready(self.rx.try_recv().ok().map(|e| *e))
            };
            match polled {
                Poll::Ready(Some(event)) if self.public_only && !is_public(&event) => continue,
                other => return other,
            }
        }
    }
}

// Nothing of a `RunStream` is structurally pinned (the result is only moved out).
impl<O> Unpin for RunStream<O> {}

impl<O> Stream for RunStream<O> {
    type Item = StreamItem<O>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match this.next_event(cx) {
                Poll::Ready(Some(event)) => return Poll::Ready(Some(StreamItem::Event(event))),
                Poll::Ready(None) if this.handle.is_none() => {
                    return Poll::Ready(this.finished.take().map(StreamItem::from));
                }
                // Every sender is gone, or none has sent yet: has the run ended?
                Poll::Ready(None) | Poll::Pending => {}
            }
            let Some(handle) = this.handle.as_mut() else {
                continue;
            };
            match Pin::new(handle).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(joined) => {
                    this.handle = None;
                    this.finished = Some(joined.unwrap_or_else(|e| {
                        RunOutcome::failed(
                            String::new(),
                            this.agent.clone(),
                            if e.is_cancelled() {
                                AgentError::Cancelled
                            } else {
                                AgentError::Configuration {
                                    message: "the run task panicked".into(),
                                }
                            },
                        )
                    }));
                }
            }
        }
    }
}

impl<O> Drop for RunStream<O> {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}

impl<O> RunStream<O> {
    /// The stream of a run on `handle` that sends its events to `rx`.
    pub(crate) fn new(
        rx: mpsc::Receiver<Box<AgentEvent>>,
        handle: tokio::task::JoinHandle<RunOutcome<O>>,
        agent: String,
        public_only: bool,
    ) -> Self {
        RunStream {
            rx,
            handle: Some(handle),
            agent,
            public_only,
            finished: None,
        }
    }
}
