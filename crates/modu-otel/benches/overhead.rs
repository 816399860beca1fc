//! Overhead of observability on the run loop: a scripted run (one model call that calls a tool,
//! the tool call, a second model call that answers) with no sink versus all sinks on (logging
//! with a subscriber writing to `io::sink`, metrics, audit to `io::sink`, OpenTelemetry spans +
//! metrics with in-memory exporters), all behind one `CompositeEventSink`.
//!
//! `cargo bench -p modu-otel --bench overhead`
//!
//! * `no_sink`: the baseline.
//! * `all_sinks`: the latency a caller sees (sinks work on their own tasks).
//! * `all_sinks_flushed`: the run plus waiting until every sink handled every event, i.e. the
//!   whole CPU cost of observability.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use modu_agent::Agent;
use modu_agent::sinks::{
    AuditEventSink, CompositeEventSink, InMemoryMetricRecorder, LoggingEventSink, MetricsEventSink,
};
use modu_core::{EventSink, FunctionTool};
use modu_otel::OtelEventSink;
use modu_testing::ScriptedModel;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

fn agent(sink: Option<Arc<dyn EventSink>>) -> Agent<(), String> {
    let model = ScriptedModel::new()
        .tool_call("add", serde_json::json!({"a": 2, "b": 3, "api_key": "k"}))
        .text("2 + 3 = 5")
        .cycle()
        .without_recording();
    let add = FunctionTool::<()>::typed(
        "add",
        "Add two integers",
        |_ctx, a: AddArgs| async move { Ok(a.a + a.b) },
    );
    let mut b = Agent::builder(model).instructions("You add numbers.").tool(add);
    if let Some(s) = sink {
        b = b.event_sink(s);
    }
    b.build().unwrap()
}

fn main() {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let spans = InMemorySpanExporter::default();
    let tracers = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
        .build();
    let otel = OtelEventSink::builder(tracers.tracer("bench"))
        .meter_provider(&meters)
        .build();
    let composite = CompositeEventSink::builder()
        .sink("log", Arc::new(LoggingEventSink::new()))
        .sink(
            "metrics",
            Arc::new(MetricsEventSink::new(Arc::new(InMemoryMetricRecorder::new()))),
        )
        .sink("audit", Arc::new(AuditEventSink::new(std::io::sink())))
        .sink("otel", Arc::new(otel))
        .capacity(4096)
        .build();

    let plain = agent(None);
    let observed = agent(Some(Arc::new(composite.clone())));
    for _ in 0..200 {
        assert!(rt.block_on(plain.run("What is 2 + 3?")).is_completed());
        assert!(rt.block_on(observed.run("What is 2 + 3?")).is_completed());
    }
    assert!(rt.block_on(composite.flush(Duration::from_secs(10))));

    let mut c = Criterion::default().configure_from_args();
    c.bench_function("overhead/no_sink", |b| {
        b.to_async(&rt)
            .iter(|| async { assert!(plain.run("What is 2 + 3?").await.is_completed()) })
    });
    c.bench_function("overhead/all_sinks", |b| {
        b.to_async(&rt).iter(|| async {
            assert!(observed.run("What is 2 + 3?").await.is_completed());
            spans.reset();
        })
    });
    c.bench_function("overhead/all_sinks_flushed", |b| {
        b.to_async(&rt).iter(|| async {
            assert!(observed.run("What is 2 + 3?").await.is_completed());
            assert!(composite.flush(Duration::from_secs(10)).await);
            spans.reset();
        })
    });
    c.final_summary();

    assert!(rt.block_on(composite.flush(Duration::from_secs(10))));
    for s in composite.stats() {
        println!(
            "sink {:<8} delivered {:>9} dropped {} failed {} panicked {}",
            s.name, s.delivered, s.dropped, s.failed, s.panicked
        );
    }
}
