//! Against a Python MCPServer (PyPI `mcp` 2.x, formerly FastMCP) written for these tests:
//! structuredContent, text only, a wrapped plain value, isError, raising, and a call outliving
//! its timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use modu_core::ToolErrorKind;
use modu_mcp::{InvocationFailure, McpConfig, McpConnector, McpError, McpServerConfig, McpSession};
use serde_json::json;

async fn exercise(session: &McpSession, s: &str) {
    let name = |t: &str| format!("{s}__{t}");
    // structuredContent as is.
    let out = session
        .call_tool(&name("weather_forecast"), json!({"city": "Seoul", "days": 2}))
        .await
        .unwrap();
    assert_eq!(out["city"], "Seoul");
    assert_eq!(out["forecast"].as_array().unwrap().len(), 2);
    // Text only → the text.
    let out = session
        .call_tool(&name("shout"), json!({"text": "quiet"}))
        .await
        .unwrap();
    assert_eq!(out, json!("QUIET"));
    // A plain return value the SDK wraps as structuredContent {"result": …} → the value.
    let out = session
        .call_tool(&name("plain_upper"), json!({"text": "quiet"}))
        .await
        .unwrap();
    assert_eq!(out, json!("QUIET"));
    let out = session
        .call_tool(&name("plain_count"), json!({"items": ["a", "b", "c"]}))
        .await
        .unwrap();
    assert_eq!(out, json!(3));
    // isError → a typed invocation error carrying the server's text.
    let e = session
        .call_tool(&name("fail_softly"), json!({"reason": "closed on sundays"}))
        .await
        .unwrap_err();
    let McpError::ToolInvocation(inv) = &e else {
        panic!("{e}")
    };
    assert_eq!(inv.failure, InvocationFailure::ToolError);
    assert_eq!(inv.server.as_deref(), Some(s));
    assert_eq!(inv.tool, name("fail_softly"));
    assert!(inv.message.contains("refused: closed on sundays"), "{}", inv.message);
    let te = e.to_tool_error();
    assert_eq!(
        (te.kind, te.reason.as_str()),
        (ToolErrorKind::Execution, "mcp_tool_error")
    );
    // An exception in the tool → isError too (the server hides the exception's text).
    let e = session.call_tool(&name("explode"), json!({})).await.unwrap_err();
    assert!(
        matches!(&e, McpError::ToolInvocation(i) if i.failure == InvocationFailure::ToolError),
        "{e}"
    );
    assert!(!e.to_string().contains("kaboom"), "{e}");
    // Schema validation before sending.
    let e = session
        .call_tool(&name("weather_forecast"), json!({"days": 2}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, McpError::ToolInvocation(i) if i.failure == InvocationFailure::InvalidArguments && i.message.contains("city")),
        "{e}"
    );
    // Past call_timeout → a timeout, and the session stays usable.
    let started = Instant::now();
    let e = session
        .call_tool(&name("slow"), json!({"seconds": 5}))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    let McpError::ToolInvocation(inv) = &e else {
        panic!("{e}")
    };
    assert_eq!(inv.failure, InvocationFailure::Timeout);
    let te = e.to_tool_error();
    assert_eq!(te.kind, ToolErrorKind::Timeout);
    assert!(te.retryable);
    let out = session
        .call_tool(&name("slow"), json!({"seconds": 0.01}))
        .await
        .unwrap();
    assert_eq!(out, json!({"slept": 0.01}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastmcp_over_stdio() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("fastmcp-stdio");
    let server = support::fastmcp_stdio("py", &python, &marker)
        .with_env("MODU_TEST_MARKER", "stdio-env-value")
        .with_call_timeout(Duration::from_secs(1));
    let connector = McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap();
    let session = connector.open_session(None).await.unwrap();
    exercise(&session, "py").await;
    // env reaches the process.
    let who = session.call_tool("py__whoami", json!({})).await.unwrap();
    assert_eq!(who["env_marker"], "stdio-env-value");
    assert_eq!(
        session.child_pids(),
        vec![u32::try_from(who["pid"].as_u64().unwrap()).unwrap()]
    );
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastmcp_over_streamable_http() {
    let Some(python) = support::python() else { return };
    let server = support::start_python_http(&python, "servers/fastmcp_server.py", &[]);
    let config =
        McpServerConfig::streamable_http("pyhttp", server.url("/mcp")).with_call_timeout(Duration::from_secs(1));
    let connector = McpConnector::new(McpConfig::new(vec![config]).unwrap()).unwrap();
    let session = connector.open_session(None).await.unwrap();
    exercise(&session, "pyhttp").await;
    session.close().await;
}
