//! OTLP/HTTP (protobuf) export: a tracer provider and a meter provider wired to a collector.

use std::collections::HashMap;
use std::time::Duration;

use modu_core::redact::{MaskedHeaders, Redactor, display_url, redact_urls};
use opentelemetry_otlp::{MetricExporter, Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::OtelError;
use crate::sink::{OtelEventSink, OtelEventSinkBuilder, instrumentation_scope};

/// Builds an [`OtlpPipeline`]: OTLP over HTTP with protobuf bodies (`/v1/traces`,
/// `/v1/metrics` under the endpoint), batch span export and periodic metric export.
///
/// Export runs on the SDK's own background threads with a blocking `reqwest` client, so it
/// never uses the application's tokio runtime and works from sync and async code alike.
///
/// The header values (a hosted collector's API key) and the user info of the endpoint are
/// credentials: `Debug` shows header names with `***` values and the endpoint with its user
/// info masked, and an [`OtelError`] from [`build`](Self::build) has every one of them
/// replaced by `***`.
#[derive(Clone)]
pub struct OtlpPipelineBuilder {
    endpoint: String,
    service_name: String,
    headers: HashMap<String, String>,
    timeout: Duration,
    metrics_interval: Duration,
}

impl std::fmt::Debug for OtlpPipelineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<String> = self.headers.keys().cloned().collect();
        names.sort();
        f.debug_struct("OtlpPipelineBuilder")
            .field("endpoint", &display_url(&self.endpoint))
            .field("service_name", &self.service_name)
            .field("headers", &MaskedHeaders(names))
            .field("timeout", &self.timeout)
            .field("metrics_interval", &self.metrics_interval)
            .finish()
    }
}

impl OtlpPipelineBuilder {
    /// The `service.name` resource attribute (default `modu-agent`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// Adds an HTTP header to every export request (e.g. an API key of a hosted collector).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The export request timeout (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How often metrics are exported (default 60 s; [`OtlpPipeline::force_flush`] exports now).
    pub fn metrics_interval(mut self, interval: Duration) -> Self {
        self.metrics_interval = interval;
        self
    }

    /// Builds the exporters and providers.
    pub fn build(self) -> Result<OtlpPipeline, OtelError> {
        let redactor = Redactor::new(None, self.headers.values().map(String::as_str), &self.endpoint);
        let exporter_error = |e: opentelemetry_otlp::ExporterBuildError| {
            OtelError::Exporter(redact_urls(&redactor.text(&e.to_string())))
        };
        let base = self.endpoint.trim_end_matches('/');
        let spans = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{base}/v1/traces"))
            .with_timeout(self.timeout)
            .with_headers(self.headers.clone())
            .build()
            .map_err(exporter_error)?;
        let metrics = MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{base}/v1/metrics"))
            .with_timeout(self.timeout)
            .with_headers(self.headers)
            .build()
            .map_err(exporter_error)?;
        let resource = Resource::builder().with_service_name(self.service_name).build();
        let tracer_provider = SdkTracerProvider::builder()
            .with_batch_exporter(spans)
            .with_resource(resource.clone())
            .build();
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(
                PeriodicReader::builder(metrics)
                    .with_interval(self.metrics_interval)
                    .build(),
            )
            .with_resource(resource)
            .build();
        Ok(OtlpPipeline {
            tracer_provider,
            meter_provider,
        })
    }
}

/// A tracer provider and a meter provider exporting to an OTLP/HTTP collector.
///
/// ```no_run
/// use std::sync::Arc;
/// use modu_otel::OtlpPipeline;
///
/// let otlp = OtlpPipeline::builder("http://127.0.0.1:4318").service_name("billing-agent").build()?;
/// let sink = Arc::new(otlp.event_sink().build());
/// // Agent::builder(model).event_sink(sink)…; at exit:
/// otlp.shutdown()?;
/// # Ok::<(), modu_otel::OtelError>(())
/// ```
#[derive(Clone, Debug)]
pub struct OtlpPipeline {
    /// The tracer provider (batch export).
    pub tracer_provider: SdkTracerProvider,
    /// The meter provider (periodic export).
    pub meter_provider: SdkMeterProvider,
}

impl OtlpPipeline {
    /// Starts building a pipeline for a collector's OTLP/HTTP base URL
    /// (`http://host:4318`; the signal paths are appended).
    pub fn builder(endpoint: impl Into<String>) -> OtlpPipelineBuilder {
        OtlpPipelineBuilder {
            endpoint: endpoint.into(),
            service_name: "modu-agent".to_owned(),
            headers: HashMap::new(),
            timeout: Duration::from_secs(10),
            metrics_interval: Duration::from_secs(60),
        }
    }

    /// An [`OtelEventSink`] builder using this pipeline's tracer and meter.
    pub fn event_sink(&self) -> OtelEventSinkBuilder {
        use opentelemetry::trace::TracerProvider as _;
        OtelEventSink::builder(self.tracer_provider.tracer_with_scope(instrumentation_scope()))
            .meter_provider(&self.meter_provider)
    }

    /// Exports everything buffered now. Blocking: from async code call it through
    /// `tokio::task::spawn_blocking`.
    pub fn force_flush(&self) -> Result<(), OtelError> {
        self.tracer_provider
            .force_flush()
            .map_err(|e| OtelError::Export(e.to_string()))?;
        self.meter_provider
            .force_flush()
            .map_err(|e| OtelError::Export(e.to_string()))
    }

    /// Flushes and stops both providers. Blocking, like [`force_flush`](Self::force_flush).
    pub fn shutdown(&self) -> Result<(), OtelError> {
        let traces = self
            .tracer_provider
            .shutdown()
            .map_err(|e| OtelError::Export(e.to_string()));
        let metrics = self
            .meter_provider
            .shutdown()
            .map_err(|e| OtelError::Export(e.to_string()));
        traces.and(metrics)
    }
}
