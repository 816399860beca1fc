//! A run that panics (a `FunctionTool` closure, a hand-written tool, a user's model or layer)
//! ends as a failure, `AgentError::Panicked` naming the run, whichever way it was started:
//! `Agent::run`, `Agent::resume` and `Agent::recover_orphans` as `Agent::stream` does. The
//! panic never unwinds into the caller's task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use modu_agent::{Agent, AgentRequest};
use modu_core::{AgentError, AgentEvent, CollectingEventSink, FunctionTool, InMemoryCheckpointStore, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

fn boom(needs_approval: bool) -> FunctionTool<()> {
    let spec = ToolSpec::new("boom", "panics", json!({"type": "object"})).needs_approval(needs_approval);
    FunctionTool::new(spec, |_ctx, _args| async move {
        if std::hint::black_box(true) {
            panic!("the tool broke");
        }
        Ok(json!("unreachable"))
    })
}

fn panicked_with(outcome: &modu_core::RunOutcome<String>) -> &str {
    match outcome.error() {
        Some(AgentError::Panicked { message }) => message,
        other => panic!("expected the run's panic as a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_run_that_panics_returns_a_failure_naming_the_run() {
    let sink = Arc::new(CollectingEventSink::new());
    let model = ScriptedModel::new().tool_call("boom", json!({})).cycle();
    let agent: Agent<()> = Agent::builder(model)
        .tool(boom(false))
        .event_sink(sink.clone())
        .build()
        .unwrap();

    // A generated run id: the one its events carry.
    let outcome = agent.run("go").await;
    assert_eq!(panicked_with(&outcome), "the tool broke");
    let started = sink.events().iter().find_map(|e| match e {
        AgentEvent::RunStarted { run_id, .. } => Some(run_id.clone()),
        _ => None,
    });
    assert!(!outcome.report().run_id.is_empty());
    assert_eq!(Some(outcome.report().run_id.clone()), started);
    // The sink heard it end as panicked, once.
    let failed: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::RunFailed { error, .. } => Some(error),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(matches!(failed[0], AgentError::Panicked { .. }), "{failed:?}");

    // The caller's own run id.
    let outcome = agent.run(AgentRequest::from("go").run_id("run-7")).await;
    assert_eq!(panicked_with(&outcome), "the tool broke");
    assert_eq!(outcome.report().run_id, "run-7");
}

#[tokio::test]
async fn a_resumed_run_that_panics_returns_a_failure_naming_the_run() {
    let model = ScriptedModel::new().tool_call("boom", json!({})).text("done");
    let agent: Agent<()> = Agent::builder(model)
        .tool(boom(true))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let paused = agent.run("go").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let run_id = paused.report().run_id.clone();
    let call_id = paused.approvals()[0].call_id.clone();
    agent.approve(&run_id, &call_id).await.unwrap();

    let outcome = agent.resume(&run_id, ()).await;
    assert_eq!(panicked_with(&outcome), "the tool broke");
    assert_eq!(outcome.report().run_id, run_id);
}

#[tokio::test]
async fn a_layer_that_panics_before_the_run_starts_fails_the_run_the_request_named() {
    let layer = tower::util::MapRequestLayer::new(|request: AgentRequest<()>| -> AgentRequest<()> {
        if std::hint::black_box(true) {
            panic!("the layer broke");
        }
        request
    });
    let agent: Agent<()> = Agent::builder(ScriptedModel::new().text("done").cycle())
        .agent_layer(layer)
        .build()
        .unwrap();
    let outcome = agent.run(AgentRequest::from("go").run_id("run-9")).await;
    assert_eq!(panicked_with(&outcome), "the layer broke");
    assert_eq!(outcome.report().run_id, "run-9");
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Task {
    topic: String,
}

#[tokio::test]
async fn a_nested_agent_that_panics_fails_its_call_without_its_message() {
    let child: Agent<()> = Agent::builder(ScriptedModel::new().tool_call("boom", json!({})).text("never"))
        .tool(boom(false))
        .build()
        .unwrap();
    let parent_model = ScriptedModel::new()
        .tool_call("research", json!({"topic": "x"}))
        .text("the researcher failed");
    let parent: Agent<()> = Agent::builder(parent_model.clone())
        .tool(child.as_tool::<Task>("research", "Research"))
        .build()
        .unwrap();
    let outcome = parent.run("go").await;
    assert_eq!(
        outcome.output().map(String::as_str),
        Some("the researcher failed"),
        "{:?}",
        outcome.error()
    );
    // The parent's model is told the call failed, in modu's words: a panic's text is whatever
    // the panicking code formatted.
    let result = parent_model.requests()[1].messages.last().unwrap().text();
    assert!(result.contains("the run panicked"), "{result}");
    assert!(!result.contains("the tool broke"), "{result}");
}

/// Workers on one in-memory backend (leases, fenced conversation and checkpoint stores).
mod orphans {
    use std::sync::Arc;
    use std::time::Duration;

    use modu_agent::{Agent, AgentRequest};
    use modu_core::model::{ChatEvent, FinishReason};
    use modu_core::{
        CheckpointStore, ConversationStore, FunctionTool, InMemoryCheckpointStore, InMemoryConversationStore,
        InMemoryLeaseStore, LeaseOptions, Role, ToolSpec,
    };
    use modu_testing::ScriptedModel;
    use serde_json::json;

    /// Calls `work` once per run (with `{"poison": true}` when the run's input is "poison"),
    /// then answers "done".
    fn model() -> ScriptedModel {
        ScriptedModel::new()
            .respond(|request| {
                if request.messages.last().is_some_and(|m| m.role == Role::Tool) {
                    return vec![
                        ChatEvent::TextDelta { text: "done".into() },
                        ChatEvent::Finish {
                            reason: FinishReason::Stop,
                        },
                    ];
                }
                let poison = request
                    .messages
                    .iter()
                    .any(|m| m.role == Role::User && m.text() == "poison");
                vec![
                    ChatEvent::ToolCallDelta {
                        index: 0,
                        id: Some("call_1".into()),
                        name: Some("work".into()),
                        arguments: json!({"poison": poison}).to_string(),
                    },
                    ChatEvent::Finish {
                        reason: FinishReason::ToolCalls,
                    },
                ]
            })
            .cycle()
    }

    /// A worker whose `work` tool sleeps `work`; when `panics`, a poisoned call panics first.
    fn worker(
        leases: &InMemoryLeaseStore,
        stores: &(Arc<dyn ConversationStore>, Arc<dyn CheckpointStore>),
        holder: &str,
        work: Duration,
        panics: bool,
    ) -> Agent {
        let tool = FunctionTool::<()>::new(
            ToolSpec::new("work", "Work a while", json!({"type": "object"})),
            move |_ctx, args| async move {
                if panics && args["poison"] == json!(true) {
                    panic!("poisoned call");
                }
                tokio::time::sleep(work).await;
                Ok(json!("worked"))
            },
        );
        Agent::builder(model())
            .name("leased")
            .tool(tool)
            .conversation_store(Arc::clone(&stores.0))
            .checkpoint_store(Arc::clone(&stores.1))
            .session_leases(
                leases.clone(),
                LeaseOptions::new().holder(holder).ttl(Duration::from_millis(150)),
            )
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn an_orphan_that_panics_does_not_stop_the_recovery_of_the_others() {
        let leases = InMemoryLeaseStore::new();
        let conversations: Arc<dyn ConversationStore> =
            Arc::new(leases.fence_conversations(InMemoryConversationStore::new()));
        let checkpoints: Arc<dyn CheckpointStore> = Arc::new(leases.fence_checkpoints(InMemoryCheckpointStore::new()));
        let stores = (conversations, checkpoints);

        // A worker dies in the middle of two runs' tool calls.
        let dying = worker(&leases, &stores, "w1", Duration::from_secs(30), false);
        let runs: Vec<_> = [("s1", "r-poison", "poison"), ("s2", "r-fine", "fine")]
            .into_iter()
            .map(|(session, run_id, input)| {
                let dying = dying.clone();
                tokio::spawn(async move {
                    dying
                        .run(AgentRequest::new((), input).session(session).run_id(run_id))
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for run in &runs {
            run.abort();
        }
        // Its leases expire.
        tokio::time::sleep(Duration::from_millis(250)).await;

        // The worker that recovers them panics on the poisoned call: the other run still ends.
        let survivor = worker(&leases, &stores, "w2", Duration::ZERO, true);
        let mut recovered = survivor.recover_orphans(()).await.unwrap();
        recovered.sort_by(|a, b| a.run_id().cmp(b.run_id()));
        assert_eq!(recovered.len(), 2, "{recovered:?}");
        assert_eq!(recovered[0].run_id(), "r-fine");
        assert_eq!(recovered[0].output().map(String::as_str), Some("done"));
        assert_eq!(recovered[1].run_id(), "r-poison");
        assert!(
            matches!(recovered[1].error(), Some(modu_core::AgentError::Panicked { message }) if message == "poisoned call"),
            "{:?}",
            recovered[1].error()
        );
    }
}
