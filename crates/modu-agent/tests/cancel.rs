//! Cancelling a run (`AgentRequest::cancel_token`, `Agent::resume_cancellable`,
//! `Agent::resume_stream_cancellable`): it stops at
//! its next boundary with `AgentError::Cancelled`, a model request in flight is abandoned,
//! tool calls in flight are aborted unless their tool is blocking, finished calls keep their
//! results in the checkpoint, and a resume runs only what did not finish.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use modu_agent::{Agent, AgentRequest};
use modu_core::{AgentError, FunctionTool, InMemoryCheckpointStore, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A tool that counts its calls and sleeps `sleep` on its first one only.
fn counting_tool(name: &str, sleep: Duration, calls: Arc<AtomicU32>) -> FunctionTool<()> {
    let spec = ToolSpec::new(name, "sleeps, then answers", json!({"type": "object"}));
    FunctionTool::new(spec, move |_ctx, _args| {
        let calls = Arc::clone(&calls);
        async move {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                tokio::time::sleep(sleep).await;
            }
            Ok(json!("done"))
        }
    })
}

#[tokio::test]
async fn a_token_cancelled_before_the_run_asks_no_model() {
    let model = ScriptedModel::new().text("never");
    let agent: Agent<()> = Agent::builder(model.clone()).build().unwrap();
    let token = CancellationToken::new();
    token.cancel();
    let result = agent.run(AgentRequest::new((), "hi").cancel_token(token)).await;
    assert_eq!(result.error(), Some(&AgentError::Cancelled));
    assert!(result.error().unwrap().is_resumable());
    assert!(model.requests().is_empty());
}

#[tokio::test]
async fn a_model_request_in_flight_is_abandoned_and_the_run_resumes_from_its_checkpoint() {
    let model = ScriptedModel::new()
        .delayed_text(Duration::from_secs(30), "too late")
        .text("resumed answer");
    let agent: Agent<()> = Agent::builder(model.clone())
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let request = AgentRequest::new((), "hi").run_id("run-model").cancel_token(token);
    let result = agent.run(request).await;
    assert_eq!(result.error(), Some(&AgentError::Cancelled));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the model call was not abandoned"
    );
    assert!(
        agent.has_checkpoint("run-model").await.unwrap(),
        "the checkpoint is kept"
    );

    let resumed = agent.resume("run-model", ()).await;
    assert!(resumed.is_completed(), "{:?}", resumed.error());
    assert_eq!(resumed.output().map(String::as_str), Some("resumed answer"));
}

#[tokio::test]
async fn tools_in_flight_are_aborted_finished_ones_kept_and_a_resume_runs_only_the_aborted() {
    let fast_calls = Arc::new(AtomicU32::new(0));
    let slow_calls = Arc::new(AtomicU32::new(0));
    let model = ScriptedModel::new()
        .tool_calls([("fast", json!({})), ("slow", json!({}))])
        .text("both done");
    let agent: Agent<()> = Agent::builder(model.clone())
        .tool(counting_tool("fast", Duration::ZERO, Arc::clone(&fast_calls)))
        .tool(counting_tool("slow", Duration::from_secs(30), Arc::clone(&slow_calls)))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let token = CancellationToken::new();
    let cancel = token.clone();
    let watched = Arc::clone(&slow_calls);
    tokio::spawn(async move {
        while watched.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let request = AgentRequest::new((), "go").run_id("run-tools").cancel_token(token);
    let result = agent.run(request).await;
    assert_eq!(result.error(), Some(&AgentError::Cancelled));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the slow tool was not aborted"
    );
    assert_eq!(
        (fast_calls.load(Ordering::SeqCst), slow_calls.load(Ordering::SeqCst)),
        (1, 1)
    );

    let resumed = tokio::time::timeout(Duration::from_secs(60), agent.resume("run-tools", ()))
        .await
        .unwrap();
    assert!(resumed.is_completed(), "{:?}", resumed.error());
    assert_eq!(resumed.output().map(String::as_str), Some("both done"));
    assert_eq!(fast_calls.load(Ordering::SeqCst), 1, "the finished call ran once");
    assert_eq!(slow_calls.load(Ordering::SeqCst), 2, "the aborted call ran again");
}

#[tokio::test]
async fn a_blocking_tool_in_flight_finishes_and_keeps_its_result() {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let spec = ToolSpec::new("grind", "blocking work", json!({"type": "object"}));
    let grind = FunctionTool::blocking(spec, move |_ctx, _args| {
        counted.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        Ok(json!("ground"))
    });
    let model = ScriptedModel::new().tool_call("grind", json!({})).text("after");
    let agent: Agent<()> = Agent::builder(model.clone())
        .tool(grind)
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let token = CancellationToken::new();
    let cancel = token.clone();
    let watched = Arc::clone(&calls);
    tokio::spawn(async move {
        while watched.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
    });
    let request = AgentRequest::new((), "go").run_id("run-blocking").cancel_token(token);
    let result = agent.run(request).await;
    assert_eq!(result.error(), Some(&AgentError::Cancelled));
    assert_eq!(model.requests().len(), 1, "no model request after the cancel");

    let resumed = agent.resume("run-blocking", ()).await;
    assert!(resumed.is_completed(), "{:?}", resumed.error());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the blocking call finished and was not run again"
    );
    let tool_text: Vec<String> = resumed
        .messages()
        .iter()
        .filter(|m| m.role == modu_core::Role::Tool)
        .map(|m| m.text())
        .collect();
    assert_eq!(tool_text.len(), 1);
    assert!(tool_text[0].contains("ground"), "{tool_text:?}");
}

#[tokio::test]
async fn a_resumed_run_can_be_cancelled_too() {
    let model = ScriptedModel::new()
        .error(|| modu_core::ModelError::transport("connection reset", "peer reset"))
        .delayed_text(Duration::from_secs(30), "too late");
    let agent: Agent<()> = Agent::builder(model)
        .retry(modu_agent::RetryConfig::none())
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let first = agent.run(AgentRequest::new((), "hi").run_id("run-resume")).await;
    assert!(
        first.error().is_some_and(AgentError::is_resumable),
        "{:?}",
        first.error()
    );
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let resumed = tokio::time::timeout(
        Duration::from_secs(10),
        agent.resume_cancellable("run-resume", Arc::new(()), token),
    )
    .await
    .unwrap();
    assert_eq!(resumed.error(), Some(&AgentError::Cancelled));
}

#[tokio::test]
async fn a_streamed_resume_stops_at_a_boundary_keeps_its_checkpoint_and_resumes_again() {
    use futures::StreamExt;
    let fast_calls = Arc::new(AtomicU32::new(0));
    let slow_calls = Arc::new(AtomicU32::new(0));
    let model = ScriptedModel::new()
        .error(|| modu_core::ModelError::transport("connection reset", "peer reset"))
        .tool_calls([("fast", json!({})), ("slow", json!({}))])
        .text("both done");
    let agent: Agent<()> = Agent::builder(model)
        .retry(modu_agent::RetryConfig::none())
        .tool(counting_tool("fast", Duration::ZERO, Arc::clone(&fast_calls)))
        .tool(counting_tool("slow", Duration::from_secs(30), Arc::clone(&slow_calls)))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let first = agent.run(AgentRequest::new((), "go").run_id("run-stream")).await;
    assert!(
        first.error().is_some_and(AgentError::is_resumable),
        "{:?}",
        first.error()
    );

    let token = CancellationToken::new();
    let cancel = token.clone();
    let watched = Arc::clone(&slow_calls);
    tokio::spawn(async move {
        while watched.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let mut stream = agent.resume_stream_cancellable("run-stream", Arc::new(()), token);
    let mut results = Vec::new();
    let mut last = None;
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(item) = stream.next().await {
            match item {
                modu_agent::StreamItem::Event(modu_core::AgentEvent::ToolCallResult { tool, .. }) => results.push(tool),
                modu_agent::StreamItem::Event(_) => {}
                other => last = other.into_outcome(),
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the slow tool was not aborted");
    // The stream ends with the run's own result: cancelled, not aborted mid-way.
    let last = last.expect("the stream ends with the run's result");
    assert_eq!(last.error(), Some(&AgentError::Cancelled));
    assert_eq!(
        results,
        ["fast"],
        "the finished call's result streamed, the aborted one's not"
    );

    let resumed = tokio::time::timeout(Duration::from_secs(60), agent.resume("run-stream", ()))
        .await
        .unwrap();
    assert!(resumed.is_completed(), "{:?}", resumed.error());
    assert_eq!(resumed.output().map(String::as_str), Some("both done"));
    assert_eq!(
        fast_calls.load(Ordering::SeqCst),
        1,
        "the finished call's result was kept"
    );
    assert_eq!(slow_calls.load(Ordering::SeqCst), 2, "the aborted call ran again");
}
