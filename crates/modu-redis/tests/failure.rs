//! A Redis server that goes away: typed errors, no panic, nothing already stored is lost.
//!
//! Design: each test starts its own `redis-server` on a free loopback port with an append-only
//! file and `appendfsync always` (so every acknowledged write is on disk before the reply),
//! kills it with SIGKILL, checks that every store operation returns `StoreError::Backend`
//! (no panic, no hang), starts it again on the same port and directory, and checks that
//! everything written before the kill is still there and that the same connection works again.
//! These tests need `redis-server` on PATH (skipped locally without it, required under CI) but
//! not `REDIS_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modu_agent::{Agent, AgentRequest, RetryConfig};
use modu_core::{
    AgentError, CheckpointMeta, CheckpointStatus, CheckpointStore, ConversationStore, FunctionTool, MemoryStateStore,
    Message, StoreError, ToolSpec,
};
use modu_redis::{RedisCheckpointStore, RedisConversationStore, RedisMemoryStateStore};
use modu_testing::ScriptedModel;
use serde_json::json;
use support::{RedisServer, counting_tool};

fn assert_backend<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str, url: &str) {
    match r {
        Err(e @ StoreError::Backend { .. }) => {
            let text = e.to_string();
            assert!(text.contains("redis"), "{what}: {text}");
            assert!(!text.contains(url), "{what}: the error repeats the URL: {text}");
        }
        other => panic!("{what}: expected StoreError::Backend while redis is down, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_going_away_gives_typed_errors_and_keeps_stored_data() {
    let Some(mut server) = RedisServer::try_start() else {
        return;
    };
    let conn = modu_redis::connect(&server.url()).await.unwrap();
    let conv = RedisConversationStore::new(conn.clone()).with_prefix("t");
    let ckpt = RedisCheckpointStore::new(conn.clone()).with_prefix("t");
    let mem = RedisMemoryStateStore::new(conn.clone()).with_prefix("t");

    let meta = CheckpointMeta::new("agent", CheckpointStatus::Paused);
    let turn = vec![Message::user("안녕"), Message::assistant("hello")];
    conv.append("s1", &turn).await.unwrap();
    ckpt.save("run-1", &meta, &[0u8, 159, 146, 150, 255]).await.unwrap();
    mem.put("summary", "요약").await.unwrap();

    server.kill();

    let started = Instant::now();
    assert_backend(
        conv.append("s1", &[Message::user("lost")]).await,
        "append",
        &server.url(),
    );
    assert_backend(conv.load("s1").await, "load", &server.url());
    assert_backend(conv.list_sessions().await, "list_sessions", &server.url());
    assert_backend(
        ckpt.save("run-1", &meta, b"new").await,
        "checkpoint.save",
        &server.url(),
    );
    assert_backend(ckpt.load("run-1").await, "checkpoint.load", &server.url());
    assert_backend(mem.get("summary").await, "memory.get", &server.url());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "errors took {:?}: requests must fail, not wait for the server",
        started.elapsed()
    );

    server.restart();

    // The same stores (same connection manager) work again once the server is back, from the
    // very first request (it reconnects and retries once).
    let loaded = conv
        .load("s1")
        .await
        .expect("the first request after the restart succeeds");
    assert_eq!(loaded, turn, "the conversation written before the crash is intact");
    assert_eq!(ckpt.load("run-1").await.unwrap(), Some(vec![0u8, 159, 146, 150, 255]));
    assert_eq!(mem.get("summary").await.unwrap().as_deref(), Some("요약"));
    conv.append("s1", &[Message::user("after")]).await.unwrap();
    assert_eq!(conv.load("s1").await.unwrap().len(), 3);
}

/// The server dies mid-run, inside the second of two tool calls: the run fails with a
/// resumable store error (the checkpoint after that tool cannot be written), nothing panics;
/// after a restart `resume` completes the run. The first tool, whose result was checkpointed
/// before the crash, does not run again; the second one, in flight when the server died, does
/// (at-least-once for the call in flight — documented).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_dying_mid_run_gives_resumable_error_and_resume_completes() {
    let Some(server) = RedisServer::try_start() else { return };
    let server = Arc::new(Mutex::new(server));
    let url = server.lock().unwrap().url();
    let conn = modu_redis::connect(&url).await.unwrap();
    let conv: Arc<dyn ConversationStore> = Arc::new(RedisConversationStore::new(conn.clone()).with_prefix("m"));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(RedisCheckpointStore::new(conn.clone()).with_prefix("m"));

    let first = Arc::new(AtomicUsize::new(0));
    let second = Arc::new(AtomicUsize::new(0));
    let kill_once = Arc::new(AtomicUsize::new(0));
    let second_tool = {
        let (second, server, kill_once) = (Arc::clone(&second), Arc::clone(&server), Arc::clone(&kill_once));
        FunctionTool::<()>::new(
            ToolSpec::new(
                "second",
                "kills redis the first time",
                json!({"type": "object", "properties": {}}),
            ),
            move |_ctx, _args| {
                second.fetch_add(1, Ordering::SeqCst);
                if kill_once.fetch_add(1, Ordering::SeqCst) == 0 {
                    server.lock().unwrap().kill();
                }
                async { Ok(json!("second done")) }
            },
        )
    };
    let model = ScriptedModel::new()
        .tool_call("first", json!({}))
        .tool_call("second", json!({}))
        .text("all done");
    let agent = Agent::builder(model.clone())
        .tool(counting_tool("first", Arc::clone(&first)))
        .tool(second_tool)
        .retry(RetryConfig::none())
        .conversation_store(Arc::clone(&conv))
        .checkpoint_store(Arc::clone(&ckpt))
        .build()
        .unwrap();

    let failed = agent.run(AgentRequest::new((), "do both").session("s")).await;
    let err = failed.error().expect("the run must fail while redis is down");
    assert!(matches!(err, AgentError::Store { .. }), "{err:?}");
    assert!(err.is_resumable(), "{err:?}");
    assert!(!err.to_string().contains(&url), "{err}");
    assert_eq!(first.load(Ordering::SeqCst), 1);
    assert_eq!(second.load(Ordering::SeqCst), 1);

    server.lock().unwrap().restart();
    // The first request after the restart succeeds (the store reconnects and retries once).
    assert!(
        agent.has_checkpoint(failed.run_id()).await.unwrap(),
        "the checkpoint survived the crash"
    );

    let resumed = agent.resume(failed.run_id(), ()).await;
    assert!(resumed.error().is_none(), "{:?}", resumed.error());
    assert_eq!(resumed.output().map(String::as_str), Some("all done"));
    assert_eq!(
        first.load(Ordering::SeqCst),
        1,
        "the checkpointed tool call did not run again"
    );
    assert_eq!(
        second.load(Ordering::SeqCst),
        2,
        "the call in flight at the crash ran again"
    );
    let stored = conv.load("s").await.unwrap();
    assert_eq!(stored.first().map(Message::text).as_deref(), Some("do both"));
    assert_eq!(stored.last().map(Message::text).as_deref(), Some("all done"));
    assert_eq!(stored.iter().filter(|m| m.role == modu_core::Role::Tool).count(), 2);
    assert_eq!(
        ckpt.load(failed.run_id()).await.unwrap(),
        None,
        "a completed run deletes its checkpoint"
    );
}
