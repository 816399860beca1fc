//! Helpers shared by the Plan-and-Execute tests: scripted plans and step results, request
//! shapes, counting and flaky tools, the strict policy and the plan report.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy, ToolFailureRecoveryConfig};
use modu_agent::{Agent, RetryConfig, RunLimits};
use modu_core::{ChatRequest, FunctionTool, ToolError, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

pub(crate) fn plan(steps: &[(&str, &[&str])]) -> String {
    json!({"steps": steps.iter().map(|(d, t)| json!({"description": d, "allowed_tools": t})).collect::<Vec<_>>()})
        .to_string()
}

pub(crate) fn step_ok(result: &str) -> String {
    json!({"status": "completed", "result": result}).to_string()
}

pub(crate) fn step_failed(result: &str) -> String {
    json!({"status": "failed", "result": result}).to_string()
}

/// (tool names offered, response format name) of a request.
pub(crate) fn shape(r: &ChatRequest) -> (Vec<String>, Option<String>) {
    (
        r.tools.iter().map(|t| t.name.clone()).collect(),
        r.response_format.as_ref().map(|f| f.name.clone()),
    )
}

pub(crate) fn tools(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

pub(crate) const PLAN: Option<&str> = Some("PlanDraft");

pub(crate) const STEP: Option<&str> = Some("StepResult");

pub(crate) fn request_text(r: &ChatRequest) -> String {
    serde_json::to_string(&r.messages).unwrap()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct Ab {
    a: i64,
    b: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct X {
    pub(crate) x: i64,
}

pub(crate) fn counted_add(count: Arc<AtomicUsize>) -> FunctionTool<()> {
    FunctionTool::typed("add", "Add two integers", move |_ctx, a: Ab| {
        let count = Arc::clone(&count);
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            Ok(a.a + a.b)
        }
    })
}

pub(crate) fn double() -> FunctionTool<()> {
    FunctionTool::typed("double", "Double an integer", |_ctx, a: X| async move { Ok(a.x * 2) })
}

/// A tool whose first `failures` calls fail with `error`, then succeed with `"ok"`.
pub(crate) fn flaky(name: &str, failures: usize, error: ToolError, count: Arc<AtomicUsize>) -> FunctionTool<()> {
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

pub(crate) fn strict(generator: LlmPlanGenerator) -> PlanAndExecutePolicy {
    PlanAndExecutePolicy::new(generator)
}

pub(crate) fn fast_retry(attempts: u32) -> RetryConfig {
    RetryConfig::new(attempts).with_backoff(Duration::from_millis(1), Duration::from_millis(2))
}

pub(crate) fn search_agent(
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

pub(crate) const SECRET_MESSAGE: &str = "conn=postgres://admin:SECRET-IN-ERROR@db";
pub(crate) const SECRET_RESULT: &str = "SECRET-IN-RESULT-7731";
pub(crate) const SECRET_ARG: &str = "sk-SECRET-IN-ARGS-0042";

/// A strict run's plan report as JSON (plan, tool_trace, usage, failure, final_replayed).
pub(crate) fn plan_json<O>(outcome: &modu_core::RunOutcome<O>) -> serde_json::Value {
    serde_json::to_value(outcome.plan().expect("a strict run has a plan report")).expect("the plan report serializes")
}
