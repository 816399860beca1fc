//! Elicitation as an ask for input, against server-everything's `trigger-elicitation-request`:
//! the run pauses with the server's schema, a person answers (or declines), and the resumed
//! call's elicitation gets the answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use modu_core::{Agent, AgentError, InMemoryCheckpointStore, Role};
use modu_mcp::{McpConfig, McpConnector, McpToolProvider};
use modu_testing::ScriptedModel;
use serde_json::json;

const TOOL: &str = "everything__trigger-elicitation-request";

fn agent(script: &str, marker: &str, model: ScriptedModel) -> Agent {
    let config = McpConfig::new(vec![support::everything_stdio("everything", script, marker)]).unwrap();
    let connector = Arc::new(McpConnector::new(config).unwrap());
    Agent::<()>::builder(model)
        .tool_provider(McpToolProvider::new(connector))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap()
}

fn call() -> ScriptedModel {
    ScriptedModel::new()
        .tool_call("mcp_call_tool", json!({"tool_name": TOOL, "arguments": {}}))
        .text("thanks")
}

fn tool_text(messages: &[modu_core::Message]) -> String {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_pauses_the_run_and_the_answer_reaches_the_server_on_resume() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("elicit-answer");
    let model = call();
    let agent = agent(&script, &marker, model.clone());

    let paused = agent.run("fill in the form").await;
    assert!(paused.is_interrupted(), "{:?}", paused.error);
    let request = &paused.input_requests[0];
    assert_eq!(request.tool_name, TOOL);
    assert_eq!(request.prompt, "Please provide inputs for the following fields:");
    assert_eq!(request.metadata["mcp_server"], "everything");
    assert_eq!(request.schema["properties"]["name"]["type"], "string");
    assert_eq!(request.schema["required"], json!(["name"]));
    assert_eq!(model.requests().len(), 1, "the model waits with the run");

    // The answer is checked against the server's schema before it is recorded.
    let wrong = agent
        .answer(&paused.run_id, &request.call_id, json!({"check": true}))
        .await;
    assert!(matches!(wrong, Err(AgentError::InvalidInput { .. })), "{wrong:?}");
    agent
        .answer(
            &paused.run_id,
            &request.call_id,
            json!({"name": "Ada Lovelace", "check": true}),
        )
        .await
        .unwrap();
    let done = agent.resume(&paused.run_id, ()).await;
    assert_eq!(done.output.as_deref(), Some("thanks"), "{:?}", done.error);
    let seen = tool_text(&done.messages);
    assert!(seen.contains("User provided the requested information"), "{seen}");
    assert!(
        seen.contains("- Name: Ada Lovelace") && seen.contains("- Agreed to terms: true"),
        "{seen}"
    );
    let sent = tool_text(&model.requests()[1].messages);
    assert!(
        !sent.contains("cancelled"),
        "the model never sees the cancelled first call: {sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_elicitation_is_declined_to_the_server() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("elicit-decline");
    let agent = agent(&script, &marker, call());
    let paused = agent.run("fill in the form").await;
    assert!(paused.is_interrupted(), "{:?}", paused.error);
    let call_id = paused.input_requests[0].call_id.clone();
    agent.decline(&paused.run_id, &call_id, None).await.unwrap();
    let done = agent.resume(&paused.run_id, ()).await;
    assert!(done.is_ok(), "{:?}", done.error);
    let seen = tool_text(&done.messages);
    assert!(
        seen.contains("User declined to provide the requested information"),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_a_run_an_elicitation_is_declined() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("elicit-direct");
    let config = McpConfig::new(vec![support::everything_stdio("everything", &script, &marker)]).unwrap();
    let session = McpConnector::new(config).unwrap().open_session(None).await.unwrap();
    let out = session.call_tool(TOOL, json!({})).await.unwrap();
    assert!(out.to_string().contains("declined"), "{out}");
    session.close().await;
}
