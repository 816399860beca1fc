//! Recovery fallbacks (replan, fail) and the tool calls that get no recovery.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::plan::{LlmPlanGenerator, RecoveryFallback, ToolFailureRecoveryConfig, ToolTraceMode};
use modu_agent::{Agent, RunLimits};
use modu_core::{
    AgentError, AgentEvent, CollectingEventSink, FunctionTool, InMemoryCheckpointStore, ModelError, RecoveryAction,
    ToolError,
};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{
    PLAN, X, counted_add, fast_retry, flaky, plan, plan_json, request_text, search_agent, shape, step_ok, strict,
};

#[tokio::test]
async fn replan_revises_the_unfinished_plan_and_keeps_committed_steps() {
    let adds = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = flaky("search", 1, ToolError::execution("backend_down"), Arc::clone(&calls));
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["add"]), ("Search", &["search"]), ("Report", &[])]))
        .tool_call("add", json!({"a": 1, "b": 1}))
        .text(step_ok("2"))
        .tool_call("search", json!({"query": "x"}))
        // REPLAN
        .text(plan(&[("Search again", &["search"])]))
        .tool_call("search", json!({"query": "x"}))
        .text(step_ok("found"))
        .text("2, found");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .tool(counted_add(Arc::clone(&adds)))
        .tool(tool)
        .event_sink(sink.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(result.error(), None);
    assert_eq!(adds.load(Ordering::SeqCst), 1, "the committed step is not redone");
    let requests = model.requests();
    assert_eq!(
        shape(&requests[4]),
        (vec![], PLAN.map(str::to_owned)),
        "REPLAN: schema, no tools"
    );
    let replan_prompt = request_text(&requests[4]);
    assert!(replan_prompt.contains("backend_down") && replan_prompt.contains("s1: Add"));
    let steps = plan_json(&result)["plan"]["steps"].as_array().unwrap().clone();
    let statuses: Vec<&str> = steps.iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["completed", "superseded", "superseded", "completed"]);
    assert_eq!(steps[3]["id"], "s4");
    assert_eq!(plan_json(&result)["plan"]["revision"], 1);
    assert_eq!(plan_json(&result)["usage"]["replans"], 1);
    assert_eq!(plan_json(&result)["tool_trace"][1]["error"]["recovery"], "replan");
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, AgentEvent::PlanRevised { cause, .. } if cause == "tool_failed"))
    );
}

#[tokio::test]
async fn max_replans_ends_the_run_when_exhausted() {
    let tool = flaky("search", 9, ToolError::execution("backend_down"), Arc::default());
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x"}))
        .text(plan(&[("Search again", &["search"])]))
        .tool_call("search", json!({"query": "y"}));
    let agent = search_agent(
        &model,
        tool,
        ToolFailureRecoveryConfig::default(),
        RunLimits::default().max_replans(1),
    );
    let result = agent.run("go").await;
    assert_eq!(
        result.error(),
        Some(&AgentError::PlanFailed {
            cause: "replan_limit".into(),
            step_id: Some("s2".into())
        })
    );
    assert_eq!(plan_json(&result)["plan"]["steps"][1]["status"], "failed");
    assert_eq!(plan_json(&result)["failure"]["reason"], "backend_down");
}

#[tokio::test]
async fn fail_fallback_ends_the_run_with_sanitised_failure_metadata() {
    let tool = flaky("search", 9, ToolError::execution("backend_down"), Arc::default());
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x"}));
    let agent = search_agent(
        &model,
        tool,
        ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Fail),
        RunLimits::default(),
    );
    let result = agent.run("go").await;
    let failure = plan_json(&result)["failure"].clone();
    assert_eq!(failure["cause"], "tool_failed");
    assert_eq!(failure["step_id"], "s1");
    assert_eq!(failure["tool_name"], "search");
    assert_eq!(failure["error_class"], "execution");
    assert_eq!(failure["reason"], "backend_down");
    assert_eq!(plan_json(&result)["plan"]["steps"][0]["status"], "failed");
    assert_eq!(model.requests().len(), 2, "no replan with fallback fail");
}

#[tokio::test]
async fn a_tool_asking_to_fail_ends_the_run_even_with_replan_fallback() {
    let tool = flaky(
        "search",
        9,
        ToolError::execution("forbidden_query").with_recovery(RecoveryAction::Fail),
        Arc::default(),
    );
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x"}));
    let agent = search_agent(&model, tool, ToolFailureRecoveryConfig::default(), RunLimits::default());
    let result = agent.run("go").await;
    assert_eq!(plan_json(&result)["failure"]["cause"], "tool_requested_fail");
}

#[tokio::test]
async fn a_partly_successful_parallel_batch_ends_terminally_even_with_replan() {
    let adds = Arc::new(AtomicUsize::new(0));
    let tool = flaky("search", 9, ToolError::execution("backend_down"), Arc::default());
    let model = ScriptedModel::new()
        .text(plan(&[("Both", &["add", "search"])]))
        .tool_calls([("add", json!({"a": 1, "b": 2})), ("search", json!({"query": "x"}))])
        .text(plan(&[("never", &[])]));
    let agent = Agent::builder(model.clone())
        .tool(counted_add(Arc::clone(&adds)))
        .tool(tool)
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(
        result.error(),
        Some(&AgentError::PlanFailed {
            cause: "partial_batch_failure".into(),
            step_id: Some("s1".into())
        })
    );
    assert_eq!(adds.load(Ordering::SeqCst), 1);
    assert_eq!(model.requests().len(), 2, "no replan after a partial batch");
}

#[tokio::test]
async fn refused_calls_are_fed_back_without_recovery() {
    // Invalid arguments never run the tool: the model gets the type and reason and corrects.
    let adds = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["add"])]))
        .tool_call("add", json!({"a": "one", "b": 2}))
        .tool_call("add", json!({"a": 1, "b": 2}))
        .text(step_ok("3"))
        .text("3");
    let agent = Agent::builder(model.clone())
        .tool(counted_add(Arc::clone(&adds)))
        .decision_policy(strict(LlmPlanGenerator::agent_model()).tool_trace_mode(ToolTraceMode::Arguments))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(result.error(), None);
    assert_eq!(adds.load(Ordering::SeqCst), 1);
    let trace = plan_json(&result)["tool_trace"].clone();
    assert_eq!(trace[0]["error"]["reason"], "invalid_arguments");
    assert_eq!(trace[0]["attempts"], 0);
    assert_eq!(trace[0]["arguments_source"], "requested");
    assert_eq!(trace[1]["arguments"], json!({"a": 1, "b": 2}));
}

#[tokio::test]
async fn a_tool_outside_the_step_is_refused_and_never_runs() {
    let adds = Arc::new(AtomicUsize::new(0));
    let doubles = Arc::new(AtomicUsize::new(0));
    let d = Arc::clone(&doubles);
    let counted_double = FunctionTool::<()>::typed("double", "Double an integer", move |_ctx, a: X| {
        let d = Arc::clone(&d);
        async move {
            d.fetch_add(1, Ordering::SeqCst);
            Ok(a.x * 2)
        }
    });
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["add"]), ("Double", &["double"])]))
        .tool_call("double", json!({"x": 1})) // not s1's tool
        .tool_call("add", json!({"a": 1, "b": 1}))
        .text(step_ok("2"))
        .tool_call("double", json!({"x": 2}))
        .text(step_ok("4"))
        .text("4");
    let agent = Agent::builder(model.clone())
        .tool(counted_add(Arc::clone(&adds)))
        .tool(counted_double)
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("(1+1)*2").await;
    assert_eq!(result.error(), None);
    assert_eq!(doubles.load(Ordering::SeqCst), 1, "double ran only in its own step");
    let trace = plan_json(&result)["tool_trace"].clone();
    assert_eq!(trace[0]["tool_name"], "double");
    assert_eq!(trace[0]["step_id"], "s1");
    assert_eq!(trace[0]["error"]["reason"], "unknown_tool");
    assert_eq!(trace[0]["attempts"], 0);
    assert_eq!(trace[2]["tool_name"], "double");
    assert_eq!(trace[2]["ok"], true);
}

#[tokio::test]
async fn a_retryable_error_classified_otherwise_is_not_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = flaky(
        "search",
        9,
        ToolError::execution("quota")
            .retryable(true)
            .with_recovery(RecoveryAction::Fail),
        Arc::clone(&calls),
    )
    .map_spec(|s| s.idempotent(true));
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x"}));
    let agent = search_agent(&model, tool, ToolFailureRecoveryConfig::default(), RunLimits::default());
    let result = agent.run("go").await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(plan_json(&result)["failure"]["cause"], "tool_requested_fail");
}

#[tokio::test]
async fn a_replan_interrupted_by_a_transport_error_resumes_without_rerunning_the_tool() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let build = |model: &ScriptedModel| {
        Agent::builder(model.clone())
            .tool(flaky(
                "search",
                1,
                ToolError::execution("backend_down"),
                Arc::clone(&calls),
            ))
            .retry(fast_retry(1))
            .checkpoint_store(store.clone())
            .decision_policy(strict(LlmPlanGenerator::agent_model()))
            .build()
            .unwrap()
    };
    let first = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x"}))
        .error(|| ModelError::transport("reset during the replan", "peer reset"));
    let failed = build(&first).run("find x").await;
    assert!(
        failed.error().is_some_and(AgentError::is_resumable),
        "{:?}",
        failed.error()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let second = ScriptedModel::new()
        .text(plan(&[("Search again", &["search"])]))
        .tool_call("search", json!({"query": "x"}))
        .text(step_ok("found"))
        .text("found");
    let resumed = build(&second).resume(failed.run_id(), ()).await;
    assert_eq!(resumed.error(), None);
    // The failed call is not run again: the resumed run asks for the replan first.
    assert_eq!(shape(&second.requests()[0]), (vec![], PLAN.map(str::to_owned)));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "one failed call, one call of the new plan"
    );
    assert_eq!(plan_json(&resumed)["usage"]["replans"], 1);
    let trace = plan_json(&resumed)["tool_trace"].as_array().unwrap().clone();
    assert_eq!(trace.len(), 2);
    assert_eq!(trace[0]["error"]["recovery"], "replan");
}
