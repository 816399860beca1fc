//! PLAN → ACT → STEP_RESULT → COMMIT → VERIFY → FINALIZE: each transition and its request shape.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::plan::LlmPlanGenerator;
use modu_agent::{Agent, FinalizationMode};
use modu_core::{AgentError, AgentEvent, CollectingEventSink, Role};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{
    PLAN, STEP, counted_add, double, plan, plan_json, request_text, shape, step_failed, step_ok, strict, tools,
};

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

/// A small model's plan and step result with more around the JSON (prose around a fenced
/// block, thinking before it) are used as they are: no corrective request, no `plan_invalid`.
#[tokio::test]
async fn a_plan_and_step_result_amid_prose_or_after_thinking_are_used() {
    let model = ScriptedModel::new()
        .text(format!(
            "Sure! Here is the plan:\n```json\n{}\n```\nLet me know.",
            plan(&[("Reply", &[])])
        ))
        .text(format!("<think>The step is done.</think>\n{}", step_ok("hi")))
        .text("hello");
    let agent = Agent::builder(model.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("hi").await;
    assert_eq!(result.error(), None);
    assert_eq!(result.output().map(String::as_str), Some("hello"));
    assert_eq!(
        model.requests().len(),
        3,
        "one request each for PLAN, STEP_RESULT, FINALIZE"
    );
    assert_eq!(plan_json(&result)["plan"]["steps"][0]["result"], "hi");
}
