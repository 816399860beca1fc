//! A2A 1.0 `SendMessage` with `configuration.returnImmediately`: the task as it stands, at
//! once, and the run goes on for the client to poll with `GetTask` (as a2a-sdk's
//! `ClientConfig(polling=True)` asks).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{post, serve};
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

const ERIN: &str = "erin-token";

/// An agent whose `get_weather` holds every call until `gate` has a permit.
async fn gated_server(gate: Arc<tokio::sync::Semaphore>) -> String {
    let tool = common::gated_weather_tool(Arc::default(), gate, false);
    let agent = modu_agent::Agent::builder(common::weather_model())
        .tool(tool)
        .build()
        .unwrap();
    let tokens = BearerTokens::new().token(ERIN, Principal::new("erin", ["weather"]));
    serve(ModuServer::new().agent("weather", agent).auth(tokens).router()).await
}

async fn rpc(base: &str, body: &Value) -> Value {
    let (status, text, _) = post(&format!("{base}/a2a/weather"), Some(ERIN), body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// `returnImmediately: true` answers with the working task before the run ends (its tool is
/// held); `GetTask` then reads it working, and completed once the tool is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_with_return_immediately_answers_before_the_run_ends() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let base = gated_server(Arc::clone(&gate)).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Weather?"}]},
        "configuration": {"returnImmediately": true},
    }});
    let answer = tokio::time::timeout(Duration::from_secs(10), rpc(&base, &body))
        .await
        .expect("returnImmediately: the answer waited for the run to end");
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{answer}");
    let task_id = task["id"].as_str().unwrap().to_owned();

    let get = json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}});
    assert_eq!(
        rpc(&base, &get).await["result"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    gate.add_permits(1);
    let mut state = Value::Null;
    for _ in 0..200 {
        state = rpc(&base, &get).await["result"]["status"]["state"].clone();
        if state == "TASK_STATE_COMPLETED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(state, "TASK_STATE_COMPLETED");
    let done = rpc(&base, &get).await;
    let text = done["result"]["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert!(text.contains("sunny"), "{done}");

    // Without it (or false), the answer is the ended task, as before.
    let mut blocking = body.clone();
    blocking["params"]["configuration"] = json!({"returnImmediately": false});
    gate.add_permits(1);
    let answer = rpc(&base, &blocking).await;
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
}
