//! Human approval: pause, decide, resume — in the same agent or a fresh one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::Agent;
use modu_core::{
    AgentError, AgentEvent, CheckpointStore, CollectingEventSink, FunctionTool, InMemoryCheckpointStore, Role,
    RunContext, Tool, ToolError, ToolSpec, approval::ApprovalRequest,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

fn transfer(count: Arc<AtomicUsize>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new(
            "transfer",
            "Move money",
            json!({"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}),
        )
        .needs_approval(true),
        move |_ctx, args| {
            count.fetch_add(1, Ordering::SeqCst);
            async move { Ok(json!(format!("moved {}", args["amount"]))) }
        },
    )
}

fn lookup(count: Arc<AtomicUsize>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("balance", "Read the balance", json!({"type": "object"})),
        move |_c, _a| {
            count.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!(100)) }
        },
    )
}

fn agent(
    model: ScriptedModel,
    store: Arc<InMemoryCheckpointStore>,
    moved: Arc<AtomicUsize>,
    read: Arc<AtomicUsize>,
) -> Agent {
    Agent::builder(model)
        .tool(transfer(moved))
        .tool(lookup(read))
        .checkpoint_store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_paused_run_is_approved_in_a_fresh_agent_and_the_call_runs_once() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let moved = Arc::new(AtomicUsize::new(0));
    let read = Arc::new(AtomicUsize::new(0));
    let sink = Arc::new(CollectingEventSink::new());
    let first =
        Agent::builder(ScriptedModel::new().tool_calls([("balance", json!({})), ("transfer", json!({"amount": 30}))]))
            .tool(transfer(Arc::clone(&moved)))
            .tool(lookup(Arc::clone(&read)))
            .checkpoint_store(store.clone())
            .event_sink(sink.clone())
            .build()
            .unwrap();
    let paused = first.run("pay 30").await;
    assert!(paused.is_paused());
    assert!(
        paused.is_paused() && paused.error().is_none(),
        "a paused run is not a failure"
    );
    assert_eq!(paused.approvals().len(), 1);
    let request = &paused.approvals()[0];
    assert_eq!(request.tool_name, "transfer");
    assert_eq!(request.arguments, json!({"amount": 30}));
    assert_eq!(moved.load(Ordering::SeqCst), 0, "nothing ran before approval");
    assert_eq!(read.load(Ordering::SeqCst), 1, "the other call of the batch ran");
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, AgentEvent::ApprovalRequested { .. }))
    );

    // The state is JSON and moves to another process: export, import into a fresh agent's store.
    let state: Value = first.export_state(paused.run_id()).await.unwrap();
    let text = serde_json::to_string(&state).unwrap();
    assert!(text.contains("\"interruptions\""));
    let other_store = Arc::new(InMemoryCheckpointStore::new());
    let fresh = agent(
        ScriptedModel::new().text("paid"),
        other_store.clone(),
        Arc::clone(&moved),
        Arc::clone(&read),
    );
    let run_id = fresh.import_state(serde_json::from_str(&text).unwrap()).await.unwrap();
    assert_eq!(fresh.pending_approvals(&run_id).await.unwrap().len(), 1);
    fresh.approve(&run_id, &request.call_id).await.unwrap();
    let done = fresh.resume(&run_id, ()).await;
    assert_eq!(done.output().map(String::as_str), Some("paid"), "{:?}", done.error());
    assert_eq!(moved.load(Ordering::SeqCst), 1, "approved call ran exactly once");
    assert_eq!(read.load(Ordering::SeqCst), 1, "the finished call was not run again");
    // Results in call order: balance, then transfer.
    let tools: Vec<String> = done
        .messages()
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .collect();
    assert_eq!(tools, vec!["100".to_string(), "moved 30".to_string()]);
    assert!(
        other_store.load(&run_id).await.unwrap().is_none(),
        "completed run deleted its checkpoint"
    );
}

#[tokio::test]
async fn a_rejected_call_does_not_run_and_the_model_sees_why() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let moved = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("transfer", json!({"amount": 5000}))
        .text("ok, not paying");
    let a = agent(model.clone(), store, Arc::clone(&moved), Arc::new(AtomicUsize::new(0)));
    let paused = a.run("pay 5000").await;
    let call_id = paused.approvals()[0].call_id.clone();
    // Deciding on a call that is not waiting is a typed error.
    assert!(matches!(
        a.approve(paused.run_id(), "nope").await,
        Err(AgentError::UnknownApproval { .. })
    ));
    a.reject(paused.run_id(), &call_id, Some("over the limit".into()))
        .await
        .unwrap();
    let done = a.resume(paused.run_id(), ()).await;
    assert_eq!(done.output().map(String::as_str), Some("ok, not paying"));
    assert_eq!(moved.load(Ordering::SeqCst), 0);
    let seen = model.requests()[1].messages.last().unwrap().text();
    let err: Value = serde_json::from_str(&seen).unwrap();
    assert_eq!(err["error"]["type"], "rejected");
    assert_eq!(err["error"]["message"], "over the limit");
}

#[tokio::test]
async fn approve_always_covers_later_calls_of_the_tool_in_the_run() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let moved = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("transfer", json!({"amount": 1}))
        .tool_call("transfer", json!({"amount": 2}))
        .text("both done");
    let a = agent(model, store, Arc::clone(&moved), Arc::new(AtomicUsize::new(0)));
    let paused = a.run("pay twice").await;
    a.approve_always(paused.run_id(), &paused.approvals()[0].call_id)
        .await
        .unwrap();
    let done = a.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("both done"),
        "{:?}",
        done.approvals()
    );
    assert_eq!(moved.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn approve_always_also_covers_the_other_waiting_calls_of_the_tool() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let moved = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_calls([("transfer", json!({"amount": 1})), ("transfer", json!({"amount": 2}))])
        .text("both done");
    let a = agent(model, store, Arc::clone(&moved), Arc::new(AtomicUsize::new(0)));
    let paused = a.run("pay twice").await;
    assert_eq!(paused.approvals().len(), 2);
    a.approve_always(paused.run_id(), &paused.approvals()[0].call_id)
        .await
        .unwrap();
    // The second call runs on resume without a decision of its own: nobody is asked for one.
    assert!(a.pending_approvals(paused.run_id()).await.unwrap().is_empty());
    let done = a.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("both done"),
        "{:?}",
        done.error()
    );
    assert_eq!(moved.load(Ordering::SeqCst), 2);
}

/// A meta tool standing for another tool, like MCP's `mcp_call_tool`.
struct MetaCall;

#[async_trait::async_trait]
impl Tool<()> for MetaCall {
    fn spec(&self) -> &ToolSpec {
        static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
        SPEC.get_or_init(|| {
            ToolSpec::new(
                "mcp_call_tool",
                "Call an MCP tool",
                json!({"type": "object", "properties": {"tool_name": {"type": "string"}, "arguments": {"type": "object"}}}),
            )
        })
    }
    async fn call(&self, _ctx: &RunContext<()>, _args: Value) -> Result<Value, ToolError> {
        Ok(json!("called"))
    }
    fn needs_approval(&self, _ctx: &RunContext<()>, args: &Value) -> bool {
        args["tool_name"] == "weather__forecast"
    }
    fn approval_request(&self, call_id: &str, args: &Value) -> ApprovalRequest {
        let mut metadata = serde_json::Map::new();
        metadata.insert("mcp_tool_name".into(), args["tool_name"].clone());
        metadata.insert("mcp_arguments".into(), args["arguments"].clone());
        ApprovalRequest::new(
            call_id,
            args["tool_name"].as_str().unwrap_or_default(),
            args["arguments"].clone(),
        )
        .with_metadata(metadata)
    }
}

#[tokio::test]
async fn approvals_of_meta_tools_name_the_external_tool() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "weather__forecast", "arguments": {"city": "Seoul"}}),
        )
        .text("sunny");
    let a = Agent::builder(model)
        .tool(MetaCall)
        .checkpoint_store(store)
        .build()
        .unwrap();
    let paused = a.run("weather?").await;
    let r = &paused.approvals()[0];
    assert_eq!(r.tool_name, "weather__forecast");
    assert_eq!(r.metadata["mcp_tool_name"], "weather__forecast");
    assert_eq!(r.metadata["mcp_arguments"], json!({"city": "Seoul"}));
    // approve-always covers the external tool, not every call of the meta tool.
    a.approve_always(paused.run_id(), &r.call_id).await.unwrap();
    let again = a.resume(paused.run_id(), ()).await;
    assert_eq!(again.output().map(String::as_str), Some("sunny"));

    let store = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "weather__forecast", "arguments": {"city": "Seoul"}}),
        )
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "weather__forecast", "arguments": {"city": "Busan"}}),
        )
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "weather__alerts", "arguments": {}}),
        )
        .text("done");
    let a = Agent::builder(model)
        .tool(MetaCallAll)
        .checkpoint_store(store)
        .build()
        .unwrap();
    let paused = a.run("weather?").await;
    a.approve_always(paused.run_id(), &paused.approvals()[0].call_id)
        .await
        .unwrap();
    let next = a.resume(paused.run_id(), ()).await;
    // The second forecast call ran without asking; the alerts tool still needs its own approval.
    assert!(next.is_paused(), "{:?}", next.error());
    assert_eq!(next.approvals()[0].tool_name, "weather__alerts");
}

/// Like `MetaCall`, but every external tool needs approval.
struct MetaCallAll;

#[async_trait::async_trait]
impl Tool<()> for MetaCallAll {
    fn spec(&self) -> &ToolSpec {
        MetaCall.spec()
    }
    async fn call(&self, _ctx: &RunContext<()>, _args: Value) -> Result<Value, ToolError> {
        Ok(json!("called"))
    }
    fn needs_approval(&self, _ctx: &RunContext<()>, _args: &Value) -> bool {
        true
    }
    fn approval_request(&self, call_id: &str, args: &Value) -> ApprovalRequest {
        MetaCall.approval_request(call_id, args)
    }
}

#[tokio::test]
async fn resume_stream_yields_the_resumed_runs_events_then_its_result() {
    use futures::StreamExt;
    use modu_agent::StreamItem;

    let store = Arc::new(InMemoryCheckpointStore::new());
    let moved = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("transfer", json!({"amount": 5}))
        .text_deltas(["moved ", "5"]);
    let agent = agent(model, store, Arc::clone(&moved), Arc::default());
    let paused = agent.run("pay 5").await;
    agent
        .approve(paused.run_id(), &paused.approvals()[0].call_id)
        .await
        .unwrap();
    let mut stream = agent.resume_stream(paused.run_id(), ());
    let mut kinds = Vec::new();
    let mut text = String::new();
    let mut last = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::ModelDelta { text: t, .. }) => text.push_str(&t),
            StreamItem::Event(e) => kinds.push(e.kind()),
            StreamItem::Completed(r) => last = Some(r),
            StreamItem::Failed(r) => panic!("{:?}", r.error),
            StreamItem::Paused(p) => panic!("paused: {:?}", p.approvals),
        }
    }
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert!(kinds.contains(&"tool_call_started") && kinds.contains(&"tool_call_finished"));
    assert_eq!(text, "moved 5");
    assert_eq!(last.map(|r| r.output), Some("moved 5".to_owned()));
    assert_eq!(moved.load(Ordering::SeqCst), 1);

    // A run without a checkpoint ends the stream with a failed result, not a panic.
    let items: Vec<_> = agent.resume_stream("no-such-run", ()).collect().await;
    assert!(matches!(
        items.as_slice(),
        [StreamItem::Failed(r)] if matches!(r.error, AgentError::CheckpointNotFound { .. })
    ));
}

/// A recorded decision binds its call: the same decision again changes nothing, the other one
/// is refused (the call no longer waits), so a rejected call never runs whoever clicks later.
#[tokio::test]
async fn a_decision_binds_its_call_and_a_later_opposite_one_is_refused() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let moved = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("transfer", json!({"amount": 5000}))
        .text("not paying")
        .tool_call("transfer", json!({"amount": 7}))
        .text("paid");
    let a = agent(model.clone(), store, Arc::clone(&moved), Arc::new(AtomicUsize::new(0)));

    // Rejected, then approved: refused, and the call never runs.
    let paused = a.run("pay 5000").await;
    let call_id = paused.approvals()[0].call_id.clone();
    a.reject(paused.run_id(), &call_id, None).await.unwrap();
    assert!(
        a.pending_approvals(paused.run_id()).await.unwrap().is_empty(),
        "a decided call no longer waits"
    );
    a.reject(paused.run_id(), &call_id, None).await.unwrap();
    assert!(matches!(
        a.approve(paused.run_id(), &call_id).await,
        Err(AgentError::UnknownApproval { .. })
    ));
    assert!(matches!(
        a.approve_always(paused.run_id(), &call_id).await,
        Err(AgentError::UnknownApproval { .. })
    ));
    let done = a.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("not paying"),
        "{:?}",
        done.error()
    );
    assert_eq!(moved.load(Ordering::SeqCst), 0);

    // Approved twice (a double click), then rejected: refused; the call runs once.
    let paused = a.run("pay 7").await;
    let call_id = paused.approvals()[0].call_id.clone();
    a.approve(paused.run_id(), &call_id).await.unwrap();
    a.approve(paused.run_id(), &call_id).await.unwrap();
    assert!(matches!(
        a.reject(paused.run_id(), &call_id, None).await,
        Err(AgentError::UnknownApproval { .. })
    ));
    let done = a.resume(paused.run_id(), ()).await;
    assert_eq!(done.output().map(String::as_str), Some("paid"), "{:?}", done.error());
    assert_eq!(moved.load(Ordering::SeqCst), 1);
}

/// Once a resume goes on with the decided calls, its checkpoint says the run is running: the
/// call no longer waits, and a decision arriving now (a second reviewer, another process) is
/// refused instead of bringing the paused run back.
#[tokio::test]
async fn a_resumed_run_no_longer_waits_for_decisions() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let slow = {
        let (started, release, runs) = (Arc::clone(&started), Arc::clone(&release), Arc::clone(&runs));
        FunctionTool::<()>::new(
            ToolSpec::new("transfer", "Move money", json!({"type": "object"})).needs_approval(true),
            move |_ctx, _args| {
                runs.fetch_add(1, Ordering::SeqCst);
                let (started, release) = (Arc::clone(&started), Arc::clone(&release));
                async move {
                    started.notify_one();
                    release.notified().await;
                    Ok(json!("moved"))
                }
            },
        )
    };
    let model = ScriptedModel::new().tool_call("transfer", json!({})).text("paid");
    let a = Agent::builder(model)
        .tool(slow)
        .checkpoint_store(Arc::clone(&store) as Arc<dyn CheckpointStore>)
        .build()
        .unwrap();
    let paused = a.run("pay").await;
    let (run_id, call_id) = (paused.run_id().to_owned(), paused.approvals()[0].call_id.clone());
    a.approve(&run_id, &call_id).await.unwrap();
    let resumed = {
        let (a, run_id) = (a.clone(), run_id.clone());
        tokio::spawn(async move { a.resume(&run_id, ()).await })
    };
    started.notified().await;
    assert!(a.pending_approvals(&run_id).await.unwrap().is_empty());
    assert!(matches!(
        a.approve(&run_id, &call_id).await,
        Err(AgentError::UnknownApproval { .. })
    ));
    release.notify_one();
    let done = resumed.await.unwrap();
    assert_eq!(done.output().map(String::as_str), Some("paid"), "{:?}", done.error());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        !a.has_checkpoint(&run_id).await.unwrap(),
        "the finished run left no checkpoint"
    );
}

/// A checkpoint store whose reads take a moment, as a database's do (the in-memory one never
/// yields, so it cannot show a race between two decisions).
struct SlowReads(InMemoryCheckpointStore);

#[async_trait::async_trait]
impl CheckpointStore for SlowReads {
    async fn save(
        &self,
        run_id: &str,
        meta: &modu_core::CheckpointMeta,
        state: &[u8],
    ) -> Result<(), modu_core::StoreError> {
        self.0.save(run_id, meta, state).await
    }
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, modu_core::StoreError> {
        let loaded = self.0.load(run_id).await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        loaded
    }
    async fn delete(&self, run_id: &str) -> Result<(), modu_core::StoreError> {
        self.0.delete(run_id).await
    }
    async fn list(
        &self,
        query: &modu_core::CheckpointQuery,
    ) -> Result<modu_core::CheckpointPage, modu_core::StoreError> {
        self.0.list(query).await
    }
    async fn purge_expired(&self) -> Result<u64, modu_core::StoreError> {
        self.0.purge_expired().await
    }
}

/// Reviewers deciding the calls of one paused run at the same time (a web UI sending each
/// click as it comes) lose no decision: without session leases, the agent still orders the
/// edits of one run's checkpoint that it makes itself.
#[tokio::test]
async fn decisions_made_at_the_same_time_on_one_run_are_all_kept() {
    let moved = Arc::new(AtomicUsize::new(0));
    let calls: Vec<(&str, Value)> = (1..=8).map(|n| ("transfer", json!({"amount": n}))).collect();
    let model = ScriptedModel::new().tool_calls(calls).text("all done");
    let a = Agent::builder(model)
        .tool(transfer(Arc::clone(&moved)))
        .checkpoint_store(Arc::new(SlowReads(InMemoryCheckpointStore::new())))
        .build()
        .unwrap();
    let paused = a.run("pay eight times").await;
    assert_eq!(paused.approvals().len(), 8, "{:?}", paused.error());
    let decisions = paused.approvals().iter().enumerate().map(|(i, request)| {
        let (a, run_id, call_id) = (&a, paused.run_id(), request.call_id.clone());
        async move {
            if i % 2 == 0 {
                a.approve(run_id, &call_id).await
            } else {
                a.reject(run_id, &call_id, Some("no".into())).await
            }
        }
    });
    for decided in futures::future::join_all(decisions).await {
        decided.unwrap();
    }
    assert!(
        a.pending_approvals(paused.run_id()).await.unwrap().is_empty(),
        "every decision was kept"
    );
    let done = a.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("all done"),
        "{:?}",
        done.error()
    );
    assert_eq!(
        moved.load(Ordering::SeqCst),
        4,
        "the four approved calls ran, the rejected did not"
    );
}
