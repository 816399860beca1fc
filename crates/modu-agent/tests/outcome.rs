//! How a run ends: `RunOutcome` (completed, paused, failed), its report, `into_result` and the
//! last item of a stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;

use futures::StreamExt;
use modu_agent::{Agent, AgentRequest, RunLimits, StreamItem};
use modu_core::store::{ConversationStore, SessionSummary, StoreError};
use modu_core::{AgentError, FunctionTool, InMemoryCheckpointStore, Message, RunError, RunOutcome, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

fn approval_tool() -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("transfer", "Move money", json!({"type": "object"})).needs_approval(true),
        |_ctx, _args| async { Ok(json!("moved")) },
    )
}

#[tokio::test]
async fn a_completed_run_reports_typed_counters_and_only_the_callers_metadata() {
    let tool = FunctionTool::<()>::new(
        ToolSpec::new("now", "The time", json!({"type": "object"})),
        |_c, _a| async { Ok(json!("noon")) },
    );
    let agent = Agent::builder(ScriptedModel::new().tool_call("now", json!({})).text("It is noon."))
        .tool(tool)
        .build()
        .unwrap();
    let outcome = agent
        .run(AgentRequest::new((), "time?").metadata("ticket", json!(7)))
        .await;
    assert!(outcome.is_completed() && !outcome.is_paused() && !outcome.is_failed());
    let stats = outcome.stats();
    assert_eq!(
        (stats.model_calls, stats.tool_calls, stats.turns, stats.resumed),
        (2, 1, 2, false)
    );
    let report = outcome.report();
    assert_eq!(report.metadata.len(), 1, "{:?}", report.metadata);
    assert_eq!(report.metadata["ticket"], 7);
    assert!(report.plan.is_none(), "a standard run has no plan report");
    assert_eq!(outcome.messages().len(), 4);

    // The JSON names the ending and keeps the report beside it; it reads back the same.
    let value = serde_json::to_value(&outcome).unwrap();
    assert_eq!(value["status"], "completed");
    assert_eq!(value["output"], "It is noon.");
    assert_eq!(value["stats"]["tool_calls"], 1);
    assert_eq!(value["run_id"], outcome.run_id());
    let back: RunOutcome = serde_json::from_value(value).unwrap();
    assert_eq!(back.output().map(String::as_str), Some("It is noon."));
    assert_eq!(back.stats(), stats);

    assert_eq!(outcome.into_result().unwrap(), "It is noon.");
}

#[tokio::test]
async fn a_paused_run_is_not_a_failure_and_into_result_hands_over_the_pause() {
    // The first run and the streamed one pause on the call; the first, resumed, answers.
    let model = ScriptedModel::new()
        .tool_call("transfer", json!({}))
        .tool_call("transfer", json!({}))
        .text("done");
    let agent = Agent::builder(model)
        .tool(approval_tool())
        .checkpoint_store(std::sync::Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let outcome = agent.run("pay").await;
    assert!(outcome.is_paused(), "{outcome:?}");
    assert!(outcome.error().is_none() && outcome.output().is_none());
    assert_eq!(outcome.approvals().len(), 1);
    assert_eq!(serde_json::to_value(&outcome).unwrap()["status"], "paused");
    let run_id = outcome.run_id().to_owned();

    let err = outcome.into_result().unwrap_err();
    assert!(err.is_paused() && err.agent_error().is_none() && err.source().is_none());
    assert_eq!(err.report().run_id, run_id);
    assert!(err.to_string().contains("paused"), "{err}");
    match &err {
        RunError::Paused(paused) => assert_eq!(paused.approvals[0].tool_name, "transfer"),
        other => panic!("expected a pause, got {other:?}"),
    }
    // A caller whose functions return AgentError keeps using `?`.
    assert!(matches!(AgentError::from(err), AgentError::Interrupted { pending: 1 }));

    // The stream of the same kind of run ends with `StreamItem::Paused`.
    let items: Vec<_> = agent.stream("pay again").collect().await;
    let last = items.into_iter().last().unwrap();
    assert!(matches!(last, StreamItem::Paused(ref p) if p.approvals.len() == 1));
    assert!(last.into_outcome().unwrap().is_paused());

    // Approved and resumed, the run completes.
    let call = agent.pending_approvals(&run_id).await.unwrap()[0].call_id.clone();
    agent.approve(&run_id, &call).await.unwrap();
    let resumed = agent.resume(&run_id, ()).await;
    assert!(resumed.stats().resumed);
    assert_eq!(resumed.into_result().unwrap(), "done");
}

#[tokio::test]
async fn a_failed_run_gives_its_error_as_the_source_with_the_report() {
    let agent = Agent::builder(
        ScriptedModel::new()
            .tool_call("transfer", json!({}))
            .tool_call("transfer", json!({})),
    )
    .tool(FunctionTool::<()>::new(
        ToolSpec::new("transfer", "Move money", json!({"type": "object"})),
        |_c, _a| async { Ok(json!("moved")) },
    ))
    .limits(RunLimits::default().max_turns(1))
    .build()
    .unwrap();
    let outcome = agent.run("loop").await;
    assert!(outcome.is_failed());
    assert_eq!(outcome.error(), Some(&AgentError::MaxTurnsExceeded { limit: 1 }));
    assert_eq!(serde_json::to_value(&outcome).unwrap()["status"], "failed");
    let messages = outcome.messages().len();
    let err = outcome.into_result().unwrap_err();
    assert_eq!(err.agent_error(), Some(&AgentError::MaxTurnsExceeded { limit: 1 }));
    let source = err.source().expect("the AgentError is the source");
    assert_eq!(
        source.to_string(),
        AgentError::MaxTurnsExceeded { limit: 1 }.to_string()
    );
    assert_eq!(err.report().messages.len(), messages);
}

/// A conversation store that loads nothing and refuses every append.
struct RefusingStore;

#[async_trait::async_trait]
impl ConversationStore for RefusingStore {
    async fn append(&self, _session_id: &str, _messages: &[Message]) -> Result<(), StoreError> {
        Err(StoreError::Backend {
            message: "disk full".into(),
            source: None,
        })
    }
    async fn load(&self, _session_id: &str) -> Result<Vec<Message>, StoreError> {
        Ok(Vec::new())
    }
    async fn delete(&self, _session_id: &str) -> Result<(), StoreError> {
        Ok(())
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn an_answer_the_store_refused_is_kept_in_the_failed_outcome() {
    let agent = Agent::builder(ScriptedModel::new().text("hello"))
        .conversation_store(std::sync::Arc::new(RefusingStore))
        .build()
        .unwrap();
    let outcome = agent.run(AgentRequest::new((), "hi").session("s1")).await;
    let RunOutcome::Failed(failed) = outcome else {
        panic!("expected a failed run, got {outcome:?}");
    };
    assert!(matches!(failed.error, AgentError::Store { ref operation, .. } if operation == "conversation.append"));
    assert_eq!(failed.unstored_output.as_deref(), Some("hello"));
    assert!(failed.report.stats.answer_not_stored);
}

#[tokio::test]
async fn a_paused_run_tells_the_sinks_it_paused_and_the_metrics_do_not_count_a_failure() {
    use modu_agent::sinks::{InMemoryMetricRecorder, MetricsEventSink, metric_names as names};
    use modu_core::{AgentEvent, CollectingEventSink};

    let collected = std::sync::Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(ScriptedModel::new().tool_call("transfer", json!({})).text("done"))
        .tool(approval_tool())
        .checkpoint_store(std::sync::Arc::new(InMemoryCheckpointStore::new()))
        .event_sink(collected.clone())
        .build()
        .unwrap();
    let outcome = agent.run("pay").await;
    assert!(outcome.is_paused(), "{outcome:?}");
    // The metrics sink sees the run's events as they were published.
    let metrics = InMemoryMetricRecorder::new();
    let metrics_sink = MetricsEventSink::new(std::sync::Arc::new(metrics.clone()));
    for event in collected.events() {
        metrics_sink.record(&event);
    }

    let last = collected.events().into_iter().last().unwrap();
    match &last {
        AgentEvent::RunPaused { pending, run_id, .. } => {
            assert_eq!(*pending, 1);
            assert_eq!(run_id, outcome.run_id());
        }
        other => panic!("expected RunPaused last, got {other:?}"),
    }
    assert_eq!(last.kind(), "run_paused");
    assert!(last.is_terminal());
    assert!(
        !collected
            .events()
            .iter()
            .any(|e| matches!(e, AgentEvent::RunFailed { .. }))
    );
    let snapshot = metrics.snapshot();
    assert_eq!(snapshot.counter(names::RUNS_PAUSED, &[]), 1);
    assert_eq!(snapshot.counter(names::RUNS_FAILED, &[]), 0);
}
