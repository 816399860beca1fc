//! A run whose future or stream is dropped, or that panics, after its `RunStarted` reached an
//! event sink: the sink still hears the run end (`RunFailed` with `Cancelled` / `Panicked`),
//! so a sink that keeps per-run state (an OpenTelemetry span, a run counter) can close it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use modu_agent::Agent;
use modu_core::{AgentError, AgentEvent, CollectingEventSink, FunctionTool, Tool, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

fn sleepy() -> FunctionTool<()> {
    let spec = ToolSpec::new("slow", "sleeps", json!({"type": "object"}));
    FunctionTool::new(spec, |_ctx, _args| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(json!("done"))
    })
}

fn agent(sink: Arc<CollectingEventSink>, tool: FunctionTool<()>) -> Agent<()> {
    let model = ScriptedModel::new()
        .tool_call(tool.spec().name.clone(), json!({}))
        .text("never");
    Agent::builder(model)
        .name("dropped")
        .tool(tool)
        .event_sink(sink)
        .build()
        .unwrap()
}

/// The run's last event, which must be its only terminal one.
fn last_terminal(sink: &CollectingEventSink) -> AgentEvent {
    let events = sink.events();
    let terminals: Vec<_> = events.iter().filter(|e| e.is_terminal()).collect();
    assert_eq!(terminals.len(), 1, "{events:#?}");
    assert!(events.last().unwrap().is_terminal(), "{events:#?}");
    events.last().unwrap().clone()
}

fn failed_with(event: &AgentEvent) -> &AgentError {
    match event {
        AgentEvent::RunFailed { error, agent, .. } => {
            assert_eq!(agent, "dropped");
            error
        }
        other => panic!("not RunFailed: {other:?}"),
    }
}

#[tokio::test]
async fn a_dropped_run_future_ends_with_run_failed_cancelled_for_its_sink() {
    let sink = Arc::new(CollectingEventSink::new());
    let agent = agent(sink.clone(), sleepy());
    let run = tokio::time::timeout(Duration::from_millis(200), agent.run("go")).await;
    assert!(run.is_err(), "the run should still be in its tool");
    assert_eq!(failed_with(&last_terminal(&sink)), &AgentError::Cancelled);
}

#[tokio::test]
async fn a_dropped_stream_ends_with_run_failed_cancelled_for_its_sink() {
    let sink = Arc::new(CollectingEventSink::new());
    let agent = agent(sink.clone(), sleepy());
    let mut stream = agent.stream("go");
    while let Some(item) = stream.next().await {
        if matches!(item, modu_agent::StreamItem::Event(AgentEvent::ToolCallStarted { .. })) {
            break;
        }
    }
    drop(stream);
    assert_eq!(failed_with(&last_terminal(&sink)), &AgentError::Cancelled);
}

#[tokio::test]
async fn a_run_that_panics_ends_with_run_failed_panicked_for_its_sink() {
    let sink = Arc::new(CollectingEventSink::new());
    let spec = ToolSpec::new("boom", "panics", json!({"type": "object"}));
    let boom = FunctionTool::<()>::new(spec, |_ctx, _args| async move {
        if true {
            panic!("the tool broke");
        }
        Ok(json!("done"))
    });
    let agent = agent(sink.clone(), boom);
    let mut stream = agent.stream("go");
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item);
    }
    assert!(matches!(last, Some(modu_agent::StreamItem::Failed(_))));
    assert!(matches!(
        failed_with(&last_terminal(&sink)),
        AgentError::Panicked { .. }
    ));
}

#[tokio::test]
async fn a_finished_run_sends_one_terminal_event() {
    let sink = Arc::new(CollectingEventSink::new());
    let model = ScriptedModel::new().text("hi");
    let agent: Agent<()> = Agent::builder(model)
        .name("dropped")
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let outcome = agent.run("go").await;
    assert!(outcome.is_completed());
    drop(outcome);
    drop(agent);
    assert!(matches!(last_terminal(&sink), AgentEvent::RunCompleted { .. }));
}
