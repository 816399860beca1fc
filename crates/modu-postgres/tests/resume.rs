//! Resume on PostgreSQL stores, and bad checkpoints: a corrupted row and an unknown schema version
//! give typed errors, no panic, and nothing already stored is lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::{Agent, AgentRequest, RetryConfig};
use modu_core::{
    AgentError, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore, FunctionTool, Message,
    ModelError, Role, ToolSpec,
};
use modu_postgres::sqlx;
use modu_postgres::{PostgresCheckpointStore, PostgresConversationStore};
use modu_testing::ScriptedModel;
use serde_json::json;

fn counting_tool(name: &str, counter: Arc<AtomicUsize>) -> FunctionTool<()> {
    let spec = ToolSpec::new(name, "Counts its calls", json!({"type": "object", "properties": {}}));
    FunctionTool::new(spec, move |_ctx, _args| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok(json!({"call": n})) }
    })
}

struct Setup {
    agent: Agent<()>,
    conv: Arc<PostgresConversationStore>,
    ckpt: Arc<PostgresCheckpointStore>,
    calls: Arc<AtomicUsize>,
}

/// An agent on PostgreSQL stores (a fresh schema) whose model calls `count`, then fails with a retryable transport
/// error, then (on resume) answers.
async fn setup(url: &str, test: &str) -> Setup {
    let pool = support::fresh_pool(url, test).await;
    let conv = Arc::new(PostgresConversationStore::from_pool(pool.clone()).await.unwrap());
    let ckpt = Arc::new(PostgresCheckpointStore::from_pool(pool).await.unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("count", json!({}))
        .error(|| ModelError::Transport {
            message: "connection reset by peer".into(),
            source: None,
        })
        .text("counted once");
    let agent = Agent::builder(model)
        .tool(counting_tool("count", Arc::clone(&calls)))
        .retry(RetryConfig::none())
        .conversation_store(Arc::clone(&conv) as Arc<dyn ConversationStore>)
        .checkpoint_store(Arc::clone(&ckpt) as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    Setup {
        agent,
        conv,
        ckpt,
        calls,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_resume_after_model_failure_does_not_rerun_tools() {
    let Some(url) = support::url() else { return };
    let s = setup(&url, "resume").await;

    let failed = s.agent.run(AgentRequest::new((), "count, please").session("s1")).await;
    let err = failed.error().expect("the model failure must end the run");
    assert!(matches!(err, AgentError::Model { retryable: true, .. }), "{err:?}");
    assert!(err.is_resumable());
    assert_eq!(s.calls.load(Ordering::SeqCst), 1);
    assert!(s.ckpt.load(failed.run_id()).await.unwrap().is_some());
    assert!(s.conv.load("s1").await.unwrap().is_empty());

    let resumed = s.agent.resume(failed.run_id(), ()).await;
    assert!(resumed.error().is_none(), "{:?}", resumed.error());
    assert_eq!(resumed.output().map(String::as_str), Some("counted once"));
    assert_eq!(s.calls.load(Ordering::SeqCst), 1, "the tool ran exactly once in total");
    let stored = s.conv.load("s1").await.unwrap();
    let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    assert_eq!(
        s.ckpt.load(failed.run_id()).await.unwrap(),
        None,
        "completed run deleted its checkpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_corrupted_checkpoint_row_is_checkpoint_invalid() {
    let Some(url) = support::url() else { return };
    let s = setup(&url, "corrupt").await;
    // Something already stored: a finished conversation in another session.
    s.conv
        .append("other", &[Message::user("keep me"), Message::assistant("kept")])
        .await
        .unwrap();

    let failed = s.agent.run(AgentRequest::new((), "count").session("s1")).await;
    assert!(failed.error().is_some_and(AgentError::is_resumable));

    // Garbage bytes (not UTF-8, not JSON) straight into the row, bypassing the store.
    sqlx::query("UPDATE modu_checkpoints SET state = $1 WHERE run_id = $2")
        .bind(&[0xffu8, 0x00, 0xfe, b'{', 0x80][..])
        .bind(failed.run_id())
        .execute(s.ckpt.pool())
        .await
        .unwrap();
    let resumed = s.agent.resume(failed.run_id(), ()).await;
    assert!(
        matches!(&resumed.error(), Some(AgentError::CheckpointInvalid { run_id, .. }) if *run_id == failed.run_id()),
        "{:?}",
        resumed.error()
    );
    assert!(resumed.output().is_none());

    // Truncated JSON, written as text by another tool (the server converts it), is reported
    // the same way.
    sqlx::query("UPDATE modu_checkpoints SET state = convert_to($1, 'UTF8') WHERE run_id = $2")
        .bind("{\"schema_version\":1,\"run_id\":")
        .bind(failed.run_id())
        .execute(s.ckpt.pool())
        .await
        .unwrap();
    let resumed = s.agent.resume(failed.run_id(), ()).await;
    assert!(
        matches!(resumed.error(), Some(AgentError::CheckpointInvalid { .. })),
        "{:?}",
        resumed.error()
    );

    // Nothing else was touched: no tool ran again, the other conversation is intact.
    assert_eq!(s.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        s.conv.load("other").await.unwrap(),
        vec![Message::user("keep me"), Message::assistant("kept")]
    );
    assert!(s.conv.load("s1").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_checkpoint_of_unknown_schema_version_is_checkpoint_invalid() {
    let Some(url) = support::url() else { return };
    let s = setup(&url, "version").await;
    let failed = s.agent.run(AgentRequest::new((), "count").session("s1")).await;
    assert!(failed.error().is_some_and(AgentError::is_resumable));

    let bytes = s.ckpt.load(failed.run_id()).await.unwrap().unwrap();
    let mut state: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(state["schema_version"], json!(modu_agent::CHECKPOINT_SCHEMA_VERSION));
    state["schema_version"] = json!(999);
    // Saved again with the metadata the run loop wrote (a resumable failure).
    let listed = s.ckpt.list(&CheckpointQuery::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "{listed:?}");
    assert_eq!(listed.items[0].run_id, failed.run_id());
    assert_eq!(listed.items[0].meta.status, CheckpointStatus::Failed);
    assert_eq!(listed.items[0].meta.session_id.as_deref(), Some("s1"));
    s.ckpt
        .save(
            failed.run_id(),
            &listed.items[0].meta,
            &serde_json::to_vec(&state).unwrap(),
        )
        .await
        .unwrap();

    let resumed = s.agent.resume(failed.run_id(), ()).await;
    match &resumed.error() {
        Some(AgentError::CheckpointInvalid { message, .. }) => assert!(message.contains("999"), "{message}"),
        other => panic!("expected CheckpointInvalid, got {other:?}"),
    }
    assert_eq!(s.calls.load(Ordering::SeqCst), 1);
    // The checkpoint is kept as it was (an operator can inspect it).
    assert_eq!(
        s.ckpt.load(failed.run_id()).await.unwrap(),
        Some(serde_json::to_vec(&state).unwrap())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_hold_across_processes_on_postgres() {
    let Some(url) = support::url() else { return };
    let schema = support::schema("approvals");
    modu_agent::testing::approvals_across_processes(|| {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            // A new pool on the same schema: what another process would open.
            let pool = modu_postgres::connect_in_schema(&url, &schema).await.unwrap();
            Arc::new(PostgresCheckpointStore::from_pool(pool).await.unwrap()) as Arc<dyn CheckpointStore>
        }
    })
    .await;
}
