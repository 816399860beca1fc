//! Run-level scenarios over a real checkpoint store: what approvals and asks for input promise
//! when the process that pauses a run is not the one that decides and resumes it.
//!
//! [`approvals_across_processes`] takes a factory that opens a new handle on the *same* backing
//! store each time (for SQLite: a new pool on the same file; for Redis: a new connection with the
//! same key prefix), so every "process" shares only what the store holds. Each case builds the
//! agents of process A and process B on their own handles, with models that know only their
//! part of the conversation.

// A scenario reports a failure by panicking, like an assertion.
#![allow(clippy::expect_used)]

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::Agent;
use modu_core::{CheckpointStore, FunctionTool, Message, Role, ToolSpec};
use serde_json::json;

use modu_testing::ScriptedModel;

fn transfer(ran: Arc<Mutex<Vec<i64>>>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new(
            "transfer",
            "Move money",
            json!({"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}),
        )
        .needs_approval(true),
        move |_ctx, args| {
            let amount = args["amount"].as_i64().unwrap_or_default();
            if let Ok(mut ran) = ran.lock() {
                ran.push(amount);
            }
            async move { Ok(json!(format!("moved {amount}"))) }
        },
    )
}

fn tool_ids(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.clone())
        .collect()
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Task {
    text: String,
}

/// Runs every case; panics with the first failure.
///
/// ```no_run
/// # async fn demo() {
/// # let open_same_store = || async { std::sync::Arc::new(modu_core::InMemoryCheckpointStore::new()) as std::sync::Arc<dyn modu_core::CheckpointStore> };
/// modu_agent::testing::approvals_across_processes(open_same_store).await;
/// # }
/// ```
pub async fn approvals_across_processes<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn CheckpointStore>>,
{
    repeated_ids_get_one_decision_each(&open).await;
    a_rejection_binds_in_another_process(&open).await;
    a_nested_pause_resumes_in_another_process(&open).await;
    an_ask_for_input_is_answered_in_another_process(&open).await;
}

/// A tool that asks a person for a seat before it books one.
fn book(booked: Arc<Mutex<Vec<String>>>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("book", "Book a seat", json!({"type": "object"})),
        move |ctx: modu_core::RunContext<()>, _args| {
            let booked = Arc::clone(&booked);
            async move {
                let seat = ctx.ask_user(
                    "Which seat?",
                    json!({"type": "object", "properties": {"seat": {"type": "string"}}, "required": ["seat"]}),
                )?;
                let seat = seat["seat"].as_str().unwrap_or_default().to_owned();
                booked.lock().expect("lock").push(seat.clone());
                Ok(json!(format!("booked {seat}")))
            }
        },
    )
}

async fn an_ask_for_input_is_answered_in_another_process<F, Fut>(open: &F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn CheckpointStore>>,
{
    let booked_a = Arc::new(Mutex::new(Vec::new()));
    let a = Agent::builder(ScriptedModel::new().tool_call("book", json!({})))
        .tool(book(Arc::clone(&booked_a)))
        .checkpoint_store(open().await)
        .build()
        .expect("agent A");
    let paused = a.run("book me a seat").await;
    assert!(paused.is_paused(), "input: {:?}", paused.error());
    let request = paused.inputs().first().expect("an input request");
    assert_eq!(request.prompt, "Which seat?");

    // Process B knows the run only by its id: it answers from the store, and resumes.
    let booked_b = Arc::new(Mutex::new(Vec::new()));
    let b = Agent::builder(ScriptedModel::new().text("booked"))
        .tool(book(Arc::clone(&booked_b)))
        .checkpoint_store(open().await)
        .build()
        .expect("agent B");
    let pending = b.pending_inputs(paused.run_id()).await.expect("pending inputs");
    assert_eq!(pending, paused.inputs(), "the request survives in the store");
    let refused = b.answer(paused.run_id(), &request.call_id, json!({"seat": 12})).await;
    assert!(
        matches!(refused, Err(modu_core::AgentError::InvalidInput { .. })),
        "input: an answer off the schema is refused: {refused:?}"
    );
    b.answer(paused.run_id(), &request.call_id, json!({"seat": "12A"}))
        .await
        .expect("answer");
    let done = b.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("booked"),
        "input: {:?}",
        done.error()
    );
    assert_eq!(*booked_b.lock().expect("lock"), ["12A"], "the tool got the answer");
    assert!(
        booked_a.lock().expect("lock").is_empty(),
        "nothing booked before the answer"
    );
    assert!(
        done.messages()
            .iter()
            .any(|m| m.role == Role::Tool && m.text() == "booked 12A"),
        "the model sees the result"
    );
}

async fn repeated_ids_get_one_decision_each<F, Fut>(open: &F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn CheckpointStore>>,
{
    let ran_a = Arc::new(Mutex::new(Vec::new()));
    let model_a = ScriptedModel::new().tool_calls_with_ids([
        (Some("call_0"), "transfer", json!({"amount": 10}).to_string()),
        (Some("call_0"), "transfer", json!({"amount": 20}).to_string()),
    ]);
    let a = Agent::builder(model_a)
        .tool(transfer(Arc::clone(&ran_a)))
        .checkpoint_store(open().await)
        .build()
        .expect("agent A");
    let paused = a.run("move").await;
    let ids: Vec<&str> = paused.approvals().iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["call_0", "call_0_2"], "repeated ids: two approvals, two ids");

    let ran_b = Arc::new(Mutex::new(Vec::new()));
    let b = Agent::builder(ScriptedModel::new().text("done"))
        .tool(transfer(Arc::clone(&ran_b)))
        .checkpoint_store(open().await)
        .build()
        .expect("agent B");
    b.approve(paused.run_id(), "call_0_2").await.expect("approve");
    b.reject(paused.run_id(), "call_0", None).await.expect("reject");
    let done = b.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "repeated ids: {:?}", done.error());
    assert_eq!(*ran_b.lock().expect("lock"), [20], "only the approved call ran");
    assert!(ran_a.lock().expect("lock").is_empty());
    assert_eq!(tool_ids(done.messages()), ["call_0", "call_0_2"], "one result per call");
}

async fn a_rejection_binds_in_another_process<F, Fut>(open: &F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn CheckpointStore>>,
{
    let ran = Arc::new(AtomicUsize::new(0));
    let guarded = |needs: bool| {
        let ran = Arc::clone(&ran);
        let asks = Arc::new(AtomicBool::new(needs));
        FunctionTool::<()>::new(
            ToolSpec::new("delete_all", "Delete everything", json!({"type": "object"})),
            move |_ctx, _args| {
                ran.fetch_add(1, Ordering::SeqCst);
                async { Ok(json!("deleted")) }
            },
        )
        .needs_approval_when(move |_ctx, _args| asks.load(Ordering::SeqCst))
    };
    let a = Agent::builder(ScriptedModel::new().tool_call("delete_all", json!({})))
        .tool(guarded(true))
        .checkpoint_store(open().await)
        .build()
        .expect("agent A");
    let paused = a.run("clean up").await;
    assert!(paused.is_paused(), "rejection: {:?}", paused.error());
    let call_id = paused.approvals()[0].call_id.clone();
    a.reject(paused.run_id(), &call_id, Some("no".into()))
        .await
        .expect("reject");

    // Process B's predicate says no approval is needed now: the recorded rejection binds.
    let b = Agent::builder(ScriptedModel::new().text("not deleted"))
        .tool(guarded(false))
        .checkpoint_store(open().await)
        .build()
        .expect("agent B");
    let done = b.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "rejection: {:?}", done.error());
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a rejected call ran on resume");
}

async fn a_nested_pause_resumes_in_another_process<F, Fut>(open: &F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn CheckpointStore>>,
{
    let build = |expert_model: ScriptedModel, boss_model: ScriptedModel, ran: Arc<Mutex<Vec<i64>>>, store| {
        let expert = Agent::builder(expert_model)
            .name("treasurer")
            .tool(transfer(ran))
            .build()
            .expect("nested agent");
        Agent::builder(boss_model)
            .name("boss")
            .tool(expert.as_tool::<Task>("ask_treasurer", "Ask the treasurer"))
            .checkpoint_store(store)
            .build()
            .expect("parent agent")
    };
    let ran_a = Arc::new(Mutex::new(Vec::new()));
    let a = build(
        ScriptedModel::new().tool_call("transfer", json!({"amount": 30})),
        ScriptedModel::new().tool_call("ask_treasurer", json!({"text": "pay 30"})),
        Arc::clone(&ran_a),
        open().await,
    );
    let paused = a.run("pay 30").await;
    assert!(paused.is_paused(), "nested: {:?}", paused.error());
    let request = paused.approvals()[0].clone();
    assert_eq!(request.tool_name, "transfer");
    assert_eq!(request.metadata.get("nested_agent"), Some(&json!("treasurer")));

    let ran_b = Arc::new(Mutex::new(Vec::new()));
    let b = build(
        ScriptedModel::new().text("moved 30"),
        ScriptedModel::new().text("the treasurer paid"),
        Arc::clone(&ran_b),
        open().await,
    );
    let pending = b.pending_approvals(paused.run_id()).await.expect("pending approvals");
    assert_eq!(pending, paused.approvals(), "the store keeps the nested interruption");
    b.approve(paused.run_id(), &request.call_id).await.expect("approve");
    let done = b.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "nested: {:?}", done.error());
    assert_eq!(done.output().map(String::as_str), Some("the treasurer paid"));
    assert_eq!(
        *ran_b.lock().expect("lock"),
        [30],
        "the approved nested call ran once, in process B"
    );
    assert!(ran_a.lock().expect("lock").is_empty());
    assert!(
        !b.has_checkpoint(paused.run_id()).await.expect("has_checkpoint"),
        "the finished run's checkpoint is gone"
    );
}
