//! How a [`RunStream`](modu_agent::RunStream) drives its run: on the caller's task as it is
//! polled (no task is spawned). An event sent from another task while the run waits still
//! wakes the reader; dropping the stream stops the run before the drop returns; a run that
//! panics ends the stream with a failure; a waiting run is polled again only once something
//! woke it, not each time its reader has taken the events; a reader taking a long burst of
//! events still lets the other tasks of its thread run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use modu_agent::{Agent, StreamItem};
use modu_core::{AgentError, AgentEvent, FunctionTool, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;
use tokio::sync::oneshot;

fn agent_with(tool: FunctionTool<()>) -> Agent<()> {
    let model = ScriptedModel::new().tool_call(tool_name(&tool), json!({})).text("done");
    Agent::builder(model).tool(tool).build().unwrap()
}

fn tool_name(tool: &FunctionTool<()>) -> String {
    use modu_core::Tool;
    tool.spec().name.clone()
}

/// A tool whose progress is reported by a task of its own, and which then waits until the
/// reader of the stream has seen that progress: it only finishes if an event sent from
/// another task wakes the reader while the run is waiting.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_event_a_tool_sends_from_its_own_task_reaches_the_reader_while_the_run_waits() {
    let release: Arc<Mutex<Option<oneshot::Receiver<()>>>> = Arc::default();
    let (go, wait) = oneshot::channel();
    *release.lock().unwrap() = Some(wait);
    let spec = ToolSpec::new(
        "waits",
        "reports progress from a task, then waits",
        json!({"type": "object"}),
    );
    let tool = FunctionTool::new(spec, move |ctx, _args| {
        let release = Arc::clone(&release);
        async move {
            let reporter = ctx.clone();
            tokio::spawn(async move {
                reporter
                    .report_progress(1.0, Some(2.0), Some("from a task".into()))
                    .await;
            });
            let wait = release.lock().unwrap().take().expect("one call");
            wait.await.expect("the reader releases the tool");
            Ok(json!("released"))
        }
    });
    let agent = agent_with(tool);
    let mut go = Some(go);
    let mut kinds = Vec::new();
    let read = async {
        let mut stream = agent.stream("go");
        while let Some(item) = stream.next().await {
            match item {
                StreamItem::Event(event) => {
                    if let AgentEvent::ToolProgress { message, .. } = &event {
                        assert_eq!(message.as_deref(), Some("from a task"));
                        go.take().expect("one progress event").send(()).unwrap();
                    }
                    kinds.push(event.kind());
                }
                last => return last.into_outcome(),
            }
        }
        None
    };
    // Time is paused: were the reader not woken, the runtime would sit idle and jump to this
    // timer at once.
    let outcome = tokio::select! {
        biased;
        () = tokio::time::sleep(Duration::from_secs(10)) => {
            panic!("the progress event never reached the reader while the tool waited")
        }
        outcome = read => outcome,
    };
    let outcome = outcome.expect("the stream ends with the run's outcome");
    assert!(outcome.is_completed(), "{:?}", outcome.error());
    let at = |kind: &str| kinds.iter().position(|k| *k == kind).unwrap();
    assert!(at("tool_progress") < at("tool_call_finished"), "{kinds:?}");
}

/// Sets its flag when dropped (the tool's future was dropped: the run stopped).
struct DroppedFlag(Arc<AtomicBool>);

impl Drop for DroppedFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_the_stream_stops_the_run_before_the_drop_returns() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&dropped);
    let spec = ToolSpec::new("forever", "never answers", json!({"type": "object"}));
    let tool = FunctionTool::new(spec, move |_ctx, _args| {
        let guard = DroppedFlag(Arc::clone(&flag));
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok(json!("unreachable"))
        }
    });
    let agent = agent_with(tool);
    let mut stream = agent.stream("go");
    while let Some(item) = stream.next().await {
        if let StreamItem::Event(AgentEvent::ToolCallStarted { .. }) = item {
            break;
        }
    }
    // The tool's future is being polled inside the stream now.
    tokio::task::yield_now().await;
    assert!(!dropped.load(Ordering::SeqCst), "the tool is still running");
    drop(stream);
    assert!(
        dropped.load(Ordering::SeqCst),
        "dropping the stream drops the run (and its tool call) at once"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_that_panics_ends_its_stream_with_a_failure() {
    let spec = ToolSpec::new("panics", "panics", json!({"type": "object"}));
    let tool = FunctionTool::new(spec, |_ctx, _args| async move {
        if std::hint::black_box(true) {
            panic!("the tool panicked");
        }
        Ok(json!("unreachable"))
    });
    let agent = agent_with(tool);
    let items: Vec<StreamItem<String>> = agent.stream("go").collect().await;
    let started = items.iter().find_map(|item| match item {
        StreamItem::Event(AgentEvent::RunStarted { run_id, .. }) => Some(run_id.clone()),
        _ => None,
    });
    let last = items.into_iter().last().and_then(StreamItem::into_outcome).unwrap();
    // A panic is its own kind, with its message, and names the run it ended (the run's id is
    // how a caller finds its checkpoint and events).
    match last.error() {
        Some(AgentError::Panicked { message }) => assert_eq!(message, "the tool panicked"),
        other => panic!("expected the run's panic as a failure, got {other:?}"),
    }
    assert_eq!(Some(last.report().run_id.clone()), started);
    assert!(!last.report().run_id.is_empty());
}

/// Counts the polls of the future it wraps.
struct Counted<F> {
    polls: Arc<AtomicUsize>,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.inner.as_mut().poll(cx)
    }
}

/// The events a poll of the run sent are read one poll of the stream each; none of those
/// polls reaches into the waiting run (each would walk the whole chain of its futures down to
/// the tool). The tool's future is polled when the call starts and when its timer fired.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_waiting_run_is_polled_again_only_when_woken() {
    let polls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&polls);
    let spec = ToolSpec::new("sleeps", "sleeps a little", json!({"type": "object"}));
    let tool = FunctionTool::new(spec, move |_ctx, _args| Counted {
        polls: Arc::clone(&counted),
        inner: Box::pin(async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok(json!("slept"))
        }),
    });
    let agent = agent_with(tool);
    let mut stream = agent.stream("go");
    let mut events = 0;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(_) => events += 1,
            last => assert!(last.into_outcome().unwrap().is_completed()),
        }
    }
    assert!(events > 3, "the run sent its events ({events})");
    assert_eq!(
        polls.load(Ordering::SeqCst),
        2,
        "the tool's future is polled when the call starts and once its timer woke it"
    );
}

/// A model that streams a thousand deltas at once: the reader has them all without waiting,
/// yet it yields to the runtime now and then (the events spend the task's cooperative budget,
/// as a channel's receive does), so another task on its thread runs during the burst.
#[tokio::test(flavor = "current_thread")]
async fn a_reader_taking_a_long_burst_of_events_lets_other_tasks_run() {
    let model = ScriptedModel::new().text_deltas(std::iter::repeat_n("x", 1000));
    let agent: Agent = Agent::builder(model).build().unwrap();
    let other_ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&other_ran);
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    let mut stream = agent.stream("go");
    let (mut deltas, mut deltas_before_other) = (0, 0);
    while let Some(item) = stream.next().await {
        if let StreamItem::Event(AgentEvent::ModelDelta { .. }) = item {
            deltas += 1;
            if !other_ran.load(Ordering::SeqCst) {
                deltas_before_other += 1;
            }
        }
    }
    assert_eq!(deltas, 1000);
    assert!(
        deltas_before_other < 1000,
        "the other task ran only after the whole burst had been read"
    );
}
