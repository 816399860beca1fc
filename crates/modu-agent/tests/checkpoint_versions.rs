//! Checkpoints written by an older schema resume under the current one: paused standard and
//! strict Plan-and-Execute runs, exported by schema version 2 (`tests/fixtures/*_v2.json`,
//! written by `write_fixtures` below with the version-2 code), are imported, approved and
//! resumed here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
use modu_agent::{Agent, CHECKPOINT_SCHEMA_VERSION};
use modu_core::{FunctionTool, InMemoryCheckpointStore, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn add(count: Arc<AtomicUsize>) -> FunctionTool<()> {
    let spec = ToolSpec::new(
        "add",
        "Add two integers",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
    )
    .needs_approval(true);
    FunctionTool::new(spec, move |_ctx, args| {
        count.fetch_add(1, Ordering::SeqCst);
        async move { Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0))) }
    })
}

fn standard(model: ScriptedModel, count: Arc<AtomicUsize>) -> Agent<()> {
    Agent::builder(model)
        .name("calc")
        .tool(add(count))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap()
}

fn strict(model: ScriptedModel, count: Arc<AtomicUsize>) -> Agent<()> {
    Agent::builder(model)
        .name("planner")
        .tool(add(count))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap()
}

fn plan() -> String {
    json!({"steps": [{"description": "Add", "allowed_tools": ["add"]}]}).to_string()
}

/// Writes the fixtures with the schema this build writes (run once per schema version:
/// `cargo test -p modu-agent --test checkpoint_versions -- --ignored`).
#[tokio::test]
#[ignore = "writes fixtures"]
async fn write_fixtures() {
    let v = CHECKPOINT_SCHEMA_VERSION;
    let agent = standard(
        ScriptedModel::new().tool_call("add", json!({"a": 1, "b": 2})),
        Arc::default(),
    );
    let paused = agent.run("1+2").await;
    assert!(
        paused.is_paused() && paused.error().is_none(),
        "a paused run is not a failure"
    );
    let state = agent.export_state(paused.run_id()).await.unwrap();
    std::fs::write(
        fixture(&format!("standard_paused_v{v}.json")),
        serde_json::to_vec_pretty(&state).unwrap(),
    )
    .unwrap();

    let agent = strict(
        ScriptedModel::new()
            .text(plan())
            .tool_call("add", json!({"a": 1, "b": 2})),
        Arc::default(),
    );
    let paused = agent.run("1+2").await;
    assert!(
        paused.is_paused() && paused.error().is_none(),
        "a paused run is not a failure"
    );
    let state = agent.export_state(paused.run_id()).await.unwrap();
    std::fs::write(
        fixture(&format!("strict_paused_v{v}.json")),
        serde_json::to_vec_pretty(&state).unwrap(),
    )
    .unwrap();
}

fn load(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(name)).unwrap()).unwrap()
}

async fn resume_fixture(agent: &Agent<()>, state: Value) -> (modu_core::RunOutcome, Value) {
    assert_eq!(state["schema_version"], 2);
    let run_id = agent.import_state(state).await.unwrap();
    let pending = agent.pending_approvals(&run_id).await.unwrap();
    assert_eq!(pending.len(), 1);
    agent.approve(&run_id, &pending[0].call_id).await.unwrap();
    // The imported state is kept in the current schema.
    let current = agent.export_state(&run_id).await.unwrap();
    (agent.resume(&run_id, ()).await, current)
}

#[tokio::test]
async fn a_standard_v2_checkpoint_resumes_under_the_current_schema() {
    let count = Arc::new(AtomicUsize::new(0));
    let agent = standard(ScriptedModel::new().text("3"), Arc::clone(&count));
    let (result, current) = resume_fixture(&agent, load("standard_paused_v2.json")).await;
    assert_eq!(result.output().map(String::as_str), Some("3"), "{:?}", result.error());
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert_eq!(current["schema_version"], CHECKPOINT_SCHEMA_VERSION);
    assert_eq!(current["state"]["policy"]["id"], "standard/1");
    assert_eq!(current["state"]["policy"]["state"]["phase"], "act");
    assert!(current["state"].get("phase").is_none() && current["state"].get("strict").is_none());
}

#[tokio::test]
async fn a_strict_v2_checkpoint_resumes_under_the_current_schema() {
    let count = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .text(json!({"status": "completed", "result": "3"}).to_string())
        .text("3");
    let agent = strict(model, Arc::clone(&count));
    let (result, current) = resume_fixture(&agent, load("strict_paused_v2.json")).await;
    assert_eq!(result.output().map(String::as_str), Some("3"), "{:?}", result.error());
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert_eq!(current["schema_version"], CHECKPOINT_SCHEMA_VERSION);
    assert_eq!(current["state"]["policy"]["id"], "plan_and_execute/1");
    assert_eq!(
        current["state"]["policy"]["state"]["plan"]["steps"][0]["description"],
        "Add"
    );
    assert!(current["state"].get("strict").is_none());
}
