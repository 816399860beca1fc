//! What a durable run leaves behind once it has ended: no checkpoint in the agent's store, no
//! object state in Restate but the session's history; against a real restate-server
//! (`MODU_RESTATE_SERVER`) and `durable_worker` processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Restate, Worker, cancel_and_attach, free_port, send_run, server_bin, wait_for_approvals};
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::json;
use std::time::{Duration, Instant};

/// The run ids whose checkpoint the worker keeps, from its `CHECKPOINT_LOG` (the ids whose last
/// line is a save).
fn kept_checkpoints(log: &std::path::Path) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let Some((what, id)) = line.split_once(' ') else {
            continue;
        };
        kept.retain(|k| k != id);
        if what == "save" {
            kept.push(id.to_owned());
        }
    }
    kept
}

/// A run that ends, however it ends (completed, cancelled while it waits for an approval, or
/// failed with a model error the agent could resume), leaves no checkpoint in the worker's
/// store: nothing resumes it there (a retried invocation replays its journal), so a worker with
/// an in-memory store and no TTL would keep every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_leaves_no_checkpoint_in_the_worker() {
    let Some(bin) = server_bin() else { return };
    let restate = Restate::start(&bin).await;
    let mock = MockOpenAiServer::start().await.unwrap();
    let ledger_path = restate.dir.path().join("ledger");
    let checkpoints = restate.dir.path().join("checkpoints");
    let worker_log = restate.dir.path().join("worker.log");
    let worker = Worker::start_with(
        free_port(),
        &mock.base_url(),
        &ledger_path,
        10,
        &worker_log,
        &[("CHECKPOINT_LOG", checkpoints.display().to_string())],
    )
    .await;
    restate.register(&format!("http://127.0.0.1:{}", worker.port)).await;

    // Completed (with a tool call, so the run checkpoints on the way).
    mock.push(MockReply::ToolCalls(vec![("record".into(), "{}".into())]));
    mock.push(MockReply::Text("done".into()));
    let out = restate.call("lena", "run", json!({"message": "go"})).await;
    assert_eq!(out["output"], "done", "{out}");
    assert_eq!(
        kept_checkpoints(&checkpoints),
        Vec::<String>::new(),
        "after a completed run"
    );

    // Cancelled while it waits for an approval (its paused checkpoint is written).
    mock.push(MockReply::ToolCalls(vec![("approve_me".into(), "{}".into())]));
    let id = send_run(&restate, "lena", "wait").await;
    wait_for_approvals(&restate, "lena").await;
    assert!(
        !kept_checkpoints(&checkpoints).is_empty(),
        "the paused run has a checkpoint"
    );
    let (status, text) = cancel_and_attach(&restate, &id).await;
    assert!(!status.is_success(), "{status} {text}");
    assert_eq!(
        kept_checkpoints(&checkpoints),
        Vec::<String>::new(),
        "after a cancelled run"
    );

    // Failed: the model answers 500 to every attempt (a retryable error, which the agent keeps
    // a checkpoint for, to be resumed; a durable run is not resumed that way).
    for _ in 0..4 {
        mock.push(MockReply::Error {
            status: 500,
            body: json!({"error": {"message": "down"}}),
            headers: Vec::new(),
        });
    }
    let out = restate.call("lena", "run", json!({"message": "fail"})).await;
    assert!(out["error"].is_string(), "the run failed: {out}");
    assert_eq!(
        kept_checkpoints(&checkpoints),
        Vec::<String>::new(),
        "after a failed run"
    );
}

/// A run cancelled while it waits for approvals, one of them decided through `decide` already,
/// leaves no approval state in Restate: the decision `settle` recorded on the object keyed by
/// the call's awakeable id is dropped, as it is when a pause ends normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_pause_leaves_no_decision_behind() {
    let Some(bin) = server_bin() else { return };
    let restate = Restate::start(&bin).await;
    let mock = MockOpenAiServer::start().await.unwrap();
    let worker = Worker::start(
        free_port(),
        &mock.base_url(),
        &restate.dir.path().join("ledger"),
        10,
        &restate.dir.path().join("worker.log"),
    )
    .await;
    restate.register(&format!("http://127.0.0.1:{}", worker.port)).await;

    // A pause that ends normally: both calls decided, the run answers.
    mock.push(MockReply::ToolCalls(vec![("approve_me".into(), "{}".into())]));
    mock.push(MockReply::Text("ran".into()));
    let id = send_run(&restate, "mona", "go").await;
    let pending = wait_for_approvals(&restate, "mona").await;
    let call = pending[0]["request"]["call_id"].as_str().unwrap().to_owned();
    let decided = restate
        .call("mona", "decide", json!({"call_id": call, "decision": "approved"}))
        .await;
    assert_eq!(decided, json!(true));
    let r = restate
        .http
        .get(format!("{}/restate/invocation/{id}/attach", restate.ingress_url()))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let only_history = vec![("mona".to_owned(), "history".to_owned())];
    wait_for_state(&restate, &only_history).await;

    // A pause cancelled with one call decided and one waiting.
    mock.push(MockReply::ToolCalls(vec![
        ("approve_me".into(), "{}".into()),
        ("approve_me".into(), "{\"again\":true}".into()),
    ]));
    let id = send_run(&restate, "nina", "go").await;
    let mut pending = wait_for_approvals(&restate, "nina").await;
    let started = Instant::now();
    while pending.as_array().map_or(0, Vec::len) < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "{pending}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        pending = restate.call("nina", "approvals", json!(null)).await;
    }
    let call = pending[0]["request"]["call_id"].as_str().unwrap().to_owned();
    let decided = restate
        .call("nina", "decide", json!({"call_id": call, "decision": "approved"}))
        .await;
    assert_eq!(decided, json!(true));
    let (status, text) = cancel_and_attach(&restate, &id).await;
    assert!(!status.is_success(), "{status} {text}");
    wait_for_state(&restate, &only_history).await;
}

/// Waits (10 s at most) until Restate's `ModuSession` state is `expected`.
async fn wait_for_state(restate: &Restate, expected: &[(String, String)]) {
    let started = Instant::now();
    loop {
        let state = restate.state().await;
        if state == expected {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the object state left behind: {state:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
