//! A worker that dies between a run's conversation append and the removal of its checkpoint.
//!
//! A run that completes appends its messages to the session (fenced), then deletes its
//! checkpoint (fenced), then releases the lease. A worker that dies between the first two
//! leaves a `running` checkpoint of a run whose messages are already in the session; another
//! worker's `recover_orphans` then continues it from that checkpoint and appends the run a
//! second time. This test holds the checkpoint removal back (as a SIGKILL at that point would),
//! drops the run, and recovers it on another agent: the session must hold the run once.
//!
//! The claim sees the run's messages where the run started (`history_len` in its checkpoint),
//! removes the checkpoint and continues nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use modu_agent::{Agent, AgentRequest};
use modu_core::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStore, Fence, InMemoryCheckpointStore,
    InMemoryConversationStore, InMemoryLeaseStore, LeaseOptions, Role, StoreError,
};
use modu_testing::ScriptedModel;

/// Checkpoints whose fenced delete never returns (the worker "dies" right before it).
struct StuckDelete {
    inner: Arc<dyn CheckpointStore>,
}

#[async_trait]
impl CheckpointStore for StuckDelete {
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
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
    async fn save_fenced(
        &self,
        run_id: &str,
        meta: &CheckpointMeta,
        state: &[u8],
        fence: &Fence,
    ) -> Result<(), StoreError> {
        self.inner.save_fenced(run_id, meta, state, fence).await
    }
    async fn delete_fenced(&self, _run_id: &str, _fence: &Fence) -> Result<(), StoreError> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_run_killed_between_its_append_and_its_checkpoint_removal_is_stored_once() {
    let leases = InMemoryLeaseStore::new();
    let conversations: Arc<dyn modu_core::ConversationStore> =
        Arc::new(leases.fence_conversations(InMemoryConversationStore::new()));
    let checkpoints: Arc<dyn CheckpointStore> = Arc::new(leases.fence_checkpoints(InMemoryCheckpointStore::new()));
    let ttl = Duration::from_millis(200);
    let agent = |model: ScriptedModel, checkpoints: Arc<dyn CheckpointStore>, holder: &str| {
        Agent::builder(model)
            .name("chaos")
            .tool(modu_core::FunctionTool::new(
                modu_core::ToolSpec::new("noop", "Does nothing.", serde_json::json!({"type": "object"})),
                |_ctx: modu_core::RunContext<()>, _args| async { Ok(serde_json::json!("ok")) },
            ))
            .conversation_store(Arc::clone(&conversations))
            .checkpoint_store(checkpoints)
            .session_leases(leases.clone(), LeaseOptions::new().ttl(ttl).holder(holder))
            .build()
            .unwrap()
    };
    let dying = agent(
        ScriptedModel::new()
            .tool_call("noop", serde_json::json!({}))
            .text("first answer"),
        Arc::new(StuckDelete {
            inner: Arc::clone(&checkpoints),
        }),
        "worker-1",
    );
    let run = tokio::spawn(async move {
        dying
            .run(AgentRequest::new((), "hello").session("s").run_id("run-1"))
            .await
    });
    // The run appended its messages and is stuck before the checkpoint's removal: it dies.
    let mut waited = Duration::ZERO;
    while conversations.load("s").await.unwrap().is_empty() {
        assert!(waited < Duration::from_secs(5), "the run never appended");
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += Duration::from_millis(10);
    }
    run.abort();
    let _ = run.await;
    assert!(checkpoints.load("run-1").await.unwrap().is_some());

    // Another worker recovers orphans once the lease expired.
    tokio::time::sleep(ttl * 2).await;
    let recoverer = agent(
        ScriptedModel::new().text("second answer").cycle(),
        Arc::clone(&checkpoints),
        "worker-2",
    );
    let _ = recoverer.recover_orphans(()).await.unwrap();
    let users = conversations
        .load("s")
        .await
        .unwrap()
        .iter()
        .filter(|m| m.role == Role::User)
        .count();
    assert_eq!(users, 1, "the run is stored once");
}
