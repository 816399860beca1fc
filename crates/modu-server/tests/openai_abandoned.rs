//! The OpenAI-compatible route's runs in flight, over real HTTP on 127.0.0.1: what a client
//! that goes away mid-run leaves in the checkpoint store, and run control on a running run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::serve;
use modu_agent::Agent;
use modu_core::{CheckpointQuery, CheckpointStatus, CheckpointStore, FunctionTool, InMemoryCheckpointStore, ToolSpec};
use modu_server::ModuServer;
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

/// An agent whose model calls `slow`, a tool that takes a minute (counting its starts in
/// `started`), with its checkpoints in `store`.
fn slow_agent(store: Arc<InMemoryCheckpointStore>, started: Arc<AtomicUsize>) -> Agent {
    let spec = ToolSpec::new("slow", "Takes a minute", json!({"type": "object"}));
    let tool = FunctionTool::new(spec, move |_ctx: modu_core::RunContext<()>, _args: Value| {
        started.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(json!("done"))
        }
    });
    let model = ScriptedModel::new().tool_call("slow", json!({})).text("finished");
    Agent::builder(model)
        .name("slow")
        .tool(tool)
        .checkpoint_store(store)
        .build()
        .unwrap()
}

/// The store's checkpoints, as (run id, status).
async fn checkpoints(store: &InMemoryCheckpointStore) -> Vec<(String, CheckpointStatus)> {
    let page = store.list(&CheckpointQuery::default()).await.unwrap();
    page.items.into_iter().map(|s| (s.run_id, s.meta.status)).collect()
}

/// Waits up to 20 s for `done` to hold of the store's checkpoints.
async fn until(store: &InMemoryCheckpointStore, done: impl Fn(&[(String, CheckpointStatus)]) -> bool) -> bool {
    for _ in 0..200 {
        if done(&checkpoints(store).await) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A server with the slow agent, and a streamed run of it begun: the response (its opening
/// chunk read) and the run's id, which that chunk names (`chatcmpl-<run id>`).
struct Streamed {
    store: Arc<InMemoryCheckpointStore>,
    started: Arc<AtomicUsize>,
    base: String,
    response: reqwest::Response,
    run_id: String,
}

async fn streamed_slow_run() -> Streamed {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let started = Arc::new(AtomicUsize::new(0));
    let app = ModuServer::new()
        .agent("slow", slow_agent(store.clone(), started.clone()))
        .router();
    let base = serve(app).await;
    let body = json!({"model": "slow", "messages": [{"role": "user", "content": "go"}], "stream": true});
    let mut response = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The opening chunk names the run: `chatcmpl-<run id>`.
    let first = String::from_utf8(response.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    let chunk: Value = serde_json::from_str(common::sse_data(&first)[0].as_str()).unwrap();
    let run_id = chunk["id"]
        .as_str()
        .unwrap()
        .strip_prefix("chatcmpl-")
        .unwrap()
        .to_owned();
    Streamed {
        store,
        started,
        base,
        response,
        run_id,
    }
}

#[tokio::test]
async fn a_streamed_client_that_disconnects_mid_run_leaves_no_running_checkpoint() {
    let Streamed {
        store,
        started,
        base,
        response,
        run_id,
    } = streamed_slow_run().await;
    // The tool is running, and the run's checkpoint says so.
    assert!(
        until(&store, |c| c == [(run_id.clone(), CheckpointStatus::Running)]).await,
        "no running checkpoint: {:?}",
        checkpoints(&store).await
    );
    assert_eq!(started.load(Ordering::SeqCst), 1);
    // The client goes away mid-run.
    drop(response);
    assert!(
        until(&store, <[_]>::is_empty).await,
        "the abandoned run's checkpoint is left: {:?}",
        checkpoints(&store).await
    );
    // Nothing continues it, and nothing runs it again.
    let (status, _, _) = common::post(&format!("{base}/agents/slow/runs/{run_id}/resume"), None, &json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_that_disconnects_from_an_unstreamed_run_leaves_no_running_checkpoint() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let started = Arc::new(AtomicUsize::new(0));
    let app = ModuServer::new()
        .agent("slow", slow_agent(store.clone(), started.clone()))
        .router();
    let base = serve(app).await;
    let body = json!({"model": "slow", "messages": [{"role": "user", "content": "go"}]});
    let request = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .json(&body)
            .send()
            .await
    });
    assert!(
        until(&store, |c| c.len() == 1 && c[0].1 == CheckpointStatus::Running).await,
        "no running checkpoint: {:?}",
        checkpoints(&store).await
    );
    // The client goes away while the tool runs.
    request.abort();
    assert!(
        until(&store, <[_]>::is_empty).await,
        "the abandoned run's checkpoint is left: {:?}",
        checkpoints(&store).await
    );
    assert_eq!(started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_openai_run_in_flight_is_not_resumed_twice_and_run_control_cancels_it() {
    let Streamed {
        store,
        started,
        base,
        response,
        run_id,
    } = streamed_slow_run().await;
    assert!(until(&store, |c| c.len() == 1).await);
    assert_eq!(started.load(Ordering::SeqCst), 1);

    // Its owner (here: anonymous, as the run is) cannot resume it while it runs: that would
    // run its tool call a second time, alongside.
    let runs = format!("{base}/agents/slow/runs/{run_id}");
    let resume = reqwest::Client::new()
        .post(format!("{runs}/resume"))
        .timeout(Duration::from_secs(5))
        .json(&json!({}))
        .send()
        .await
        .expect("the resume of a running run must be refused at once, not run");
    assert_eq!(resume.status(), 409);
    let refused: Value = resume.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "run_id_in_use", "{refused}");
    assert_eq!(started.load(Ordering::SeqCst), 1, "the tool did not run again");

    // Its events are not kept: there is nothing to follow.
    let events = reqwest::Client::new()
        .get(format!("{runs}/events"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 404);

    // Run control cancels it: the stream ends with the error `cancelled`, its checkpoint kept.
    let (status, text, _) = common::post(&format!("{runs}/cancel"), None, &json!({})).await;
    assert_eq!(status, 202, "{text}");
    let rest = response.text().await.unwrap();
    let last = common::sse_json(&rest).pop().unwrap();
    assert_eq!(last["error"]["code"], "cancelled", "{rest}");
    assert_eq!(checkpoints(&store).await.len(), 1, "a cancelled run is resumable");
    // Ended, it is no longer in flight.
    let (status, _, _) = common::post(&format!("{runs}/cancel"), None, &json!({})).await;
    assert_eq!(status, 404);
}
