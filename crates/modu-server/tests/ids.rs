//! Client-chosen ids no store can keep (over 1,024 bytes, or holding a NUL) on the run-control
//! routes, over real HTTP on 127.0.0.1: 400 naming the path parameter, before anything runs
//! (AG-UI's `threadId` / `runId` and A2A's `contextId` are checked on their own routes; the
//! OpenAI route takes no client-chosen id).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{serve, weather_model, weather_tool};
use modu_agent::Agent;
use modu_core::{InMemoryCheckpointStore, InMemoryConversationStore};
use modu_server::ModuServer;
use serde_json::{Value, json};

#[tokio::test]
async fn run_control_refuses_an_id_no_store_can_keep_naming_the_parameter() {
    let model = weather_model();
    let agent = Agent::builder(model.clone())
        .tool(weather_tool(Arc::default(), true))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .build()
        .unwrap();
    let base = serve(ModuServer::new().agent("approval", agent).router()).await;
    let client = reqwest::Client::new();
    let long = "a".repeat(1025);
    // A NUL, percent-encoded in the path.
    for id in [long.as_str(), "run%00id"] {
        let routes = [
            ("GET", format!("runs/{id}/approvals"), "run_id", json!(null)),
            ("POST", format!("runs/{id}/approve"), "run_id", json!({"callId": "c"})),
            ("POST", format!("runs/{id}/reject"), "run_id", json!({"callId": "c"})),
            ("GET", format!("runs/{id}/inputs"), "run_id", json!(null)),
            (
                "POST",
                format!("runs/{id}/answer"),
                "run_id",
                json!({"callId": "c", "value": 1}),
            ),
            ("POST", format!("runs/{id}/decline"), "run_id", json!({"callId": "c"})),
            ("POST", format!("runs/{id}/resume"), "run_id", json!({})),
            ("POST", format!("runs/{id}/cancel"), "run_id", json!(null)),
            ("GET", format!("runs/{id}/events"), "run_id", json!(null)),
            ("GET", format!("sessions/{id}/messages"), "session_id", json!(null)),
            ("GET", format!("sessions/{id}/approvals"), "session_id", json!(null)),
        ];
        for (method, route, param, body) in routes {
            let url = format!("{base}/agents/approval/{route}");
            let request = if method == "GET" {
                client.get(&url)
            } else if body.is_null() {
                client.post(&url)
            } else {
                client.post(&url).json(&body)
            };
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            let shown = &route[route.len().saturating_sub(40)..];
            assert_eq!(status, 400, "{shown}: {text}");
            let error = &serde_json::from_str::<Value>(&text).unwrap()["error"];
            assert_eq!(error["param"], param, "{shown}: {text}");
            assert_eq!(error["code"], "invalid_value", "{shown}: {text}");
            assert!(error["message"].as_str().unwrap().contains(param), "{shown}: {text}");
        }
    }
    assert!(model.requests().is_empty(), "nothing ran");
}
