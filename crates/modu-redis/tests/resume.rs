//! Resume on Redis stores: a scripted model fails mid-run (after a tool call completed) with a
//! retryable error; `Agent::resume` completes the run without running the tool again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::{Agent, AgentRequest, RetryConfig};
use modu_core::{AgentError, CheckpointStore, ConversationStore, ModelError, Role};
use modu_redis::{RedisCheckpointStore, RedisConversationStore};
use modu_testing::{ScriptedModel, service_env, unique_prefix};
use serde_json::json;
use support::counting_tool;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_resume_after_model_failure_does_not_rerun_tools() {
    let Some(url) = service_env("REDIS_URL") else { return };
    let conn = modu_redis::connect(&url).await.unwrap();
    let prefix = unique_prefix("resume");
    let conv: Arc<dyn ConversationStore> = Arc::new(RedisConversationStore::new(conn.clone()).with_prefix(&prefix));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(RedisCheckpointStore::new(conn.clone()).with_prefix(&prefix));
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("count", json!({}))
        .error(|| ModelError::Transport {
            message: "connection reset by peer".into(),
            source: None,
        })
        .text("counted once");
    let agent = Agent::builder(model.clone())
        .tool(counting_tool("count", Arc::clone(&calls)))
        .retry(RetryConfig::none())
        .conversation_store(Arc::clone(&conv))
        .checkpoint_store(Arc::clone(&ckpt))
        .build()
        .unwrap();

    let failed = agent.run(AgentRequest::new((), "count, please").session("s1")).await;
    let err = failed.error().expect("the model failure must end the run");
    assert!(matches!(err, AgentError::Model { retryable: true, .. }), "{err:?}");
    assert!(err.is_resumable());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        ckpt.load(failed.run_id()).await.unwrap().is_some(),
        "a failed run keeps its checkpoint"
    );
    assert!(
        conv.load("s1").await.unwrap().is_empty(),
        "a failed run stores no conversation"
    );

    let resumed = agent.resume(failed.run_id(), ()).await;
    assert!(resumed.error().is_none(), "{:?}", resumed.error());
    assert_eq!(resumed.output().map(String::as_str), Some("counted once"));
    assert_eq!(resumed.run_id(), failed.run_id());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the tool ran exactly once in total");
    assert!(resumed.stats().resumed);

    let stored = conv.load("s1").await.unwrap();
    let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    assert_eq!(stored[3].text(), "counted once");
    assert_eq!(
        ckpt.load(failed.run_id()).await.unwrap(),
        None,
        "completed run deleted its checkpoint"
    );
    // A second resume has nothing to do.
    let again = agent.resume(failed.run_id(), ()).await;
    assert!(
        matches!(again.error(), Some(AgentError::CheckpointNotFound { .. })),
        "{:?}",
        again.error()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_hold_across_processes_on_redis() {
    let Some(url) = service_env("REDIS_URL") else { return };
    let prefix = unique_prefix("approvals");
    modu_agent::testing::approvals_across_processes(|| {
        let (url, prefix) = (url.clone(), prefix.clone());
        async move {
            // A new connection with the same prefix: what another process would open.
            let conn = modu_redis::connect(&url).await.unwrap();
            Arc::new(RedisCheckpointStore::new(conn).with_prefix(&prefix)) as Arc<dyn CheckpointStore>
        }
    })
    .await;
}
