#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod otlp;
pub mod semconv;
mod sink;

pub use otlp::{OtlpPipeline, OtlpPipelineBuilder};
pub use sink::{OtelEventSink, OtelEventSinkBuilder, instrumentation_scope};

/// Re-exports of the OpenTelemetry crates this crate is built against (use them to avoid
/// version mismatches).
pub use opentelemetry;
pub use opentelemetry_otlp;
pub use opentelemetry_sdk;

/// Errors of modu-otel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// An exporter could not be built (bad endpoint, HTTP client).
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
    /// Flushing or shutting down the providers failed.
    #[error("OTLP export failed: {0}")]
    Export(String),
}
