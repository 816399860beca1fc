//! The limits of a strict run: steps, step attempts, tool calls, turns and the run timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modu_agent::plan::LlmPlanGenerator;
use modu_agent::{Agent, RunLimits};
use modu_core::{AgentError, CheckpointStore, InMemoryCheckpointStore};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{counted_add, plan, plan_json, request_text, step_ok, strict};

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
    // The report says why the plan could not be used.
    assert_eq!(plan_json(&result)["failure"]["error_class"], "plan");
    assert_eq!(plan_json(&result)["failure"]["reason"], "too_many_steps");
}

/// A plan that cannot be used says why in the report's failure; and when it was a revision
/// after a tool failure, the failure keeps that tool failure (step, tool, call, error) and the
/// error names the step, instead of losing them to a bare `plan_invalid`.
#[tokio::test]
async fn an_unusable_plan_says_why_and_a_failed_revision_keeps_the_tool_failure() {
    for (answer, reason) in [
        ("not a plan".to_owned(), "invalid_json"),
        (
            json!({"steps": [{"id": 1, "description": "a", "allowed_tools": []}]}).to_string(),
            "schema_mismatch",
        ),
        (json!({"steps": []}).to_string(), "no_steps"),
        (plan(&[("  ", &[])]), "empty_description"),
        (plan(&[("Add", &["sum"])]), "unknown_tool"),
    ] {
        let model = ScriptedModel::new().text(answer.clone()).text(answer);
        let agent = Agent::builder(model)
            .decision_policy(strict(LlmPlanGenerator::agent_model()))
            .build()
            .unwrap();
        let result = agent.run("go").await;
        assert_eq!(plan_json(&result)["failure"]["reason"], reason);
    }

    let tool = crate::support::flaky(
        "search",
        9,
        modu_core::ToolError::execution("backend_down"),
        Arc::default(),
    );
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x"}))
        // REPLAN, twice unusable
        .text("no plan")
        .text("still no plan");
    let agent = Agent::builder(model)
        .tool(tool)
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(
        result.error(),
        Some(&AgentError::PlanFailed {
            cause: "plan_invalid".into(),
            step_id: Some("s1".into())
        })
    );
    let failure = &plan_json(&result)["failure"];
    assert_eq!(failure["cause"], "plan_invalid");
    assert_eq!(failure["step_id"], "s1");
    assert_eq!(failure["tool_name"], "search");
    assert_eq!(failure["reason"], "backend_down");
    assert!(failure["call_id"].is_string(), "{failure}");
    assert_eq!(plan_json(&result)["plan"]["steps"][0]["status"], "failed");
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

/// A planner that runs away (a small model writing thousands of tokens of plan) stops at the
/// output limit: its cut plan is not sent back in the corrective request, which asks for a
/// shorter plan instead; a second cut plan fails the run with the reason `answer_cut`.
#[tokio::test]
async fn a_plan_cut_at_the_output_limit_is_not_repeated_in_its_correction() {
    use modu_core::{ChatEvent, ChatRequest, FinishReason};
    let runaway = format!(
        r#"{{"steps": [{{"description": "{}"#,
        "First greet the user warmly and then ".repeat(200)
    );
    let cut = |text: String| {
        move |_: &ChatRequest| {
            vec![
                ChatEvent::TextDelta { text: text.clone() },
                ChatEvent::Finish {
                    reason: FinishReason::Length,
                },
            ]
        }
    };
    let model = ScriptedModel::new()
        .respond(cut(runaway.clone()))
        .text(plan(&[("Say hello", &[])]))
        .text(step_ok("said hello"))
        .text("Hello!");
    let agent = Agent::builder(model.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("Say hello.").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("Hello!"),
        "{:?}",
        result.error()
    );
    let requests = model.requests();
    let correction = request_text(&requests[1]);
    assert!(!correction.contains("greet the user warmly"), "{correction}");
    assert!(correction.contains("cut off at the output limit"), "{correction}");
    assert!(
        correction.len() < runaway.len(),
        "the correction ({} bytes) is shorter than the cut plan ({} bytes)",
        correction.len(),
        runaway.len()
    );

    let model = ScriptedModel::new().respond(cut(runaway.clone())).respond(cut(runaway));
    let agent = Agent::builder(model)
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("Say hello.").await;
    assert_eq!(plan_json(&result)["failure"]["cause"], "plan_invalid");
    assert_eq!(plan_json(&result)["failure"]["reason"], "answer_cut");
}
