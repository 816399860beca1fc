//! The agents the `checkpoint` target resumes, shared with `make-seeds`, which writes real
//! checkpoints of them: a checkpoint only loads into an agent with the same fingerprint (tools,
//! output schema, policy), so both must build exactly these.

use std::sync::Arc;
use std::time::Duration;

use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
use modu_agent::{Agent, RetryConfig, RunLimits};
use modu_core::{ChatEvent, ChatRequest, FinishReason, FunctionTool, InMemoryCheckpointStore, ToolError, ToolSpec, Usage};
use modu_testing::ScriptedModel;
use serde_json::json;

/// `add`'s arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Ab {
    /// The first term.
    pub a: i64,
    /// The second term.
    pub b: i64,
}

/// `add` (needs approval) and `search` (a default in its schema).
pub fn tools() -> Vec<FunctionTool<()>> {
    let add = FunctionTool::typed("add", "Add two integers", |_ctx, x: Ab| async move {
        x.a.checked_add(x.b)
            .ok_or_else(|| ToolError::validation("overflow", "the sum does not fit"))
    })
    .map_spec(|s| s.needs_approval(true));
    let search = FunctionTool::new(
        ToolSpec::new(
            "search",
            "Search records",
            json!({
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 100}},
                "required": ["query"]
            }),
        )
        .idempotent(true)
        .repair_safe(true),
        |_ctx, args| async move { Ok(json!({"found": args})) },
    );
    vec![add, search]
}

/// Whether the agent uses the strict Plan-and-Execute policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The standard tool loop.
    Standard,
    /// Strict Plan-and-Execute (plans with the agent's model).
    Strict,
}

/// The agent, with `model` and checkpoints in `store`.
pub fn agent(policy: Policy, model: ScriptedModel, store: Arc<InMemoryCheckpointStore>) -> Agent<()> {
    let mut builder = Agent::builder(model)
        .fix_types()
        .name(match policy {
            Policy::Standard => "standard",
            Policy::Strict => "strict",
        })
        .instructions("You are tested.")
        .retry(RetryConfig::new(1).with_backoff(Duration::from_millis(1), Duration::from_millis(1)))
        .limits(RunLimits::default().timeout(Some(Duration::from_secs(5))))
        .checkpoint_store(store);
    for tool in tools() {
        builder = builder.tool(tool);
    }
    if policy == Policy::Strict {
        builder = builder.decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()));
    }
    builder.build().expect("the fuzz agents build")
}

fn text_events(text: String) -> Vec<ChatEvent> {
    vec![
        ChatEvent::TextDelta { text },
        ChatEvent::Usage {
            usage: Usage::new(3, 2),
        },
        ChatEvent::Finish {
            reason: FinishReason::Stop,
        },
    ]
}

/// A plan of these steps (description, allowed tools), as the model answers a PLAN request.
pub fn plan(steps: &[(&str, &[&str])]) -> String {
    json!({"steps": steps.iter().map(|(d, t)| json!({"description": d, "allowed_tools": t})).collect::<Vec<_>>()})
        .to_string()
}

/// A completed step result.
pub fn step_ok(result: &str) -> String {
    json!({"status": "completed", "result": result}).to_string()
}

/// A model that ends every run as soon as it can: a one-step plan without tools for a PLAN
/// request, a completed step for a STEP_RESULT request, else a text answer. Never runs out.
pub fn finishing_model() -> ScriptedModel {
    ScriptedModel::new()
        .respond(|request: &ChatRequest| {
            let answer = match request.response_format.as_ref().map(|f| f.name.as_str()) {
                Some("PlanDraft") => plan(&[("Answer", &[])]),
                Some("StepResult") => step_ok("done"),
                _ => "done".to_owned(),
            };
            text_events(answer)
        })
        .cycle()
        .without_recording()
}
