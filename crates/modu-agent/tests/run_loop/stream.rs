//! Streaming a run: event order, tool-call deltas and a slow consumer.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use futures::StreamExt;
use modu_agent::{Agent, StreamItem};
use modu_core::{AgentEvent, CollectingEventSink};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::add_tool;

#[tokio::test]
async fn streaming_yields_events_in_order_and_the_result_last() {
    let model = ScriptedModel::new()
        .tool_call("add", json!({"a": 2, "b": 2}))
        .text_deltas(["2 + 2 ", "= 4"]);
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let mut stream = agent.stream("2 + 2?");
    let mut kinds = Vec::new();
    let mut deltas = String::new();
    let mut results = Vec::new();
    let mut last = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(e) => {
                if let AgentEvent::ModelDelta { text, .. } = &e {
                    deltas.push_str(text);
                }
                if let AgentEvent::ToolCallResult {
                    tool,
                    content,
                    is_error,
                    ..
                } = &e
                {
                    results.push((tool.clone(), content.clone(), *is_error));
                }
                kinds.push(e.kind());
            }
            StreamItem::Completed(r) => last = Some(r),
            StreamItem::Failed(r) => panic!("run failed: {:?}", r.error),
            StreamItem::Paused(p) => panic!("paused: {:?}", p.approvals),
        }
    }
    assert_eq!(
        kinds,
        vec![
            "run_started",
            "model_call_started",
            // The tool call as it streams in (the scripted model sends it in three fragments).
            "tool_call_delta",
            "tool_call_delta",
            "tool_call_delta",
            "model_call_finished",
            "tool_call_started",
            "tool_call_finished",
            // The result as the model reads it, before the next model call.
            "tool_call_result",
            "model_call_started",
            "model_delta",
            "model_delta",
            "model_call_finished",
        ]
    );
    assert_eq!(deltas, "2 + 2 = 4");
    assert_eq!(results, [("add".to_owned(), "4".to_owned(), false)]);
    assert_eq!(last.map(|r| r.output), Some("2 + 2 = 4".to_owned()));
    // The sink saw the same events but the raw tool-call fragments (no sink may see them:
    // masking needs whole JSON) and the tool's result, plus the terminal one.
    let sink_kinds: Vec<&str> = sink.events().iter().map(AgentEvent::kind).collect();
    let shown: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| *k != "tool_call_delta" && *k != "tool_call_result")
        .collect();
    assert_eq!(&sink_kinds[..shown.len()], &shown[..]);
    assert_eq!(sink_kinds.last(), Some(&"run_completed"));
}

/// More events than a `RunStream` buffers (256), read by a consumer slower than the run: the
/// run waits for room instead of dropping any, and the deltas arrive whole and in order.
#[tokio::test]
async fn a_slow_stream_consumer_gets_every_event_in_order() {
    let deltas: Vec<String> = (0..600).map(|i| format!("{i} ")).collect();
    let model = ScriptedModel::new().text_deltas(deltas.clone());
    let agent = Agent::builder(model).build().unwrap();
    let mut stream = agent.stream("count");
    // Let the run fill the buffer before anything is read.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut received = Vec::new();
    let mut output = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::ModelDelta { text, .. }) => {
                received.push(text);
                if received.len() % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            StreamItem::Event(_) => {}
            StreamItem::Completed(c) => output = Some(c.output),
            other => panic!("unexpected end: {other:?}"),
        }
    }
    assert_eq!(received, deltas);
    assert_eq!(output.as_deref(), Some(deltas.concat().as_str()));
}
