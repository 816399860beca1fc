//! Prints the span tree of an agent run: `cargo run -p modu-otel --example span_tree`.
//!
//! The run calls two tools concurrently; one of them fails. A nested agent-as-tool run is
//! simulated by publishing a second run's events with `parent_run_id` set.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use modu_agent::Agent;
use modu_core::{AgentEvent, EventSink, FunctionTool, ToolError, ToolSpec, Usage};
use modu_otel::OtelEventSink;
use modu_testing::ScriptedModel;
use opentelemetry::trace::{SpanId, Status, TracerProvider as _};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;

fn print_tree(spans: &[SpanData], parent: SpanId, depth: usize) {
    let mut children: Vec<&SpanData> = spans.iter().filter(|s| s.parent_span_id == parent).collect();
    children.sort_by_key(|s| s.start_time);
    for s in children {
        let ms = s
            .end_time
            .duration_since(s.start_time)
            .unwrap_or_default()
            .as_secs_f64()
            * 1000.0;
        let attrs: Vec<String> = s
            .attributes
            .iter()
            .filter(|kv| {
                let k = kv.key.as_str();
                k.starts_with("gen_ai.usage") || k == "gen_ai.tool.call.id" || k == "error.type"
            })
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        let status = match &s.status {
            Status::Error { description } => format!(" ERROR({description})"),
            _ => String::new(),
        };
        println!(
            "{}{} [{ms:.1} ms] {}{status}",
            "  ".repeat(depth),
            s.name,
            attrs.join(" ")
        );
        print_tree(spans, s.span_context.span_id(), depth + 1);
    }
}

#[tokio::main]
async fn main() {
    let spans = InMemorySpanExporter::default();
    let tracers = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
    let metrics = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let sink = Arc::new(
        OtelEventSink::builder(tracers.tracer_with_scope(modu_otel::instrumentation_scope()))
            .meter_provider(&meters)
            .build(),
    );

    let tool = |name: &'static str, ms: u64, fail: bool| {
        FunctionTool::<()>::new(
            ToolSpec::new(name, name, json!({"type": "object"})),
            move |_c, args| async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                if fail {
                    Err(ToolError::execution("upstream_down"))
                } else {
                    Ok(args)
                }
            },
        )
    };
    let model = ScriptedModel::new()
        .with_usage(120, 30)
        .tool_calls([("weather", json!({"city": "Seoul"})), ("stocks", json!({"sym": "X"}))])
        .text("Sunny; stocks unavailable.");
    let agent = Agent::builder(model)
        .name("assistant")
        .tool(tool("weather", 40, false))
        .tool(tool("stocks", 25, true))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent.run("weather and stocks?").await;
    println!("output: {:?}\n", result.output());

    // A simulated agent-as-tool run: orchestrator → execute_tool researcher → invoke_agent researcher.
    let ev = |v: serde_json::Value| -> AgentEvent { serde_json::from_value(v).unwrap() };
    let events = [
        ev(json!({"type": "run_started", "run_id": "p", "agent": "orchestrator"})),
        ev(json!({"type": "tool_call_started", "run_id": "p", "call_id": "c1", "tool": "researcher", "arguments": {}})),
        ev(json!({"type": "run_started", "run_id": "c", "agent": "researcher", "parent_run_id": "p"})),
        ev(
            json!({"type": "model_call_started", "run_id": "c", "model": "m", "call": 1, "tools": 0, "structured": false}),
        ),
        ev(
            json!({"type": "model_call_finished", "run_id": "c", "model": "m", "call": 1, "usage": Usage::new(50, 9), "tool_calls": 0, "duration_ms": 3}),
        ),
        ev(
            json!({"type": "run_completed", "run_id": "c", "agent": "researcher", "usage": Usage::new(50, 9), "output": "notes", "duration_ms": 4}),
        ),
        ev(
            json!({"type": "tool_call_finished", "run_id": "p", "call_id": "c1", "tool": "researcher", "ok": true, "attempts": 1, "duration_ms": 5}),
        ),
        ev(
            json!({"type": "run_completed", "run_id": "p", "agent": "orchestrator", "usage": Usage::new(50, 9), "output": "done", "duration_ms": 6}),
        ),
    ];
    for e in &events {
        sink.publish(e).await.unwrap();
    }

    let finished = spans.get_finished_spans().unwrap();
    let mut by_trace: HashMap<_, Vec<SpanData>> = HashMap::new();
    for s in finished {
        by_trace.entry(s.span_context.trace_id()).or_default().push(s);
    }
    for (trace, spans) in &by_trace {
        println!("trace {trace}");
        print_tree(spans, SpanId::INVALID, 1);
        println!();
    }

    meters.force_flush().unwrap();
    for rm in metrics.get_finished_metrics().unwrap() {
        for sm in rm.scope_metrics() {
            for m in sm.metrics() {
                println!("metric {} ({})", m.name(), m.unit());
            }
        }
    }
}
