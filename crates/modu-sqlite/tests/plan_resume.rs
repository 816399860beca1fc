//! Strict Plan-and-Execute on SQLite stores: a run that failed mid-plan resumes at the same step
//! from a fresh pool (as a new process would), and a finished run is not finalized twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
use modu_agent::{Agent, AgentRequest, RetryConfig};
use modu_core::{AgentError, CheckpointStore, ConversationStore, FunctionTool, ModelError, ToolSpec};
use modu_sqlite::{SqliteCheckpointStore, SqliteConversationStore};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

fn counting_tool(name: &str, counter: Arc<AtomicUsize>) -> FunctionTool<()> {
    let spec = ToolSpec::new(name, "Counts its calls", json!({"type": "object", "properties": {}}));
    FunctionTool::new(spec, move |_ctx, _args| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok(json!({"call": n})) }
    })
}

struct Stores {
    conv: Arc<SqliteConversationStore>,
    ckpt: Arc<SqliteCheckpointStore>,
}

async fn stores(path: &Path) -> Stores {
    let pool = modu_sqlite::open(path).await.unwrap();
    Stores {
        conv: Arc::new(SqliteConversationStore::from_pool(pool.clone()).await.unwrap()),
        ckpt: Arc::new(SqliteCheckpointStore::from_pool(pool).await.unwrap()),
    }
}

fn agent(model: &ScriptedModel, stores: &Stores, first: &Arc<AtomicUsize>, second: &Arc<AtomicUsize>) -> Agent<()> {
    Agent::builder(model.clone())
        .tool(counting_tool("first", Arc::clone(first)))
        .tool(counting_tool("second", Arc::clone(second)))
        .retry(RetryConfig::none())
        .conversation_store(Arc::clone(&stores.conv) as Arc<dyn ConversationStore>)
        .checkpoint_store(Arc::clone(&stores.ckpt) as Arc<dyn CheckpointStore>)
        .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap()
}

fn plan() -> String {
    json!({"steps": [
        {"description": "Run the first tool", "allowed_tools": ["first"]},
        {"description": "Run the second tool", "allowed_tools": ["second"]}
    ]})
    .to_string()
}

fn step_ok(result: &str) -> String {
    json!({"status": "completed", "result": result}).to_string()
}

#[tokio::test]
async fn sqlite_strict_run_resumes_mid_plan_and_is_not_finalized_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("modu.db");
    let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));

    // Process 1: plans, finishes step 1, then the model server drops at step 2.
    let failed = {
        let s = stores(&path).await;
        let model = ScriptedModel::new()
            .text(plan())
            .tool_call("first", json!({}))
            .text(step_ok("first ran"))
            .error(|| ModelError::Transport {
                message: "connection reset by peer".into(),
                source: None,
            });
        agent(&model, &s, &first, &second)
            .run(AgentRequest::new((), "Run both tools").session("s-plan"))
            .await
    };
    assert!(
        failed.error().is_some_and(AgentError::is_resumable),
        "{:?}",
        failed.error()
    );
    assert_eq!(
        failed.plan().unwrap().plan.steps[0].status,
        modu_agent::plan::StepStatus::Completed
    );
    assert_eq!(
        failed.plan().unwrap().plan.steps[1].status,
        modu_agent::plan::StepStatus::InProgress
    );

    // Process 2: a fresh pool on the same file resumes at step 2.
    let s = stores(&path).await;
    let raw: Value = serde_json::from_slice(&s.ckpt.load(failed.run_id()).await.unwrap().unwrap()).unwrap();
    assert_eq!(raw["state"]["policy"]["state"]["phase"]["phase"], "act");
    assert_eq!(raw["state"]["policy"]["state"]["current"], 1);
    let model = ScriptedModel::new()
        .tool_call("second", json!({}))
        .text(step_ok("second ran"))
        .text("Both tools ran.");
    let resumed = agent(&model, &s, &first, &second).resume(failed.run_id(), ()).await;
    assert_eq!(resumed.error(), None);
    assert_eq!(resumed.output().map(String::as_str), Some("Both tools ran."));
    assert_eq!(first.load(Ordering::SeqCst), 1, "step 1's tool ran once");
    assert_eq!(second.load(Ordering::SeqCst), 1);
    let requests = model.requests();
    assert_eq!(requests[0].tools.len(), 1, "the resumed process starts at step 2's ACT");
    assert_eq!(requests[0].tools[0].name, "second");
    assert_eq!(resumed.plan().unwrap().tool_trace.len(), 2);
    let history = s.conv.load("s-plan").await.unwrap();
    assert_eq!(history.len(), 2, "input and answer, once");

    // Resuming the finished run again returns the stored answer: no model call, no new append.
    let idle = ScriptedModel::new();
    let again = agent(&idle, &s, &first, &second).resume(failed.run_id(), ()).await;
    assert_eq!(again.error(), None);
    assert_eq!(again.output().map(String::as_str), Some("Both tools ran."));
    assert!(again.plan().unwrap().final_replayed);
    assert!(idle.requests().is_empty());
    assert_eq!(s.conv.load("s-plan").await.unwrap().len(), 2);
}
