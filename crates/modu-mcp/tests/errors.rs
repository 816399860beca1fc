//! Errors a user can act on: an HTTP 401 without a `WWW-Authenticate` challenge is an auth
//! error wherever it comes (initialize, tools/list, tools/call); other failures read as plain
//! sentences without rmcp's type names; a stdio server that dies at start-up shows the end of
//! its stderr, with secrets masked. Against a real HTTP server (axum on 127.0.0.1) and real
//! `sh` processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use modu_core::{AgentError, ToolErrorKind, ToolProviderErrorKind};
use modu_mcp::{McpAuthConfig, McpConfig, McpConnector, McpError, McpServerConfig};
use serde_json::{Value, json};

/// What the test server refuses.
#[derive(Clone, Copy)]
enum Mode {
    /// Every request: 401, no `WWW-Authenticate`.
    RefuseAll,
    /// Every request after `initialize`.
    RefuseAfterInitialize,
    /// `tools/call` only.
    RefuseCalls,
    /// Every request: a plain-text 500.
    Fail,
    /// Every request: an HTML page (a URL that is not an MCP endpoint).
    Html,
}

async fn mcp(State(mode): State<Mode>, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap();
    let method = message["method"].as_str().unwrap_or("").to_owned();
    let refused = (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
    match mode {
        Mode::RefuseAll => return refused,
        Mode::RefuseAfterInitialize if method != "initialize" && message.get("id").is_some() => return refused,
        Mode::RefuseCalls if method == "tools/call" => return refused,
        Mode::Fail => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "upstream exploded").into_response();
        }
        Mode::Html => {
            return ([(header::CONTENT_TYPE, "text/html")], "<html>hello</html>").into_response();
        }
        _ => {}
    }
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method.as_str() {
        "initialize" => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "errors-test", "version": "1.0.0"}
        }),
        "tools/list" => json!({"tools": [{
            "name": "whoami",
            "description": "Say who.",
            "inputSchema": {"type": "object", "properties": {}}
        }]}),
        _ => json!({}),
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    )
        .into_response()
}

async fn start(mode: Mode) -> String {
    let app = Router::new()
        .route(
            "/mcp",
            post(mcp)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .with_state(mode);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

const TOKEN: &str = "tok-secret-4711";

fn connector(url: String) -> McpConnector {
    let auth = McpAuthConfig {
        bearer_token: Some(TOKEN.into()),
        ..McpAuthConfig::default()
    };
    let server = McpServerConfig::streamable_http("plain", url).with_auth(auth);
    McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap()
}

/// rmcp's type names and `Debug` shapes that must not reach a user.
fn assert_plain(text: &str) {
    for banned in [
        "TransportSend",
        "ServiceError",
        "Transport [",
        "Transport(",
        "rmcp::",
        "Send message error",
        "when send",
        "Some(",
        "JsonRpc",
        "ErrorData",
        "Mcp error",
        "Client error",
        "unexpected server response",
    ] {
        assert!(!text.contains(banned), "{banned:?} in {text:?}");
    }
    assert!(!text.contains(TOKEN), "the token in {text:?}");
}

#[tokio::test]
async fn a_plain_401_at_initialize_is_an_auth_error() {
    let url = start(Mode::RefuseAll).await;
    let e = connector(url).open_session(None).await.unwrap_err();
    let McpError::Auth(auth) = &e else { panic!("{e:?}") };
    assert_eq!(auth.server, "plain");
    assert_eq!(
        e.to_string(),
        "MCP authentication failed (server plain): the server refused the credentials (HTTP 401)"
    );
    assert_eq!(e.to_tool_error().kind, ToolErrorKind::Authorization);
    assert_plain(&format!("{e} {e:?}"));
}

#[tokio::test]
async fn a_plain_401_during_tools_list_is_an_auth_error() {
    let url = start(Mode::RefuseAfterInitialize).await;
    let e = connector(url).open_session(None).await.unwrap_err();
    assert!(matches!(&e, McpError::Auth(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "MCP authentication failed (server plain): the server refused the credentials (HTTP 401)"
    );
}

#[tokio::test]
async fn a_plain_401_on_a_call_is_an_auth_error() {
    let url = start(Mode::RefuseCalls).await;
    let session = connector(url).open_session(None).await.unwrap();
    let e = session.call_tool("plain__whoami", json!({})).await.unwrap_err();
    assert!(matches!(&e, McpError::Auth(_)), "{e:?}");
    let tool_error = e.to_tool_error();
    assert_eq!(tool_error.kind, ToolErrorKind::Authorization);
    assert!(!tool_error.retryable);
    assert_plain(&format!("{e} {e:?}"));
    session.close().await;
}

#[tokio::test]
async fn other_http_failures_are_transport_errors_in_plain_words() {
    let url = start(Mode::Fail).await;
    let e = connector(url).open_session(None).await.unwrap_err();
    assert!(matches!(&e, McpError::Transport(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "MCP transport error (server plain): initialize failed: the server failed (HTTP 500)"
    );

    let url = start(Mode::Html).await;
    let e = connector(url).open_session(None).await.unwrap_err();
    assert!(matches!(&e, McpError::Transport(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("content type \"text/html\"") && text.contains("is the URL an MCP endpoint?"),
        "{text}"
    );
    assert_plain(&text);

    // Nobody listens on the port.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let e = connector(format!("http://127.0.0.1:{port}/mcp"))
        .open_session(None)
        .await
        .unwrap_err();
    assert!(matches!(&e, McpError::Transport(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("MCP transport error (server plain): initialize failed: the server could not be reached"),
        "{text}"
    );
    assert_plain(&text);
}

fn sh(script: &str) -> McpConnector {
    let server = McpServerConfig::stdio("dies", "sh")
        .with_args(["-c", script])
        .with_env("API_KEY", "sk-live-0123456789");
    McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap()
}

#[tokio::test]
async fn a_stdio_server_that_dies_at_start_up_shows_the_end_of_its_stderr() {
    let e = sh("echo \"boom: key $API_KEY rejected\" >&2; exit 3")
        .open_session(None)
        .await
        .unwrap_err();
    let McpError::Transport(t) = &e else { panic!("{e:?}") };
    assert_eq!(t.server, "dies");
    let text = e.to_string();
    assert_eq!(
        text,
        "MCP transport error (server dies): initialize failed: the server exited before answering it \
         (exit status: 3); the last lines of its stderr:\nboom: key [redacted] rejected"
    );
    assert!(!text.contains("sk-live"), "{text}");
    assert_plain(&text);
}

#[tokio::test]
async fn secret_arguments_of_a_stdio_server_are_masked_in_its_errors() {
    // A server that prints its command line when it gives up (many do, in their usage text).
    let server = McpServerConfig::stdio("dies", "sh").with_args([
        "-c",
        "echo \"bad arguments: $1 $2 $3\" >&2; exit 2",
        "sh",
        "--api-key=sk-arg-live-1",
        "--token",
        "tok-arg-live-2",
    ]);
    let connector = McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap();
    let e = connector.open_session(None).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.ends_with("the last lines of its stderr:\nbad arguments: --api-key=[redacted] --token [redacted]"),
        "{text}"
    );
    assert_plain(&text);
}

#[tokio::test]
async fn the_stderr_shown_is_its_last_twenty_lines() {
    let e = sh("i=0; while [ $i -lt 100 ]; do echo \"progress line $i\" >&2; i=$((i+1)); done; exit 1")
        .open_session(None)
        .await
        .unwrap_err();
    let text = e.to_string();
    let (_, tail) = text.split_once("; the last lines of its stderr:\n").expect(&text);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 20, "{tail}");
    assert_eq!((lines[0], lines[19]), ("progress line 80", "progress line 99"));
    assert!(tail.len() <= 2048);
}

#[tokio::test]
async fn a_stdio_server_that_says_nothing_shows_no_stderr_section() {
    let e = sh("exit 0").open_session(None).await.unwrap_err();
    let text = e.to_string();
    assert!(text.contains("initialize failed"), "{text}");
    assert!(!text.contains("stderr"), "{text}");
    assert_plain(&text);
}

/// An agent over `connector` whose model would answer at once (it is never asked: opening the
/// tools fails first).
fn agent_over(connector: McpConnector) -> modu_agent::Agent<()> {
    let model = modu_testing::ScriptedModel::new().text("never asked");
    modu_agent::Agent::builder(model)
        .tool_provider(modu_mcp::McpToolProvider::new(std::sync::Arc::new(connector)))
        .build()
        .unwrap()
}

fn provider_error(result: &modu_core::RunOutcome<String>) -> (ToolProviderErrorKind, bool) {
    match result.error() {
        Some(e @ AgentError::ToolProvider { kind, message, .. }) => {
            assert_plain(message);
            (*kind, e.is_resumable())
        }
        other => panic!("expected a tool provider error, got {other:?}"),
    }
}

#[tokio::test]
async fn at_the_agent_a_refused_token_is_an_auth_error_and_not_resumable() {
    let url = start(Mode::RefuseAll).await;
    let result = agent_over(connector(url)).run("hi").await;
    assert_eq!(provider_error(&result), (ToolProviderErrorKind::Auth, false));
}

#[tokio::test]
async fn at_the_agent_a_failing_server_is_unavailable_and_resumable() {
    let url = start(Mode::Fail).await;
    let result = agent_over(connector(url)).run("hi").await;
    assert_eq!(provider_error(&result), (ToolProviderErrorKind::Unavailable, true));
}

#[tokio::test]
async fn at_the_agent_an_unknown_server_in_the_selection_is_a_configuration_error() {
    let url = start(Mode::Fail).await;
    let request = modu_agent::AgentRequest::new((), "hi").metadata("mcp", json!({"servers": ["nope"]}));
    let result = agent_over(connector(url)).run(request).await;
    assert_eq!(provider_error(&result), (ToolProviderErrorKind::Configuration, false));
}
