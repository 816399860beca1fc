//! The sinks' side: [`SinkError`]'s constructor, [`EventSink`] for an `Arc`, and the
//! [`CollectingEventSink`] that keeps what it receives.

use async_trait::async_trait;

use super::{AgentEvent, CollectingEventSink, EventSink, SinkError};

impl SinkError {
    /// A sink error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        SinkError {
            message: message.into(),
        }
    }
}

#[async_trait]
impl<T: EventSink + ?Sized> EventSink for std::sync::Arc<T> {
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        (**self).publish(event).await
    }
    fn wants_deltas(&self) -> bool {
        (**self).wants_deltas()
    }
}

impl CollectingEventSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// The events received so far.
    pub fn events(&self) -> Vec<AgentEvent> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl EventSink for CollectingEventSink {
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event.clone());
        Ok(())
    }
}
