//! The span tree, asserted with the OpenTelemetry SDK's in-memory exporter: names, parenting
//! (two concurrent tool calls, a nested agent-as-tool run), attributes, error status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use modu_agent::Agent;
use modu_core::{AgentEvent, EventSink, FunctionTool, ToolError, ToolSpec, Usage};
use modu_otel::OtelEventSink;
use modu_testing::ScriptedModel;
use opentelemetry::trace::{SpanId, SpanKind, Status, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;

fn provider() -> (SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    (provider, exporter)
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv: &&KeyValue| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn attr_str(span: &SpanData, key: &str) -> String {
    attr(span, key).map(|v| v.as_str().into_owned()).unwrap_or_default()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found = named(spans, name);
    assert_eq!(
        found.len(),
        1,
        "spans named {name}: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_span_tree_with_concurrent_tools_and_a_failed_tool() {
    let (provider, exporter) = provider();
    let sink = Arc::new(
        OtelEventSink::builder(provider.tracer("test"))
            .capture_content(true)
            .provider_name("scripted")
            .build(),
    );
    let slow = |name: &str, fail: bool| {
        FunctionTool::<()>::new(
            ToolSpec::new(name, "t", json!({"type": "object"})),
            move |_c, args| async move {
                tokio::time::sleep(Duration::from_millis(150)).await;
                if fail {
                    Err(ToolError::execution("upstream_down").with_message("password=hunter2"))
                } else {
                    Ok(args)
                }
            },
        )
    };
    let model = ScriptedModel::new()
        .with_usage(11, 4)
        .tool_calls([
            ("weather", json!({"city": "Seoul", "api_key": "k-123"})),
            ("stocks", json!({"sym": "X"})),
        ])
        .text("It is sunny; token=abc");
    let agent = Agent::builder(model)
        .name("planner")
        .tool(slow("weather", false))
        .tool(slow("stocks", true))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent
        .run(modu_agent::AgentRequest::new((), "go").session("sess-1"))
        .await;
    assert!(result.is_completed());
    assert_eq!(sink.open_runs(), 0);

    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(
        spans.len(),
        5,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let run = one(&spans, "invoke_agent planner");
    assert_eq!(run.parent_span_id, SpanId::INVALID, "the run is a root");
    assert_eq!(run.span_kind, SpanKind::Internal);
    assert_eq!(attr_str(run, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr_str(run, "gen_ai.agent.name"), "planner");
    assert_eq!(attr_str(run, "gen_ai.conversation.id"), "sess-1");
    assert_eq!(attr_str(run, "modu.run_id"), result.run_id());
    assert_eq!(attr(run, "gen_ai.usage.input_tokens"), Some(&Value::I64(22)));
    assert_eq!(attr(run, "gen_ai.usage.output_tokens"), Some(&Value::I64(8)));
    assert_eq!(run.status, Status::Unset);
    let output = attr_str(run, "gen_ai.output.messages");
    assert!(
        output.contains("It is sunny; token=***") && !output.contains("abc"),
        "{output}"
    );

    let chats = named(&spans, "chat scripted");
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        assert_eq!(chat.parent_span_id, run.span_context.span_id());
        assert_eq!(chat.span_context.trace_id(), run.span_context.trace_id());
        assert_eq!(chat.span_kind, SpanKind::Client);
        assert_eq!(attr_str(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(attr_str(chat, "gen_ai.request.model"), "scripted");
        assert_eq!(attr_str(chat, "gen_ai.provider.name"), "scripted");
        assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), Some(&Value::I64(11)));
        assert_eq!(attr(chat, "gen_ai.usage.output_tokens"), Some(&Value::I64(4)));
    }
    let reasons: Vec<String> = chats
        .iter()
        .map(|c| attr(c, "gen_ai.response.finish_reasons").unwrap().as_str().into_owned())
        .collect();
    assert!(reasons.iter().any(|r| r.contains("tool_calls")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("stop")), "{reasons:?}");

    let weather = one(&spans, "execute_tool weather");
    let stocks = one(&spans, "execute_tool stocks");
    for (span, tool, id) in [(weather, "weather", "call_0_0"), (stocks, "stocks", "call_0_1")] {
        assert_eq!(
            span.parent_span_id,
            run.span_context.span_id(),
            "{tool} is a child of the run"
        );
        assert_eq!(attr_str(span, "gen_ai.operation.name"), "execute_tool");
        assert_eq!(attr_str(span, "gen_ai.tool.name"), tool);
        assert_eq!(attr_str(span, "gen_ai.tool.call.id"), id);
        assert_eq!(attr_str(span, "gen_ai.tool.type"), "function");
    }
    // The two calls really ran concurrently: their spans overlap.
    assert!(weather.start_time < stocks.end_time && stocks.start_time < weather.end_time);
    // Arguments are recorded (opt-in) and masked.
    let args = attr_str(weather, "gen_ai.tool.call.arguments");
    assert!(
        args.contains("Seoul") && args.contains("***") && !args.contains("k-123"),
        "{args}"
    );
    // The failed tool: error status and error.type; the successful one: unset.
    assert_eq!(weather.status, Status::Unset);
    assert!(attr(weather, "error.type").is_none());
    assert_eq!(attr_str(stocks, "error.type"), "execution");
    match &stocks.status {
        Status::Error { description } => {
            assert!(description.contains("upstream_down") && !description.contains("hunter2"))
        }
        other => panic!("expected an error status, got {other:?}"),
    }
}

#[tokio::test]
async fn content_is_off_by_default() {
    let (provider, exporter) = provider();
    let sink = Arc::new(OtelEventSink::builder(provider.tracer("test")).build());
    let model = ScriptedModel::new()
        .tool_call("echo", json!({"q": "private"}))
        .text("secret answer");
    let echo = FunctionTool::<()>::new(
        ToolSpec::new("echo", "e", json!({"type": "object"})),
        |_c, a| async move { Ok(a) },
    );
    let agent = Agent::builder(model).tool(echo).event_sink(sink).build().unwrap();
    assert!(agent.run("go").await.is_completed());
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 4);
    for s in &spans {
        for kv in &s.attributes {
            let v = kv.value.as_str();
            assert!(!v.contains("private") && !v.contains("secret answer"), "{}={v}", kv.key);
        }
        assert!(attr(s, "gen_ai.output.messages").is_none() && attr(s, "gen_ai.tool.call.arguments").is_none());
    }
}

/// A sink that wants deltas makes every run stream its model requests (runs nobody streams
/// ask for whole answers otherwise), so the sink asks for them only to capture the text.
#[tokio::test]
async fn the_sink_asks_for_text_deltas_only_when_it_captures_content() {
    let (provider, exporter) = provider();
    let quiet = OtelEventSink::builder(provider.tracer("test")).build();
    assert!(!quiet.wants_deltas(), "content off: no deltas wanted");
    let capturing = Arc::new(
        OtelEventSink::builder(provider.tracer("test"))
            .capture_content(true)
            .build(),
    );
    assert!(
        capturing.wants_deltas(),
        "content on: the model text is joined from deltas"
    );
    // With content on, the answer streamed to the sink lands on the chat span.
    let model = ScriptedModel::new().text_deltas(["joined ", "answer"]);
    let agent = Agent::builder(model).event_sink(capturing).build().unwrap();
    assert!(agent.run("go").await.is_completed());
    let spans = exporter.get_finished_spans().unwrap();
    let chat = spans.iter().find(|s| s.name.starts_with("chat ")).unwrap();
    assert!(
        attr_str(chat, "gen_ai.output.messages").contains("joined answer"),
        "{chat:?}"
    );
}

fn started(run: &str, agent: &str, parent: Option<&str>) -> AgentEvent {
    serde_json::from_value(json!({
        "type": "run_started", "run_id": run, "agent": agent, "parent_run_id": parent,
    }))
    .unwrap()
}

fn tool_started(run: &str, call: &str, tool: &str) -> AgentEvent {
    AgentEvent::ToolCallStarted {
        run_id: run.into(),
        call_id: call.into(),
        tool: tool.into(),
        arguments: json!({}),
    }
}

fn tool_finished(run: &str, call: &str, tool: &str, error: Option<ToolError>) -> AgentEvent {
    serde_json::from_value(json!({
        "type": "tool_call_finished", "run_id": run, "call_id": call, "tool": tool, "ok": error.is_none(),
        "attempts": 1, "duration_ms": 3, "error": error,
    }))
    .unwrap()
}

fn completed(run: &str, agent: &str) -> AgentEvent {
    AgentEvent::RunCompleted {
        run_id: run.into(),
        agent: agent.into(),
        usage: Usage::new(1, 1),
        output: json!("ok"),
        duration_ms: 5,
    }
}

fn chat(run: &str, call: u32) -> [AgentEvent; 2] {
    [
        AgentEvent::ModelCallStarted {
            run_id: run.into(),
            model: "m".into(),
            call,
            tools: 0,
            structured: false,
        },
        serde_json::from_value(json!({
            "type": "model_call_finished", "run_id": run, "model": "m", "call": call,
            "usage": Usage::new(1, 1), "tool_calls": 0, "duration_ms": 2,
        }))
        .unwrap(),
    ]
}

#[tokio::test]
async fn nested_agent_as_tool_runs_and_interleaved_tool_calls_parent_correctly() {
    let (provider, exporter) = provider();
    let sink = OtelEventSink::builder(provider.tracer("test")).build();
    let mut events = vec![started("parent", "orchestrator", None)];
    events.extend(chat("parent", 1));
    // Two concurrent calls; the nested run starts inside the second one (agent-as-tool), and
    // the calls finish in the opposite order.
    events.push(tool_started("parent", "c-search", "search"));
    events.push(tool_started("parent", "c-research", "researcher"));
    events.push(started("child", "researcher", Some("parent")));
    events.extend(chat("child", 1));
    events.push(tool_started("child", "c-inner", "fetch"));
    events.push(tool_finished("child", "c-inner", "fetch", None));
    events.push(completed("child", "researcher"));
    events.push(tool_finished("parent", "c-research", "researcher", None));
    events.push(tool_finished(
        "parent",
        "c-search",
        "search",
        Some(ToolError::new(modu_core::ToolErrorKind::Timeout, "timeout")),
    ));
    // A nested run started with no tool call open hangs off the parent run itself.
    events.push(started("child2", "summariser", Some("parent")));
    events.push(completed("child2", "summariser"));
    events.push(completed("parent", "orchestrator"));
    for e in &events {
        sink.publish(e).await.unwrap();
    }
    assert_eq!(sink.open_runs(), 0);

    let spans = exporter.get_finished_spans().unwrap();
    let parent = one(&spans, "invoke_agent orchestrator");
    let search = one(&spans, "execute_tool search");
    let research = one(&spans, "execute_tool researcher");
    let child = one(&spans, "invoke_agent researcher");
    let child2 = one(&spans, "invoke_agent summariser");
    let fetch = one(&spans, "execute_tool fetch");
    let chats = named(&spans, "chat m");
    assert_eq!(chats.len(), 2);

    let id = |s: &SpanData| s.span_context.span_id();
    assert_eq!(parent.parent_span_id, SpanId::INVALID);
    assert_eq!(search.parent_span_id, id(parent));
    assert_eq!(research.parent_span_id, id(parent));
    assert_eq!(
        child.parent_span_id,
        id(research),
        "the nested run hangs off its tool call"
    );
    assert_eq!(fetch.parent_span_id, id(child));
    assert_eq!(child2.parent_span_id, id(parent));
    assert_eq!(attr_str(child, "modu.parent_run_id"), "parent");
    assert!(chats.iter().any(|c| c.parent_span_id == id(parent)));
    assert!(chats.iter().any(|c| c.parent_span_id == id(child)));
    for s in &spans {
        assert_eq!(s.span_context.trace_id(), parent.span_context.trace_id(), "one trace");
    }
    assert_eq!(attr_str(search, "gen_ai.tool.call.id"), "c-search");
    assert_eq!(attr_str(research, "gen_ai.tool.call.id"), "c-research");
    assert_eq!(attr_str(search, "error.type"), "timeout");
    assert!(matches!(search.status, Status::Error { .. }));
    assert_eq!(research.status, Status::Unset);
}

#[tokio::test]
async fn failed_run_and_failed_model_call_have_error_status() {
    let (provider, exporter) = provider();
    let sink = Arc::new(OtelEventSink::builder(provider.tracer("test")).build());
    let model = ScriptedModel::new().error(|| modu_core::ModelError::Authentication {
        status: 401,
        message: "api_key=sk-live-1 rejected".into(),
    });
    let agent = Agent::builder(model).name("a").event_sink(sink).build().unwrap();
    assert!(agent.run("go").await.error().is_some());
    let spans = exporter.get_finished_spans().unwrap();
    let run = one(&spans, "invoke_agent a");
    let chat = one(&spans, "chat scripted");
    assert_eq!(attr_str(chat, "error.type"), "authentication");
    assert!(matches!(chat.status, Status::Error { .. }));
    assert_eq!(attr_str(run, "error.type"), "model");
    match &run.status {
        Status::Error { description } => assert!(!description.contains("sk-live-1"), "{description}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_paused_run_ends_its_span_without_an_error() {
    let (provider, exporter) = provider();
    let sink = Arc::new(OtelEventSink::builder(provider.tracer("test")).build());
    let transfer = FunctionTool::new(
        ToolSpec::new("transfer", "Move money", json!({"type": "object"})).needs_approval(true),
        |_ctx, _args| async { Ok(json!("moved")) },
    );
    let agent = Agent::builder(ScriptedModel::new().tool_call("transfer", json!({})))
        .name("a")
        .tool(transfer)
        .checkpoint_store(Arc::new(modu_core::InMemoryCheckpointStore::new()))
        .event_sink(sink)
        .build()
        .unwrap();
    assert!(agent.run("pay").await.is_paused());
    let spans = exporter.get_finished_spans().unwrap();
    let run = one(&spans, "invoke_agent a");
    assert_eq!(run.status, Status::Unset);
    assert!(attr(run, "error.type").is_none());
    assert_eq!(attr(run, "modu.run.paused"), Some(&Value::Bool(true)));
    assert_eq!(attr(run, "modu.run.pending"), Some(&Value::I64(1)));
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Topic {
    topic: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_agent_as_tool_run_nests_under_its_tool_span() {
    let (provider, exporter) = provider();
    let sink: Arc<OtelEventSink> = Arc::new(OtelEventSink::builder(provider.tracer("test")).build());
    let fetch = FunctionTool::<()>::new(
        ToolSpec::new("fetch", "Fetch", json!({"type": "object"})),
        |_c, _a| async { Ok(json!("page")) },
    );
    let researcher = Agent::builder(ScriptedModel::new().tool_call("fetch", json!({})).text("notes"))
        .name("researcher")
        .tool(fetch)
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let orchestrator = Agent::builder(
        ScriptedModel::new()
            .tool_call("research", json!({"topic": "otel"}))
            .text("summary"),
    )
    .name("orchestrator")
    .tool(researcher.as_tool::<Topic>("research", "Research a topic"))
    .event_sink(sink.clone())
    .build()
    .unwrap();
    let result = orchestrator.run("go").await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert_eq!(sink.open_runs(), 0);

    let spans = exporter.get_finished_spans().unwrap();
    let parent = one(&spans, "invoke_agent orchestrator");
    let research = one(&spans, "execute_tool research");
    let child = one(&spans, "invoke_agent researcher");
    let fetch = one(&spans, "execute_tool fetch");
    let id = |s: &SpanData| s.span_context.span_id();
    assert_eq!(research.parent_span_id, id(parent));
    assert_eq!(
        child.parent_span_id,
        id(research),
        "the nested run hangs off its tool call"
    );
    assert_eq!(fetch.parent_span_id, id(child));
    for s in &spans {
        assert_eq!(s.span_context.trace_id(), parent.span_context.trace_id(), "one trace");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_or_panicking_run_ends_its_spans_and_is_forgotten() {
    let (provider, exporter) = provider();
    let sink = Arc::new(OtelEventSink::builder(provider.tracer("test")).build());
    let spec = ToolSpec::new("slow", "sleeps", json!({"type": "object"}));
    let slow = FunctionTool::<()>::new(spec, |_ctx, _args| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(json!("done"))
    });
    let agent = Agent::builder(ScriptedModel::new().tool_call("slow", json!({})).text("never"))
        .name("dropped")
        .tool(slow)
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let run = tokio::time::timeout(Duration::from_millis(200), agent.run("go")).await;
    assert!(run.is_err(), "the run should still be in its tool");

    let spec = ToolSpec::new("boom", "panics", json!({"type": "object"}));
    let boom = FunctionTool::<()>::new(spec, |_ctx, _args| async move {
        if true {
            panic!("the tool broke");
        }
        Ok(json!("done"))
    });
    let agent = Agent::builder(ScriptedModel::new().tool_call("boom", json!({})).text("never"))
        .name("panicky")
        .tool(boom)
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let panicked = tokio::spawn(async move { agent.run("go").await }).await.unwrap();
    // The run's panic is its failure (it unwound into the caller before `Agent::run` caught it;
    // guarantees.md, "A stream is its run").
    assert!(
        matches!(panicked.error(), Some(modu_core::AgentError::Panicked { .. })),
        "{:?}",
        panicked.error()
    );

    assert_eq!(sink.open_runs(), 0, "a run that never ended is still held");
    let spans = exporter.get_finished_spans().unwrap();
    for (run, tool, error) in [("dropped", "slow", "cancelled"), ("panicky", "boom", "panicked")] {
        let run_span = one(&spans, &format!("invoke_agent {run}"));
        assert_eq!(attr_str(run_span, "error.type"), error);
        assert!(matches!(run_span.status, Status::Error { .. }));
        assert_eq!(
            one(&spans, &format!("execute_tool {tool}")).parent_span_id,
            run_span.span_context.span_id()
        );
    }
}
