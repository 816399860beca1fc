//! A run paused for a person's input (a tool's `ask_user`), not an approval, over real HTTP on
//! 127.0.0.1: what the OpenAI route, AG-UI and A2A say, and answering it on run control.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{post, serve, sse_json};
use modu_agent::Agent;
use modu_core::{
    ChatEvent, ChatRequest, FinishReason, FunctionTool, InMemoryCheckpointStore, InMemoryConversationStore, Role,
    ToolSpec,
};
use modu_server::{BearerTokens, ModuServer, Principal};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

const ANA: &str = "ana-token";
const BO: &str = "bo-token";

/// A model that calls `ask_city` for a user message and answers with the tool's result.
fn asking_model() -> ScriptedModel {
    ScriptedModel::new()
        .respond(|request: &ChatRequest| match request.messages.last() {
            Some(result) if result.role == Role::Tool => vec![
                ChatEvent::TextDelta {
                    text: format!("Forecast: {}", result.text()),
                },
                ChatEvent::Finish {
                    reason: FinishReason::Stop,
                },
            ],
            _ => vec![
                ChatEvent::ToolCallDelta {
                    index: 0,
                    id: Some("call_ask".into()),
                    name: Some("ask_city".into()),
                    arguments: "{}".into(),
                },
                ChatEvent::Finish {
                    reason: FinishReason::ToolCalls,
                },
            ],
        })
        .cycle()
}

/// `ask_city` asks the person for a city (a non-empty string) and reports its weather.
fn asking_agent() -> Agent {
    let spec = ToolSpec::new("ask_city", "Asks which city", json!({"type": "object"}));
    let tool = FunctionTool::new(spec, |ctx: modu_core::RunContext<()>, _args: Value| {
        let city = ctx.ask_user("Which city?", json!({"type": "string", "minLength": 1}));
        async move { Ok(json!(format!("sunny in {}", city?.as_str().unwrap_or_default()))) }
    });
    Agent::builder(asking_model())
        .name("asker")
        .tool(tool)
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .build()
        .unwrap()
}

async fn server() -> String {
    let tokens = BearerTokens::new()
        .token(ANA, Principal::new("ana", Vec::<String>::new()))
        .token(BO, Principal::new("bo", Vec::<String>::new()));
    serve(ModuServer::new().agent("asker", asking_agent()).auth(tokens).router()).await
}

async fn get(url: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new().get(url).bearer_auth(token).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

fn chat(stream: bool) -> Value {
    json!({"model": "asker", "messages": [{"role": "user", "content": "Weather?"}], "stream": stream})
}

#[tokio::test]
async fn the_openai_route_says_input_required_and_run_control_answers_the_ask() {
    let base = server().await;
    // Not streamed: 409 input_required, naming the run (not approval_required).
    let (status, text, headers) = post(&format!("{base}/v1/chat/completions"), Some(ANA), &chat(false)).await;
    assert_eq!(status, 409, "{text}");
    assert_eq!(headers["x-should-retry"], "false");
    let error = &serde_json::from_str::<Value>(&text).unwrap()["error"];
    assert_eq!(error["code"], "input_required", "{text}");
    assert!(error["message"].as_str().unwrap().contains("/inputs"), "{text}");
    let run_id = error["run_id"].as_str().unwrap().to_owned();
    // Streamed: the error chunk says the same.
    let (status, text, _) = post(&format!("{base}/v1/chat/completions"), Some(ANA), &chat(true)).await;
    assert_eq!(status, 200);
    let last = sse_json(&text).pop().unwrap();
    assert_eq!(last["error"]["code"], "input_required", "{text}");

    let runs = format!("{base}/agents/asker/runs/{run_id}");
    let (status, listed) = get(&format!("{runs}/inputs"), ANA).await;
    assert_eq!(status, 200, "{listed}");
    let asks = listed["inputs"].as_array().unwrap();
    assert_eq!(asks.len(), 1, "{listed}");
    assert_eq!(asks[0]["callId"], "call_ask");
    assert_eq!(asks[0]["tool"], "ask_city");
    assert_eq!(asks[0]["prompt"], "Which city?");
    assert_eq!(asks[0]["schema"]["type"], "string");
    assert_eq!(
        get(&format!("{runs}/approvals"), ANA).await.1["inputs"],
        listed["inputs"]
    );
    // Another user's run does not exist for them.
    assert_eq!(get(&format!("{runs}/inputs"), BO).await.0, 404);
    let answer = |value: Value| json!({"callId": "call_ask", "value": value});
    assert_eq!(
        post(&format!("{runs}/answer"), Some(BO), &answer(json!("Oslo")))
            .await
            .0,
        404
    );

    // A value that does not fit the schema: 400, nothing recorded.
    let (status, text, _) = post(&format!("{runs}/answer"), Some(ANA), &answer(json!(42))).await;
    assert_eq!(status, 400, "{text}");
    let error = &serde_json::from_str::<Value>(&text).unwrap()["error"];
    assert_eq!(error["param"], "value", "{text}");
    assert_eq!(error["code"], "invalid_value", "{text}");
    assert_eq!(
        post(&format!("{runs}/answer"), Some(ANA), &answer(json!(""))).await.0,
        400
    );
    assert_eq!(
        post(&format!("{runs}/answer"), Some(ANA), &json!({"callId": "call_ask"}))
            .await
            .0,
        400,
        "an answer needs a value"
    );
    let unknown = json!({"callId": "nope", "value": "Oslo"});
    assert_eq!(post(&format!("{runs}/answer"), Some(ANA), &unknown).await.0, 404);
    assert_eq!(get(&format!("{runs}/inputs"), ANA).await.1["inputs"], listed["inputs"]);

    let (status, text, _) = post(&format!("{runs}/answer"), Some(ANA), &answer(json!("Oslo"))).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        get(&format!("{runs}/inputs"), ANA).await.1["inputs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Answered once: a second answer is refused.
    assert_eq!(
        post(&format!("{runs}/answer"), Some(ANA), &answer(json!("Rome")))
            .await
            .0,
        404
    );
    let (status, text, _) = post(&format!("{runs}/resume"), Some(ANA), &json!({})).await;
    assert_eq!(status, 200, "{text}");
    let done: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(done["status"], "completed", "{text}");
    assert_eq!(done["text"], "Forecast: sunny in Oslo", "{text}");
}

#[tokio::test]
async fn a_declined_ask_resumes_with_the_refusal_and_a_resume_that_still_waits_says_so() {
    let base = server().await;
    let (_, text, _) = post(&format!("{base}/v1/chat/completions"), Some(ANA), &chat(false)).await;
    let run_id = serde_json::from_str::<Value>(&text).unwrap()["error"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let runs = format!("{base}/agents/asker/runs/{run_id}");
    // Resumed unanswered, it pauses again with the same ask.
    let (status, text, _) = post(&format!("{runs}/resume"), Some(ANA), &json!({})).await;
    assert_eq!(status, 200, "{text}");
    let paused: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(paused["status"], "paused", "{text}");
    assert_eq!(paused["inputs"][0]["callId"], "call_ask", "{text}");
    let decline = json!({"callId": "call_ask", "message": "no city today"});
    assert_eq!(post(&format!("{runs}/decline"), Some(ANA), &decline).await.0, 200);
    let (status, text, _) = post(&format!("{runs}/resume"), Some(ANA), &json!({})).await;
    assert_eq!(status, 200, "{text}");
    let done: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(done["status"], "completed", "{text}");
    assert!(done["text"].as_str().unwrap().contains("no city today"), "{text}");
}

#[tokio::test]
async fn agui_and_a2a_say_the_run_waits_for_input_not_approval() {
    let base = server().await;
    let input = json!({"threadId": "t-ask", "runId": "r-ask", "state": {}, "tools": [], "context": [],
                       "forwardedProps": {}, "messages": [{"id": "u1", "role": "user", "content": "Weather?"}]});
    let (status, text, _) = post(&format!("{base}/agui/asker"), Some(ANA), &input).await;
    assert_eq!(status, 200);
    let last = sse_json(&text).pop().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{text}");
    assert_eq!(last["code"], "input_required", "{text}");
    assert!(last["message"].as_str().unwrap().contains("input"), "{text}");
    assert_eq!(get(&format!("{base}/agents/asker/runs/r-ask/inputs"), ANA).await.0, 200);

    let send = |parts: Value, task: Option<&str>| {
        let mut message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": parts});
        if let Some(task) = task {
            message["taskId"] = json!(task);
        }
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
    };
    let (_, text, _) = post(
        &format!("{base}/a2a/asker"),
        Some(ANA),
        &send(json!([{"text": "Weather?"}]), None),
    )
    .await;
    let task = &serde_json::from_str::<Value>(&text).unwrap()["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{text}");
    let parts = &task["status"]["message"]["parts"];
    let wording = parts[0]["text"].as_str().unwrap();
    assert!(wording.contains("Which city?") && !wording.contains("approv"), "{text}");
    assert_eq!(parts[1]["data"]["inputs"][0]["callId"], "call_ask", "{text}");
    // An approval on it is refused, and says what to do.
    let task_id = task["id"].as_str().unwrap();
    let (_, text, _) = post(
        &format!("{base}/a2a/asker"),
        Some(ANA),
        &send(json!([{"text": "approve"}]), Some(task_id)),
    )
    .await;
    let error = &serde_json::from_str::<Value>(&text).unwrap()["error"];
    assert_eq!(error["code"], -32602, "{text}");
    assert!(error["message"].as_str().unwrap().contains("/answer"), "{text}");
}
