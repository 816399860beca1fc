//! Elicitation as an ask for input, against server-everything's `trigger-elicitation-request`:
//! the run pauses with the server's schema, a person answers (or declines), and the resumed
//! call's elicitation gets the answer; or a live handler answers while the server waits, and
//! the schema's defaults fill what the answer leaves out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use modu_agent::Agent;
use modu_core::{AgentError, InMemoryCheckpointStore, Role};
use modu_mcp::{
    McpConfig, McpConnector, McpElicitation, McpElicitationAnswer, McpElicitationHandler, McpSelectionRequest,
    McpSessionOptions, McpToolProvider,
};
use modu_testing::ScriptedModel;
use serde_json::json;

const TOOL: &str = "everything__trigger-elicitation-request";

fn agent(script: &str, marker: &str, model: ScriptedModel) -> Agent {
    let config = McpConfig::new(vec![support::everything_stdio("everything", script, marker)]).unwrap();
    let connector = Arc::new(McpConnector::new(config).unwrap());
    Agent::builder(model)
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
    assert!(paused.is_paused(), "{:?}", paused.error());
    let request = &paused.inputs()[0];
    assert_eq!(request.tool_name, TOOL);
    assert_eq!(request.prompt, "Please provide inputs for the following fields:");
    assert_eq!(request.metadata["mcp_server"], "everything");
    assert_eq!(request.schema["properties"]["name"]["type"], "string");
    assert_eq!(request.schema["required"], json!(["name"]));
    assert_eq!(model.requests().len(), 1, "the model waits with the run");

    // The answer is checked against the server's schema before it is recorded.
    let wrong = agent
        .answer(paused.run_id(), &request.call_id, json!({"check": true}))
        .await;
    assert!(matches!(wrong, Err(AgentError::InvalidInput { .. })), "{wrong:?}");
    agent
        .answer(
            paused.run_id(),
            &request.call_id,
            json!({"name": "Ada Lovelace", "check": true}),
        )
        .await
        .unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(done.output().map(String::as_str), Some("thanks"), "{:?}", done.error());
    let seen = tool_text(done.messages());
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
    assert!(paused.is_paused(), "{:?}", paused.error());
    let call_id = paused.inputs()[0].call_id.clone();
    agent.decline(paused.run_id(), &call_id, None).await.unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    let seen = tool_text(done.messages());
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

/// Answers live with a partly filled form, and remembers what it was asked.
#[derive(Default)]
struct Person {
    asked: std::sync::Mutex<Vec<McpElicitation>>,
}

#[async_trait::async_trait]
impl McpElicitationHandler for Person {
    async fn elicit(&self, request: &McpElicitation) -> McpElicitationAnswer {
        self.asked.lock().unwrap().push(request.clone());
        let answer = json!({"name": "Ada Lovelace", "check": true, "integer": 7});
        McpElicitationAnswer::Accept(answer.as_object().cloned().unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_handler_answers_outside_a_run_and_the_schema_defaults_fill_the_rest() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("elicit-live");
    let config = McpConfig::new(vec![support::everything_stdio("everything", &script, &marker)]).unwrap();
    let person = Arc::new(Person::default());
    let options = McpSessionOptions::default().with_elicitation(Arc::clone(&person));
    let session = McpConnector::new(config)
        .unwrap()
        .open_with_options(&McpSelectionRequest::new(None), options)
        .await
        .unwrap();
    let out = session.call_tool(TOOL, json!({})).await.unwrap().to_string();
    session.close().await;

    let asked = person.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].server, "everything");
    assert_eq!(asked[0].message, "Please provide inputs for the following fields:");
    assert_eq!(asked[0].schema["required"], json!(["name"]));
    // The answer's own values, and the defaults of what it left out (number 3.14, the first
    // line), but not a default over a given value (integer: 7, not 42).
    assert!(out.contains("User provided the requested information"), "{out}");
    assert!(out.contains("- Name: Ada Lovelace"), "{out}");
    assert!(out.contains("- Favorite Integer: 7"), "{out}");
    assert!(!out.contains("- Favorite Integer: 42"), "{out}");
    assert!(out.contains("- Favorite Number: 3.14"), "{out}");
    assert!(out.contains("It was a dark and stormy night."), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_live_handler_a_run_does_not_pause_and_the_call_runs_once() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("elicit-live-run");
    let config = McpConfig::new(vec![support::everything_stdio("everything", &script, &marker)]).unwrap();
    let connector = Arc::new(McpConnector::new(config).unwrap());
    let person = Arc::new(Person::default());
    let model = call();
    let agent = Agent::builder(model.clone())
        .tool_provider(McpToolProvider::new(connector).with_elicitation(Arc::clone(&person)))
        .build()
        .unwrap();
    let done = agent.run("fill in the form").await;
    assert_eq!(done.output().map(String::as_str), Some("thanks"), "{:?}", done.error());
    assert!(done.inputs().is_empty());
    assert_eq!(
        person.asked.lock().unwrap().len(),
        1,
        "asked once: the call is not made again"
    );
    let seen = tool_text(done.messages());
    assert!(
        seen.contains("- Name: Ada Lovelace") && seen.contains("- Favorite Number: 3.14"),
        "{seen}"
    );
}

/// Answers live with a form that does not fit the schema: no `name` (required), a string for
/// the integer.
struct Careless;

#[async_trait::async_trait]
impl McpElicitationHandler for Careless {
    async fn elicit(&self, _request: &McpElicitation) -> McpElicitationAnswer {
        let answer = json!({"integer": "seven", "check": true});
        McpElicitationAnswer::Accept(answer.as_object().cloned().unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_answer_that_does_not_fit_the_schema_is_not_sent_as_accepted() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("elicit-misfit");
    let config = McpConfig::new(vec![support::everything_stdio("everything", &script, &marker)]).unwrap();
    let options = McpSessionOptions::default().with_elicitation(Careless);
    let session = McpConnector::new(config)
        .unwrap()
        .open_with_options(&McpSelectionRequest::new(None), options)
        .await
        .unwrap();
    let out = session
        .call_tool(TOOL, json!({}))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .to_string();
    session.close().await;
    // The server hears "cancel", as for a dismissed form, not a malformed "accept".
    assert!(out.contains("User cancelled the elicitation dialog"), "{out}");
    assert!(!out.contains("seven"), "{out}");
}
