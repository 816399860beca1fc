//! The lifecycle of a stdio server's processes: a graceful close leaves nothing of the server's
//! process group behind, whatever the server did with its own children (README: "closing
//! (stdin EOF, then SIGTERM, then SIGKILL) leaves no process behind").
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use modu_mcp::{McpConfig, McpConnector, McpServerConfig, McpSession};
use serde_json::json;

/// The misbehaving test server behind a shell that first starts `sleep 1000` in the
/// background (in the server's process group, as a Node or shell server's helper would be)
/// and writes its pid to `pid_file`.
fn server_with_helper(python: &str, pid_file: &Path) -> McpServerConfig {
    let script = r#"sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > "$0"; shift; exec "$@""#;
    McpServerConfig::stdio("helper", "sh").with_args([
        "-c".to_owned(),
        script.to_owned(),
        pid_file.to_string_lossy().into_owned(),
        "unused".to_owned(),
        python.to_owned(),
        support::test_file("peers/misbehaving_server.py"),
        "stdio".to_owned(),
    ])
}

async fn open(server: McpServerConfig) -> McpSession {
    McpConnector::new(McpConfig::new(vec![server]).unwrap())
        .unwrap()
        .open_session(None)
        .await
        .unwrap()
}

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(support::marker(name))
}

fn read_pid(file: &Path) -> u32 {
    std::fs::read_to_string(file).unwrap().trim().parse().unwrap()
}

/// Waits up to `within` for `pid` to be gone; `true` when it is.
async fn gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while support::alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// Ends a helper the test left behind (only the pid it started).
fn kill(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_close_ends_the_helpers_the_server_started() {
    let Some(python) = support::python() else { return };
    let pid_file = temp_file("helper-pid");
    let session = open(server_with_helper(&python, &pid_file)).await;
    assert_eq!(session.child_pids().len(), 1);
    let helper = read_pid(&pid_file);
    assert!(support::alive(helper), "the helper runs while the session is open");

    // The server exits at the end of its stdin: the close is graceful.
    let started = Instant::now();
    session.close().await;
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    let ended = gone(helper, Duration::from_secs(2)).await;
    if !ended {
        kill(helper);
    }
    let _ = std::fs::remove_file(&pid_file);
    assert!(
        ended,
        "the server's helper process {helper} outlived the session's close"
    );
}

/// A call whose request is larger than the pipe to the server's stdin (64 KiB on Linux),
/// sent while the server does not read (busy in another call): its write blocks. Returns the
/// call's outcome and how long it took.
async fn block_the_servers_stdin(
    session: &std::sync::Arc<McpSession>,
) -> tokio::task::JoinHandle<(Result<serde_json::Value, modu_mcp::McpError>, Duration)> {
    let busy = {
        let session = std::sync::Arc::clone(session);
        tokio::spawn(async move {
            let _ = session.call_tool("m__busy", json!({"seconds": 60})).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let session = std::sync::Arc::clone(session);
    let big = tokio::spawn(async move {
        let started = Instant::now();
        let out = session
            .call_tool("m__ok", json!({"text": "x".repeat(1024 * 1024)}))
            .await;
        (out, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    busy.abort();
    big
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_server_that_stopped_reading_its_stdin_does_not_hang() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("stopped-reading");
    let server = support::misbehaving_stdio("m", &python, &[&marker]).with_call_timeout(Duration::from_secs(120));
    let session = std::sync::Arc::new(open(server).await);
    let big = block_the_servers_stdin(&session).await;

    // stdin EOF cannot be delivered while the write blocks: SIGTERM ends it (3 s later).
    let started = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(15), session.close()).await;
    assert!(closed.is_ok(), "close still waits after {:?}", started.elapsed());
    big.abort();
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_timeout_holds_while_the_server_does_not_read_its_stdin() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("timeout-holds");
    let server = support::misbehaving_stdio("m", &python, &[&marker]).with_call_timeout(Duration::from_secs(2));
    let session = std::sync::Arc::new(open(server).await);
    let big = block_the_servers_stdin(&session).await;

    // The call fails at its timeout although its cancellation cannot be written either.
    let outcome = tokio::time::timeout(Duration::from_secs(15), big).await;
    let Ok(outcome) = outcome else {
        session.close().await;
        panic!("the call with a 2 s timeout is still waiting after 15 s");
    };
    let (out, took) = outcome.unwrap();
    let e = out.unwrap_err();
    assert!(
        matches!(&e, modu_mcp::McpError::ToolInvocation(i) if i.failure == modu_mcp::InvocationFailure::Timeout),
        "{e}"
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}
