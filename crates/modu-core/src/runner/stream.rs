//! [`RunStream`]: a run's events as they happen, then its result.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

use crate::agent::AgentResult;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::Usage;

/// The events of a streamed run, then its result.
pub struct RunStream<O> {
    rx: mpsc::Receiver<AgentEvent>,
    handle: Option<tokio::task::JoinHandle<AgentResult<O>>>,
    agent: String,
    /// Only the events a user sees (strict runs' `stream`).
    public_only: bool,
    /// The run's result, once its task has ended, handed out after the last event.
    finished: Option<AgentResult<O>>,
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
    /// The run succeeded; its result (always the last item).
    Completed(Box<AgentResult<O>>),
    /// The run failed; its result (always the last item).
    Failed(Box<AgentResult<O>>),
}

impl<O> RunStream<O> {
    /// The next event to hand out, if any is waiting (strict runs' `stream` skips internal ones).
    fn next_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        loop {
            let polled = if self.handle.is_some() {
                self.rx.poll_recv(cx)
            } else {
                // The run has ended: everything it sent is in the channel already.
                Poll::Ready(self.rx.try_recv().ok())
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
                    return Poll::Ready(this.finished.take().map(|result| {
                        if result.error.is_none() {
                            StreamItem::Completed(Box::new(result))
                        } else {
                            StreamItem::Failed(Box::new(result))
                        }
                    }));
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
                    this.finished = Some(joined.unwrap_or_else(|e| AgentResult {
                        run_id: String::new(),
                        agent: this.agent.clone(),
                        output: None,
                        messages: Vec::new(),
                        usage: Usage::default(),
                        usage_by_model: Default::default(),
                        metadata: serde_json::Map::new(),
                        error: Some(if e.is_cancelled() {
                            AgentError::Cancelled
                        } else {
                            AgentError::Configuration {
                                message: "the run task panicked".into(),
                            }
                        }),
                        interruptions: Vec::new(),
                        input_requests: Vec::new(),
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
        rx: mpsc::Receiver<AgentEvent>,
        handle: tokio::task::JoinHandle<AgentResult<O>>,
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
