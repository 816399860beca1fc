//! Session ownership: a session (AG-UI `threadId`, A2A `contextId`) belongs to the principal
//! that first used it; anyone else cannot read its history, list it, or continue it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{post, serve, sse_json, weather_model, weather_tool};
use modu_agent::Agent;
use modu_core::InMemoryConversationStore;
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

const ERIN: &str = "erin-token";
const MALLORY: &str = "mallory-token";

async fn server(runs: Arc<AtomicUsize>) -> String {
    let agent = Agent::builder(weather_model())
        .tool(weather_tool(runs, false))
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .build()
        .unwrap();
    let tokens = BearerTokens::new()
        .token(ERIN, Principal::new("erin", ["weather"]))
        .token(MALLORY, Principal::new("mallory", ["weather"]));
    serve(ModuServer::new().agent("weather", agent).auth(tokens).router()).await
}

fn input(thread: &str, run: &str) -> Value {
    json!({"threadId": thread, "runId": run, "messages": [{"id": "u1", "role": "user", "content": "Weather?"}],
           "tools": [], "context": [], "forwardedProps": {}})
}

async fn get(url: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new().get(url).bearer_auth(token).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn send(context: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m1", "role": "ROLE_USER", "contextId": context, "parts": [{"text": "Weather?"}]}}})
}

#[tokio::test]
async fn a_session_is_its_first_users_only() {
    let runs = Arc::new(AtomicUsize::new(0));
    let base = server(Arc::clone(&runs)).await;
    let agui = format!("{base}/agui/weather");
    let (status, body, _) = post(&agui, Some(ERIN), &input("t1", "r1")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sse_json(&body).last().unwrap()["type"], "RUN_FINISHED");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // History: the owner reads it; anyone else gets 404, as for a session that does not exist.
    let history = format!("{base}/agents/weather/sessions/t1/messages");
    let (status, mine) = get(&history, ERIN).await;
    assert_eq!(status, 200);
    assert_eq!(mine["messages"].as_array().unwrap().len(), 4);
    let (status, theirs) = get(&history, MALLORY).await;
    assert_eq!(status, 404);
    assert_eq!(
        theirs,
        get(&format!("{base}/agents/weather/sessions/nope/messages"), MALLORY)
            .await
            .1
    );
    assert_eq!(
        get(&format!("{base}/agents/weather/sessions/t1/approvals"), MALLORY)
            .await
            .0,
        404
    );

    // Continuing it as someone else is refused; nothing runs, nothing is appended.
    let (status, _, _) = post(&agui, Some(MALLORY), &input("t1", "r2")).await;
    assert_eq!(status, 404);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(get(&history, ERIN).await.1["messages"].as_array().unwrap().len(), 4);
    // The owner continues it.
    let (status, _, _) = post(&agui, Some(ERIN), &input("t1", "r3")).await;
    assert_eq!(status, 200);
    assert_eq!(get(&history, ERIN).await.1["messages"].as_array().unwrap().len(), 8);

    // The session list is each caller's own.
    let (_, listed) = get(&format!("{base}/agents/weather/sessions"), ERIN).await;
    assert_eq!(listed["sessions"][0]["sessionId"], "t1");
    let (_, listed) = get(&format!("{base}/agents/weather/sessions"), MALLORY).await;
    assert_eq!(listed["sessions"], json!([]));

    // A2A contexts are sessions too, in the same namespace.
    let a2a = format!("{base}/a2a/weather");
    let (_, body, _) = post(&a2a, Some(MALLORY), &send("t1")).await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert!(body["error"].is_object(), "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let (_, body, _) = post(&a2a, Some(MALLORY), &send("c1")).await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
    let (_, body, _) = post(&a2a, Some(ERIN), &send("c1")).await;
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_object());
    assert_eq!(
        get(&format!("{base}/agents/weather/sessions/c1/messages"), ERIN)
            .await
            .0,
        404
    );
    assert_eq!(
        get(&format!("{base}/agents/weather/sessions/c1/messages"), MALLORY)
            .await
            .0,
        200
    );
    let (_, body, _) = post(&a2a, Some(ERIN), &send("t1")).await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
}
