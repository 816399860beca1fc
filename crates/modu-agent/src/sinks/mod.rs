//! Event sinks shipped with the core, and the [`CompositeEventSink`] that isolates them from
//! the run loop.
//!
//! * [`CompositeEventSink`]: fans events out to several sinks, each behind its own bounded
//!   queue and tokio task; a slow, failing or panicking sink never stops or slows a run
//!   (events are dropped and counted instead). See its docs for the mechanism.
//! * [`LoggingEventSink`]: `tracing` events with structured fields, secrets masked.
//! * [`AuditEventSink`]: masked JSON lines to an injected writer.
//! * [`MetricsEventSink`]: counters and histograms through a [`MetricRecorder`]
//!   ([`InMemoryMetricRecorder`] for tests).
//! * [`SecretMasker`]: the masking rules the logging and audit sinks (and `modu-otel`) use.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use modu_agent::sinks::{AuditEventSink, CompositeEventSink, InMemoryMetricRecorder, LoggingEventSink, MetricsEventSink};
//! use modu_agent::Agent;
//! use modu_testing::ScriptedModel;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let metrics = InMemoryMetricRecorder::new();
//! let audit = Arc::new(AuditEventSink::new(Vec::<u8>::new()));
//! let events = CompositeEventSink::builder()
//!     .sink("log", Arc::new(LoggingEventSink::new()))
//!     .sink("metrics", Arc::new(MetricsEventSink::new(Arc::new(metrics.clone()))))
//!     .sink("audit", audit.clone())
//!     .build();
//! let model = ScriptedModel::new().text("hello");
//! let agent = Agent::builder(model).event_sink(Arc::new(events.clone())).build()?;
//! agent.run("hi").await.into_result()?;
//! assert!(events.flush(Duration::from_secs(5)).await);
//! assert_eq!(metrics.snapshot().counter("modu.runs.completed", &[]), 1);
//! assert!(audit.with_writer(|w| String::from_utf8_lossy(w).contains("run_completed")));
//! # Ok(()) }
//! ```

mod audit;
mod composite;
mod logging;
pub(crate) use modu_core::mask;
mod metrics;

pub use audit::AuditEventSink;
pub use composite::{
    CompositeEventSink, CompositeEventSinkBuilder, DEFAULT_PUBLISH_TIMEOUT, DEFAULT_QUEUE_CAPACITY, SinkStats,
};
pub use logging::{LOG_TARGET, LoggingEventSink};
pub use mask::{DEFAULT_SECRET_KEYS, MASK, SecretMasker};
pub use metrics::{
    HistogramSnapshot, InMemoryMetricRecorder, MetricKey, MetricRecorder, MetricsEventSink, MetricsSnapshot,
    names as metric_names,
};
