//! The take-over test: a paused worker whose session lease was taken over cannot write.

use std::sync::Arc;
use std::time::{Duration, Instant};

use modu_agent::{Agent, AgentRequest};
use modu_chaos::{Backend, Stores};
use modu_core::{AgentError, FunctionTool, LeaseOptions, Role, ToolSpec};
use modu_testing::ScriptedModel;

/// A paused worker whose session was taken over cannot write: run A's tool blocks its runtime
/// (renewal starved, like a long pause) past the lease's ttl; run B on another worker takes the
/// session and completes; A wakes up and ends with `LeaseLost`, its checkpoint unchanged, and
/// the session holds only B's messages.
pub async fn taken_over_lease_cannot_write(backend: Backend, url: &str) {
    let prefix = modu_testing::unique_prefix("takeover");
    let ttl = Duration::from_millis(500);
    let pause = Duration::from_millis(2500);
    let session = "contested";
    let (paused_tx, paused_rx) = std::sync::mpsc::channel::<()>();
    let worker_a = {
        let (url, prefix) = (url.to_owned(), prefix.clone());
        std::thread::spawn(move || {
            // One thread: while the tool blocks it, nothing else of worker A runs (not the
            // lease renewal either).
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let stores = Stores::open(backend, &url, &prefix).await.unwrap();
                let pause_tool = FunctionTool::new(
                    ToolSpec::new("pause", "Pauses the worker.", serde_json::json!({"type": "object"})),
                    move |_ctx: modu_core::RunContext<()>, _args| {
                        let paused_tx = paused_tx.clone();
                        async move {
                            let _ = paused_tx.send(());
                            std::thread::sleep(pause);
                            Ok(serde_json::json!("woke up"))
                        }
                    },
                );
                let agent = Agent::builder(
                    ScriptedModel::new()
                        .tool_call("pause", serde_json::json!({}))
                        .text("a's answer"),
                )
                .name("takeover")
                .tool(pause_tool)
                .conversation_store(Arc::clone(&stores.conversations))
                .checkpoint_store(Arc::clone(&stores.checkpoints))
                .session_leases(
                    Arc::clone(&stores.leases),
                    LeaseOptions::new().ttl(ttl).holder("worker-a"),
                )
                .build()
                .unwrap();
                agent
                    .run(AgentRequest::new((), "from a").session(session).run_id("run-a"))
                    .await
            })
        })
    };
    paused_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("run A reached its tool");
    let stores = Stores::open(backend, url, &prefix).await.unwrap();
    let before = stores.checkpoints.load("run-a").await.unwrap();
    assert!(before.is_some(), "run A saved its checkpoint before the tool");

    // Worker B: the lease expires while A is paused, B takes the session and completes.
    let agent_b = Agent::builder(ScriptedModel::new().text("b's answer"))
        .name("takeover")
        .conversation_store(Arc::clone(&stores.conversations))
        .checkpoint_store(Arc::clone(&stores.checkpoints))
        .session_leases(
            Arc::clone(&stores.leases),
            LeaseOptions::new()
                .ttl(ttl)
                .wait(Duration::from_secs(10))
                .holder("worker-b"),
        )
        .build()
        .unwrap();
    let t = Instant::now();
    let b = agent_b
        .run(AgentRequest::new((), "from b").session(session).run_id("run-b"))
        .await;
    assert_eq!(b.error(), None);
    assert_eq!(b.output().map(String::as_str), Some("b's answer"));
    assert!(
        t.elapsed() < pause,
        "B completed while A was still paused ({:?})",
        t.elapsed()
    );

    let a = tokio::task::spawn_blocking(move || worker_a.join().unwrap())
        .await
        .unwrap();
    assert!(
        matches!(&a.error(), Some(AgentError::LeaseLost { session_id }) if session_id == session),
        "run A ends with LeaseLost: {:?}",
        a.error()
    );
    let history = stores.conversations.load(session).await.unwrap();
    let texts: Vec<(Role, String)> = history.iter().map(|m| (m.role, m.text())).collect();
    assert_eq!(
        texts,
        vec![
            (Role::User, "from b".to_owned()),
            (Role::Assistant, "b's answer".to_owned())
        ],
        "the session holds only the new holder's writes"
    );
    assert_eq!(
        stores.checkpoints.load("run-a").await.unwrap(),
        before,
        "run A's checkpoint was not written after the take-over"
    );
}
