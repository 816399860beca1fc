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
//! removes the checkpoint and continues nothing. A run resumed after its session moved on
//! appends where the session ends then, and its checkpoint says so before it goes on.
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

/// Checkpoints whose fenced delete never returns (the worker "dies" right before it), or, with
/// `saves_before_stuck`, whose fenced saves stop returning after that many.
struct StuckDelete {
    inner: Arc<dyn CheckpointStore>,
    saves_before_stuck: Option<std::sync::atomic::AtomicUsize>,
}

impl StuckDelete {
    fn on_delete(inner: &Arc<dyn CheckpointStore>) -> Arc<dyn CheckpointStore> {
        Arc::new(StuckDelete {
            inner: Arc::clone(inner),
            saves_before_stuck: None,
        })
    }

    fn after_saves(inner: &Arc<dyn CheckpointStore>, saves: usize) -> Arc<dyn CheckpointStore> {
        Arc::new(StuckDelete {
            inner: Arc::clone(inner),
            saves_before_stuck: Some(std::sync::atomic::AtomicUsize::new(saves)),
        })
    }
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
        if let Some(left) = &self.saves_before_stuck {
            let taken = left.fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| n.checked_sub(1),
            );
            if taken.is_err() {
                std::future::pending::<()>().await;
            }
        }
        self.inner.save_fenced(run_id, meta, state, fence).await
    }
    async fn delete_fenced(&self, _run_id: &str, _fence: &Fence) -> Result<(), StoreError> {
        std::future::pending().await
    }
}

/// Workers of one agent over shared in-memory stores with fenced session leases.
struct Workers {
    leases: InMemoryLeaseStore,
    conversations: Arc<dyn modu_core::ConversationStore>,
    checkpoints: Arc<dyn CheckpointStore>,
    ttl: Duration,
}

impl Workers {
    fn new() -> Self {
        let leases = InMemoryLeaseStore::new();
        Workers {
            conversations: Arc::new(leases.fence_conversations(InMemoryConversationStore::new())),
            checkpoints: Arc::new(leases.fence_checkpoints(InMemoryCheckpointStore::new())),
            leases,
            ttl: Duration::from_millis(200),
        }
    }

    /// A worker's agent (one tool, `noop`), its checkpoints through `checkpoints`.
    fn agent(&self, model: ScriptedModel, checkpoints: Arc<dyn CheckpointStore>, holder: &str) -> Agent {
        Agent::builder(model)
            .name("chaos")
            .tool(modu_core::FunctionTool::new(
                modu_core::ToolSpec::new("noop", "Does nothing.", serde_json::json!({"type": "object"})),
                |_ctx: modu_core::RunContext<()>, _args| async { Ok(serde_json::json!("ok")) },
            ))
            .conversation_store(Arc::clone(&self.conversations))
            .checkpoint_store(checkpoints)
            .session_leases(self.leases.clone(), LeaseOptions::new().ttl(self.ttl).holder(holder))
            .build()
            .unwrap()
    }

    /// The user messages of session `s`, in order.
    async fn user_texts(&self) -> Vec<String> {
        self.conversations
            .load("s")
            .await
            .unwrap()
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| m.text())
            .collect()
    }
}

/// Waits until `done` holds, for at most five seconds.
async fn wait_until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let mut waited = Duration::ZERO;
    while !done().await {
        assert!(waited < Duration::from_secs(5), "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += Duration::from_millis(10);
    }
}

#[tokio::test]
async fn a_run_killed_between_its_append_and_its_checkpoint_removal_is_stored_once() {
    let w = Workers::new();
    let checkpoints = Arc::clone(&w.checkpoints);
    let dying = w.agent(
        ScriptedModel::new()
            .tool_call("noop", serde_json::json!({}))
            .text("first answer"),
        StuckDelete::on_delete(&checkpoints),
        "worker-1",
    );
    let run = tokio::spawn(async move {
        dying
            .run(AgentRequest::new((), "hello").session("s").run_id("run-1"))
            .await
    });
    // The run appended its messages and is stuck before the checkpoint's removal: it dies.
    wait_until("the run never appended", || async { !w.user_texts().await.is_empty() }).await;
    run.abort();
    let _ = run.await;
    assert!(checkpoints.load("run-1").await.unwrap().is_some());

    // Another worker recovers orphans once the lease expired.
    tokio::time::sleep(w.ttl * 2).await;
    let recoverer = w.agent(
        ScriptedModel::new().text("second answer").cycle(),
        Arc::clone(&checkpoints),
        "worker-2",
    );
    let _ = recoverer.recover_orphans(()).await.unwrap();
    assert_eq!(w.user_texts().await.len(), 1, "the run is stored once");
}

/// A run dies after its first checkpoint; another run of the session completes meanwhile; the
/// first is resumed, appends after the other's messages and dies before removing its
/// checkpoint; a last claim must find it stored there, not run it a second time.
#[tokio::test]
async fn a_run_resumed_after_its_session_moved_on_is_still_stored_once() {
    let w = Workers::new();
    let checkpoints = Arc::clone(&w.checkpoints);

    // run-1 saves its first checkpoint (the session empty) and its worker dies.
    let first = w.agent(
        ScriptedModel::new()
            .tool_call("noop", serde_json::json!({}))
            .text("first answer"),
        StuckDelete::after_saves(&checkpoints, 1),
        "worker-1",
    );
    let run = tokio::spawn(async move {
        first
            .run(AgentRequest::new((), "first question").session("s").run_id("run-1"))
            .await
    });
    wait_until("run-1 never saved its checkpoint", || async {
        checkpoints.load("run-1").await.unwrap().is_some()
    })
    .await;
    run.abort();
    let _ = run.await;

    // Once the lease expired, run-2 of the same session completes.
    tokio::time::sleep(w.ttl * 2).await;
    let other = w.agent(
        ScriptedModel::new().text("second answer"),
        Arc::clone(&checkpoints),
        "worker-2",
    );
    let outcome = other
        .run(AgentRequest::new((), "second question").session("s").run_id("run-2"))
        .await;
    assert!(outcome.is_completed(), "{:?}", outcome.error());

    // run-1 is resumed after run-2's messages, appends, and dies before removing its checkpoint.
    let resumer = w.agent(
        ScriptedModel::new()
            .tool_call("noop", serde_json::json!({}))
            .text("first answer"),
        StuckDelete::on_delete(&checkpoints),
        "worker-3",
    );
    let recovery = tokio::spawn(async move { resumer.recover_orphans(()).await });
    wait_until("run-1 was never appended", || async { w.user_texts().await.len() == 2 }).await;
    recovery.abort();
    let _ = recovery.await;
    assert_eq!(w.user_texts().await, ["second question", "first question"]);

    // The last claim finds run-1 in the session and removes its checkpoint.
    tokio::time::sleep(w.ttl * 2).await;
    let last = w.agent(
        ScriptedModel::new().text("again").cycle(),
        Arc::clone(&checkpoints),
        "worker-4",
    );
    let _ = last.recover_orphans(()).await.unwrap();
    assert_eq!(
        w.user_texts().await,
        ["second question", "first question"],
        "run-1 is stored once"
    );
    assert!(checkpoints.load("run-1").await.unwrap().is_none());
}
