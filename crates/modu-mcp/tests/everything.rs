//! Against server-everything (npm `@modelcontextprotocol/server-everything`), over stdio and
//! over streamable HTTP, started by the tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use modu_mcp::{InvocationFailure, McpConfig, McpConnector, McpError, McpServerConfig, McpSession};
use serde_json::json;

async fn exercise(session: &McpSession, server: &str) {
    assert_eq!(session.server_names(), vec![server]);
    let echo = format!("{server}__echo");
    assert!(session.registry().get(&echo).is_some(), "echo discovered");
    assert!(session.registry().len() >= 10, "server-everything has many tools");

    let found = session.search("echo", 5, |_| true);
    assert_eq!(found["tools"][0]["name"], echo);
    assert_eq!(found["tools"][0]["description"], "Echoes back the input string");
    assert_eq!(
        found["tools"][0]["input_schema"]["properties"]["message"]["type"],
        "string"
    );
    assert_eq!(found["count"], found["tools"].as_array().unwrap().len());

    // Text-only result → the text.
    let out = session.call_tool(&echo, json!({"message": "hello"})).await.unwrap();
    assert_eq!(out, json!("Echo: hello"));
    // structuredContent → as is.
    let out = session
        .call_tool(
            &format!("{server}__get-structured-content"),
            json!({"location": "Chicago"}),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82})
    );
    // Arguments are validated against the input schema before sending.
    let e = session.call_tool(&echo, json!({"message": 5})).await.unwrap_err();
    let McpError::ToolInvocation(inv) = &e else {
        panic!("{e}")
    };
    assert_eq!(inv.failure, InvocationFailure::InvalidArguments);
    assert!(inv.message.contains("/message"), "{}", inv.message);
    let e = session
        .call_tool(
            &format!("{server}__get-structured-content"),
            json!({"location": "Paris"}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, McpError::ToolInvocation(i) if i.failure == InvocationFailure::InvalidArguments),
        "{e}"
    );
    // Unknown tools.
    let e = session
        .call_tool(&format!("{server}__nope"), json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, McpError::ToolInvocation(i) if i.failure == InvocationFailure::UnknownTool),
        "{e}"
    );
    assert_eq!(e.to_tool_error().kind, modu_core::ToolErrorKind::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_session_discovers_searches_calls_and_closes_without_orphans() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("everything-stdio");
    let config = McpConfig::new(vec![support::everything_stdio("everything", &script, &marker)]).unwrap();
    let connector = McpConnector::new(config).unwrap();
    let session = connector.open_session(None).await.unwrap();
    let pids = session.child_pids();
    assert_eq!(pids.len(), 1);
    assert_eq!(support::children_matching(&marker).len(), 1, "one server process runs");
    exercise(&session, "everything").await;
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
    assert!(!support::alive(pids[0]));
    // Calls after close fail as transport errors.
    let e = session
        .call_tool("everything__echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, McpError::ToolInvocation(i) if i.failure == InvocationFailure::Transport),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_session_against_server_everything() {
    let Some(script) = support::everything() else { return };
    let server = support::start_everything_http(&script);
    let config = McpConfig::new(vec![McpServerConfig::streamable_http("remote", server.url("/mcp"))]).unwrap();
    let connector = McpConnector::new(config).unwrap();
    let session = connector.open_session(None).await.unwrap();
    exercise(&session, "remote").await;
    session.close().await;
    // The preload forced the listener onto loopback.
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_hex = format!(":{:04X}", server.port);
    let listeners: Vec<&str> = tcp
        .lines()
        .filter(|l| l.contains(&port_hex) && l.contains(" 0A "))
        .collect();
    assert!(!listeners.is_empty(), "listener found");
    assert!(
        listeners
            .iter()
            .all(|l| l.split_whitespace().nth(1).unwrap().starts_with("0100007F")),
        "{listeners:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_open_concurrently_and_one_failure_closes_the_others() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("open-concurrently");
    let log = std::env::temp_dir().join(format!("{marker}.log"));
    let log_arg = log.to_string_lossy().into_owned();
    // Each takes DELAY to answer initialize; "broken" then exits instead of answering.
    const DELAY: Duration = Duration::from_secs(2);
    let delay = DELAY.as_secs_f64().to_string();
    let config = McpConfig::new(vec![
        support::misbehaving_stdio(
            "good",
            &python,
            &["--delay-initialize", &delay, "--log", &log_arg, &marker],
        ),
        support::misbehaving_stdio(
            "broken",
            &python,
            &["--delay-initialize", &delay, "--fail-initialize", &marker],
        ),
    ])
    .unwrap();
    let connector = McpConnector::new(config).unwrap();
    let started = std::time::Instant::now();
    let e = connector.open_session(None).await.unwrap_err();
    let took = started.elapsed();
    let McpError::Transport(t) = &e else { panic!("{e}") };
    assert_eq!(t.server, "broken");
    assert!(t.message.contains("initialize failed"), "{t}");
    // Opened one after the other, the two would take at least 2 × DELAY.
    assert!(
        took >= DELAY && took < DELAY * 2 - Duration::from_millis(500),
        "opening took {took:?}; concurrently it takes about {DELAY:?}"
    );
    // The good server really ran: it was initialized and listed its tools...
    let seen = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let methods: Vec<&str> = seen.lines().filter_map(|l| l.split_once(' ').map(|(_, m)| m)).collect();
    assert!(
        methods.contains(&"initialize") && methods.contains(&"tools/list"),
        "{seen}"
    );
    let pid: u32 = seen.split_whitespace().next().unwrap().parse().unwrap();
    // ...and was closed because the other one failed.
    support::assert_no_children(&marker, Duration::from_secs(5)).await;
    assert!(!support::alive(pid), "the good server ({pid}) still runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_is_a_transport_error_and_leaves_no_process() {
    let marker = support::marker("sleeper");
    let pid_file = std::env::temp_dir().join(format!("{marker}.pid"));
    // A "server" that never answers initialize, with a child of its own (a grandchild of the
    // test): the process-group kill must end that one too.
    let config = McpConfig::new(vec![McpServerConfig::stdio("mute", "sh").with_args([
        "-c".to_owned(),
        r#"sleep 60 & echo $! > "$1"; wait"#.to_owned(),
        "sh".to_owned(),
        pid_file.to_string_lossy().into_owned(),
        marker.clone(),
    ])])
    .unwrap()
    .with_connect_timeout(Duration::from_millis(1000));
    let connector = McpConnector::new(config).unwrap();
    let started = std::time::Instant::now();
    let e = connector.open_session(None).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(&e, McpError::Transport(t) if t.message.contains("within 1.0s")),
        "{e}"
    );
    let grandchild: u32 = std::fs::read_to_string(&pid_file)
        .expect("the server started its child before the timeout")
        .trim()
        .parse()
        .unwrap();
    let _ = std::fs::remove_file(&pid_file);
    support::assert_no_children(&marker, Duration::from_secs(5)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while support::alive(grandchild) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server's own child ({grandchild}) outlived it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_session_without_closing_still_kills_the_server() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("everything-drop");
    let config = McpConfig::new(vec![support::everything_stdio("everything", &script, &marker)]).unwrap();
    let connector = McpConnector::new(config).unwrap();
    let session = connector.open_session(None).await.unwrap();
    assert_eq!(support::children_matching(&marker).len(), 1);
    drop(session);
    support::assert_no_children(&marker, Duration::from_secs(10)).await;
}
