//! Usage on the chat span and metrics, with the SDK's in-memory exporters: cached and
//! reasoning tokens as GenAI attributes, and `gen_ai.response.model` naming the member of a
//! fallback chain that answered.

use std::sync::Arc;

use modu_agent::{Agent, FallbackModel};
use modu_core::{ChatEvent, FinishReason, ModelError, Usage};
use modu_otel::{OtelEventSink, semconv};
use modu_testing::ScriptedModel;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_span_and_metrics_carry_cached_reasoning_tokens_and_the_answering_model() -> TestResult {
    let spans = InMemorySpanExporter::default();
    let tracers = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
    let metrics = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let sink = Arc::new(
        OtelEventSink::builder(tracers.tracer("t"))
            .meter_provider(&meters)
            .build(),
    );
    let primary = ScriptedModel::new()
        .named("primary")
        .error(|| ModelError::Timeout(std::time::Duration::from_secs(1)));
    let backup = ScriptedModel::new().named("backup").respond(|_| {
        let mut usage = Usage::new(100, 40);
        usage.cached_input_tokens = 64;
        usage.reasoning_tokens = 25;
        vec![
            ChatEvent::TextDelta { text: "done".into() },
            ChatEvent::Usage { usage },
            ChatEvent::Finish {
                reason: FinishReason::Stop,
            },
        ]
    });
    let agent = Agent::builder(FallbackModel::new(primary).with_fallback(backup))
        .event_sink(sink)
        .build()?;
    let result = agent.run("hi").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("done"),
        "{:?}",
        result.error()
    );

    let finished = spans.get_finished_spans()?;
    let chat = finished.iter().find(|s| s.name == "chat primary").ok_or_else(|| {
        format!(
            "no chat span: {:?}",
            finished.iter().map(|s| &s.name).collect::<Vec<_>>()
        )
    })?;
    let int = |key: &str| attr(chat, key).cloned();
    assert_eq!(int(semconv::REQUEST_MODEL), Some(Value::from("primary")));
    assert_eq!(int(semconv::RESPONSE_MODEL), Some(Value::from("backup")));
    assert_eq!(int(semconv::USAGE_INPUT_TOKENS), Some(Value::I64(100)));
    assert_eq!(int(semconv::USAGE_OUTPUT_TOKENS), Some(Value::I64(40)));
    assert_eq!(int("gen_ai.usage.cache_read.input_tokens"), Some(Value::I64(64)));
    assert_eq!(int("gen_ai.usage.reasoning.output_tokens"), Some(Value::I64(25)));
    let run = finished
        .iter()
        .find(|s| s.name.starts_with("invoke_agent"))
        .ok_or("no run span")?;
    assert_eq!(attr(run, semconv::USAGE_CACHE_READ_INPUT_TOKENS), Some(&Value::I64(64)));

    let flushed = tokio::task::spawn_blocking(move || meters.force_flush()).await?;
    flushed?;
    let exported = metrics.get_finished_metrics()?;
    let rm = exported.last().ok_or("no metrics export")?;
    let mut models = Vec::new();
    for scope in rm.scope_metrics() {
        for metric in scope.metrics() {
            if let ("gen_ai.client.token.usage", AggregatedMetrics::U64(MetricData::Histogram(h))) =
                (metric.name(), metric.data())
            {
                for p in h.data_points() {
                    let attrs: Vec<&KeyValue> = p.attributes().collect();
                    let get = |k: &str| {
                        attrs
                            .iter()
                            .find(|kv| kv.key.as_str() == k)
                            .map(|kv| kv.value.as_str().into_owned())
                    };
                    models.push((get(semconv::REQUEST_MODEL), get(semconv::RESPONSE_MODEL), p.sum()));
                }
            }
        }
    }
    models.sort();
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        models,
        vec![
            (some("primary"), some("backup"), 40),
            (some("primary"), some("backup"), 100)
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_plain_model_without_cached_or_reasoning_tokens_sets_neither() -> TestResult {
    let spans = InMemorySpanExporter::default();
    let tracers = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
    let sink = Arc::new(OtelEventSink::builder(tracers.tracer("t")).build());
    let agent = Agent::builder(ScriptedModel::new().named("plain").text("ok"))
        .event_sink(sink)
        .build()?;
    assert!(agent.run("hi").await.is_completed());
    let finished = spans.get_finished_spans()?;
    let chat = finished.iter().find(|s| s.name == "chat plain").ok_or("no chat span")?;
    assert_eq!(attr(chat, semconv::RESPONSE_MODEL), Some(&Value::from("plain")));
    assert_eq!(attr(chat, semconv::USAGE_CACHE_READ_INPUT_TOKENS), None);
    assert_eq!(attr(chat, semconv::USAGE_REASONING_OUTPUT_TOKENS), None);
    Ok(())
}
