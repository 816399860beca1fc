//! Metric values after a scripted run: the core `MetricsEventSink` with the in-memory
//! recorder, and the OpenTelemetry GenAI metrics with the SDK's in-memory exporter.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use modu_agent::Agent;
use modu_agent::sinks::{CompositeEventSink, InMemoryMetricRecorder, MetricsEventSink, metric_names as names};
use modu_core::{FunctionTool, ToolError, ToolSpec};
use modu_otel::OtelEventSink;
use modu_testing::ScriptedModel;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::json;

fn agent(sink: Arc<dyn modu_core::EventSink>) -> Agent {
    let ok = FunctionTool::<()>::new(
        ToolSpec::new("lookup", "l", json!({"type": "object"})),
        |_c, a| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(a)
        },
    );
    let bad = FunctionTool::<()>::new(
        ToolSpec::new("charge", "c", json!({"type": "object"})),
        |_c, _a| async move { Err(ToolError::execution("card_declined")) },
    );
    // Turn 1: lookup twice and charge once; turn 2: an unknown tool; turn 3: the answer.
    let model = ScriptedModel::new()
        .with_usage(120, 30)
        .tool_calls([
            ("lookup", json!({"k": 1})),
            ("lookup", json!({"k": 2})),
            ("charge", json!({})),
        ])
        .tool_call("nope", json!({}))
        .text("done");
    Agent::builder(model)
        .name("shop")
        .tool(ok)
        .tool(bad)
        .event_sink(sink)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_metrics_after_a_scripted_run() {
    let recorder = InMemoryMetricRecorder::new();
    let sink = CompositeEventSink::isolate("metrics", Arc::new(MetricsEventSink::new(Arc::new(recorder.clone()))));
    let result = agent(Arc::new(sink.clone())).run("buy").await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert!(sink.flush(Duration::from_secs(5)).await);

    let m = recorder.snapshot();
    assert_eq!(m.counter(names::RUNS_STARTED, &[("agent", "shop")]), 1);
    assert_eq!(m.counter(names::RUNS_COMPLETED, &[("agent", "shop")]), 1);
    assert_eq!(m.counter(names::RUNS_FAILED, &[]), 0);
    assert_eq!(
        m.counter(names::MODEL_CALLS, &[("model", "scripted"), ("outcome", "ok")]),
        3
    );
    assert_eq!(m.counter(names::TOKENS_INPUT, &[("model", "scripted")]), 360);
    assert_eq!(m.counter(names::TOKENS_OUTPUT, &[("model", "scripted")]), 90);
    assert_eq!(
        m.counter(names::TOOL_CALLS, &[("tool", "lookup"), ("outcome", "ok")]),
        2
    );
    assert_eq!(
        m.counter(names::TOOL_CALLS, &[("tool", "charge"), ("outcome", "execution")]),
        1
    );
    assert_eq!(
        m.counter(names::TOOL_CALLS, &[("tool", "nope"), ("outcome", "not_found")]),
        1
    );
    assert_eq!(m.counter(names::TOOL_CALLS, &[]), 4);
    let lookups = m.histogram(names::TOOL_DURATION_MS, &[("tool", "lookup")]);
    assert_eq!(lookups.count(), 2);
    assert!(lookups.values.iter().all(|v| *v >= 20.0), "{lookups:?}");
    assert_eq!(m.histogram(names::MODEL_DURATION_MS, &[]).count(), 3);
    assert_eq!(m.histogram(names::RUN_DURATION_MS, &[("outcome", "ok")]).count(), 1);
}

fn attrs_match(attrs: &[&KeyValue], want: &[(&str, &str)]) -> bool {
    want.iter()
        .all(|(k, v)| attrs.iter().any(|kv| kv.key.as_str() == *k && kv.value.as_str() == *v))
}

/// The `gen_ai.client.token.usage` points of the last export (cumulative: the totals), each
/// with its attributes, count and sum.
fn token_usage_points(exporter: &InMemoryMetricExporter) -> Vec<(Vec<KeyValue>, u64, u64)> {
    let exported = exporter.get_finished_metrics().unwrap();
    let mut points = Vec::new();
    for scope in exported.last().expect("one export").scope_metrics() {
        for metric in scope.metrics() {
            if let ("gen_ai.client.token.usage", AggregatedMetrics::U64(MetricData::Histogram(h))) =
                (metric.name(), metric.data())
            {
                assert_eq!(metric.unit(), "{token}");
                for p in h.data_points() {
                    points.push((p.attributes().cloned().collect(), p.count(), p.sum()));
                }
            }
        }
    }
    points
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genai_metrics_through_the_opentelemetry_sdk() {
    let exporter = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let tracers = SdkTracerProvider::builder().build();
    let sink = Arc::new(
        OtelEventSink::builder(tracers.tracer("t"))
            .meter_provider(&meters)
            .build(),
    );
    assert!(agent(sink).run("buy").await.is_completed());
    tokio::task::spawn_blocking(move || meters.force_flush())
        .await
        .unwrap()
        .unwrap();

    let exported = exporter.get_finished_metrics().unwrap();
    let mut token_points = Vec::new();
    let mut duration_points = Vec::new();
    // Cumulative temporality: the last export holds the totals (dropping the provider exports again).
    let rm = exported.last().expect("one export");
    {
        for scope in rm.scope_metrics() {
            assert_eq!(scope.scope().name(), "modu-otel");
            for metric in scope.metrics() {
                match (metric.name(), metric.data()) {
                    ("gen_ai.client.token.usage", AggregatedMetrics::U64(MetricData::Histogram(h))) => {
                        assert_eq!(metric.unit(), "{token}");
                        for p in h.data_points() {
                            let attrs: Vec<&KeyValue> = p.attributes().collect();
                            token_points.push((
                                attrs_match(&attrs, &[("gen_ai.token.type", "input")]),
                                attrs_match(
                                    &attrs,
                                    &[("gen_ai.operation.name", "chat"), ("gen_ai.request.model", "scripted")],
                                ),
                                p.count(),
                                p.sum(),
                            ));
                        }
                    }
                    ("gen_ai.client.operation.duration", AggregatedMetrics::F64(MetricData::Histogram(h))) => {
                        assert_eq!(metric.unit(), "s");
                        for p in h.data_points() {
                            duration_points.push(p.count());
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    token_points.sort_by_key(|p| p.0);
    // (is_input, has chat+model attributes, count, sum): 3 model calls of 120 in / 30 out.
    assert_eq!(token_points, vec![(false, true, 3, 90), (true, true, 3, 360)]);
    assert_eq!(duration_points.iter().sum::<u64>(), 3);
}

/// A model call a tool makes on the run's behalf (an MCP server's sampling request, reported
/// with `RunContext::report_model_call`) spends tokens like the run's own: both the core
/// metrics and the GenAI token usage count them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_calls_made_by_tools_count_in_both_sinks_metrics() {
    let recorder = InMemoryMetricRecorder::new();
    let exporter = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let tracers = SdkTracerProvider::builder().build();
    let otel = OtelEventSink::builder(tracers.tracer("t"))
        .meter_provider(&meters)
        .build();
    let sink = CompositeEventSink::builder()
        .sink("metrics", Arc::new(MetricsEventSink::new(Arc::new(recorder.clone()))))
        .sink("otel", Arc::new(otel))
        .build();
    let sampling = FunctionTool::<()>::new(
        ToolSpec::new("summarize", "s", json!({"type": "object"})),
        |ctx, _a| async move {
            ctx.report_model_call("helper-model", modu_core::Usage::new(50, 7), "mcp_sampling")
                .await;
            Ok(json!("summary"))
        },
    );
    let model = ScriptedModel::new()
        .with_usage(120, 30)
        .tool_call("summarize", json!({}))
        .text("done");
    let agent = Agent::builder(model)
        .tool(sampling)
        .event_sink(Arc::new(sink.clone()))
        .build()
        .unwrap();
    assert!(agent.run("go").await.is_completed());
    assert!(sink.flush(Duration::from_secs(5)).await);

    let m = recorder.snapshot();
    assert_eq!(
        m.counter(names::MODEL_CALLS, &[("model", "helper-model"), ("outcome", "ok")]),
        1
    );
    assert_eq!(m.counter(names::TOKENS_INPUT, &[("model", "helper-model")]), 50);
    assert_eq!(m.counter(names::TOKENS_OUTPUT, &[("model", "helper-model")]), 7);
    assert_eq!(m.counter(names::TOKENS_INPUT, &[("model", "scripted")]), 240);
    // No duration is reported for it: the latency histogram holds the run's own two calls.
    assert_eq!(m.histogram(names::MODEL_DURATION_MS, &[]).count(), 2);

    tokio::task::spawn_blocking(move || meters.force_flush())
        .await
        .unwrap()
        .unwrap();
    let mut helper = Vec::new();
    for (attrs, _, sum) in token_usage_points(&exporter) {
        let attrs: Vec<&KeyValue> = attrs.iter().collect();
        if attrs_match(&attrs, &[("gen_ai.request.model", "helper-model")]) {
            helper.push((attrs_match(&attrs, &[("gen_ai.token.type", "input")]), sum));
        }
    }
    helper.sort();
    assert_eq!(helper, vec![(false, 7), (true, 50)]);
}
