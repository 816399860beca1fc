//! MCP resources as a run's context ([`McpResourceContext`]) against server-everything: read
//! once per run, in every request's instructions; a resource that cannot be read ends the run.
//! Resources over the result cap against a minimal streamable-HTTP server (axum): each text
//! is cut with the marker, blobs are named, never included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use modu_agent::Agent;
use modu_core::{AgentError, Role};
use modu_mcp::{McpConfig, McpConnector, McpResourceContext, McpServerConfig};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

fn connector(script: &str, marker: &str) -> Arc<McpConnector> {
    let config = McpConfig::new(vec![support::everything_stdio("everything", script, marker)]).unwrap();
    Arc::new(McpConnector::new(config).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_in_every_requests_instructions() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("resource-context");
    let model = ScriptedModel::new().tool_call("noop", json!({})).text("answered");
    let noop = modu_core::FunctionTool::<()>::new(
        modu_core::ToolSpec::new("noop", "Does nothing", json!({"type": "object"})),
        |_ctx, _args: serde_json::Value| async { Ok(json!("ok")) },
    );
    let context = McpResourceContext::new(connector(&script, &marker))
        .resource("everything", "demo://resource/dynamic/text/5")
        .resource("everything", "demo://resource/dynamic/text/7");
    let agent: Agent = Agent::builder(model.clone())
        .instructions("Be brief.")
        .tool(noop)
        .context_provider(context)
        .build()
        .unwrap();
    let result = agent.run("What do the resources say?").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("answered"),
        "{:?}",
        result.error()
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let system = &request.messages[0];
        assert_eq!(system.role, Role::System);
        let text = system.text();
        assert!(text.starts_with("Be brief."), "{text}");
        let five = text.find("MCP resource demo://resource/dynamic/text/5 (server everything):\nResource 5:");
        let seven = text.find("MCP resource demo://resource/dynamic/text/7 (server everything):\nResource 7:");
        assert!(five.is_some() && seven.is_some() && five < seven, "{text}");
    }
    // The servers were opened for the reading and closed again.
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_that_cannot_be_read_ends_the_run_naming_it() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("resource-context-missing");
    let model = ScriptedModel::new().text("never asked");
    let context =
        McpResourceContext::new(connector(&script, &marker)).resource("everything", "demo://no/such/resource");
    let agent: Agent = Agent::builder(model.clone()).context_provider(context).build().unwrap();
    let result = agent.run("Go.").await;
    match &result.error() {
        Some(AgentError::ContextProvider { provider, message }) => {
            assert_eq!(provider, "mcp_resources");
            assert!(message.contains("demo://no/such/resource"), "{message}");
        }
        other => panic!("not a context provider error: {other:?}"),
    }
    assert!(
        model.requests().is_empty(),
        "the model was not asked without its context"
    );

    // A server that is not configured is named too.
    let context = McpResourceContext::new(connector(&script, &marker)).resource("nowhere", "a://b");
    let agent: Agent = Agent::builder(ScriptedModel::new().text("x"))
        .context_provider(context)
        .build()
        .unwrap();
    let result = agent.run("Go.").await;
    assert!(
        result
            .error()
            .as_ref()
            .is_some_and(|e| e.to_string().contains("\"nowhere\"")),
        "{:?}",
        result.error()
    );
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

/// A streamable-HTTP server with two large resources: `big://text` (300 KB of text) and
/// `big://bin` (a 307,200-byte blob).
async fn large_resources(body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap();
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match message["method"].as_str().unwrap_or("") {
        "initialize" => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"resources": {}},
            "serverInfo": {"name": "large", "version": "1.0.0"}
        }),
        "tools/list" => json!({"tools": []}),
        "resources/read" => {
            let uri = message["params"]["uri"].as_str().unwrap();
            let content = if uri == "big://bin" {
                // Base64 of 307,200 bytes.
                json!({"uri": uri, "mimeType": "application/octet-stream", "blob": "AAEC".repeat(102_400)})
            } else {
                json!({"uri": uri, "mimeType": "text/plain", "text": "A".repeat(300_000)})
            };
            json!({"contents": [content]})
        }
        _ => json!({}),
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    )
        .into_response()
}

#[tokio::test]
async fn resources_over_the_cap_are_cut_per_text_and_blobs_are_named() {
    let app = Router::new().route(
        "/mcp",
        post(large_resources).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let server = McpServerConfig::streamable_http("large", url).with_max_result_bytes(1_000);
    let connector = Arc::new(McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap());
    let context = McpResourceContext::new(connector)
        .resource("large", "big://text")
        .resource("large", "big://bin");
    let model = ScriptedModel::new().text("answered");
    let agent: Agent = Agent::builder(model.clone()).context_provider(context).build().unwrap();
    let result = agent.run("Go.").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("answered"),
        "{:?}",
        result.error()
    );
    let system = model.requests()[0].messages[0].text();
    let text_block = format!(
        "MCP resource big://text (server large):\n{}\n…[truncated: 1000 of 300000 bytes shown]",
        "A".repeat(1_000)
    );
    assert!(system.contains(&text_block), "{}", &system[..system.len().min(400)]);
    assert!(
        system.contains(
            "MCP resource big://bin (server large):\n[binary content, application/octet-stream, 307200 bytes: not included]"
        ),
        "{}",
        &system[..system.len().min(400)]
    );
    assert!(!system.contains("AAEC"), "the blob's base64 is in the instructions");
    assert!(
        !system.contains("\"contents\""),
        "a JSON envelope is in the instructions"
    );
    assert!(system.len() < 2_000, "{} bytes", system.len());
}
