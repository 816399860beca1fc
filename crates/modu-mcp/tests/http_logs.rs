//! modu-mcp's own log lines over streamable HTTP hold no secret of the server's URL (a
//! secret-named query parameter such as `?api_key=...`), even when a request fails at the
//! connection level and the HTTP client's error names the URL. Against an axum server on
//! 127.0.0.1 that dies mid-session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use modu_mcp::{McpConfig, McpConnector, McpServerConfig};
use serde_json::{Value, json};

mod support;

const SECRET: &str = "SEKRET4711";

/// A one-tool server whose `hang` never answers and which dies (its runtime shut down, every
/// connection cut) when it receives `notifications/cancelled`.
async fn mcp(kill: Arc<Mutex<Option<std::sync::mpsc::Sender<()>>>>, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap();
    let method = message["method"].as_str().unwrap_or("");
    if method == "notifications/cancelled" {
        if let Some(kill) = kill.lock().unwrap().take() {
            kill.send(()).unwrap();
        }
        futures::future::pending::<()>().await;
    }
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method {
        "initialize" => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "dies", "version": "1.0.0"}
        }),
        "tools/list" => json!({"tools": [{"name": "hang", "inputSchema": {"type": "object"}}]}),
        _ => futures::future::pending().await,
    };
    // A session id, so closing the session sends a DELETE.
    (
        [(header::CONTENT_TYPE, "application/json")],
        [(header::HeaderName::from_static("mcp-session-id"), "s1")],
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    )
        .into_response()
}

/// Starts the server on its own runtime and thread; returns its URL (with the secret).
fn start() -> String {
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (kill_tx, kill_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let kill = Arc::new(Mutex::new(Some(kill_tx)));
        runtime.spawn(async move {
            let app = Router::new().route(
                "/mcp",
                post(move |body: Bytes| mcp(Arc::clone(&kill), body)).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            url_tx.send(format!("http://{addr}/mcp?api_key={SECRET}")).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
        let _ = kill_rx.recv();
        runtime.shutdown_background();
    });
    url_rx.recv().unwrap()
}

/// Waits until every line of `wanted` was logged, or 5 s pass.
async fn logged(logs: &Arc<Mutex<String>>, wanted: &[&str]) {
    for _ in 0..100 {
        let seen = logs.lock().unwrap().clone();
        if wanted.iter().all(|w| seen.contains(w)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens a session on a server that dies on the `notifications/cancelled` of a dropped call,
/// waits for that failure to be logged, closes the session (its DELETE fails at the
/// connection, the server being gone) and waits for the lines `wanted` names; returns every
/// log line. The runtime has one thread, so the test's subscriber sees every task.
async fn a_session_on_a_dying_server(logs: &Arc<Mutex<String>>, wanted: &[&str]) -> String {
    let server = McpServerConfig::streamable_http("dies", start());
    let connector = McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap();
    let session = connector.open_session(None).await.unwrap();
    // The call's future is dropped: the session sends notifications/cancelled, and the
    // server dies on it.
    let call = tokio::time::timeout(Duration::from_millis(300), session.call_tool("dies__hang", json!({}))).await;
    assert!(call.is_err(), "{call:?}");
    logged(logs, &["sending notifications/cancelled failed"]).await;
    session.close().await;
    logged(logs, wanted).await;
    logs.lock().unwrap().clone()
}

/// A dropped call's `notifications/cancelled` fails at the connection (the server died): the
/// line modu-mcp logs about it names neither the URL's secret nor rmcp's types.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_cancellation_logs_no_secret_of_the_url() {
    let (logs, _guard) = support::capture_logs();
    let wanted = "sending notifications/cancelled failed";
    let logs = a_session_on_a_dying_server(&logs, &[wanted]).await;
    let own: Vec<&str> = logs
        .lines()
        .filter(|l| l.split(' ').nth(1).is_some_and(|t| t.starts_with("modu_mcp")))
        .collect();
    // The subscriber saw the failure (so the absence below means something).
    assert!(own.iter().any(|l| l.contains(wanted)), "{logs}");
    for line in own {
        assert!(!line.contains(SECRET), "the URL's secret logged: {line}");
        assert!(!line.contains("rmcp::"), "rmcp's types logged: {line}");
    }
}

/// rmcp logs a session's failed DELETE at close at `ERROR` with the HTTP client's error; the
/// README's advice (`rmcp=error` where servers may echo credentials) holds: no `ERROR` or
/// `WARN` line of any crate names the URL's secret.
#[tokio::test(flavor = "current_thread")]
async fn rmcp_logs_no_secret_of_the_url_at_error_or_warn() {
    let (logs, _guard) = support::capture_logs();
    let wanted = "fail to delete session";
    let logs = a_session_on_a_dying_server(&logs, &[wanted]).await;
    // rmcp reported the failed DELETE (so the absence below means something).
    assert!(
        logs.lines().any(|l| l.starts_with("ERROR rmcp") && l.contains(wanted)),
        "{logs}"
    );
    for line in logs.lines().filter(|l| l.starts_with("ERROR") || l.starts_with("WARN")) {
        assert!(!line.contains(SECRET), "the URL's secret logged: {line}");
    }
}
