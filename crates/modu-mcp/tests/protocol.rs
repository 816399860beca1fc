//! Protocol version negotiation: the client asks for 2025-11-25 (the latest revision with an
//! `initialize` handshake, not rmcp's draft), accepts an older revision the server prefers,
//! and refuses a revision it does not speak.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use modu_mcp::{McpConfig, McpConnector, McpError, McpServerConfig, PROTOCOL_VERSION};
use serde_json::{Value, json};

fn connector(server: McpServerConfig) -> McpConnector {
    McpConnector::new(McpConfig::new(vec![server.with_call_timeout(Duration::from_secs(15))]).unwrap()).unwrap()
}

/// The messages the misbehaving server recorded (`--record`).
fn recorded(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn record_file(test: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{}.jsonl", support::marker(test)))
}

#[test]
fn the_pinned_version_is_2025_11_25() {
    assert_eq!(PROTOCOL_VERSION.as_str(), "2025-11-25");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_asks_for_2025_11_25_and_the_session_reports_the_answer() {
    let Some(python) = support::python() else { return };
    let record = record_file("protocol-ask");
    let server = support::misbehaving_stdio("echoing", &python, &["--record", record.to_str().unwrap()]);
    let session = connector(server).open_session(None).await.unwrap();
    assert_eq!(session.protocol_version("echoing").as_deref(), Some("2025-11-25"));
    assert_eq!(session.protocol_version("absent"), None);
    let out = session.call_tool("echoing__ok", json!({"text": "hi"})).await.unwrap();
    assert_eq!(out, json!("ok: hi"));
    session.close().await;
    let messages = recorded(&record);
    let initialize = messages.iter().find(|m| m["method"] == "initialize").unwrap();
    assert_eq!(initialize["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(initialize["params"]["clientInfo"]["name"], "modu-mcp");
    // The lifecycle continues with `initialized`, not with the draft's per-request metadata.
    assert!(messages.iter().any(|m| m["method"] == "notifications/initialized"));
    let call = messages.iter().find(|m| m["method"] == "tools/call").unwrap();
    assert!(
        call["params"]
            .get("_meta")
            .and_then(|m| m.get("protocolVersion"))
            .is_none(),
        "{call}"
    );
    let _ = std::fs::remove_file(record);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_revision_the_server_prefers_is_accepted() {
    let Some(python) = support::python() else { return };
    for older in ["2025-06-18", "2025-03-26", "2024-11-05"] {
        let server = support::misbehaving_stdio("old", &python, &["--answer-version", older]);
        let session = connector(server).open_session(None).await.unwrap();
        assert_eq!(session.protocol_version("old").as_deref(), Some(older));
        let out = session.call_tool("old__ok", json!({"text": older})).await.unwrap();
        assert_eq!(out, json!(format!("ok: {older}")));
        session.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_the_client_does_not_speak_is_refused() {
    let Some(python) = support::python() else { return };
    for unknown in ["2026-07-28", "2099-01-01", "1.0"] {
        let server = support::misbehaving_stdio("new", &python, &["--answer-version", unknown]);
        let e = connector(server).open_session(None).await.unwrap_err();
        let McpError::Transport(transport) = &e else {
            panic!("{e}")
        };
        assert_eq!(transport.server, "new");
        assert!(
            transport.message.contains(unknown) && transport.message.contains("does not speak"),
            "{}",
            transport.message
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_negotiates_2025_11_25() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("protocol-everything");
    let session = connector(support::everything_stdio("everything", &script, &marker))
        .open_session(None)
        .await
        .unwrap();
    assert_eq!(session.protocol_version("everything").as_deref(), Some("2025-11-25"));
    session.close().await;
}

/// Waits (up to 5 s) until the recorded messages satisfy `done`.
async fn wait_recorded(path: &std::path::Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let messages = recorded(path);
        if done(&messages) || std::time::Instant::now() > deadline {
            return messages;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_call_is_cancelled_on_the_server_with_its_request_id() {
    let Some(python) = support::python() else { return };
    let record = record_file("protocol-cancel");
    let server = support::misbehaving_stdio("slowpoke", &python, &["--record", record.to_str().unwrap()]);
    let session = connector(server).open_session(None).await.unwrap();
    // The caller gives up (a run cancelled, a tool timeout in the run loop): the future drops.
    let call = session.call_tool("slowpoke__slow", json!({"seconds": 10}));
    assert!(tokio::time::timeout(Duration::from_millis(500), call).await.is_err());
    let cancelled = |m: &Value| m["method"] == "notifications/cancelled";
    let messages = wait_recorded(&record, |ms| ms.iter().any(cancelled)).await;
    let call = messages.iter().find(|m| m["method"] == "tools/call").unwrap();
    let notice = messages
        .iter()
        .find(|m| cancelled(m))
        .expect("no notifications/cancelled");
    assert_eq!(notice["params"]["requestId"], call["id"], "{notice}");
    // A call that is answered sends none.
    let out = session.call_tool("slowpoke__ok", json!({"text": "x"})).await.unwrap();
    assert_eq!(out, json!("ok: x"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(recorded(&record).iter().filter(|m| cancelled(m)).count(), 1);
    session.close().await;
    let _ = std::fs::remove_file(record);
}
