//! Tool failure recovery inside a step: retrying a call and repairing its arguments.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modu_agent::plan::{FeedbackMode, LlmPlanGenerator, RecoveryFallback, ToolFailureRecoveryConfig, ToolTraceMode};
use modu_agent::{Agent, RunLimits};
use modu_core::{AgentError, FunctionTool, RecoveryAction, ToolError, ToolErrorKind, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{X, flaky, plan, plan_json, request_text, search_agent, shape, step_ok, strict, tools};

fn repair_error() -> ToolError {
    ToolError::new(ToolErrorKind::Execution, "invalid_query_syntax")
        .with_message("The query syntax is invalid; correct the Tool arguments.")
        .with_recovery(RecoveryAction::RepairCall)
}

#[tokio::test]
async fn retry_call_reruns_an_idempotent_tool_with_the_same_arguments() {
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = flaky(
        "search",
        1,
        ToolError::execution("backend_busy")
            .retryable(true)
            .with_recovery(RecoveryAction::RetryCall),
        Arc::clone(&calls),
    )
    .map_spec(|s| s.idempotent(true));
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x"}))
        .text(step_ok("found"))
        .text("found");
    let agent = search_agent(&model, tool, ToolFailureRecoveryConfig::default(), RunLimits::default());
    let result = agent.run("find x").await;
    assert_eq!(result.error(), None);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let trace = plan_json(&result)["tool_trace"][0].clone();
    assert_eq!(trace["ok"], true);
    assert_eq!(trace["attempts"], 2);
}

#[tokio::test]
async fn a_timed_out_blocking_tool_is_not_retried_and_falls_back() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let spec = ToolSpec::new("slow", "Slow sync work", json!({"type": "object", "properties": {}}))
        .idempotent(true)
        .timeout(Duration::from_millis(50));
    let tool = FunctionTool::<()>::blocking(spec, move |_ctx, _args| {
        c.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        Ok(json!("late"))
    });
    let model = ScriptedModel::new()
        .text(plan(&[("Slow", &["slow"])]))
        .tool_call("slow", json!({}))
        .text(plan(&[("never", &[])]));
    // The default recovery (fallback replan): a blocking timeout is FAIL all the same, since the
    // work may still be running.
    let agent = search_agent(&model, tool, ToolFailureRecoveryConfig::default(), RunLimits::default());
    let result = agent.run("go").await;
    assert_eq!(
        result.error(),
        Some(&AgentError::PlanFailed {
            cause: "uncancellable_timeout".into(),
            step_id: Some("s1".into())
        })
    );
    assert_eq!(model.requests().len(), 2, "no replan request");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a blocking timeout is never retried");
    let trace = plan_json(&result)["tool_trace"][0].clone();
    assert_eq!(trace["error"]["type"], "timeout");
    assert_eq!(trace["error"]["retryable"], false);
    assert_eq!(trace["error"]["recovery"], "fail");
    assert_eq!(plan_json(&result)["failure"]["error_class"], "timeout");
}

#[tokio::test]
async fn repair_call_lets_the_model_correct_the_arguments_once() {
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = flaky("search", 1, repair_error(), Arc::clone(&calls)).map_spec(|s| s.repair_safe(true));
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "name = 'x"}))
        .tool_call("search", json!({"query": "name = 'x'"}))
        .text(step_ok("found"))
        .text("found");
    let agent = search_agent(&model, tool, ToolFailureRecoveryConfig::default(), RunLimits::default());
    let result = agent.run("find x").await;
    assert_eq!(result.error(), None);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let trace = plan_json(&result)["tool_trace"].as_array().unwrap().clone();
    assert_eq!(trace.len(), 2);
    assert_eq!(trace[0]["ok"], false);
    assert_eq!(trace[0]["error"]["recovery"], "repair_call");
    assert_eq!(trace[0]["error"]["reason"], "invalid_query_syntax");
    assert_ne!(trace[0]["call_id"], trace[1]["call_id"]);
    assert_eq!(trace[1]["ok"], true);
    assert_eq!(trace[1]["recovery_of_call_id"], trace[0]["call_id"]);
    assert_eq!(plan_json(&result)["usage"]["tool_repairs"], 1);
    // The repair request offers only the failed tool; the model saw type and reason only.
    let requests = model.requests();
    assert_eq!(shape(&requests[2]), (tools(&["search"]), None));
    let seen = request_text(&requests[2]);
    assert!(seen.contains("invalid_query_syntax"));
    assert!(
        !seen.contains("The query syntax is invalid"),
        "type_only hides the message"
    );
}

#[tokio::test]
async fn safe_message_feedback_adds_the_sanitised_message() {
    let tool = flaky(
        "search",
        1,
        ToolError::execution("invalid_query_syntax")
            .with_message("Bad\u{0007} query\nsyntax")
            .with_recovery(RecoveryAction::RepairCall),
        Arc::default(),
    )
    .map_spec(|s| s.repair_safe(true));
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "a"}))
        .tool_call("search", json!({"query": "b"}))
        .text(step_ok("ok"))
        .text("ok");
    let agent = search_agent(
        &model,
        tool,
        ToolFailureRecoveryConfig::default().feedback_mode(FeedbackMode::SafeMessage),
        RunLimits::default(),
    );
    let result = agent.run("go").await;
    assert_eq!(result.error(), None);
    let seen = request_text(&model.requests()[2]);
    assert!(seen.contains("Bad  query syntax"), "{seen}");
}

/// A repair answer the runtime must refuse without running the tool.
async fn rejected_repair(second: (&str, &str), expected_cause: &str) {
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = flaky("search", 5, repair_error(), Arc::clone(&calls)).map_spec(|s| s.repair_safe(true));
    let other = FunctionTool::<()>::typed("other", "Other", |_c, _a: X| async move { Ok(0) });
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search", "other"])]))
        .raw_tool_call("search", r#"{"query": "x", "limit": 1}"#)
        .raw_tool_call(second.0, second.1);
    let agent = Agent::builder(model.clone())
        .tool(tool)
        .tool(other)
        .decision_policy(
            strict(LlmPlanGenerator::agent_model())
                .tool_failure_recovery(ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Fail))
                .tool_trace_mode(ToolTraceMode::Arguments),
        )
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(
        result.error(),
        Some(&AgentError::PlanFailed {
            cause: expected_cause.into(),
            step_id: Some("s1".into())
        }),
        "{second:?}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the repair call did not run: {second:?}"
    );
    let trace = plan_json(&result)["tool_trace"].as_array().unwrap().clone();
    assert_eq!(trace.len(), 2);
    assert_eq!(
        trace[0]["error"]["recovery"], "repair_call",
        "the failed call keeps its recovery"
    );
    assert_eq!(
        trace[1]["error"]["recovery"], "fail",
        "the rejected repair records the fallback"
    );
    assert_eq!(trace[1]["attempts"], 0);
    assert_eq!(trace[1]["error"]["reason"], expected_cause);
    assert_eq!(trace[1]["arguments_source"], "requested");
    assert_eq!(trace[0]["arguments_source"], "validated");
    assert_eq!(plan_json(&result)["failure"]["cause"], expected_cause);
}

#[tokio::test]
async fn repair_with_reordered_keys_is_rejected() {
    rejected_repair(("search", r#"{"limit": 1, "query": "x"}"#), "repair_same_arguments").await;
}

#[tokio::test]
async fn repair_with_only_a_different_number_spelling_is_rejected() {
    rejected_repair(("search", r#"{"query": "x", "limit": 1.0}"#), "repair_same_arguments").await;
}

#[tokio::test]
async fn repair_with_the_same_effective_arguments_after_defaults_is_rejected() {
    // The first call sent limit 1; here the first sends the default explicitly, the repair omits it.
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = flaky("search", 5, repair_error(), Arc::clone(&calls)).map_spec(|s| s.repair_safe(true));
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .raw_tool_call("search", r#"{"query": "x", "limit": 100}"#)
        .raw_tool_call("search", r#"{"query": "x"}"#);
    let agent = search_agent(
        &model,
        tool,
        ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Fail),
        RunLimits::default(),
    );
    let result = agent.run("go").await;
    assert_eq!(
        result.error(),
        Some(&AgentError::PlanFailed {
            cause: "repair_same_effective_arguments".into(),
            step_id: Some("s1".into())
        })
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn repair_with_another_tool_is_rejected() {
    rejected_repair(("other", r#"{"x": 1}"#), "repair_other_tool").await;
}

#[tokio::test]
async fn repair_needs_a_repair_safe_tool() {
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = flaky("search", 5, repair_error(), Arc::clone(&calls)); // not repair_safe
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
    assert_eq!(plan_json(&result)["failure"]["cause"], "repair_not_safe");
    assert_eq!(model.requests().len(), 2, "no repair request was made");
}

#[tokio::test]
async fn max_tool_repair_attempts_bounds_repairs_then_falls_back() {
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = flaky("search", 5, repair_error(), Arc::clone(&calls)).map_spec(|s| s.repair_safe(true));
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "a"}))
        .tool_call("search", json!({"query": "b"}));
    let agent = search_agent(
        &model,
        tool,
        ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Fail),
        RunLimits::default().max_tool_repair_attempts(1),
    );
    let result = agent.run("go").await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(plan_json(&result)["failure"]["cause"], "repair_limit");
    assert_eq!(plan_json(&result)["usage"]["tool_repairs"], 1);
}
