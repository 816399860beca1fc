//! Run context, sessions in the conversation store and resume from checkpoints.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modu_agent::{Agent, AgentRequest, RetryConfig};
use modu_core::{AgentError, InMemoryCheckpointStore, InMemoryConversationStore, ModelError, Role, UserContext};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::add_tool;

struct Tenant {
    name: String,
}

#[tokio::test]
async fn instructions_are_computed_from_the_run_context() {
    let model = ScriptedModel::new().text("hi").text("hi");
    let agent = Agent::builder(model.clone())
        .context::<Tenant>()
        .instructions_fn(|ctx| {
            format!(
                "You serve {} (roles: {}).",
                ctx.context().name,
                ctx.user().roles.join(",")
            )
        })
        .build()
        .unwrap();
    for name in ["acme", "globex"] {
        let request = AgentRequest::new(Tenant { name: name.into() }, "hello").user(UserContext::with_roles(["admin"]));
        assert!(agent.run(request).await.is_completed());
    }
    let requests = model.requests();
    assert_eq!(requests[0].messages[0].role, Role::System);
    assert_eq!(requests[0].messages[0].text(), "You serve acme (roles: admin).");
    assert_eq!(requests[1].messages[0].text(), "You serve globex (roles: admin).");
}

#[tokio::test]
async fn sessions_continue_through_the_conversation_store() {
    let store = Arc::new(InMemoryConversationStore::new());
    let model = ScriptedModel::new()
        .text("Nice to meet you, Ada.")
        .text("Your name is Ada.");
    let agent = Agent::builder(model.clone())
        .conversation_store(store.clone())
        .build()
        .unwrap();
    assert!(
        agent
            .run(AgentRequest::new((), "I am Ada.").session("s1"))
            .await
            .is_completed()
    );
    let second = agent.run(AgentRequest::new((), "What is my name?").session("s1")).await;
    assert_eq!(second.output().map(String::as_str), Some("Your name is Ada."));
    // The second request saw the first turn; the result holds only the new turn.
    assert_eq!(model.requests()[1].messages.len(), 3);
    assert_eq!(second.messages().len(), 2);
    use modu_core::ConversationStore;
    assert_eq!(store.load("s1").await.unwrap().len(), 4);
}

#[tokio::test]
async fn resume_continues_after_a_transient_failure_without_rerunning_tools() {
    let calls = Arc::new(AtomicUsize::new(0));
    let checkpoints = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .tool_call("add", json!({"a": 20, "b": 22}))
        .error(|| ModelError::Transport {
            message: "connection reset".into(),
            source: None,
        })
        .text("42");
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::clone(&calls)))
        .retry(RetryConfig::none())
        .checkpoint_store(checkpoints.clone())
        .build()
        .unwrap();
    let failed = agent.run("20 + 22?").await;
    let error = failed.error().unwrap();
    assert!(error.is_resumable(), "{error:?}");
    assert!(agent.has_checkpoint(failed.run_id()).await.unwrap());
    let resumed = agent.resume(failed.run_id(), ()).await;
    assert_eq!(
        resumed.output().map(String::as_str),
        Some("42"),
        "{:?}",
        resumed.error()
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the completed tool call was not run again"
    );
    assert!(resumed.stats().resumed);
    assert_eq!(resumed.messages().len(), 4);
    // A completed run deletes its checkpoint; resuming again is a typed error.
    assert!(!agent.has_checkpoint(failed.run_id()).await.unwrap());
    let again = agent.resume(failed.run_id(), ()).await;
    assert!(matches!(again.error(), Some(AgentError::CheckpointNotFound { .. })));
}

#[tokio::test]
async fn resume_refuses_an_incompatible_agent_and_corrupted_checkpoints() {
    use modu_core::CheckpointStore;
    let checkpoints = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new().error(|| ModelError::Timeout(Duration::from_secs(1)));
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .retry(RetryConfig::none())
        .checkpoint_store(checkpoints.clone())
        .build()
        .unwrap();
    let failed = agent.run("q").await;
    assert!(failed.error().unwrap().is_resumable());
    // Another agent: no tools.
    let other = Agent::builder(ScriptedModel::new().text("x"))
        .checkpoint_store(checkpoints.clone())
        .build()
        .unwrap();
    let r = other.resume(failed.run_id(), ()).await;
    assert!(
        matches!(r.error(), Some(AgentError::ResumeIncompatible { .. })),
        "{:?}",
        r.error()
    );
    // Corrupted bytes and an unknown schema version.
    checkpoints
        .save(
            "broken",
            &modu_core::CheckpointMeta::new("a", modu_core::CheckpointStatus::Failed),
            b"\x00\xffnot json",
        )
        .await
        .unwrap();
    let r = agent.resume("broken", ()).await;
    assert!(matches!(r.error(), Some(AgentError::CheckpointInvalid { .. })));
    checkpoints
        .save(
            "future",
            &modu_core::CheckpointMeta::new("a", modu_core::CheckpointStatus::Failed),
            br#"{"schema_version": 99, "run_id": "future"}"#,
        )
        .await
        .unwrap();
    let r = agent.resume("future", ()).await;
    match r.error() {
        Some(AgentError::CheckpointInvalid { message, .. }) => assert!(message.contains("99")),
        other => panic!("{other:?}"),
    }
}
