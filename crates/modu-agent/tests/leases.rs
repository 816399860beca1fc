//! Session leases on the in-memory stores: the conformance suite, and what an agent does with
//! them (busy sessions, waiting, a run that lost its lease, orphaned runs recovered once).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use modu_core::{InMemoryCheckpointStore, InMemoryConversationStore, InMemoryLeaseStore};
use modu_testing::conformance::{self, FencedStores};

#[tokio::test]
async fn in_memory_leases_pass_the_conformance_suite() {
    conformance::lease_store_suite(|| async {
        let leases = InMemoryLeaseStore::new();
        FencedStores {
            conversations: Arc::new(leases.fence_conversations(InMemoryConversationStore::new())),
            checkpoints: Arc::new(leases.fence_checkpoints(InMemoryCheckpointStore::new())),
            leases: Arc::new(leases),
        }
    })
    .await;
}

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use modu_agent::Agent;
use modu_core::model::{ChatEvent, FinishReason};
use modu_core::{
    AgentError, CheckpointStore, ConversationStore, FunctionTool, Lease, LeaseOptions, LeaseStore, Role, StoreError,
    ToolSpec,
};
use modu_testing::ScriptedModel;

/// One backend shared by every worker of a test.
#[derive(Clone)]
struct Backend {
    leases: InMemoryLeaseStore,
    conversations: Arc<dyn ConversationStore>,
    checkpoints: Arc<dyn CheckpointStore>,
    /// How many times the `work` tool started.
    calls: Arc<AtomicUsize>,
}

fn backend() -> Backend {
    let leases = InMemoryLeaseStore::new();
    Backend {
        conversations: Arc::new(leases.fence_conversations(InMemoryConversationStore::new())),
        checkpoints: Arc::new(leases.fence_checkpoints(InMemoryCheckpointStore::new())),
        leases,
        calls: Arc::new(AtomicUsize::new(0)),
    }
}

/// A model that calls `work` once per run, then answers "done".
fn model() -> ScriptedModel {
    ScriptedModel::new()
        .respond(|request| {
            if request.messages.last().is_some_and(|m| m.role == Role::Tool) {
                vec![
                    ChatEvent::TextDelta { text: "done".into() },
                    ChatEvent::Finish {
                        reason: FinishReason::Stop,
                    },
                ]
            } else {
                vec![
                    ChatEvent::ToolCallDelta {
                        index: 0,
                        id: Some(format!("call_{}", request.messages.len())),
                        name: Some("work".into()),
                        arguments: "{}".into(),
                    },
                    ChatEvent::Finish {
                        reason: FinishReason::ToolCalls,
                    },
                ]
            }
        })
        .cycle()
}

/// A worker: an agent on the shared backend whose `work` tool sleeps `work`.
fn worker(b: &Backend, leases: impl LeaseStore + 'static, options: LeaseOptions, work: Duration) -> Agent {
    leased_agent(b, leases, options, sleeping_tool(b, work, false))
}

/// The `work` tool: counts its calls, then sleeps `work`; needing approval when `approval`.
fn sleeping_tool(b: &Backend, work: Duration, approval: bool) -> FunctionTool<()> {
    let calls = Arc::clone(&b.calls);
    FunctionTool::<()>::new(
        ToolSpec::new("work", "Work a while", serde_json::json!({"type": "object"})).needs_approval(approval),
        move |_ctx, _args| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(work).await;
                Ok(serde_json::json!("worked"))
            }
        },
    )
}

/// An agent on the shared backend, under its leases, with `tool`.
fn leased_agent(
    b: &Backend,
    leases: impl LeaseStore + 'static,
    options: LeaseOptions,
    tool: FunctionTool<()>,
) -> Agent {
    Agent::builder(model())
        .name("leased")
        .tool(tool)
        .conversation_store(Arc::clone(&b.conversations))
        .checkpoint_store(Arc::clone(&b.checkpoints))
        .session_leases(leases, options)
        .build()
        .unwrap()
}

fn opts(holder: &str) -> LeaseOptions {
    LeaseOptions::new().holder(holder).ttl(Duration::from_millis(150))
}

async fn history(b: &Backend, session: &str) -> Vec<String> {
    b.conversations
        .load(session)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.text())
        .collect()
}

#[tokio::test]
async fn a_busy_session_fails_fast_or_waits_its_turn() {
    let b = backend();
    let w1 = worker(&b, b.leases.clone(), opts("w1"), Duration::from_millis(400));
    let impatient = worker(&b, b.leases.clone(), opts("w2"), Duration::ZERO);
    let patient = worker(
        &b,
        b.leases.clone(),
        opts("w3").wait(Duration::from_secs(5)),
        Duration::ZERO,
    );

    let first = tokio::spawn({
        let w1 = w1.clone();
        async move { w1.run(modu_agent::AgentRequest::new((), "first").session("s")).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let busy = impatient
        .run(modu_agent::AgentRequest::new((), "impatient").session("s"))
        .await;
    assert!(
        matches!(&busy.error(), Some(AgentError::SessionBusy { session_id }) if session_id == "s"),
        "{:?}",
        busy.error()
    );
    assert!(!busy.run_id().is_empty(), "a busy result names its run");
    // Another session is not busy.
    let other = impatient
        .run(modu_agent::AgentRequest::new((), "elsewhere").session("t"))
        .await;
    assert!(other.is_completed(), "{:?}", other.error());

    let second = patient
        .run(modu_agent::AgentRequest::new((), "second").session("s"))
        .await;
    assert!(second.is_completed(), "{:?}", second.error());
    let first = first.await.unwrap();
    assert!(first.is_completed(), "{:?}", first.error());
    // The first run renewed its lease for 400 ms on a 150 ms ttl, and the runs did not interleave.
    assert_eq!(history(&b, "s").await, ["first", "second"]);
    assert_eq!(b.conversations.load("s").await.unwrap().len(), 8);
}

/// Leases whose renewals fail, as for a worker cut off from its store.
struct Partitioned(InMemoryLeaseStore);

#[async_trait]
impl LeaseStore for Partitioned {
    async fn acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        self.0.acquire(key, holder, ttl).await
    }
    async fn renew(&self, _lease: &Lease) -> Result<(), StoreError> {
        Err(StoreError::Timeout)
    }
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.0.release(lease).await
    }
}

#[tokio::test]
async fn a_run_whose_session_was_taken_over_cannot_write() {
    let b = backend();
    let cut_off = worker(
        &b,
        Partitioned(b.leases.clone()),
        opts("w1"),
        Duration::from_millis(500),
    );
    let w2 = worker(
        &b,
        b.leases.clone(),
        opts("w2").wait(Duration::from_secs(5)),
        Duration::ZERO,
    );

    let stale = tokio::spawn({
        let cut_off = cut_off.clone();
        async move {
            cut_off
                .run(modu_agent::AgentRequest::new((), "stale").session("s"))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // w1's lease expires (it cannot renew); w2 takes the session over and completes a run.
    let fresh = w2.run(modu_agent::AgentRequest::new((), "fresh").session("s")).await;
    assert!(fresh.is_completed(), "{:?}", fresh.error());

    let stale = stale.await.unwrap();
    assert!(
        matches!(&stale.error(), Some(AgentError::LeaseLost { session_id }) if session_id == "s"),
        "{:?}",
        stale.error()
    );
    assert!(!stale.error().unwrap().is_resumable());
    assert_eq!(
        history(&b, "s").await,
        ["fresh"],
        "only the new holder's run is in the history"
    );
}

#[tokio::test]
async fn an_orphaned_run_is_recovered_by_exactly_one_worker() {
    let b = backend();
    let dying = worker(&b, b.leases.clone(), opts("w1"), Duration::from_secs(30));
    let w2 = worker(&b, b.leases.clone(), opts("w2"), Duration::ZERO);
    let w3 = worker(&b, b.leases.clone(), opts("w3"), Duration::ZERO);

    // w1 dies in the middle of its tool call: its run is dropped and stops renewing.
    let run = tokio::spawn(async move {
        dying
            .run(modu_agent::AgentRequest::new((), "orphan").session("s").run_id("r-1"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    run.abort();
    assert_eq!(b.calls.load(Ordering::SeqCst), 1);

    // While the dead worker's lease lives, nobody claims the run.
    assert!(w2.recover_orphans(()).await.unwrap().is_empty());

    tokio::time::sleep(Duration::from_millis(200)).await;
    let (a, c) = tokio::join!(w2.recover_orphans(()), w3.recover_orphans(()));
    let recovered: Vec<_> = a.unwrap().into_iter().chain(c.unwrap()).collect();
    assert_eq!(recovered.len(), 1, "one claimer: {recovered:?}");
    assert_eq!(recovered[0].run_id(), "r-1");
    assert_eq!(
        recovered[0].output().map(String::as_str),
        Some("done"),
        "{:?}",
        recovered[0].error()
    );
    assert_eq!(history(&b, "s").await, ["orphan"]);
    // The call in flight when the worker died ran again, once.
    assert_eq!(b.calls.load(Ordering::SeqCst), 2);
    // Nothing is left to recover.
    assert!(w3.recover_orphans(()).await.unwrap().is_empty());
    assert_eq!(b.checkpoints.load("r-1").await.unwrap(), None);
}

#[tokio::test]
async fn leases_need_stores_with_fenced_writes() {
    let b = backend();
    let agent = Agent::builder(model())
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .session_leases(b.leases.clone(), opts("w1"))
        .build()
        .unwrap();
    let result = agent.run(modu_agent::AgentRequest::new((), "hi").session("s")).await;
    let message = result.error().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("does not support checkpoint.save_fenced"), "{message}");
    // Without checkpoints and sessions there is nothing to fence.
    let plain = Agent::builder(ScriptedModel::new().text("hi"))
        .session_leases(b.leases.clone(), opts("w1"))
        .build()
        .unwrap();
    assert!(plain.run("hi").await.is_completed());
    assert!(
        plain.recover_orphans(()).await.is_err(),
        "recovery needs a checkpoint store"
    );
}

/// A worker: like [`worker`], but its `work` tool needs approval.
fn approving_worker(b: &Backend, holder: &str, work: Duration) -> Agent {
    leased_agent(b, b.leases.clone(), opts(holder), sleeping_tool(b, work, true))
}

/// A worker that dies inside a call it resumed after approval leaves a `running` run, which
/// `recover_orphans` continues (the approved call runs again: at least once).
#[tokio::test]
async fn a_run_resumed_after_approval_whose_worker_dies_is_recovered() {
    let b = backend();
    let dying = approving_worker(&b, "w1", Duration::from_secs(30));
    let w2 = approving_worker(&b, "w2", Duration::ZERO);
    let paused = dying
        .run(
            modu_agent::AgentRequest::new((), "approve me")
                .session("s")
                .run_id("r-a"),
        )
        .await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let call = paused.approvals()[0].call_id.clone();
    dying.approve("r-a", &call).await.unwrap();
    // Paused and decided, but not resumed: nobody may take it over.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(w2.recover_orphans(()).await.unwrap().is_empty());

    let resumed = tokio::spawn(async move { dying.resume("r-a", ()).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    resumed.abort();
    assert_eq!(b.calls.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let recovered = w2.recover_orphans(()).await.unwrap();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(
        recovered[0].output().map(String::as_str),
        Some("done"),
        "{:?}",
        recovered[0].error()
    );
    assert_eq!(b.calls.load(Ordering::SeqCst), 2, "the approved call ran again, once");
    assert_eq!(b.checkpoints.load("r-a").await.unwrap(), None);
}

/// An answered ask keeps its run paused until its owner resumes it: another worker's
/// `recover_orphans` does not take it over.
#[tokio::test]
async fn an_answered_ask_is_not_taken_over_by_recovery() {
    let b = backend();
    let asking = |holder: &str| {
        let calls = Arc::clone(&b.calls);
        let tool = FunctionTool::<()>::new(
            ToolSpec::new("work", "Work a while", serde_json::json!({"type": "object"})),
            move |ctx: modu_core::RunContext<()>, _args| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    let answer = ctx.ask_user("How long?", serde_json::json!({"type": "string"}))?;
                    Ok(serde_json::json!(format!("worked {answer}")))
                }
            },
        );
        leased_agent(&b, b.leases.clone(), opts(holder), tool)
    };
    let owner = asking("w1");
    let other = asking("w2");
    let paused = owner
        .run(modu_agent::AgentRequest::new((), "ask me").session("s").run_id("r-i"))
        .await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    owner
        .answer("r-i", &paused.inputs()[0].call_id, serde_json::json!("an hour"))
        .await
        .unwrap();
    assert!(owner.pending_inputs("r-i").await.unwrap().is_empty(), "answered");
    // Answering again is refused: the ask no longer waits.
    assert!(matches!(
        owner
            .answer("r-i", &paused.inputs()[0].call_id, serde_json::json!("a day"))
            .await,
        Err(AgentError::UnknownInput { .. })
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        other.recover_orphans(()).await.unwrap().is_empty(),
        "a paused run is not an orphan"
    );
    let done = owner.resume("r-i", ()).await;
    assert_eq!(done.output().map(String::as_str), Some("done"), "{:?}", done.error());
    assert_eq!(
        b.calls.load(Ordering::SeqCst),
        2,
        "asked once, ran again with the answer"
    );
}

/// A checkpoint store whose saves take a while (a slow network), over the shared one.
struct SlowSaves(Arc<dyn CheckpointStore>);

#[async_trait]
impl CheckpointStore for SlowSaves {
    async fn save(&self, run_id: &str, meta: &modu_core::CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.0.save(run_id, meta, state).await
    }
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        self.0.delete(run_id).await
    }
    async fn list(&self, query: &modu_core::CheckpointQuery) -> Result<modu_core::CheckpointPage, StoreError> {
        self.0.list(query).await
    }
    async fn purge_expired(&self) -> Result<u64, StoreError> {
        self.0.purge_expired().await
    }
    async fn save_fenced(
        &self,
        run_id: &str,
        meta: &modu_core::CheckpointMeta,
        state: &[u8],
        fence: &modu_core::Fence,
    ) -> Result<(), StoreError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.0.save_fenced(run_id, meta, state, fence).await
    }
    async fn delete_fenced(&self, run_id: &str, fence: &modu_core::Fence) -> Result<(), StoreError> {
        self.0.delete_fenced(run_id, fence).await
    }
}

/// A decision recorded by one worker while another resumes the run never lands after that
/// resume went on: with leases the decision holds the session's lease, so the resume waits for
/// it (or it waits for the resume). Here the decision's save is slow; the resume must not finish
/// in between and have its finished run brought back by that save.
#[tokio::test]
async fn a_decision_and_a_resume_in_two_workers_do_not_interleave() {
    let b = backend();
    let owner = approving_worker(&b, "w1", Duration::ZERO);
    let slow_backend = Backend {
        checkpoints: Arc::new(SlowSaves(Arc::clone(&b.checkpoints))),
        ..b.clone()
    };
    let reviewer = approving_worker(&slow_backend, "w2", Duration::ZERO);
    let paused = owner
        .run(
            modu_agent::AgentRequest::new((), "approve me")
                .session("s")
                .run_id("r-d"),
        )
        .await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let call = paused.approvals()[0].call_id.clone();
    owner.approve("r-d", &call).await.unwrap();

    // The reviewer's approve_always (a save) starts first; the owner's resume right after.
    let decided = {
        let call = call.clone();
        tokio::spawn(async move { reviewer.approve_always("r-d", &call).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The reviewer holds the session's lease while it saves: the resume (which does not wait
    // here) is refused before it reads anything, and goes on once the decision is stored.
    let refused = owner.resume("r-d", ()).await;
    assert!(
        matches!(refused.error(), Some(AgentError::SessionBusy { .. })),
        "{:?}",
        refused.error()
    );
    decided.await.unwrap().unwrap();
    let done = owner.resume("r-d", ()).await;
    assert_eq!(done.output().map(String::as_str), Some("done"), "{:?}", done.error());
    assert_eq!(b.calls.load(Ordering::SeqCst), 1, "the approved call ran once");
    assert_eq!(
        b.checkpoints.load("r-d").await.unwrap(),
        None,
        "the finished run's checkpoint stays gone"
    );
}

/// A decision waits a moment for its session's lease: a second reviewer deciding while another
/// decision (or any short hold) has the session gets through once it is free, instead of
/// failing with `SessionBusy` at once (the agent's `wait` is zero here, the default).
#[tokio::test]
async fn a_decision_waits_for_a_short_hold_on_its_session() {
    let b = backend();
    let agent = approving_worker(&b, "w1", Duration::ZERO);
    let paused = agent
        .run(
            modu_agent::AgentRequest::new((), "approve me")
                .session("s")
                .run_id("r-e"),
        )
        .await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let call = paused.approvals()[0].call_id.clone();
    // Someone else (another reviewer's decision, say) holds the session for a moment.
    let hold = b
        .leases
        .acquire("s", "reviewer-2", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the session is free");
    let leases = b.leases.clone();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        leases.release(&hold).await.unwrap();
    });
    agent
        .approve("r-e", &call)
        .await
        .expect("the decision waited for the session");
    release.await.unwrap();
    // A run (not a decision) still fails fast on a busy session, as configured.
    let hold = b
        .leases
        .acquire("s", "other", Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let busy = agent.resume("r-e", ()).await;
    assert!(
        matches!(busy.error(), Some(AgentError::SessionBusy { .. })),
        "{:?}",
        busy.error()
    );
    b.leases.release(&hold).await.unwrap();
    let done = agent.resume("r-e", ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(b.calls.load(Ordering::SeqCst), 1);
}

/// A worker that finds more orphaned runs than it continues at a time recovers them all, at
/// most `RECOVER_CONCURRENCY` at once (hundreds at once starved each other's lease renewals).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_orphaned_runs_are_recovered_a_bounded_number_at_a_time() {
    let b = backend();
    let orphans = modu_agent::RECOVER_CONCURRENCY * 2 + 3;
    let dying = worker(&b, b.leases.clone(), opts("w1"), Duration::from_secs(30));
    let mut runs = Vec::new();
    for i in 0..orphans {
        let dying = dying.clone();
        runs.push(tokio::spawn(async move {
            dying
                .run(
                    modu_agent::AgentRequest::new((), "orphan")
                        .session(format!("s{i}"))
                        .run_id(format!("r{i}")),
                )
                .await
        }));
    }
    let started = std::time::Instant::now();
    while b.calls.load(Ordering::SeqCst) < orphans {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "every orphan reached its tool"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for run in &runs {
        run.abort();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The recovering worker's tool counts how many of its calls are in flight at once.
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tool = {
        let (now, most) = (Arc::clone(&now), Arc::clone(&most));
        FunctionTool::<()>::new(
            ToolSpec::new("work", "Work a while", serde_json::json!({"type": "object"})),
            move |_ctx, _args| {
                let (now, most) = (Arc::clone(&now), Arc::clone(&most));
                async move {
                    let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(in_flight, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok(serde_json::json!("worked"))
                }
            },
        )
    };
    let w2 = leased_agent(&b, b.leases.clone(), opts("w2"), tool);
    let recovered = w2.recover_orphans(()).await.unwrap();
    assert_eq!(recovered.len(), orphans);
    assert!(recovered.iter().all(|r| r.is_completed()), "{recovered:?}");
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= modu_agent::RECOVER_CONCURRENCY,
        "{most} recovered runs ran at once"
    );
    assert!(most > 1, "recovered runs still run concurrently");
}
