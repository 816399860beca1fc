//! Strict Plan-and-Execute within its limits: a size-limited trace, one deadline for
//! every store operation, and a public stream that shows the answer that is returned.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy, ToolTraceMode};
use modu_agent::{Agent, RunLimits, StreamItem};
use modu_core::{
    AgentError, AgentEvent, CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStore, FunctionTool,
    InMemoryCheckpointStore, StoreError, ToolSpec,
};
use modu_testing::ScriptedModel;
use serde_json::json;

fn plan(steps: &[(&str, &[&str])]) -> String {
    json!({"steps": steps.iter().map(|(d, t)| json!({"description": d, "allowed_tools": t})).collect::<Vec<_>>()})
        .to_string()
}

fn step_ok(result: &str) -> String {
    json!({"status": "completed", "result": result}).to_string()
}

fn echo() -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new(
            "store_blob",
            "Store a blob",
            json!({"type": "object", "properties": {"blob": {"type": "string"}}, "required": ["blob"]}),
        ),
        |_ctx, args| async move { Ok(json!(args["blob"].as_str().map_or(0, str::len))) },
    )
}

#[tokio::test]
async fn one_large_argument_does_not_make_a_large_trace_or_checkpoint() {
    let blob = "x".repeat(1_500_000);
    let model = ScriptedModel::new()
        .text(plan(&[("Store it", &["store_blob"])]))
        .tool_call("store_blob", json!({"blob": blob}))
        .text(step_ok("stored"))
        .text("stored");
    let store = Arc::new(InMemoryCheckpointStore::new());
    let agent = Agent::builder(model)
        .tool(echo())
        .checkpoint_store(store.clone())
        .decision_policy(
            PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()).tool_trace_mode(ToolTraceMode::Arguments),
        )
        .build()
        .unwrap();
    let result = agent.run("store the blob").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let trace = plan_json(&result)["tool_trace"].to_string();
    assert!(trace.len() < 8_000, "trace is {} bytes", trace.len());
    assert!(trace.contains("truncated:"), "no visible marker in {trace}");
    // The DONE checkpoint carries the trace (the run's messages still hold the argument, as
    // they must, but the trace adds no second copy).
    let saved = store.load(result.run_id()).await.unwrap().unwrap();
    assert!(
        saved.len() < 2 * 1_500_000,
        "checkpoint is {} bytes: the trace copied the argument",
        saved.len()
    );
}

/// A checkpoint store whose delete and load take `delay`.
struct Slow {
    inner: InMemoryCheckpointStore,
    delay: Duration,
}

#[async_trait]
impl CheckpointStore for Slow {
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
        self.inner.save(run_id, meta, state).await
    }
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.delete(run_id).await
    }
    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        self.inner.list(query).await
    }
    async fn purge_expired(&self) -> Result<u64, StoreError> {
        self.inner.purge_expired().await
    }
}

#[tokio::test]
async fn the_final_checkpoint_delete_obeys_the_run_timeout() {
    let model = ScriptedModel::new().text("hi");
    let agent = Agent::builder(model)
        .checkpoint_store(Arc::new(Slow {
            inner: InMemoryCheckpointStore::new(),
            delay: Duration::from_secs(3),
        }))
        .limits(RunLimits::default().timeout(Some(Duration::from_millis(300))))
        .build()
        .unwrap();
    let started = Instant::now();
    let result = agent.run("hello").await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2_000),
        "the run took {took:?} under a 300 ms timeout"
    );
    // The answer stands; the delete that did not finish is reported, not fatal.
    assert_eq!(result.output().map(String::as_str), Some("hi"), "{:?}", result.error());
}

#[tokio::test]
async fn a_resume_counts_its_checkpoint_load_toward_the_run_timeout() {
    let agent = Agent::builder(ScriptedModel::new().text("hi"))
        .checkpoint_store(Arc::new(Slow {
            inner: InMemoryCheckpointStore::new(),
            delay: Duration::from_secs(3),
        }))
        .limits(RunLimits::default().timeout(Some(Duration::from_millis(300))))
        .build()
        .unwrap();
    let started = Instant::now();
    let result = agent.resume("some-run", ()).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2_000),
        "the resume took {took:?} under a 300 ms timeout"
    );
    assert!(
        matches!(result.error(), Some(AgentError::Timeout { .. })),
        "{:?}",
        result.error()
    );
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Answer {
    value: i64,
}

#[tokio::test]
async fn the_public_stream_shows_the_structured_answer_that_is_returned() {
    let add = FunctionTool::<()>::new(
        ToolSpec::new(
            "add",
            "Add",
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
        ),
        |_ctx, a| async move { Ok(json!(a["a"].as_i64().unwrap_or(0) + a["b"].as_i64().unwrap_or(0))) },
    );
    let model = ScriptedModel::new()
        .text(plan(&[("Add", &["add"])]))
        .tool_call("add", json!({"a": 2, "b": 2}))
        .text(step_ok("4"))
        // FINALIZE: an answer that does not parse, then the corrected one.
        .text_deltas(["{\"value\": ", "\"four\"}"])
        .text_deltas(["{\"value\": ", "4}"]);
    let agent = Agent::builder(model)
        .output::<Answer>()
        .tool(add)
        .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let mut stream = agent.stream("2+2");
    let mut shown = String::new();
    let mut result = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::FinalDelta { text, .. }) => shown.push_str(&text),
            StreamItem::Event(_) => {}
            StreamItem::Completed(r) => result = Some(r),
            StreamItem::Failed(r) => panic!("failed: {:?}", r.error),
            StreamItem::Paused(p) => panic!("paused: {:?}", p.approvals),
        }
    }
    let result = result.unwrap();
    assert_eq!(result.output, Answer { value: 4 });
    let shown: Answer = serde_json::from_str(&shown).unwrap_or_else(|e| panic!("FinalDelta showed {shown:?}: {e}"));
    assert_eq!(shown, Answer { value: 4 });
}

/// A strict run's plan report as JSON (plan, tool_trace, usage, failure, final_replayed).
fn plan_json<O>(outcome: &modu_core::RunOutcome<O>) -> serde_json::Value {
    serde_json::to_value(outcome.plan().expect("a strict run has a plan report")).expect("the plan report serializes")
}
