//! Decisions and answers on a run that is being resumed, over real HTTP on 127.0.0.1: refused
//! with 409 naming the run, from whichever endpoint the resume came, and nothing is recorded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{post, serve, sse_json, weather_model};
use modu_agent::Agent;
use modu_core::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStore, InMemoryCheckpointStore,
    InMemoryConversationStore, StoreError,
};
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

const ERIN: &str = "erin-token";
const MALLORY: &str = "mallory-token";

/// A server whose `get_weather` needs approval and holds every call until `gate` has a permit.
async fn gated_server(runs: Arc<AtomicUsize>, gate: Arc<tokio::sync::Semaphore>) -> String {
    gated_server_with(runs, gate, Arc::new(InMemoryCheckpointStore::new())).await
}

/// [`gated_server`] keeping its checkpoints in `checkpoints`.
async fn gated_server_with(
    runs: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::Semaphore>,
    checkpoints: Arc<dyn CheckpointStore>,
) -> String {
    let tool = common::gated_weather_tool(runs, gate, true);
    let agent = Agent::builder(weather_model())
        .tool(tool)
        .checkpoint_store(checkpoints)
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .build()
        .unwrap();
    let tokens = BearerTokens::new()
        .token(ERIN, Principal::new("erin", ["weather"]))
        .token(MALLORY, Principal::new("mallory", ["weather"]));
    serve(ModuServer::new().agent("approval", agent).auth(tokens).router()).await
}

fn agui_input(thread: &str, run: &str) -> Value {
    json!({"threadId": thread, "runId": run, "messages": [{"id": "u1", "role": "user", "content": "Weather?"}],
           "tools": [], "context": [], "forwardedProps": {}})
}

/// Starts a run over AG-UI that pauses for approval of `call_0`.
async fn paused(base: &str, thread: &str, run: &str) {
    let (status, body, _) = post(&format!("{base}/agui/approval"), Some(ERIN), &agui_input(thread, run)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        sse_json(&body).last().unwrap()["outcome"]["type"],
        "interrupt",
        "{body}"
    );
}

async fn until_tool_runs(runs: &AtomicUsize, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while runs.load(Ordering::SeqCst) < n {
        assert!(std::time::Instant::now() < deadline, "the tool did not start");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Every run-control route that records something for `run` is refused with 409
/// `run_in_flight` naming it; another user's is still told there is no such run.
async fn every_record_is_refused(base: &str, run: &str) {
    for (route, body) in [
        ("approve", json!({"callId": "call_0"})),
        ("reject", json!({"callId": "call_0", "message": "no"})),
        ("answer", json!({"callId": "call_0", "value": "Paris"})),
        ("decline", json!({"callId": "call_0"})),
    ] {
        let url = format!("{base}/agents/approval/runs/{run}/{route}");
        let (status, text, _) = post(&url, Some(ERIN), &body).await;
        assert_eq!(status, 409, "{route}: {text}");
        let error = &serde_json::from_str::<Value>(&text).unwrap()["error"];
        assert_eq!(error["code"], "run_in_flight", "{route}: {text}");
        assert_eq!(error["run_id"], run, "{route}: {text}");
        assert!(error["message"].as_str().unwrap().contains(run), "{route}: {text}");
        assert_eq!(post(&url, Some(MALLORY), &body).await.0, 404, "{route}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_being_resumed_takes_no_decision_or_answer_until_it_ends() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let base = gated_server(Arc::clone(&runs), Arc::clone(&gate)).await;
    paused(&base, "t1", "p1").await;
    let control = format!("{base}/agents/approval/runs/p1");
    let (status, body, _) = post(&format!("{control}/approve"), Some(ERIN), &json!({"callId": "call_0"})).await;
    assert_eq!(status, 200, "{body}");

    // The run-control resume runs the approved call, held by the gate.
    let first = tokio::spawn({
        let resume = format!("{control}/resume");
        async move { post(&resume, Some(ERIN), &json!({})).await }
    });
    until_tool_runs(&runs, 1).await;
    every_record_is_refused(&base, "p1").await;

    gate.add_permits(100);
    let (status, body, _) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let done: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(done["status"], "completed", "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the approved call ran once");
    // The run is over: nothing waits to be decided.
    let (status, body, _) = post(&format!("{control}/approve"), Some(ERIN), &json!({"callId": "call_0"})).await;
    assert_eq!(status, 404, "{body}");

    // An AG-UI resume (under its own run id) claims the paused run the same way.
    gate.forget_permits(gate.available_permits());
    paused(&base, "t2", "p2").await;
    let mut resume = agui_input("t2", "r2");
    resume["resume"] = json!([{"interruptId": "p2#call_1", "status": "resolved", "payload": {"approved": true}}]);
    let second = tokio::spawn({
        let agui = format!("{base}/agui/approval");
        async move { post(&agui, Some(ERIN), &resume).await }
    });
    until_tool_runs(&runs, 2).await;
    let (status, text, _) = post(
        &format!("{base}/agents/approval/runs/p2/approve"),
        Some(ERIN),
        &json!({"callId": "call_1"}),
    )
    .await;
    assert_eq!(status, 409, "{text}");
    gate.add_permits(100);
    let (status, body, _) = second.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(sse_json(&body).last().unwrap()["outcome"]["type"], "success", "{body}");
}

/// A checkpoint store whose next save, once armed, waits until released (a slow database):
/// a decision being recorded is held between its read and its write.
#[derive(Default)]
struct HeldSave {
    inner: InMemoryCheckpointStore,
    armed: std::sync::atomic::AtomicBool,
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl CheckpointStore for HeldSave {
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
        self.inner.save(run_id, meta, state).await
    }
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        self.inner.delete(run_id).await
    }
    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        self.inner.list(query).await
    }
    async fn purge_expired(&self) -> Result<u64, StoreError> {
        self.inner.purge_expired().await
    }
}

/// A resume asked for while a decision on the same run is being recorded is refused (409),
/// not started: it would load the checkpoint without the decision and its own save would then
/// write over it. Once the decision is recorded the resume runs the approved call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_asked_for_while_a_decision_is_recorded_is_refused_not_raced() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(100));
    let store = Arc::new(HeldSave::default());
    let base = gated_server_with(Arc::clone(&runs), gate, Arc::clone(&store) as Arc<dyn CheckpointStore>).await;
    paused(&base, "t1", "p1").await;
    let control = format!("{base}/agents/approval/runs/p1");

    store.armed.store(true, Ordering::SeqCst);
    let approve = tokio::spawn({
        let url = format!("{control}/approve");
        async move { post(&url, Some(ERIN), &json!({"callId": "call_0"})).await }
    });
    store.entered.notified().await;
    let (status, text, _) = post(&format!("{control}/resume"), Some(ERIN), &json!({})).await;
    assert_eq!(status, 409, "{text}");
    let code = &serde_json::from_str::<Value>(&text).unwrap()["error"]["code"];
    assert_eq!(code, "run_id_in_use", "{text}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran");

    store.release.notify_one();
    let (status, text, _) = approve.await.unwrap();
    assert_eq!(status, 200, "{text}");
    let (status, body, _) = post(&format!("{control}/resume"), Some(ERIN), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let done: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(done["status"], "completed", "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the approved call ran once");
}

/// An AG-UI resume claims the paused run before it records its decision: a run-control resume
/// asked for while that decision is being saved is refused (409), not started from the
/// checkpoint without it. The AG-UI resume then runs the approved call, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_asked_for_while_an_agui_resume_records_its_decision_is_refused() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(100));
    let store = Arc::new(HeldSave::default());
    let base = gated_server_with(Arc::clone(&runs), gate, Arc::clone(&store) as Arc<dyn CheckpointStore>).await;
    paused(&base, "t1", "p1").await;

    store.armed.store(true, Ordering::SeqCst);
    let mut input = agui_input("t1", "r1");
    input["resume"] = json!([{"interruptId": "p1#call_0", "status": "resolved", "payload": {"approved": true}}]);
    let agui = tokio::spawn({
        let url = format!("{base}/agui/approval");
        async move { post(&url, Some(ERIN), &input).await }
    });
    store.entered.notified().await;
    let (status, text, _) = post(
        &format!("{base}/agents/approval/runs/p1/resume"),
        Some(ERIN),
        &json!({}),
    )
    .await;
    assert_eq!(status, 409, "{text}");
    let code = &serde_json::from_str::<Value>(&text).unwrap()["error"]["code"];
    assert_eq!(code, "run_id_in_use", "{text}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran");

    store.release.notify_one();
    let (status, body, _) = agui.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(sse_json(&body).last().unwrap()["type"], "RUN_FINISHED", "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the approved call ran once");
}
