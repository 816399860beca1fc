//! Call identity and decisions: unique call ids, decisions that bind their call, RBAC on the
//! tool that really runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use modu_agent::Agent;
use modu_core::{
    AgentError, AgentEvent, CollectingEventSink, FunctionTool, InMemoryCheckpointStore, Message, RbacToolAuthorizer,
    Role, RunContext, Tool, ToolError, ToolSpec, UserContext,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

/// A tool that records the amounts it ran with.
fn transfer(ran: Arc<Mutex<Vec<i64>>>, approval: bool) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new(
            "transfer",
            "Move money",
            json!({"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}),
        )
        .needs_approval(approval),
        move |_ctx, args| {
            let amount = args["amount"].as_i64().unwrap_or_default();
            ran.lock().unwrap().push(amount);
            async move { Ok(json!(format!("moved {amount}"))) }
        },
    )
}

fn call_ids(m: &Message) -> Vec<String> {
    m.tool_calls.iter().map(|c| c.id.clone()).collect()
}

fn tool_message_ids(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.clone())
        .collect()
}

#[tokio::test]
async fn repeated_call_ids_are_renamed_and_each_call_gets_one_result() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_calls_with_ids([
            (Some("dup"), "transfer", json!({"amount": 1}).to_string()),
            (Some("dup"), "transfer", json!({"amount": 2}).to_string()),
            (Some("other"), "transfer", json!({"amount": 3}).to_string()),
        ])
        // The next turn reuses ids of the first one.
        .tool_calls_with_ids([
            (Some("dup"), "transfer", json!({"amount": 4}).to_string()),
            (Some("other"), "transfer", json!({"amount": 5}).to_string()),
        ])
        .text("done");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .tool(transfer(Arc::clone(&ran), false))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent.run("move").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let mut amounts = ran.lock().unwrap().clone();
    amounts.sort();
    assert_eq!(amounts, vec![1, 2, 3, 4, 5], "every call ran once");

    let assistants: Vec<&Message> = result.messages().iter().filter(|m| m.has_tool_calls()).collect();
    assert_eq!(call_ids(assistants[0]), ["dup", "dup_2", "other"]);
    assert_eq!(call_ids(assistants[1]), ["dup_3", "other_2"]);
    assert_eq!(
        tool_message_ids(result.messages()),
        ["dup", "dup_2", "other", "dup_3", "other_2"],
        "one tool result per call, in call order, under the rewritten ids"
    );
    // The model saw the rewritten ids, with one result each.
    let requests = model.requests();
    let second = &requests[1].messages;
    let sent: Vec<String> = second
        .iter()
        .filter(|m| m.has_tool_calls())
        .flat_map(call_ids)
        .collect();
    assert_eq!(sent, ["dup", "dup_2", "other"]);
    assert_eq!(tool_message_ids(second), ["dup", "dup_2", "other"]);
    // Events name each call once.
    let started: Vec<String> = sink
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallStarted { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    let unique: BTreeSet<&String> = started.iter().collect();
    assert_eq!(started.len(), 5);
    assert_eq!(unique.len(), 5, "event call ids {started:?}");
}

#[tokio::test]
async fn approving_one_of_two_calls_with_one_id_runs_only_that_call() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let store = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .tool_calls_with_ids([
            (Some("call_0"), "transfer", json!({"amount": 10}).to_string()),
            (Some("call_0"), "transfer", json!({"amount": 20}).to_string()),
        ])
        .text("done");
    let agent = Agent::builder(model)
        .tool(transfer(Arc::clone(&ran), true))
        .checkpoint_store(store.clone())
        .build()
        .unwrap();
    let paused = agent.run("move").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let ids: Vec<&str> = paused.approvals().iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["call_0", "call_0_2"], "two approvals, two ids");
    assert_eq!(paused.approvals()[1].arguments, json!({"amount": 20}));

    // The checkpoint's assistant message carries the same ids as the approvals.
    let state = agent.export_state(paused.run_id()).await.unwrap();
    let stored = serde_json::to_string(&state).unwrap();
    assert!(
        stored.contains("\"call_0_2\""),
        "checkpoint lacks the rewritten id: {stored}"
    );

    agent.approve(paused.run_id(), "call_0_2").await.unwrap();
    agent.reject(paused.run_id(), "call_0", None).await.unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(*ran.lock().unwrap(), vec![20], "only the approved call ran");
    assert_eq!(tool_message_ids(done.messages()), ["call_0", "call_0_2"]);
    let rejected = done
        .messages()
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("call_0"))
        .unwrap();
    assert!(rejected.is_error, "the rejected call's result is an error");
}

/// A tool whose approval predicate follows a flag the test flips between runs.
fn guarded(ran: Arc<AtomicUsize>, needs: Arc<AtomicBool>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("delete_all", "Delete everything", json!({"type": "object"})),
        move |_ctx, _args| {
            ran.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!("deleted")) }
        },
    )
    .needs_approval_when(move |_ctx, _args| needs.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_rejected_call_never_runs_even_when_the_predicate_no_longer_asks() {
    let ran = Arc::new(AtomicUsize::new(0));
    let needs = Arc::new(AtomicBool::new(true));
    let store = Arc::new(InMemoryCheckpointStore::new());
    let build = |model: ScriptedModel| {
        Agent::builder(model)
            .tool(guarded(Arc::clone(&ran), Arc::clone(&needs)))
            .checkpoint_store(store.clone())
            .build()
            .unwrap()
    };
    let first = build(ScriptedModel::new().tool_call("delete_all", json!({})));
    let paused = first.run("clean up").await;
    assert!(paused.is_paused());
    let call_id = paused.approvals()[0].call_id.clone();
    first
        .reject(paused.run_id(), &call_id, Some("no".into()))
        .await
        .unwrap();

    // The resuming agent's predicate says no approval is needed now.
    needs.store(false, Ordering::SeqCst);
    let second = build(ScriptedModel::new().text("ok, not deleted"));
    let done = second.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the rejected call ran");
    let result = done
        .messages()
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some(call_id.as_str()))
        .unwrap();
    assert!(result.is_error);
    assert!(result.text().contains("no"), "{}", result.text());
}

#[tokio::test]
async fn an_approved_call_runs_once_even_when_the_predicate_asks_again() {
    let ran = Arc::new(AtomicUsize::new(0));
    let needs = Arc::new(AtomicBool::new(true));
    let store = Arc::new(InMemoryCheckpointStore::new());
    let agent = Agent::builder(ScriptedModel::new().tool_call("delete_all", json!({})).text("done"))
        .tool(guarded(Arc::clone(&ran), Arc::clone(&needs)))
        .checkpoint_store(store.clone())
        .build()
        .unwrap();
    let paused = agent.run("clean up").await;
    let call_id = paused.approvals()[0].call_id.clone();
    agent.approve(paused.run_id(), &call_id).await.unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// A meta tool in the shape of MCP's `mcp_call_tool`: it stands for `{server}__{tool}`.
struct MetaTool {
    spec: ToolSpec,
    ran: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Tool<()> for MetaTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _ctx: &RunContext<()>, arguments: Value) -> Result<Value, ToolError> {
        let target = self.identity(&arguments).into_owned();
        self.ran.lock().unwrap().push(target.clone());
        Ok(json!(format!("ran {target}")))
    }

    fn identity(&self, arguments: &Value) -> Cow<'_, str> {
        Cow::Owned(format!(
            "{}__{}",
            arguments["server"].as_str().unwrap_or_default(),
            arguments["tool"].as_str().unwrap_or_default()
        ))
    }
}

#[tokio::test]
async fn rbac_decides_on_the_tool_a_meta_tool_runs() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let meta = MetaTool {
        spec: ToolSpec::new(
            "call_external",
            "Call an external tool",
            json!({"type": "object", "properties": {"server": {"type": "string"}, "tool": {"type": "string"}}}),
        ),
        ran: Arc::clone(&ran),
    };
    let model = ScriptedModel::new()
        .tool_calls([
            ("call_external", json!({"server": "github", "tool": "list_issues"})),
            ("call_external", json!({"server": "github", "tool": "delete_repo"})),
        ])
        .text("done");
    let sink = Arc::new(CollectingEventSink::new());
    let rbac = Arc::new(RbacToolAuthorizer::new().allow("triager", ["github__list_issues"]));
    let agent = Agent::builder(model)
        .tool(meta)
        .authorizer(rbac)
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let request = modu_agent::AgentRequest::new((), "triage").user(UserContext::with_roles(["triager"]));
    let result = agent.run(request).await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert_eq!(
        *ran.lock().unwrap(),
        ["github__list_issues"],
        "only the allowed external tool ran"
    );
    let results: Vec<&Message> = result.messages().iter().filter(|m| m.role == Role::Tool).collect();
    assert!(!results[0].is_error);
    assert!(results[1].is_error);
    assert!(
        results[1].text().contains("github__delete_repo"),
        "{}",
        results[1].text()
    );
    // Events name the external tool.
    let finished: Vec<(String, bool)> = sink
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallFinished { tool, ok, .. } => Some((tool.clone(), *ok)),
            _ => None,
        })
        .collect();
    assert_eq!(
        finished,
        [
            ("github__list_issues".to_owned(), true),
            ("github__delete_repo".to_owned(), false)
        ]
    );
    // A role allowed only the meta tool's own name may call nothing through it.
    let only_meta = Arc::new(RbacToolAuthorizer::new().allow("meta", ["call_external"]));
    let ran2 = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(
        ScriptedModel::new()
            .tool_call("call_external", json!({"server": "github", "tool": "list_issues"}))
            .text("done"),
    )
    .tool(MetaTool {
        spec: ToolSpec::new("call_external", "Call an external tool", json!({"type": "object"})),
        ran: Arc::clone(&ran2),
    })
    .authorizer(only_meta)
    .build()
    .unwrap();
    let request = modu_agent::AgentRequest::new((), "triage").user(UserContext::with_roles(["meta"]));
    let result = agent.run(request).await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert!(
        ran2.lock().unwrap().is_empty(),
        "the meta tool's name is not a permission"
    );
    let _ = AgentError::Cancelled;
}

#[tokio::test]
async fn importing_a_state_without_a_run_id_is_a_typed_error() {
    let agent = Agent::builder(ScriptedModel::new())
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    for state in [
        json!({"schema_version": 2, "state": {}}),
        json!({"run_id": ""}),
        json!({"run_id": 7}),
    ] {
        match agent.import_state(state.clone()).await {
            Err(AgentError::CheckpointInvalid { message, .. }) => assert!(message.contains("run_id"), "{message}"),
            other => panic!("{state}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn limit_errors_name_the_setting_and_its_value() {
    let agent = Agent::builder(
        ScriptedModel::new()
            .tool_call("transfer", json!({"amount": 1}))
            .tool_call("transfer", json!({"amount": 2})),
    )
    .tool(transfer(Arc::default(), false))
    .limits(modu_agent::RunLimits::default().max_turns(1))
    .build()
    .unwrap();
    let error = agent.run("go").await.error().cloned().unwrap();
    assert_eq!(
        error.to_string(),
        "the run reached RunLimits::max_turns = 1 (model turns that called tools)"
    );
}

/// Narrows the turn to one external tool by identity, keeping meta tools offered (as skills'
/// `allowed-tools` does).
struct OnlyIdentity(&'static str);

#[async_trait]
impl modu_core::ContextProvider<()> for OnlyIdentity {
    fn name(&self) -> &str {
        "only"
    }
    async fn invoking(
        &self,
        _ctx: &RunContext<()>,
        context: &mut modu_core::ModelContext,
    ) -> Result<(), modu_core::ContextProviderError> {
        let meta = context.meta_tools.clone();
        context.tools.retain(|t| meta.contains(&t.name) || t.name == self.0);
        let mut allowed: BTreeSet<String> = meta;
        allowed.insert(self.0.to_owned());
        context.allowed_identities = Some(allowed);
        Ok(())
    }
}

#[tokio::test]
async fn a_provider_admits_tools_by_identity_through_a_meta_tool() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let meta = MetaTool {
        spec: ToolSpec::new("call_external", "Call an external tool", json!({"type": "object"})).meta(true),
        ran: Arc::clone(&ran),
    };
    let model = ScriptedModel::new()
        .tool_calls([
            ("call_external", json!({"server": "github", "tool": "list_issues"})),
            ("call_external", json!({"server": "github", "tool": "delete_repo"})),
        ])
        .text("done");
    let agent = Agent::builder(model.clone())
        .tool(meta)
        .context_provider(OnlyIdentity("github__list_issues"))
        .build()
        .unwrap();
    let result = agent.run("triage").await;
    assert!(result.is_completed(), "{:?}", result.error());
    // The meta tool stayed offered; only the admitted external tool ran through it.
    assert_eq!(model.requests()[0].tools.len(), 1);
    assert_eq!(*ran.lock().unwrap(), ["github__list_issues"]);
    let refused = result
        .messages()
        .iter()
        .filter(|m| m.role == Role::Tool)
        .nth(1)
        .unwrap();
    assert!(refused.is_error);
    assert!(refused.text().contains("tool_not_allowed"), "{}", refused.text());
}

/// A session id no store keeps (over `MAX_ID_BYTES`) fails the run as the caller's mistake:
/// not a store failure reported as resumable, which a worker would retry for ever.
#[tokio::test]
async fn a_session_id_no_store_keeps_fails_the_run_as_not_resumable() {
    let agent = Agent::builder(ScriptedModel::new().text("never asked"))
        .conversation_store(modu_core::InMemoryConversationStore::new())
        .checkpoint_store(InMemoryCheckpointStore::new())
        .build()
        .unwrap();
    let long = "s".repeat(modu_core::MAX_ID_BYTES + 1);
    let result = agent.run(modu_agent::AgentRequest::new((), "hi").session(long)).await;
    let error = result.error().unwrap();
    assert!(matches!(error, AgentError::Configuration { .. }), "{error:?}");
    assert!(error.to_string().contains("MAX_ID_BYTES"), "{error}");
    assert!(!error.is_resumable());
}
