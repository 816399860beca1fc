//! Checkpoints of a strict run: resume after a failure, after DONE, and after an approval.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::Agent;
use modu_agent::plan::LlmPlanGenerator;
use modu_core::{
    AgentError, AgentEvent, CheckpointStore, CollectingEventSink, FunctionTool, InMemoryCheckpointStore, ModelError,
    ToolSpec,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

use crate::support::{SECRET_ARG, counted_add, double, fast_retry, plan, plan_json, shape, step_ok, strict, tools};

#[tokio::test]
async fn a_transport_error_mid_plan_resumes_at_the_same_step() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let adds = Arc::new(AtomicUsize::new(0));
    let first = ScriptedModel::new()
        .text(plan(&[("Add", &["add"]), ("Double", &["double"])]))
        .tool_call("add", json!({"a": 20, "b": 22}))
        .text(step_ok("42"))
        .error(|| ModelError::transport("connection reset", "peer reset"));
    let build = |model: &ScriptedModel| {
        Agent::builder(model.clone())
            .tool(counted_add(Arc::clone(&adds)))
            .tool(double())
            .retry(fast_retry(1))
            .checkpoint_store(store.clone())
            .decision_policy(strict(LlmPlanGenerator::agent_model()))
            .build()
            .unwrap()
    };
    let failed = build(&first).run("(20+22)*2").await;
    assert!(failed.error().is_some_and(AgentError::is_resumable));
    assert_eq!(plan_json(&failed)["plan"]["steps"][0]["status"], "completed");
    assert_eq!(plan_json(&failed)["plan"]["steps"][1]["status"], "in_progress");

    let second = ScriptedModel::new()
        .tool_call("double", json!({"x": 42}))
        .text(step_ok("84"))
        .text("84");
    let resumed = build(&second).resume(failed.run_id(), ()).await;
    assert_eq!(resumed.error(), None);
    assert_eq!(resumed.output().map(String::as_str), Some("84"));
    assert_eq!(adds.load(Ordering::SeqCst), 1, "step 1's tool did not run again");
    // The resumed process starts with step 2's ACT: no new plan.
    assert_eq!(shape(&second.requests()[0]), (tools(&["double"]), None));
    assert_eq!(plan_json(&resumed)["plan"]["steps"][1]["status"], "completed");
    assert_eq!(plan_json(&resumed)["tool_trace"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_done_run_is_not_finalized_twice() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .text(plan(&[("Reply", &[])]))
        .text(step_ok("hi"))
        .text("hello there");
    let build = |model: &ScriptedModel, sink: Arc<CollectingEventSink>| {
        Agent::builder(model.clone())
            .checkpoint_store(store.clone())
            .event_sink(sink)
            .decision_policy(strict(LlmPlanGenerator::agent_model()))
            .build()
            .unwrap()
    };
    let first = build(&model, Arc::new(CollectingEventSink::new())).run("hi").await;
    assert_eq!(first.output().map(String::as_str), Some("hello there"));
    // The terminal DONE state stays in the store (final_emitted).
    let saved: Value = serde_json::from_slice(&store.load(first.run_id()).await.unwrap().unwrap()).unwrap();
    assert_eq!(saved["state"]["policy"]["state"]["phase"]["phase"], "done");
    assert_eq!(saved["state"]["policy"]["state"]["final_emitted"], true);
    assert_eq!(saved["schema_version"], modu_agent::CHECKPOINT_SCHEMA_VERSION);

    let empty = ScriptedModel::new();
    let sink = Arc::new(CollectingEventSink::new());
    let again = build(&empty, sink.clone()).resume(first.run_id(), ()).await;
    assert_eq!(again.error(), None);
    assert_eq!(again.output().map(String::as_str), Some("hello there"));
    assert_eq!(plan_json(&again)["final_replayed"], true);
    assert!(empty.requests().is_empty(), "no second FINALIZE");
    assert!(!sink.events().iter().any(|e| matches!(e, AgentEvent::FinalDelta { .. })));
}

#[tokio::test]
async fn a_standard_checkpoint_does_not_resume_under_a_strict_policy() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let standard = Agent::builder(ScriptedModel::new().error(|| ModelError::transport("down", "refused")))
        .retry(fast_retry(1))
        .checkpoint_store(store.clone())
        .build()
        .unwrap();
    let failed = standard.run("x").await;
    let strict_agent = Agent::builder(ScriptedModel::new())
        .checkpoint_store(store.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let resumed = strict_agent.resume(failed.run_id(), ()).await;
    assert!(matches!(resumed.error(), Some(AgentError::ResumeIncompatible { .. })));
}

#[tokio::test]
async fn an_approval_inside_a_step_pauses_and_resumes() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let adds = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&adds);
    let spec = ToolSpec::new(
        "add",
        "Add with a key",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "api_key": {"type": "string"}}}),
    )
    .needs_approval(true);
    let keyed_add = FunctionTool::<()>::new(spec, move |_ctx, args| {
        c.fetch_add(1, Ordering::SeqCst);
        async move { Ok(json!(args["a"].as_i64().unwrap() + args["b"].as_i64().unwrap())) }
    });
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["add"])]))
        .tool_call("add", json!({"a": 1, "b": 2, "api_key": SECRET_ARG}))
        .text(step_ok("3"))
        .text("3");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .tool(keyed_add)
        .event_sink(sink.clone())
        .checkpoint_store(store)
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let paused = agent.run("1+2").await;
    assert!(
        paused.is_paused() && paused.error().is_none(),
        "a paused run is not a failure"
    );
    assert_eq!(adds.load(Ordering::SeqCst), 0);
    // The person deciding sees the arguments; events carry them with secret keys masked.
    assert_eq!(paused.approvals()[0].arguments["api_key"], SECRET_ARG);
    let events = serde_json::to_string(&sink.events()).unwrap();
    assert!(events.contains("approval_requested"));
    assert!(!events.contains(SECRET_ARG), "{events}");
    let call_id = paused.approvals()[0].call_id.clone();
    agent.approve(paused.run_id(), &call_id).await.unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(done.error(), None);
    assert_eq!(done.output().map(String::as_str), Some("3"));
    assert_eq!(adds.load(Ordering::SeqCst), 1);
}
