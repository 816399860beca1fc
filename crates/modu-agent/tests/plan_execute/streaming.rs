//! Streaming a strict run: final tokens only, or every plan, step and tool event.

use std::sync::Arc;

use futures::StreamExt;
use modu_agent::plan::LlmPlanGenerator;
use modu_agent::{Agent, StreamItem};
use modu_core::AgentEvent;
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{counted_add, strict};

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

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Sum {
    sum: i64,
}

/// A structured final answer goes out as one `FinalDelta` once it parsed: the JSON itself, not
/// the model's thinking or the prose and fence it wrote around it.
#[tokio::test]
async fn a_structured_final_delta_is_the_json_without_thinking_or_prose() {
    for answer in [
        "<think>private reasoning</think>\n{\"sum\": 3}",
        "Here it is:\n```json\n{\"sum\": 3}\n```\nBye.",
        "```json\n{\"sum\": 3}\n```",
    ] {
        let model = ScriptedModel::new()
            .text(json!({"steps": [{"description": "Reply", "allowed_tools": []}]}).to_string())
            .text(json!({"status": "completed", "result": "3"}).to_string())
            .text(answer);
        let agent = Agent::builder(model)
            .output::<Sum>()
            .decision_policy(strict(LlmPlanGenerator::agent_model()))
            .build()
            .unwrap();
        let mut stream = agent.stream("1+2");
        let mut finals = Vec::new();
        let mut sum = None;
        while let Some(item) = stream.next().await {
            match item {
                StreamItem::Event(AgentEvent::FinalDelta { text, .. }) => finals.push(text),
                other => sum = other.into_outcome().and_then(|o| o.output().map(|s| s.sum)),
            }
        }
        assert_eq!(sum, Some(3), "{answer}");
        assert_eq!(finals, ["{\"sum\": 3}"], "{answer}");
    }
}
