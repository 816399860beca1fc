//! A run nested with `Agent::as_tool` that reaches a tool needing approval pauses its parent;
//! the parent's decisions resume it, also from exported state in another "process".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::{Agent, AgentRequest};
use modu_core::{FunctionTool, InMemoryCheckpointStore, Role, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Task {
    text: String,
}

struct Counters {
    moved: Arc<AtomicUsize>,
    read: Arc<AtomicUsize>,
}

impl Counters {
    fn new() -> Self {
        Counters {
            moved: Arc::new(AtomicUsize::new(0)),
            read: Arc::new(AtomicUsize::new(0)),
        }
    }
}

fn expert(model: ScriptedModel, c: &Counters) -> Agent {
    let moved = Arc::clone(&c.moved);
    let read = Arc::clone(&c.read);
    Agent::builder(model)
        .name("treasurer")
        .tool(FunctionTool::new(
            ToolSpec::new(
                "transfer",
                "Move money",
                json!({"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}),
            )
            .needs_approval(true),
            move |_ctx, args| {
                moved.fetch_add(1, Ordering::SeqCst);
                async move { Ok(json!(format!("moved {}", args["amount"]))) }
            },
        ))
        .tool(FunctionTool::new(
            ToolSpec::new("balance", "Read the balance", json!({"type": "object"})),
            move |_c, _a| {
                read.fetch_add(1, Ordering::SeqCst);
                async { Ok(json!(100)) }
            },
        ))
        .build()
        .unwrap()
}

fn boss(model: ScriptedModel, expert: &Agent, store: Arc<InMemoryCheckpointStore>) -> Agent {
    Agent::builder(model)
        .name("boss")
        .tool(expert.as_tool::<Task>("ask_treasurer", "Ask the treasurer"))
        .checkpoint_store(store)
        .build()
        .unwrap()
}

fn expert_script() -> ScriptedModel {
    ScriptedModel::new()
        .tool_calls([("balance", json!({})), ("transfer", json!({"amount": 30}))])
        .text("moved 30")
}

fn boss_script() -> ScriptedModel {
    ScriptedModel::new()
        .tool_call("ask_treasurer", json!({"text": "pay 30"}))
        .text("the treasurer paid")
}

#[tokio::test]
async fn a_nested_approval_pauses_the_parent_and_its_approval_resumes_the_nested_run() {
    let c = Counters::new();
    let expert_model = expert_script();
    let expert = expert(expert_model.clone(), &c);
    let store = Arc::new(InMemoryCheckpointStore::new());
    let boss = boss(boss_script(), &expert, store.clone());

    let paused = boss.run("pay 30").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    assert!(
        paused.is_paused() && paused.error().is_none(),
        "a paused run is not a failure"
    );
    let request = &paused.approvals()[0];
    assert_eq!(request.tool_name, "transfer");
    assert_eq!(request.arguments, json!({"amount": 30}));
    assert_eq!(request.metadata["nested_agent"], "treasurer");
    assert_eq!(request.metadata["parent_call_id"], "call_0_0");
    assert_eq!(request.call_id, "call_0_0/call_0_1");
    assert_eq!(c.moved.load(Ordering::SeqCst), 0, "nothing moved before approval");
    assert_eq!(c.read.load(Ordering::SeqCst), 1);
    assert_eq!(
        boss.pending_approvals(paused.run_id()).await.unwrap(),
        paused.approvals()
    );

    boss.approve(paused.run_id(), &request.call_id).await.unwrap();
    let done = boss.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(done.output().map(String::as_str), Some("the treasurer paid"));
    assert_eq!(c.moved.load(Ordering::SeqCst), 1, "the approved nested call ran once");
    assert_eq!(
        c.read.load(Ordering::SeqCst),
        1,
        "the nested run's finished call did not run again"
    );
    // The nested model was asked twice in all: the tool calls, then (after resume) the answer.
    assert_eq!(expert_model.requests().len(), 2);
    let answer = done
        .messages()
        .iter()
        .find(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .unwrap();
    assert!(answer.contains("moved 30"), "{answer}");
    // Boss: 2 requests; treasurer: 2 requests; none counted twice.
    assert_eq!(done.usage().requests, 4);
    assert!(!boss.has_checkpoint(paused.run_id()).await.unwrap());
}

#[tokio::test]
async fn a_nested_rejection_never_runs_the_call_and_the_nested_model_is_told() {
    let c = Counters::new();
    let expert_model = ScriptedModel::new()
        .tool_calls([("balance", json!({})), ("transfer", json!({"amount": 30}))])
        .text("could not move");
    let expert = expert(expert_model.clone(), &c);
    let store = Arc::new(InMemoryCheckpointStore::new());
    let boss = boss(boss_script(), &expert, store);
    let paused = boss.run("pay 30").await;
    let id = paused.approvals()[0].call_id.clone();
    boss.reject(paused.run_id(), &id, Some("not today".into()))
        .await
        .unwrap();
    let done = boss.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(c.moved.load(Ordering::SeqCst), 0, "a rejected nested call never runs");
    let last = expert_model.requests().pop().unwrap();
    let rejection = last
        .messages
        .iter()
        .find(|m| m.role == Role::Tool && m.is_error)
        .map(|m| m.text())
        .unwrap();
    assert!(rejection.contains("not today"), "{rejection}");
}

#[tokio::test]
async fn a_nested_pause_survives_export_and_import_into_another_process() {
    // Process A: the run pauses; its state leaves as a JSON string.
    let a = Counters::new();
    let expert_a = expert(expert_script(), &a);
    let boss_a = boss(boss_script(), &expert_a, Arc::new(InMemoryCheckpointStore::new()));
    let paused = boss_a.run("pay 30").await;
    assert!(paused.is_paused());
    let text = serde_json::to_string(&boss_a.export_state(paused.run_id()).await.unwrap()).unwrap();
    drop(boss_a);
    drop(expert_a);

    // Process B: fresh agents, stores and models that only know what comes after the pause.
    let b = Counters::new();
    let expert_b = expert(ScriptedModel::new().text("moved 30"), &b);
    let boss_b = boss(
        ScriptedModel::new().text("the treasurer paid"),
        &expert_b,
        Arc::new(InMemoryCheckpointStore::new()),
    );
    let run_id = boss_b.import_state(serde_json::from_str(&text).unwrap()).await.unwrap();
    assert_eq!(run_id, paused.run_id());
    let pending = boss_b.pending_approvals(&run_id).await.unwrap();
    assert_eq!(pending.len(), 1);
    boss_b.approve(&run_id, &pending[0].call_id).await.unwrap();
    let done = boss_b.resume(&run_id, ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(done.output().map(String::as_str), Some("the treasurer paid"));
    assert_eq!(b.moved.load(Ordering::SeqCst), 1, "the approved call ran in process B");
    assert_eq!(
        b.read.load(Ordering::SeqCst),
        0,
        "the call finished in process A did not run again"
    );
    assert_eq!(a.moved.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_agent_tool_can_itself_require_approval() {
    let c = Counters::new();
    let expert_model = expert_script();
    let expert = expert(expert_model.clone(), &c);
    let store = Arc::new(InMemoryCheckpointStore::new());
    let boss = Agent::builder(boss_script())
        .tool(
            expert
                .as_tool::<Task>("ask_treasurer", "Ask the treasurer")
                .needs_approval(true),
        )
        .checkpoint_store(store)
        .build()
        .unwrap();
    let paused = boss.run("pay 30").await;
    assert_eq!(paused.approvals().len(), 1);
    assert_eq!(paused.approvals()[0].tool_name, "ask_treasurer");
    assert!(
        expert_model.requests().is_empty(),
        "the nested run did not start before approval"
    );
}

#[tokio::test]
async fn a_request_can_carry_tools_approved_in_advance() {
    let c = Counters::new();
    let treasurer = expert(expert_script(), &c);
    let chief = boss(boss_script(), &treasurer, Arc::new(InMemoryCheckpointStore::new()));
    let request = AgentRequest::new((), "pay 30").approve_tool("transfer");
    let done = chief.run(request).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(c.moved.load(Ordering::SeqCst), 1);
    let rejecting = AgentRequest::new((), "pay 30").reject_tool("transfer", Some("frozen".into()));
    let c2 = Counters::new();
    let expert2 = expert(expert_script(), &c2);
    let boss2 = boss(boss_script(), &expert2, Arc::new(InMemoryCheckpointStore::new()));
    let done = boss2.run(rejecting).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(c2.moved.load(Ordering::SeqCst), 0);
}

/// The nested agent is part of what the parent's checkpoint depends on: a parent whose nested
/// agent changed (its tool's schema here) refuses the decision and the resume with
/// `ResumeIncompatible` instead of going on without the approved call.
#[tokio::test]
async fn a_changed_nested_agent_makes_the_parents_resume_incompatible() {
    let c = Counters::new();
    let store = Arc::new(InMemoryCheckpointStore::new());
    let old_boss = boss(boss_script(), &expert(expert_script(), &c), store.clone());
    let paused = old_boss.run("pay 30").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let call = paused.approvals()[0].call_id.clone();

    let changed = Agent::builder(expert_script())
        .name("treasurer")
        .tool(FunctionTool::new(
            ToolSpec::new(
                "transfer",
                "Move money",
                json!({"type": "object", "properties": {"cents": {"type": "integer"}}, "required": ["cents"]}),
            )
            .needs_approval(true),
            |_ctx, _args| async { Ok(json!("moved")) },
        ))
        .build()
        .unwrap();
    let new_boss = boss(boss_script(), &changed, store.clone());
    assert_ne!(old_boss.fingerprint(), new_boss.fingerprint());
    assert!(matches!(
        new_boss.approve(paused.run_id(), &call).await,
        Err(modu_core::AgentError::ResumeIncompatible { .. })
    ));
    old_boss.approve(paused.run_id(), &call).await.unwrap();
    let resumed = new_boss.resume(paused.run_id(), ()).await;
    assert!(
        matches!(resumed.error(), Some(modu_core::AgentError::ResumeIncompatible { .. })),
        "{:?}",
        resumed.error()
    );
    assert_eq!(c.moved.load(Ordering::SeqCst), 0);

    // An agent without nested agents keeps the fingerprint it had.
    let plain = Agent::builder(ScriptedModel::new()).name("plain").build().unwrap();
    let again = Agent::builder(ScriptedModel::new()).name("plain").build().unwrap();
    assert_eq!(plain.fingerprint(), again.fingerprint());
}

/// A nested run that fails on its model reaches the parent's model (and anything showing tool
/// results) as modu's own words: the model server's text stays out of the tool result.
#[tokio::test]
async fn a_failed_nested_run_does_not_quote_its_model_server() {
    #[derive(Clone)]
    struct Failing;
    #[async_trait::async_trait]
    impl modu_core::ChatModel for Failing {
        fn model_name(&self) -> &str {
            "failing"
        }
        async fn stream(
            &self,
            _request: modu_core::ChatRequest,
        ) -> Result<modu_core::ChatStream, modu_core::ModelError> {
            Err(modu_core::ModelError::invalid_response(
                "upstream said: internal-detail-QWERTY",
            ))
        }
    }
    let inner = Agent::builder(Failing).name("inner").build().unwrap();
    let model = ScriptedModel::new()
        .tool_call("ask_inner", json!({"text": "hi"}))
        .text("it failed");
    let outer = Agent::builder(model)
        .tool(inner.as_tool::<Task>("ask_inner", "Ask the inner agent"))
        .build()
        .unwrap();
    let done = outer.run("go").await;
    assert!(done.is_completed(), "{:?}", done.error());
    let result = done
        .messages()
        .iter()
        .find(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .unwrap();
    assert!(result.contains("the nested agent inner failed"), "{result}");
    assert!(result.contains("invalid_response"), "{result}");
    assert!(!result.contains("QWERTY"), "{result}");
}
