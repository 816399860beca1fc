//! Agent-as-tool and handoffs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
use modu_agent::{Agent, AgentRequest, BuildError, Handoff};
use modu_core::{
    AgentEvent, CheckpointStore, CollectingEventSink, ContextProvider, ContextProviderError, ConversationStore,
    FunctionTool, InMemoryCheckpointStore, InMemoryConversationStore, ModelContext, Role, RunContext,
    StaticToolSession, Tool, ToolProvider, ToolProviderError, ToolSession, ToolSpec, UserContext,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

#[derive(Default)]
struct App {
    writes: AtomicUsize,
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Task {
    topic: String,
}

fn write_tool() -> FunctionTool<App> {
    FunctionTool::new(
        ToolSpec::new("write", "Write to the shared store", json!({"type": "object"})).needs_approval(true),
        |ctx: modu_core::RunContext<App>, _a| async move {
            ctx.context().writes.fetch_add(1, Ordering::SeqCst);
            Ok(json!("written"))
        },
    )
}

fn researcher(model: ScriptedModel) -> Agent<App> {
    Agent::builder(model)
        .context::<App>()
        .name("researcher")
        .instructions_fn(|ctx| {
            format!(
                "Research {}.",
                ctx.tool_input().and_then(|i| i["topic"].as_str()).unwrap_or("nothing")
            )
        })
        .tool(write_tool())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_nested_agent_shares_context_and_usage_and_gets_its_input() {
    let child_model = ScriptedModel::new().with_usage(100, 50).text("notes on rust");
    let child = researcher(child_model.clone());
    let parent_model = ScriptedModel::new()
        .tool_call("research", json!({"topic": "rust"}))
        .text("summary");
    let parent = Agent::builder(parent_model)
        .context::<App>()
        .tool(child.as_tool::<Task>("research", "Research a topic"))
        .build()
        .unwrap();
    let result = parent
        .run(AgentRequest::new(App::default(), "tell me about rust"))
        .await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("summary"),
        "{:?}",
        result.error()
    );
    // The child saw its structured input through the context.
    assert_eq!(child_model.requests()[0].messages[0].text(), "Research rust.");
    assert_eq!(child_model.requests()[0].messages[1].text(), r#"{"topic":"rust"}"#);
    // The child's usage is in the parent's: 2 parent calls (10/5 each) + 1 child call (100/50).
    assert_eq!(result.usage().requests, 3);
    assert_eq!(result.usage().input_tokens, 120);
    assert_eq!(result.usage().output_tokens, 60);
    let tool_result = result.messages().iter().find(|m| m.role == Role::Tool).unwrap();
    assert_eq!(tool_result.text(), "notes on rust");
}

#[tokio::test]
async fn approvals_are_shared_with_nested_runs() {
    // Without a decision, the nested run pauses its parent (tests/nested_approvals.rs resumes it).
    let child = researcher(ScriptedModel::new().tool_call("write", json!({})).text("never"));
    let parent_model = ScriptedModel::new()
        .tool_call("research", json!({"topic": "x"}))
        .text("could not write");
    let parent = Agent::builder(parent_model.clone())
        .context::<App>()
        .tool(child.as_tool::<Task>("research", "Research"))
        .build()
        .unwrap();
    let app = Arc::new(App::default());
    let result = parent.run(AgentRequest::new(Arc::clone(&app), "go")).await;
    assert!(result.is_paused(), "{:?}", result.error());
    assert_eq!(result.approvals()[0].tool_name, "write");
    assert_eq!(
        parent_model.requests().len(),
        1,
        "the parent waits instead of answering"
    );
    assert_eq!(app.writes.load(Ordering::SeqCst), 0);

    // A parent that approved the tool in code lets the nested run write, once.
    let grant = FunctionTool::<App>::new(
        ToolSpec::new("grant", "Grant writes", json!({"type": "object"})),
        |ctx: modu_core::RunContext<App>, _a| async move {
            ctx.approve_tool("write");
            Ok(json!("granted"))
        },
    );
    let child = researcher(ScriptedModel::new().tool_call("write", json!({})).text("wrote it"));
    let parent_model = ScriptedModel::new()
        .tool_call("grant", json!({}))
        .tool_call("research", json!({"topic": "x"}))
        .text("done");
    let parent = Agent::builder(parent_model)
        .context::<App>()
        .tool(grant)
        .tool(child.as_tool::<Task>("research", "Research"))
        .build()
        .unwrap();
    let result = parent.run(AgentRequest::new(Arc::clone(&app), "go")).await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("done"),
        "{:?}",
        result.error()
    );
    assert_eq!(
        app.writes.load(Ordering::SeqCst),
        1,
        "the shared application context saw the write"
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Escalation {
    reason: String,
}

#[tokio::test]
async fn handoffs_switch_agents_after_on_handoff_accepts() {
    let billing_model = ScriptedModel::new().text("Your refund is on its way.");
    let billing = Agent::builder(billing_model.clone())
        .name("billing")
        .instructions("You handle billing.")
        .tool(FunctionTool::new(
            ToolSpec::new("refund", "Refund", json!({"type": "object"})),
            |_c, _a| async { Ok(json!("ok")) },
        ))
        .build()
        .unwrap();
    let triage_model = ScriptedModel::new()
        .tool_call("transfer_to_billing", json!({"reason": ""}))
        .tool_call("transfer_to_billing", json!({"reason": "refund request"}));
    let sink = Arc::new(CollectingEventSink::new());
    let triage = Agent::builder(triage_model.clone())
        .name("triage")
        .instructions("You route requests.")
        .tool(FunctionTool::new(
            ToolSpec::new("lookup", "Lookup", json!({"type": "object"})),
            |_c, _a| async { Ok(json!("ok")) },
        ))
        .handoff(Handoff::to(&billing).on_handoff(|_ctx, e: Escalation| {
            if e.reason.trim().is_empty() {
                Err("say why the customer needs billing".to_string())
            } else {
                Ok(())
            }
        }))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = triage.run("I want my money back").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("Your refund is on its way."),
        "{:?}",
        result.error()
    );
    assert_eq!(
        result.report().agent,
        "billing",
        "the result names the agent that answered"
    );
    // The first attempt was refused before anything happened, and the model saw why.
    let refused: Value = serde_json::from_str(&triage_model.requests()[1].messages.last().unwrap().text()).unwrap();
    assert_eq!(refused["error"]["reason"], "handoff_refused");
    assert_eq!(refused["error"]["message"], "say why the customer needs billing");
    // Triage offered its tool and the transfer; billing answered with its own instructions and tools.
    let offered: Vec<String> = triage_model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(offered, ["lookup", "transfer_to_billing"]);
    let billing_request = &billing_model.requests()[0];
    assert_eq!(billing_request.messages[0].text(), "You handle billing.");
    let offered: Vec<String> = billing_request.tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(offered, ["refund"]);
    assert!(
        billing_request
            .messages
            .iter()
            .any(|m| m.text().contains("transferred_to"))
    );
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, AgentEvent::Handoff { from, to, .. } if from == "triage" && to == "billing"))
    );
}

#[tokio::test]
async fn a_disabled_handoff_is_not_offered() {
    let vip = Agent::builder(ScriptedModel::new()).name("vip").build().unwrap();
    let model = ScriptedModel::new().text("hello").text("hello");
    let front = Agent::builder(model.clone())
        .handoff(Handoff::to(&vip).enabled_when(|ctx| ctx.user().has_role("vip")))
        .build()
        .unwrap();
    assert!(front.run("hi").await.is_completed());
    assert!(model.requests()[0].tools.is_empty());
    assert!(
        front
            .run(AgentRequest::new((), "hi").user(UserContext::with_roles(["vip"])))
            .await
            .is_completed()
    );
    assert_eq!(model.requests()[1].tools[0].name, "transfer_to_vip");
}

#[tokio::test]
async fn a_handoff_in_a_batch_that_paused_still_hands_over_on_resume() {
    let billing_model = ScriptedModel::new().text("billing answers");
    let billing = Agent::builder(billing_model.clone()).name("billing").build().unwrap();
    let triage_model = ScriptedModel::new()
        .tool_calls([("transfer_to_billing", json!({})), ("danger", json!({}))])
        .text("triage answers");
    let triage = Agent::builder(triage_model.clone())
        .name("triage")
        .tool(FunctionTool::new(
            ToolSpec::new("danger", "Needs approval", json!({"type": "object"})).needs_approval(true),
            |_c, _a| async { Ok(json!("done")) },
        ))
        .handoff(Handoff::to(&billing))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let paused = triage.run("hi").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let run_id = paused.report().run_id.clone();
    triage.approve(&run_id, &paused.approvals()[0].call_id).await.unwrap();
    let done = triage.resume(&run_id, ()).await;
    // The model was told of the transfer before the pause: the agent it named answers.
    assert_eq!(done.report().agent, "billing");
    assert_eq!(done.output().map(String::as_str), Some("billing answers"));
    assert_eq!(
        triage_model.requests().len(),
        1,
        "triage was asked again after handing over"
    );
}

/// A provider offering one tool, `{name}_tool`.
struct Provider(&'static str);

#[async_trait::async_trait]
impl ToolProvider<()> for Provider {
    fn name(&self) -> &str {
        self.0
    }
    async fn open(&self, _ctx: &RunContext<()>) -> Result<Box<dyn ToolSession<()>>, ToolProviderError> {
        let tool: Arc<dyn Tool<()>> = Arc::new(FunctionTool::new(
            ToolSpec::new(format!("{}_tool", self.0), "Provided", json!({"type": "object"})),
            |_c, _a| async { Ok(json!("provided")) },
        ));
        Ok(Box::new(StaticToolSession::new(vec![tool])))
    }
}

#[tokio::test]
async fn a_handoff_target_gets_its_own_providers_tools_not_the_first_agents() {
    let billing_model = ScriptedModel::new().text("billing answers");
    let billing = Agent::builder(billing_model.clone())
        .name("billing")
        .tool_provider(Provider("shared"))
        .build()
        .unwrap();
    let triage = Agent::builder(ScriptedModel::new().tool_call("transfer_to_billing", json!({})))
        .name("triage")
        .tool_provider(Provider("shared"))
        .tool_provider(Provider("triage_only"))
        .handoff(Handoff::to(&billing))
        .build()
        .unwrap();
    let done = triage.run("hi").await;
    // Both agents open the same provider (one MCP server, say): that is no name clash.
    assert!(done.is_completed(), "{:?}", done.error());
    let offered: Vec<String> = billing_model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(offered, ["shared_tool"], "billing was offered triage's provider tools");
}

/// A billing agent, without stores, whose one tool `refund_tool` needs approval; its model
/// calls `refund`.
fn billing(refund_tool: &str) -> Agent {
    Agent::builder(ScriptedModel::new().tool_call("refund", json!({})).text("refunded"))
        .name("billing")
        .tool(FunctionTool::new(
            ToolSpec::new(refund_tool, "Refund", json!({"type": "object"})).needs_approval(true),
            |_c, _a| async { Ok(json!("ok")) },
        ))
        .build()
        .unwrap()
}

/// Triage hands over to `billing(billing_refund_tool)`.
fn triage_over(billing_refund_tool: &str, store: Arc<InMemoryCheckpointStore>) -> Agent {
    Agent::builder(ScriptedModel::new().tool_call("transfer_to_billing", json!({})))
        .name("triage")
        .handoff(Handoff::to(&billing(billing_refund_tool)))
        .checkpoint_store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_run_paused_after_a_handoff_does_not_resume_with_a_changed_target() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let paused = triage_over("refund", store.clone()).run("refund me").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    assert_eq!(paused.report().agent, "billing");
    // Another process, whose billing agent calls its tool differently.
    let changed = triage_over("issue_refund", store.clone());
    assert_ne!(changed.fingerprint(), triage_over("refund", store).fingerprint());
    let run_id = &paused.report().run_id;
    let approved = changed.approve(run_id, &paused.approvals()[0].call_id).await;
    assert!(
        matches!(approved, Err(modu_core::AgentError::ResumeIncompatible { .. })),
        "{approved:?}"
    );
    let resumed = changed.resume(run_id, ()).await;
    assert!(
        matches!(resumed.error(), Some(modu_core::AgentError::ResumeIncompatible { .. })),
        "{:?}",
        resumed.error()
    );
}

#[tokio::test]
async fn a_handed_over_run_is_kept_by_the_stores_of_the_agent_it_started_with() {
    let conversations = Arc::new(InMemoryConversationStore::new());
    let checkpoints = Arc::new(InMemoryCheckpointStore::new());
    let triage = Agent::builder(ScriptedModel::new().tool_call("transfer_to_billing", json!({})))
        .name("triage")
        // The target has no stores of its own.
        .handoff(Handoff::to(&billing("refund")))
        .conversation_store(conversations.clone())
        .checkpoint_store(checkpoints.clone())
        .build()
        .unwrap();
    let paused = triage.run(AgentRequest::new((), "refund me").session("s")).await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let run_id = paused.report().run_id.clone();
    let saved = checkpoints.load(&run_id).await.unwrap().unwrap();
    let saved: Value = serde_json::from_slice(&saved).unwrap();
    assert_eq!(
        saved["state"]["interruptions"][0]["tool_name"], "refund",
        "the pause was not saved"
    );
    assert_eq!(
        saved["agent"], "triage",
        "recover_orphans and resume look for the entry agent's runs"
    );
    triage.approve(&run_id, &paused.approvals()[0].call_id).await.unwrap();
    let done = triage.resume(&run_id, ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("refunded"),
        "{:?}",
        done.error()
    );
    assert_eq!(done.report().agent, "billing");
    let stored = conversations.load("s").await.unwrap();
    assert_eq!(stored.len(), 6, "the session keeps the whole run: {stored:?}");
    assert!(checkpoints.load(&run_id).await.unwrap().is_none());
}

#[tokio::test]
async fn a_handoff_to_a_strict_agent_is_refused_at_build() {
    // A handed-over run goes on under the policy it started with: the planner would answer
    // without a plan, its steps unchecked.
    let planner = Agent::builder(ScriptedModel::new().text("an answer without a plan"))
        .name("planner")
        .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let front = Agent::builder(ScriptedModel::new().tool_call("transfer_to_planner", json!({})))
        .handoff(Handoff::to(&planner))
        .build();
    assert!(
        matches!(&front, Err(BuildError::HandoffToStrictPolicy { name, target })
            if name == "transfer_to_planner" && target == "planner"),
        "{:?}",
        front.err()
    );
}

#[tokio::test]
async fn a_handoff_targets_tools_see_its_model_before_and_after_a_resume() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let model_name = |name: &str, approval: bool| {
        let seen = Arc::clone(&seen);
        FunctionTool::new(
            ToolSpec::new(name, "Names the run's model", json!({"type": "object"})).needs_approval(approval),
            move |ctx: RunContext<()>, _a| {
                let name = ctx.model().map(|m| m.model_name().to_owned());
                seen.lock().unwrap().push(name);
                async { Ok(json!("noted")) }
            },
        )
    };
    let billing = Agent::builder(
        ScriptedModel::new()
            .named("billing-model")
            .tool_call("now", json!({}))
            .tool_call("later", json!({}))
            .text("done"),
    )
    .name("billing")
    .tool(model_name("now", false))
    .tool(model_name("later", true))
    .build()
    .unwrap();
    let triage = Agent::builder(
        ScriptedModel::new()
            .named("triage-model")
            .tool_call("transfer_to_billing", json!({})),
    )
    .name("triage")
    .handoff(Handoff::to(&billing))
    .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
    .build()
    .unwrap();
    let paused = triage.run("hi").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    triage
        .approve(paused.run_id(), &paused.approvals()[0].call_id)
        .await
        .unwrap();
    let done = triage.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    let billing_model = Some("billing-model".to_owned());
    assert_eq!(*seen.lock().unwrap(), [billing_model.clone(), billing_model]);
}

/// Counts the runs it is told ended.
#[derive(Default)]
struct Finished(AtomicUsize);

#[async_trait::async_trait]
impl ContextProvider<()> for Finished {
    fn name(&self) -> &str {
        "finished"
    }
    async fn invoking(&self, _ctx: &RunContext<()>, _context: &mut ModelContext) -> Result<(), ContextProviderError> {
        Ok(())
    }
    async fn run_finished(&self, _ctx: &RunContext<()>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn every_agent_of_a_handed_over_run_hears_that_it_ended() {
    let (triage_own, billing_own, shared) = (
        Arc::new(Finished::default()),
        Arc::new(Finished::default()),
        Arc::new(Finished::default()),
    );
    let billing = Agent::builder(ScriptedModel::new().text("billing answers"))
        .name("billing")
        .context_provider(billing_own.clone())
        .context_provider(shared.clone())
        .build()
        .unwrap();
    let triage = Agent::builder(ScriptedModel::new().tool_call("transfer_to_billing", json!({})))
        .name("triage")
        .context_provider(triage_own.clone())
        .context_provider(shared.clone())
        .handoff(Handoff::to(&billing))
        .build()
        .unwrap();
    assert!(triage.run("hi").await.is_completed());
    let counts = [&triage_own, &billing_own, &shared].map(|p| p.0.load(Ordering::SeqCst));
    // One provider added to both agents is told by each.
    assert_eq!(
        counts,
        [1, 1, 2],
        "run_finished of triage's, billing's and the shared provider"
    );
}

#[tokio::test]
async fn a_resumed_handed_over_run_finalizes_as_the_run_did_before_its_pause() {
    let billing_model = ScriptedModel::new().tool_call("refund", json!({})).text("refunded");
    let billing = Agent::builder(billing_model.clone())
        .name("billing")
        // Not the run's: a handed-over run keeps the policy and finalization it started with.
        .finalization_mode(modu_agent::FinalizationMode::Always)
        .tool(FunctionTool::new(
            ToolSpec::new("refund", "Refund", json!({"type": "object"})).needs_approval(true),
            |_c, _a| async { Ok(json!("ok")) },
        ))
        .build()
        .unwrap();
    let triage = Agent::builder(ScriptedModel::new().tool_call("transfer_to_billing", json!({})))
        .name("triage")
        .handoff(Handoff::to(&billing))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let paused = triage.run("refund me").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    triage
        .approve(paused.run_id(), &paused.approvals()[0].call_id)
        .await
        .unwrap();
    let done = triage.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("refunded"),
        "{:?}",
        done.error()
    );
    assert_eq!(billing_model.requests().len(), 2, "no separate final request");
}

/// After a handoff the target's model requests retry as the target's `RetryConfig` says, and
/// `ModelCallFailed::will_retry` says what its retry layer does (it read the entry agent's).
#[tokio::test]
async fn after_a_handoff_will_retry_follows_the_targets_retries() {
    let transient = || modu_core::ModelError::Status {
        status: 503,
        body: "busy".into(),
        retry_after: None,
    };
    let billing = Agent::builder(ScriptedModel::new().named("billing").error(transient).text("paid"))
        .name("billing")
        .retry(
            modu_agent::RetryConfig::new(2)
                .with_backoff(std::time::Duration::from_millis(1), std::time::Duration::from_millis(1)),
        )
        .build()
        .unwrap();
    let sink = Arc::new(CollectingEventSink::new());
    let triage = Agent::builder(ScriptedModel::new().tool_call("transfer_to_billing", json!({})))
        .name("triage")
        .retry(modu_agent::RetryConfig::none())
        .handoff(Handoff::to(&billing))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = triage.run("pay").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("paid"),
        "{:?}",
        result.error()
    );
    let failed: Vec<bool> = sink
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ModelCallFailed { will_retry, .. } => Some(*will_retry),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [true], "the target's second attempt answered");
}
