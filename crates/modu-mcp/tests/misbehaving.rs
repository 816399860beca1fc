//! Against a misbehaving MCP server (tests/peers/misbehaving_server.py, started by the tests):
//! answers that cannot be decoded fail their call at once with a typed error instead of
//! waiting for the call timeout; results are capped at `max_result_bytes` with the marker
//! function tools get; the server's credentials never reach the model in a result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use modu_agent::Agent;
use modu_core::Role;
use modu_mcp::config::DEFAULT_MAX_RESULT_BYTES;
use modu_mcp::{
    InvocationFailure, McpAuthConfig, McpConfig, McpConnector, McpError, McpServerConfig, McpSession, McpToolProvider,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

/// The call timeout of every server here: a hang would take this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// What "at once" means: well under the call timeout, with room for a busy machine.
const FAST: Duration = Duration::from_secs(3);

async fn open(servers: Vec<McpServerConfig>) -> McpSession {
    let servers = servers.into_iter().map(|s| s.with_call_timeout(CALL_TIMEOUT)).collect();
    McpConnector::new(McpConfig::new(servers).unwrap())
        .unwrap()
        .open_session(None)
        .await
        .unwrap()
}

/// Calls a tool and returns its outcome and how long it took.
async fn timed(session: &McpSession, tool: &str, args: Value) -> (Result<Value, McpError>, Duration) {
    let started = Instant::now();
    let out = session.call_tool(tool, args).await;
    (out, started.elapsed())
}

fn invocation(e: &McpError) -> &modu_mcp::McpToolInvocationError {
    match e {
        McpError::ToolInvocation(i) => i,
        other => panic!("expected an invocation error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_answers_fail_at_once_with_a_typed_error_and_the_session_stays_usable() {
    let Some(python) = support::python() else { return };
    let session = open(vec![support::misbehaving_stdio("bad", &python, &[])]).await;
    let cases = [
        ("invalid_utf8", json!({}), "not valid UTF-8"),
        ("invalid_utf8", json!({"id_last": true}), "not valid UTF-8"),
        ("deep_nesting", json!({"depth": 10_000}), "nested more than 128 levels"),
        ("big_structured", json!({"bytes": 20_000_000}), "larger than the 16 MiB"),
        // The id after the 20 MB result, as the TypeScript SDK orders an answer.
        (
            "big_structured",
            json!({"bytes": 20_000_000, "id_last": true}),
            "larger than the 16 MiB",
        ),
    ];
    for (tool, args, reason) in cases {
        let (out, took) = timed(&session, &format!("bad__{tool}"), args.clone()).await;
        let e = out.unwrap_err();
        let inv = invocation(&e);
        assert_eq!(
            inv.failure,
            InvocationFailure::UndecodableResponse,
            "{tool} {args}: {e}"
        );
        assert_eq!(inv.server.as_deref(), Some("bad"));
        assert!(inv.message.contains(reason), "{tool} {args}: {}", inv.message);
        assert!(
            took < FAST,
            "{tool} {args} took {took:?} (call timeout {CALL_TIMEOUT:?})"
        );
        let te = e.to_tool_error();
        assert_eq!(te.reason, "mcp_undecodable_response");
        assert!(!te.retryable);
        // The session goes on: the next call is answered.
        let (ok, _) = timed(&session, "bad__ok", json!({"text": tool})).await;
        assert_eq!(ok.unwrap(), json!(format!("ok: {tool}")));
    }
    // Noise on stdout that is not JSON-RPC is skipped, as the official SDKs do.
    let (out, took) = timed(&session, "bad__banner_then_ok", json!({})).await;
    assert_eq!(out.unwrap(), json!("after the banner"));
    assert!(took < FAST);
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_on_stdout_are_skipped_and_the_session_stays_open() {
    let Some(python) = support::python() else { return };
    // The server writes `{"level":"info","msg":"server started"}` before initialize and a JSON
    // log line before every answer: the session opens.
    let session = Arc::new(open(vec![support::misbehaving_stdio("logs", &python, &["--json-logs"])]).await);
    // A call in flight while log lines arrive (the next call's) is not failed either.
    let slow = tokio::spawn({
        let session = Arc::clone(&session);
        async move { timed(&session, "logs__slow", json!({"seconds": 1})).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for text in ["one", "two"] {
        let (out, took) = timed(&session, "logs__ok", json!({"text": text})).await;
        assert_eq!(out.unwrap(), json!(format!("ok: {text}")));
        assert!(took < FAST, "{took:?}");
    }
    let (out, _) = slow.await.unwrap();
    assert_eq!(out.unwrap(), json!("slept"));
    let (out, _) = timed(&session, "logs__ok", json!({"text": "after"})).await;
    assert_eq!(out.unwrap(), json!("ok: after"));
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_tool_with_a_taken_name_is_left_out_not_swapped_in() {
    let Some(python) = support::python() else { return };
    // The server lists `ok` twice: the first (text argument) is kept, the second (a required
    // `n`) is left out.
    let session = open(vec![support::misbehaving_stdio("dup", &python, &["--duplicate-tool"])]).await;
    let registry = session.registry();
    let oks: Vec<_> = registry
        .tools()
        .iter()
        .filter(|t| t.external_name == "dup__ok")
        .collect();
    assert_eq!(oks.len(), 1);
    assert_eq!(oks[0].description, "A normal text result.");
    assert_eq!((oks[0].server.as_str(), oks[0].tool.as_str()), ("dup", "ok"));
    let found = session.search("dup__ok", 10, |_| true);
    assert_eq!(found["tools"][0]["description"], "A normal text result.");
    // Calls are checked against the first tool's schema.
    let out = session.call_tool("dup__ok", json!({"text": "first"})).await;
    assert_eq!(out.unwrap(), json!("ok: first"));
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_naming_no_request_fails_every_call_in_flight_and_closes_the_session() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("no-id");
    let session = Arc::new(open(vec![support::misbehaving_stdio("bad", &python, &[&marker])]).await);
    let slow = tokio::spawn({
        let session = Arc::clone(&session);
        async move { timed(&session, "bad__slow", json!({"seconds": 10})).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (out, took) = timed(&session, "bad__no_id_answer", json!({})).await;
    let e = out.unwrap_err();
    assert_eq!(invocation(&e).failure, InvocationFailure::Transport, "{e}");
    assert!(invocation(&e).message.contains("names no request"), "{e}");
    assert!(took < FAST, "{took:?}");
    // The other call in flight fails too, long before its answer (10 s) or timeout (15 s).
    let (out, took) = slow.await.unwrap();
    let e = out.unwrap_err();
    assert_eq!(invocation(&e).failure, InvocationFailure::Transport, "{e}");
    assert!(took < FAST + Duration::from_millis(300), "{took:?}");
    // The session is closed: later calls fail as transport errors, and the process is gone.
    let (out, took) = timed(&session, "bad__ok", json!({})).await;
    assert_eq!(invocation(&out.unwrap_err()).failure, InvocationFailure::Transport);
    assert!(took < FAST);
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_mid_call_fails_the_call_at_once() {
    let Some(python) = support::python() else { return };
    let session = open(vec![support::misbehaving_stdio("bad", &python, &[])]).await;
    let (out, took) = timed(&session, "bad__crash", json!({})).await;
    let e = out.unwrap_err();
    assert_eq!(invocation(&e).failure, InvocationFailure::Transport, "{e}");
    assert!(invocation(&e).message.contains("closed its output"), "{e}");
    assert!(took < FAST, "{took:?}");
    session.close().await;
}

/// "0123456789" repeated to `bytes` bytes, as the server's big_text makes it.
fn digits(bytes: usize) -> String {
    "0123456789".repeat(bytes / 10 + 1)[..bytes].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_cut_at_max_result_bytes_with_the_function_tool_marker() {
    let Some(python) = support::python() else { return };
    // One server with the default cap, one with its own (set in its JSON configuration).
    let mut capped = serde_json::to_value(json!({
        "name": "capped", "transport": "stdio", "command": python,
        "args": [support::test_file("peers/misbehaving_server.py"), "stdio"],
        "max_result_bytes": 5000
    }))
    .unwrap();
    capped["call_timeout_seconds"] = json!(CALL_TIMEOUT.as_secs_f64());
    let session = open(vec![
        support::misbehaving_stdio("plain", &python, &[]),
        McpServerConfig::from_json(capped).unwrap(),
    ])
    .await;
    assert_eq!(session.max_result_bytes("plain"), Some(DEFAULT_MAX_RESULT_BYTES));
    assert_eq!(session.max_result_bytes("capped"), Some(5000));

    // A 10 MB text result: cut to the default cap, with exactly the marker of function tools.
    let (out, took) = timed(&session, "plain__big_text", json!({"bytes": 10_000_000})).await;
    let Value::String(text) = out.unwrap() else {
        panic!("a string")
    };
    assert!(took < FAST, "{took:?}");
    assert_eq!(
        text,
        modu_core::tool::truncate_result(digits(10_000_000), Some(DEFAULT_MAX_RESULT_BYTES))
    );
    assert!(
        text.ends_with(&format!(
            "\n…[truncated: {DEFAULT_MAX_RESULT_BYTES} of 10000000 bytes shown]"
        )),
        "{}",
        &text[text.len() - 80..]
    );
    // A result under the cap is untouched.
    let (out, _) = timed(&session, "plain__big_text", json!({"bytes": 1000})).await;
    assert_eq!(out.unwrap(), json!(digits(1000)));

    // The server's own cap wins; large structured content is bounded too (as its JSON text).
    let (out, _) = timed(&session, "capped__big_text", json!({"bytes": 6000})).await;
    assert_eq!(
        out.unwrap(),
        json!(modu_core::tool::truncate_result(digits(6000), Some(5000)))
    );
    let (out, took) = timed(&session, "capped__big_structured", json!({"bytes": 2_000_000})).await;
    let Value::String(text) = out.unwrap() else {
        panic!("a string")
    };
    assert!(took < FAST, "{took:?}");
    assert!(text.starts_with(r#"{"items":["xxxx"#), "{}", &text[..40]);
    let (kept, marker) = text.split_once("\n…[truncated: ").unwrap();
    assert_eq!(kept.len(), 5000);
    let total: usize = marker
        .strip_prefix("5000 of ")
        .and_then(|m| m.strip_suffix(" bytes shown]"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(total > 1_900_000, "{marker}");
    // Small structured content stays structured.
    let (out, _) = timed(&session, "capped__big_structured", json!({"bytes": 2000})).await;
    assert_eq!(out.unwrap()["items"].as_array().unwrap().len(), 1);
    session.close().await;
}

fn tool_messages(messages: &[modu_core::Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_applies_through_the_meta_tool_and_direct_tools_and_the_provider_sets_the_default() {
    let Some(python) = support::python() else { return };
    let config = McpConfig::new(vec![
        support::misbehaving_stdio("plain", &python, &[]),
        support::misbehaving_stdio("capped", &python, &[]).with_max_result_bytes(300),
    ])
    .unwrap();
    let connector = Arc::new(McpConnector::new(config).unwrap());
    for direct in [false, true] {
        let call = |tool: &str, bytes: usize| {
            let args = json!({"bytes": bytes});
            if direct {
                (tool.to_owned(), args)
            } else {
                (
                    "mcp_call_tool".to_owned(),
                    json!({"tool_name": tool, "arguments": args}),
                )
            }
        };
        let (a, a_args) = call("plain__big_text", 50_000);
        let (b, b_args) = call("capped__big_text", 50_000);
        let model = ScriptedModel::new()
            .tool_call(&a, a_args)
            .tool_call(&b, b_args)
            .text("done");
        let mut provider = McpToolProvider::new(Arc::clone(&connector)).with_max_result_bytes(1000);
        if direct {
            provider = provider.with_direct_tools();
        }
        let agent: Agent<()> = Agent::builder(model.clone())
            .name("capped-agent")
            .tool_provider(provider)
            .build()
            .unwrap();
        let result = agent.run("Get the big texts.").await;
        assert!(result.is_completed(), "direct={direct}: {:?}", result.error());
        let results = tool_messages(result.messages());
        assert_eq!(
            results,
            [
                modu_core::tool::truncate_result(digits(50_000), Some(1000)),
                modu_core::tool::truncate_result(digits(50_000), Some(300)),
            ],
            "direct={direct}: the provider's default, then the server's own cap, one marker each"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_token_never_reaches_the_model_in_a_successful_result() {
    let Some(python) = support::python() else { return };
    let token = "misbehaving-bearer-7f3a9c";
    let server = support::start_python_http(&python, "peers/misbehaving_server.py", &[token]);
    let http = McpServerConfig::streamable_http("remote", server.url("/mcp")).with_auth(McpAuthConfig {
        bearer_token: Some(token.into()),
        ..McpAuthConfig::default()
    });
    // Without the token the server refuses the connection: the echo below is the token sent.
    let refused = McpServerConfig::streamable_http("remote", server.url("/mcp"));
    let e = McpConnector::new(McpConfig::new(vec![refused]).unwrap())
        .unwrap()
        .open_session(None)
        .await
        .unwrap_err();
    assert!(matches!(e, McpError::Auth(_)), "{e}");

    let session = open(vec![http.clone()]).await;
    let out = session.call_tool("remote__whoami", json!({})).await.unwrap();
    assert_eq!(
        out,
        json!({"authorization": "Bearer [redacted]", "note": "you called with [redacted]"})
    );
    session.close().await;

    // Through an agent: neither the meta tool's result nor anything else the model is sent
    // carries the token.
    let model = ScriptedModel::new()
        .tool_call("mcp_call_tool", json!({"tool_name": "remote__whoami", "arguments": {}}))
        .text("done");
    let connector = Arc::new(McpConnector::new(McpConfig::new(vec![http]).unwrap()).unwrap());
    let agent: Agent<()> = Agent::builder(model.clone())
        .name("token-agent")
        .tool_provider(McpToolProvider::new(connector))
        .build()
        .unwrap();
    let result = agent.run("Who am I?").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let results = tool_messages(result.messages());
    assert_eq!(results.len(), 1);
    assert!(results[0].contains("Bearer [redacted]"), "{}", results[0]);
    let sent = format!("{:?}", model.requests());
    assert!(!sent.contains(token), "the token reached the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_environment_values_of_a_stdio_server_are_redacted_from_results() {
    let Some(python) = support::python() else { return };
    let server = support::misbehaving_stdio("envy", &python, &[])
        .with_env("MODU_TEST_API_TOKEN", "env-secret-5521")
        .with_env("MODU_TEST_LOG_LEVEL", "verbose");
    let session = open(vec![server]).await;
    let out = session
        .call_tool(
            "envy__echo_env",
            json!({"names": ["MODU_TEST_API_TOKEN", "MODU_TEST_LOG_LEVEL"]}),
        )
        .await
        .unwrap();
    // A secret-looking name's value is redacted; an ordinary setting is left alone.
    assert_eq!(
        out,
        json!({"MODU_TEST_API_TOKEN": "[redacted]", "MODU_TEST_LOG_LEVEL": "verbose"})
    );
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_answers_over_streamable_http_fail_at_once() {
    let Some(python) = support::python() else { return };
    let cases = [
        ("invalid_utf8", json!({}), "not valid UTF-8"),
        ("deep_nesting", json!({"depth": 10_000}), "nested more than 128 levels"),
        ("big_structured", json!({"bytes": 20_000_000}), "larger than the 16 MiB"),
    ];
    // An answer in a JSON body: the typed error, as over stdio.
    let server = support::start_python_http_mode(&python, "peers/misbehaving_server.py", "http-raw", &["json"]);
    let session = open(vec![McpServerConfig::streamable_http("remote", server.url("/mcp"))]).await;
    for (tool, args, reason) in &cases {
        let (out, took) = timed(&session, &format!("remote__{tool}"), args.clone()).await;
        let e = out.unwrap_err();
        let inv = invocation(&e);
        assert_eq!(inv.failure, InvocationFailure::UndecodableResponse, "{tool}: {e}");
        assert!(inv.message.contains(reason), "{tool}: {}", inv.message);
        assert!(
            !inv.message.contains("xxxx") && inv.message.len() < 300,
            "no body: {}",
            inv.message
        );
        assert!(took < FAST, "{tool} took {took:?}");
        let (ok, _) = timed(&session, "remote__ok", json!({"text": tool})).await;
        assert_eq!(ok.unwrap(), json!(format!("ok: {tool}")));
    }
    session.close().await;
    // An answer in an SSE event: rmcp drops the event and fails the request when the stream
    // ends without an answer, so the call fails at once too, as a transport error.
    let server = support::start_python_http_mode(&python, "peers/misbehaving_server.py", "http-raw", &["sse"]);
    let session = open(vec![McpServerConfig::streamable_http("remote", server.url("/mcp"))]).await;
    for (tool, args, _) in &cases {
        let (out, took) = timed(&session, &format!("remote__{tool}"), args.clone()).await;
        let e = out.unwrap_err();
        assert_eq!(invocation(&e).failure, InvocationFailure::Transport, "{tool}: {e}");
        assert!(took < FAST, "{tool} took {took:?}");
        let (ok, _) = timed(&session, "remote__ok", json!({"text": tool})).await;
        assert_eq!(ok.unwrap(), json!(format!("ok: {tool}")));
    }
    session.close().await;
}
