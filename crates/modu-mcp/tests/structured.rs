//! Structured results checked against the output schema a tool declares, against a server on
//! the low-level API of PyPI `mcp` 2.x (`tests/servers/structured_server.py`), which sends
//! whatever structuredContent it is given.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use modu_mcp::{InvocationFailure, McpConfig, McpConnector, McpError, McpServerConfig};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_result_that_does_not_fit_the_output_schema_is_a_tool_error() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("structured");
    let server =
        McpServerConfig::stdio("wx", python).with_args([support::test_file("servers/structured_server.py"), marker]);
    let connector = McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap();
    let session = connector.open_session(None).await.unwrap_or_else(|e| panic!("{e}"));
    // A result that fits comes back unchanged.
    let out = session
        .call_tool("wx__weather", json!({"city": "Seoul"}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out, json!({"temperature": 21.5, "unit": "C"}));
    // One that does not (a string temperature, no unit) is the tool's failure, named.
    let e = session
        .call_tool("wx__weather", json!({"city": "Seoul", "broken": true}))
        .await
        .unwrap_err();
    let McpError::ToolInvocation(inv) = &e else {
        panic!("{e}")
    };
    assert_eq!(inv.failure, InvocationFailure::InvalidOutput);
    assert_eq!((inv.server.as_deref(), inv.tool.as_str()), (Some("wx"), "wx__weather"));
    assert!(
        inv.message
            .starts_with("the result of wx__weather does not fit the output schema the tool declares (the call ran"),
        "{}",
        inv.message
    );
    assert!(inv.message.contains("/temperature"), "{}", inv.message);
    assert!(
        inv.message.contains("\"unit\" is a required property"),
        "{}",
        inv.message
    );
    // The model sees it as the tool's error, with the same words.
    let seen = e.to_tool_error();
    assert_eq!(seen.reason, "mcp_invalid_output");
    assert_eq!(seen.message.as_deref(), Some(inv.message.as_str()));
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_without_structured_content_from_a_tool_with_an_output_schema_is_a_tool_error() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("structured-missing");
    let server =
        McpServerConfig::stdio("wx", python).with_args([support::test_file("servers/structured_server.py"), marker]);
    let connector = McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap();
    let session = connector.open_session(None).await.unwrap_or_else(|e| panic!("{e}"));
    // Text only ("21.5 C"), though the tool promises {temperature, unit}.
    let e = session
        .call_tool("wx__weather", json!({"city": "Seoul", "missing": true}))
        .await
        .unwrap_err();
    let McpError::ToolInvocation(inv) = &e else {
        panic!("{e}")
    };
    assert_eq!(inv.failure, InvocationFailure::InvalidOutput);
    assert_eq!((inv.server.as_deref(), inv.tool.as_str()), (Some("wx"), "wx__weather"));
    assert!(inv.message.contains("(the call ran"), "{}", inv.message);
    assert!(
        inv.message
            .ends_with("the tool declares an output schema but the result has no structuredContent"),
        "{}",
        inv.message
    );
    assert_eq!(e.to_tool_error().reason, "mcp_invalid_output");
    session.close().await;
}
