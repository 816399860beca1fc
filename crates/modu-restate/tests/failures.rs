//! Steps that fail in ways the agent handles on its own (a panic), against a real
//! restate-server (`MODU_RESTATE_SERVER`) and a `durable_worker` process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::time::Duration;

use common::{Restate, Worker, free_port, ledger, server_bin};
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::json;

/// A tool that panics in a durable run fails the run as it would outside Restate
/// (`AgentError::Panicked`, with the panic's message), once: the panic is journaled, so the
/// tool is not run again and again by Restate's retries of an invocation whose handler died,
/// and the session takes its next run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_panics_fails_the_run_once_and_the_session_goes_on() {
    let Some(bin) = server_bin() else { return };
    let restate = Restate::start(&bin).await;
    let mock = MockOpenAiServer::start().await.unwrap();
    let ledger_path = restate.dir.path().join("ledger");
    let worker_log = restate.dir.path().join("worker.log");
    let worker = Worker::start(free_port(), &mock.base_url(), &ledger_path, 10, &worker_log).await;
    restate.register(&format!("http://127.0.0.1:{}", worker.port)).await;
    mock.push(MockReply::ToolCalls(vec![("panic_me".into(), "{}".into())]));

    let out = tokio::time::timeout(
        Duration::from_secs(30),
        restate.call("pat", "run", json!({"message": "panic"})),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the run with a panicking tool did not end; the tool ran {} times",
            ledger(&ledger_path).len()
        )
    });
    let error = out["error"].as_str().unwrap_or_default();
    assert!(error.contains("the tool broke"), "{out}");
    assert_eq!(out["output"], serde_json::Value::Null, "{out}");
    assert_eq!(ledger(&ledger_path).len(), 1, "the tool ran once");
    assert_eq!(mock.requests().len(), 1, "the model was not asked again");
    assert_eq!(restate.call("pat", "history", json!(null)).await, json!([]));

    // The session is not held by the failed run.
    mock.push(MockReply::Text("next".into()));
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        restate.call("pat", "run", json!({"message": "again"})),
    )
    .await
    .expect("the session's next run did not end");
    assert_eq!(out["output"], "next", "{out}");
    assert_eq!(ledger(&ledger_path).len(), 1, "the panicking tool did not run again");
    drop(worker);
}
