//! Strict Plan-and-Execute: every transition, limit and recovery path, driven by `ScriptedModel`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use modu_agent::plan::{
    FeedbackMode, LlmPlanGenerator, PlanAndExecutePolicy, RecoveryFallback, ToolFailureRecoveryConfig, ToolTraceMode,
};
use modu_agent::{Agent, FinalizationMode, RetryConfig, RunLimits, StreamItem};
use modu_core::{
    AgentError, AgentEvent, ChatRequest, CheckpointStore, CollectingEventSink, FunctionTool, InMemoryCheckpointStore,
    ModelError, RecoveryAction, Role, ToolError, ToolErrorKind, ToolSpec,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

// ----- helpers -----

fn plan(steps: &[(&str, &[&str])]) -> String {
    json!({"steps": steps.iter().map(|(d, t)| json!({"description": d, "allowed_tools": t})).collect::<Vec<_>>()})
        .to_string()
}

fn step_ok(result: &str) -> String {
    json!({"status": "completed", "result": result}).to_string()
}

fn step_failed(result: &str) -> String {
    json!({"status": "failed", "result": result}).to_string()
}

/// (tool names offered, response format name) of a request.
fn shape(r: &ChatRequest) -> (Vec<String>, Option<String>) {
    (
        r.tools.iter().map(|t| t.name.clone()).collect(),
        r.response_format.as_ref().map(|f| f.name.clone()),
    )
}

fn tools(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

const PLAN: Option<&str> = Some("PlanDraft");
const STEP: Option<&str> = Some("StepResult");

fn request_text(r: &ChatRequest) -> String {
    serde_json::to_string(&r.messages).unwrap()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Ab {
    a: i64,
    b: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct X {
    x: i64,
}

fn counted_add(count: Arc<AtomicUsize>) -> FunctionTool<()> {
    FunctionTool::typed("add", "Add two integers", move |_ctx, a: Ab| {
        let count = Arc::clone(&count);
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            Ok(a.a + a.b)
        }
    })
}

fn double() -> FunctionTool<()> {
    FunctionTool::typed("double", "Double an integer", |_ctx, a: X| async move { Ok(a.x * 2) })
}

/// A tool whose first `failures` calls fail with `error`, then succeed with `"ok"`.
fn flaky(name: &str, failures: usize, error: ToolError, count: Arc<AtomicUsize>) -> FunctionTool<()> {
    let spec = ToolSpec::new(
        name,
        "Search records",
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "default": 100}
            },
            "required": ["query"]
        }),
    );
    FunctionTool::new(spec, move |_ctx, _args| {
        let count = Arc::clone(&count);
        let error = error.clone();
        async move {
            let n = count.fetch_add(1, Ordering::SeqCst);
            if n < failures { Err(error) } else { Ok(json!("ok")) }
        }
    })
}

fn strict(generator: LlmPlanGenerator) -> PlanAndExecutePolicy {
    PlanAndExecutePolicy::new(generator)
}

fn fast_retry(attempts: u32) -> RetryConfig {
    RetryConfig::new(attempts).with_backoff(Duration::from_millis(1), Duration::from_millis(2))
}

// ----- transitions -----

#[tokio::test]
async fn plan_act_step_result_commit_verify_finalize_with_request_shapes() {
    let adds = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .text(plan(&[("Add 20 and 22", &["add"]), ("Double the sum", &["double"])]))
        .tool_call("add", json!({"a": 20, "b": 22}))
        .text(step_ok("20 + 22 = 42"))
        .tool_call("double", json!({"x": 42}))
        .text(step_ok("42 * 2 = 84"))
        .text_deltas(["The answer ", "is 84."]);
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .instructions("Be exact.")
        .tool(counted_add(Arc::clone(&adds)))
        .tool(double())
        .event_sink(sink.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("What is (20 + 22) * 2?").await;
    assert_eq!(result.error(), None);
    assert_eq!(result.output().map(String::as_str), Some("The answer is 84."));
    assert_eq!(adds.load(Ordering::SeqCst), 1);

    let requests = model.requests();
    let shapes: Vec<_> = requests.iter().map(shape).collect();
    assert_eq!(
        shapes,
        vec![
            (vec![], PLAN.map(str::to_owned)), // PLAN: schema, no tools
            (tools(&["add"]), None),           // ACT_TOOL s1: only s1's tools
            (vec![], STEP.map(str::to_owned)), // STEP_RESULT s1: schema, no tools
            (tools(&["double"]), None),        // ACT_TOOL s2: only s2's tools
            (vec![], STEP.map(str::to_owned)), // STEP_RESULT s2
            (vec![], None),                    // FINALIZE: text, no tools
        ]
    );
    // The plan schema limits the tools to the agent's (an enum) and the steps to max_steps, so
    // constrained decoding can only produce plans that validate.
    let plan_schema = &requests[0].response_format.as_ref().unwrap().schema;
    let step_schema = &plan_schema["properties"]["steps"];
    assert_eq!(step_schema["maxItems"], 8);
    assert_eq!(
        step_schema["items"]["properties"]["allowed_tools"]["items"]["enum"],
        json!(["add", "double"])
    );
    // Tools and a schema are never in one request.
    assert!(
        requests
            .iter()
            .all(|r| r.tools.is_empty() || r.response_format.is_none())
    );
    // Step 2 does not see step 1's tool traffic, only its committed result.
    let s2 = request_text(&requests[3]);
    assert!(s2.contains("20 + 22 = 42"));
    assert!(
        requests[3]
            .messages
            .iter()
            .all(|m| m.role != Role::Tool && m.tool_calls.is_empty())
    );
    // FINALIZE sees the committed results.
    let fin = request_text(&requests[5]);
    assert!(fin.contains("20 + 22 = 42") && fin.contains("42 * 2 = 84"));

    let plan = plan_json(&result)["plan"].clone();
    assert_eq!(plan["steps"][0]["status"], "completed");
    assert_eq!(plan["steps"][1]["status"], "completed");
    assert_eq!(plan["steps"][0]["allowed_tools"], json!(["add"]));
    assert_eq!(plan["steps"][1]["result"], "42 * 2 = 84");
    let trace = plan_json(&result)["tool_trace"].as_array().unwrap().clone();
    assert_eq!(trace.len(), 2);
    assert_eq!(trace[0]["step_id"], "s1");
    assert_eq!(trace[0]["tool_name"], "add");
    assert_eq!(trace[0]["ok"], true);
    assert_eq!(trace[0]["attempts"], 1);
    assert!(trace[0].get("arguments").is_none(), "summary mode records no arguments");
    assert_eq!(trace[1]["step_id"], "s2");
    assert_eq!(plan_json(&result)["usage"]["tool_repairs"], 0);
    // The session history gets the input and the final answer only.
    assert_eq!(result.messages().len(), 2);

    let kinds: Vec<&str> = sink
        .events()
        .iter()
        .map(AgentEvent::kind)
        .filter(|k| {
            [
                "plan_created",
                "step_started",
                "tool_call_finished",
                "step_committed",
                "plan_verified",
                "final_delta",
            ]
            .contains(k)
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "plan_created",
            "step_started",
            "tool_call_finished",
            "step_committed",
            "step_started",
            "tool_call_finished",
            "step_committed",
            "plan_verified",
            "final_delta",
            "final_delta",
        ]
    );
}

#[tokio::test]
async fn a_plain_act_answer_does_not_complete_a_step() {
    let model = ScriptedModel::new()
        .text(plan(&[("Add 1 and 2", &["add"])]))
        .text("I think it is 3.") // plain ACT answer: a draft, not a completion
        .text(step_failed("I did not use the tool")) // STEP_RESULT says failed: back to ACT
        .tool_call("add", json!({"a": 1, "b": 2}))
        .text(step_ok("1 + 2 = 3"))
        .text("3");
    let sink = Arc::new(CollectingEventSink::new());
    let adds = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(model.clone())
        .tool(counted_add(Arc::clone(&adds)))
        .event_sink(sink.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("1 + 2?").await;
    assert_eq!(result.error(), None);
    let shapes: Vec<_> = model.requests().iter().map(shape).collect();
    assert_eq!(shapes[1], (tools(&["add"]), None));
    assert_eq!(
        shapes[2],
        (vec![], STEP.map(str::to_owned)),
        "a plain answer leads to STEP_RESULT"
    );
    assert_eq!(
        shapes[3],
        (tools(&["add"]), None),
        "a failed step result returns to ACT"
    );
    assert_eq!(adds.load(Ordering::SeqCst), 1);
    let rejected: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::StepResultRejected { reason, attempt, .. } => Some((reason, attempt)),
            _ => None,
        })
        .collect();
    assert_eq!(rejected, vec![("step_reported_failed".to_owned(), 1)]);
    assert_eq!(plan_json(&result)["plan"]["steps"][0]["attempts"], 2);
}

#[tokio::test]
async fn an_invalid_step_result_is_corrected_then_committed() {
    let model = ScriptedModel::new()
        .text(plan(&[("Think", &[])]))
        .text("not json at all")
        .text(step_ok("thought"))
        .text("done");
    let agent = Agent::builder(model.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("think").await;
    assert_eq!(result.error(), None);
    let requests = model.requests();
    // A step without tools goes straight to STEP_RESULT.
    assert_eq!(shape(&requests[1]), (vec![], STEP.map(str::to_owned)));
    assert_eq!(shape(&requests[2]), (vec![], STEP.map(str::to_owned)));
    assert!(request_text(&requests[2]).contains("could not be used"));
    assert_eq!(plan_json(&result)["plan"]["steps"][0]["result"], "thought");
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema, Debug, PartialEq)]
struct Answer {
    value: i64,
}

#[tokio::test]
async fn finalize_uses_the_public_output_schema_without_tools() {
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["add"])]))
        .tool_call("add", json!({"a": 2, "b": 2}))
        .text(step_ok("4"))
        .text(r#"{"value": 4}"#);
    let agent = Agent::builder(model.clone())
        .output::<Answer>()
        .tool(counted_add(Arc::default()))
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("2+2").await;
    assert_eq!(result.output(), Some(&Answer { value: 4 }));
    let last = model.requests().pop().unwrap();
    assert_eq!(shape(&last), (vec![], Some("Answer".into())));
}

#[tokio::test]
async fn a_separate_planner_model_plans() {
    let planner = ScriptedModel::new().named("planner").text(plan(&[("Reply", &[])]));
    let model = ScriptedModel::new().text(step_ok("hi")).text("hi");
    let agent = Agent::builder(model.clone())
        .decision_policy(strict(LlmPlanGenerator::new(planner.clone()).max_steps(2)))
        .build()
        .unwrap();
    let result = agent.run("say hi").await;
    assert_eq!(result.error(), None);
    assert_eq!(planner.requests().len(), 1);
    assert_eq!(shape(&planner.requests()[0]), (vec![], PLAN.map(str::to_owned)));
    assert_eq!(model.requests().len(), 2);
}

#[test]
fn strict_policy_with_finalization_disabled_is_rejected_at_build() {
    let err = Agent::builder(ScriptedModel::new())
        .finalization_mode(FinalizationMode::Disabled)
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .map_err(AgentError::from)
        .unwrap_err();
    assert!(matches!(err, AgentError::Configuration { ref message } if message.contains("finalization_mode")));
}

// ----- limits -----

#[tokio::test]
async fn max_steps_bounds_the_plan_with_one_correction() {
    let too_long = plan(&[("a", &[]), ("b", &[]), ("c", &[])]);
    let model = ScriptedModel::new().text(too_long.clone()).text(too_long);
    let agent = Agent::builder(model.clone())
        .limits(RunLimits::default().max_steps(2))
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(
        result.error(),
        Some(&AgentError::PlanFailed {
            cause: "plan_invalid".into(),
            step_id: None
        })
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(request_text(&requests[1]).contains("at most 2 are allowed"));
    assert_eq!(plan_json(&result)["failure"]["cause"], "plan_invalid");
}

#[tokio::test]
async fn a_plan_naming_an_unknown_tool_is_corrected() {
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["sum"])]))
        .text(plan(&[("Add", &["add"])]))
        .tool_call("add", json!({"a": 1, "b": 1}))
        .text(step_ok("2"))
        .text("2");
    let agent = Agent::builder(model.clone())
        .tool(counted_add(Arc::default()))
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("1+1").await;
    assert_eq!(result.error(), None);
    assert!(request_text(&model.requests()[1]).contains("unknown tool \\\"sum\\\""));
}

#[tokio::test]
async fn max_step_attempts_ends_the_run_and_fails_the_step() {
    let model = ScriptedModel::new()
        .text(plan(&[("Think", &[])]))
        .text("garbage")
        .text("more garbage");
    let agent = Agent::builder(model.clone())
        .limits(RunLimits::default().max_step_attempts(2))
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(
        result.error(),
        Some(&AgentError::PlanFailed {
            cause: "step_attempts_exhausted".into(),
            step_id: Some("s1".into())
        })
    );
    assert_eq!(plan_json(&result)["plan"]["steps"][0]["status"], "failed");
    assert_eq!(plan_json(&result)["failure"]["error_class"], "step_result");
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test]
async fn max_tool_calls_counts_calls_across_steps() {
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["add"]), ("Add more", &["add"])]))
        .tool_call("add", json!({"a": 1, "b": 1}))
        .text(step_ok("2"))
        .tool_calls([("add", json!({"a": 1, "b": 2})), ("add", json!({"a": 1, "b": 3}))]);
    let adds = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(model)
        .tool(counted_add(Arc::clone(&adds)))
        .limits(RunLimits::default().max_tool_calls(2))
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(result.error(), Some(&AgentError::MaxToolCallsExceeded { limit: 2 }));
    assert_eq!(adds.load(Ordering::SeqCst), 1);
    assert_eq!(plan_json(&result)["plan"]["steps"][0]["status"], "completed");
    assert_eq!(plan_json(&result)["plan"]["steps"][1]["status"], "failed");
    assert_eq!(plan_json(&result)["failure"]["cause"], "max_tool_calls");
}

#[tokio::test]
async fn max_turns_bounds_act_answers_that_call_tools() {
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["add"]), ("Add more", &["add"])]))
        .tool_call("add", json!({"a": 1, "b": 1}))
        .text(step_ok("2"));
    let agent = Agent::builder(model)
        .tool(counted_add(Arc::default()))
        .limits(RunLimits::default().max_turns(1))
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(result.error(), Some(&AgentError::MaxTurnsExceeded { limit: 1 }));
}

#[tokio::test]
async fn the_run_timeout_leaves_the_step_in_progress_and_resumable() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .text(plan(&[("Think", &[])]))
        .delayed_text(Duration::from_secs(5), step_ok("late"));
    let agent = Agent::builder(model)
        .checkpoint_store(store.clone())
        .limits(RunLimits::default().timeout(Some(Duration::from_millis(300))))
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert!(matches!(result.error(), Some(AgentError::Timeout { .. })));
    assert_eq!(plan_json(&result)["plan"]["steps"][0]["status"], "in_progress");
    assert!(result.plan().unwrap().failure.is_none());
    assert!(store.load(result.run_id()).await.unwrap().is_some());
}

// ----- tool failure recovery -----

fn repair_error() -> ToolError {
    ToolError::new(ToolErrorKind::Execution, "invalid_query_syntax")
        .with_message("The query syntax is invalid; correct the Tool arguments.")
        .with_recovery(RecoveryAction::RepairCall)
}

fn search_agent(
    model: &ScriptedModel,
    tool: FunctionTool<()>,
    recovery: ToolFailureRecoveryConfig,
    limits: RunLimits,
) -> Agent<()> {
    Agent::builder(model.clone())
        .tool(tool)
        .retry(fast_retry(2))
        .limits(limits)
        .decision_policy(strict(LlmPlanGenerator::agent_model()).tool_failure_recovery(recovery))
        .build()
        .unwrap()
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

// ----- leaks -----

const SECRET_MESSAGE: &str = "conn=postgres://admin:SECRET-IN-ERROR@db";
const SECRET_RESULT: &str = "SECRET-IN-RESULT-7731";
const SECRET_ARG: &str = "sk-SECRET-IN-ARGS-0042";

#[tokio::test]
async fn tool_errors_results_and_secret_arguments_do_not_leak() {
    let spec = ToolSpec::new(
        "lookup",
        "Look up a customer",
        json!({"type": "object", "properties": {"customer": {"type": "string"}, "api_key": {"type": "string"}}}),
    );
    let n = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&n);
    let tool = FunctionTool::<()>::new(spec, move |_ctx, args| {
        let c = Arc::clone(&c);
        async move {
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(ToolError::execution("db_error").with_message(SECRET_MESSAGE))
            } else {
                Ok(json!({"customer": args["customer"], "note": SECRET_RESULT}))
            }
        }
    });
    let model = ScriptedModel::new()
        .text(plan(&[("Look up", &["lookup"])]))
        .tool_call("lookup", json!({"customer": "c1", "api_key": SECRET_ARG}))
        // REPLAN after the failure
        .text(plan(&[("Look up again", &["lookup"])]))
        .tool_call("lookup", json!({"customer": "c1", "api_key": SECRET_ARG}))
        .text(step_ok("customer c1 exists"))
        .text("c1 exists");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .tool(tool)
        .event_sink(sink.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()).tool_trace_mode(ToolTraceMode::Arguments))
        .build()
        .unwrap();
    let result = agent.run("Does customer c1 exist?").await;
    assert_eq!(result.error(), None);
    // Model requests (type_only): never the error message.
    for r in model.requests() {
        assert!(!request_text(&r).contains("SECRET-IN-ERROR"));
    }
    // The result did reach the model (that is its job)…
    assert!(model.requests().iter().any(|r| request_text(r).contains(SECRET_RESULT)));
    // …but not the trace, the events or the metadata; secret arguments are masked.
    let trace = plan_json(&result)["tool_trace"].to_string();
    assert!(trace.contains("\"customer\":\"c1\""), "{trace}");
    let events = serde_json::to_string(&sink.events()).unwrap();
    let metadata = serde_json::to_string(result.report()).unwrap();
    for haystack in [&trace, &events, &metadata] {
        assert!(!haystack.contains("SECRET-IN-ERROR"));
        assert!(!haystack.contains(SECRET_RESULT));
        assert!(!haystack.contains(SECRET_ARG));
    }
}

#[tokio::test]
async fn a_failed_run_leaks_nothing_into_failure_metadata_or_the_error() {
    let tool = flaky(
        "search",
        9,
        ToolError::execution("db_error").with_message(SECRET_MESSAGE),
        Arc::default(),
    );
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x", "api_key": SECRET_ARG}));
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .tool(tool)
        .event_sink(sink.clone())
        .decision_policy(
            strict(LlmPlanGenerator::agent_model())
                .tool_failure_recovery(ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Fail)),
        )
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert!(result.error().is_some());
    let all = format!(
        "{} {} {}",
        serde_json::to_string(result.report()).unwrap(),
        serde_json::to_string(&sink.events()).unwrap(),
        serde_json::to_string(&result.error()).unwrap()
    );
    assert!(!all.contains("SECRET-IN-ERROR"));
    assert!(!all.contains(SECRET_ARG));
}

// ----- checkpoints and resume -----

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

// ----- streaming -----

fn streaming_agent(model: &ScriptedModel) -> Agent<()> {
    Agent::builder(model.clone())
        .tool(counted_add(Arc::default()))
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap()
}

fn streaming_script() -> ScriptedModel {
    ScriptedModel::new()
        .text_deltas([
            "{\"steps\": [{\"description\": \"Add\", ",
            "\"allowed_tools\": [\"add\"]}]}",
        ])
        .tool_call("add", json!({"a": 1, "b": 2}))
        .text_deltas(["{\"status\": \"completed\", ", "\"result\": \"internal draft\"}"])
        .text_deltas(["The answer ", "is 3."])
}

#[tokio::test]
async fn stream_shows_only_final_tokens_and_the_result() {
    let model = streaming_script();
    let mut stream = streaming_agent(&model).stream("1+2");
    let mut kinds = Vec::new();
    let mut text = String::new();
    let mut result = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::FinalDelta { text: t, .. }) => {
                kinds.push("final_delta");
                text.push_str(&t);
            }
            StreamItem::Event(e) => kinds.push(e.kind()),
            StreamItem::Completed(r) => result = Some(r),
            StreamItem::Failed(r) => panic!("failed: {:?}", r.error),
            StreamItem::Paused(p) => panic!("paused: {:?}", p.approvals),
        }
    }
    assert_eq!(kinds, vec!["run_started", "final_delta", "final_delta"]);
    assert_eq!(text, "The answer is 3.");
    assert_eq!(result.map(|r| r.output), Some("The answer is 3.".to_owned()));
}

#[tokio::test]
async fn stream_all_shows_plan_step_tool_and_step_delta_events() {
    let model = streaming_script();
    let mut stream = streaming_agent(&model).stream_all("1+2");
    let mut kinds = Vec::new();
    let mut step_text = String::new();
    while let Some(item) = stream.next().await {
        if let StreamItem::Event(e) = item {
            if let AgentEvent::StepModelDelta { step_id, text, .. } = &e
                && step_id == "s1"
            {
                step_text.push_str(text);
            }
            kinds.push(e.kind());
        }
    }
    for kind in [
        "plan_created",
        "step_started",
        "tool_call_started",
        "tool_call_finished",
        "step_model_delta",
        "step_committed",
        "plan_verified",
        "final_delta",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    assert!(!kinds.contains(&"model_delta"), "strict runs route deltas by stage");
    assert!(step_text.contains("internal draft"));
}

/// A strict run's plan report as JSON (plan, tool_trace, usage, failure, final_replayed).
fn plan_json<O>(outcome: &modu_core::RunOutcome<O>) -> serde_json::Value {
    serde_json::to_value(outcome.plan().expect("a strict run has a plan report")).expect("the plan report serializes")
}
