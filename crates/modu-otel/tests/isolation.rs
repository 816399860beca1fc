//! Sink isolation: a panicking, an erroring and a 5-second sink behind a `CompositeEventSink`
//! neither stop nor slow a run; every failure is counted. Attached directly, the slow sink does
//! slow the run (the baseline).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use modu_agent::Agent;
use modu_agent::sinks::CompositeEventSink;
use modu_core::{AgentEvent, CollectingEventSink, EventSink, FunctionTool, SinkError, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

struct Panicking;
#[async_trait]
impl EventSink for Panicking {
    async fn publish(&self, _event: &AgentEvent) -> Result<(), SinkError> {
        panic!("sink bug");
    }
}

struct Erroring;
#[async_trait]
impl EventSink for Erroring {
    async fn publish(&self, _event: &AgentEvent) -> Result<(), SinkError> {
        Err(SinkError::new("collector down"))
    }
}

/// Sleeps on every event (5 s unless built with [`Sleeping::new`]) and counts the calls.
struct Sleeping {
    calls: AtomicUsize,
    delay: Duration,
}
impl Default for Sleeping {
    fn default() -> Self {
        Sleeping::new(Duration::from_secs(5))
    }
}
impl Sleeping {
    fn new(delay: Duration) -> Self {
        Sleeping {
            calls: AtomicUsize::new(0),
            delay,
        }
    }
}
#[async_trait]
impl EventSink for Sleeping {
    async fn publish(&self, _event: &AgentEvent) -> Result<(), SinkError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        Ok(())
    }
}

fn agent(sink: Arc<dyn EventSink>) -> Agent {
    let echo = FunctionTool::<()>::new(
        ToolSpec::new("echo", "echo", json!({"type": "object"})),
        |_c, a| async move { Ok(a) },
    );
    let model = ScriptedModel::new()
        .tool_calls([("echo", json!({"x": 1})), ("echo", json!({"x": 2}))])
        .text_deltas(["a", "b", "c", "d"]);
    Agent::builder(model).tool(echo).event_sink(sink).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_erroring_and_slow_sinks_do_not_stop_or_slow_the_run() {
    // Keep the expected panics quiet (and fast: no backtrace capture); others still print.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&"sink bug") {
            default_hook(info);
        }
    }));
    let collected = Arc::new(CollectingEventSink::new());
    let slow = Arc::new(Sleeping::default());
    let sink = CompositeEventSink::builder()
        .sink("panics", Arc::new(Panicking))
        .sink("errors", Arc::new(Erroring))
        .sink_with_capacity("slow", slow.clone(), 4)
        .sink("collect", collected.clone())
        .build();
    let agent = agent(Arc::new(sink.clone()));

    let started = Instant::now();
    let result = agent.run("go").await;
    let elapsed = started.elapsed();
    assert!(result.is_completed(), "{:?}", result.error());
    assert!(elapsed < Duration::from_secs(2), "the run took {elapsed:?}");

    // The healthy sink got everything; flushing it does not wait for the slow one's 5 s
    // beyond the bound we give.
    let flush_started = Instant::now();
    assert!(
        !sink.flush(Duration::from_millis(300)).await,
        "the slow sink cannot catch up"
    );
    assert!(flush_started.elapsed() < Duration::from_secs(2));
    let events = collected.events();
    let n = events.len() as u64;
    assert!(n >= 12, "events: {events:?}");
    assert!(matches!(events.last(), Some(AgentEvent::RunCompleted { .. })));

    // The failing sinks work through their queues on their own tasks; give them time under load.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink
        .stats()
        .iter()
        .any(|s| s.name != "slow" && s.delivered + s.lost() < n)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = sink.stats();
    let by = |name: &str| stats.iter().find(|s| s.name == name).unwrap().clone();
    assert_eq!(by("collect").delivered, n);
    assert_eq!(by("collect").lost(), 0);
    assert_eq!(by("panics").panicked, n, "{stats:?}");
    assert_eq!(by("panics").delivered, 0);
    assert_eq!(by("errors").failed, n, "{stats:?}");
    // The slow sink is busy with its first event and holds 4 queued; the rest were dropped.
    let s = by("slow");
    assert_eq!(s.delivered, 0);
    assert_eq!(slow.calls.load(Ordering::SeqCst), 1);
    // (Depending on when its task took the first event, 4 or 5 events were accepted.)
    assert!(s.dropped == n - 5 || s.dropped == n - 4, "{stats:?}");

    // Shutdown is bounded too: it gives up on the slow sink and aborts it.
    let t = Instant::now();
    assert!(!sink.shutdown(Duration::from_millis(300)).await);
    assert!(t.elapsed() < Duration::from_secs(1));
    // After shutdown events are dropped and counted, never an error.
    sink.publish(&AgentEvent::CheckpointSaved { run_id: "r".into() })
        .await
        .unwrap();
    assert_eq!(sink.stats().iter().find(|s| s.name == "collect").unwrap().dropped, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_sink_is_abandoned_after_the_publish_timeout() {
    let slow = Arc::new(Sleeping::default());
    let sink = CompositeEventSink::builder()
        .sink("slow", slow.clone())
        .publish_timeout(Some(Duration::from_millis(50)))
        .build();
    for _ in 0..3 {
        sink.publish(&AgentEvent::CheckpointSaved { run_id: "r".into() })
            .await
            .unwrap();
    }
    assert!(sink.flush(Duration::from_secs(2)).await);
    let s = &sink.stats()[0];
    assert_eq!((s.timed_out, s.delivered, s.dropped), (3, 0, 0));
    assert_eq!(slow.calls.load(Ordering::SeqCst), 3);
}

/// Like [`agent`], but one tool call per model turn, so no two events are published
/// concurrently (parallel tool calls emit their events from concurrent futures).
fn sequential_agent(sink: Arc<dyn EventSink>) -> Agent {
    let echo = FunctionTool::<()>::new(
        ToolSpec::new("echo", "echo", json!({"type": "object"})),
        |_c, a| async move { Ok(a) },
    );
    let model = ScriptedModel::new()
        .tool_call("echo", json!({"x": 1}))
        .tool_call("echo", json!({"x": 2}))
        .text_deltas(["a", "b", "c", "d"]);
    Agent::builder(model).tool(echo).event_sink(sink).build().unwrap()
}

#[tokio::test]
async fn without_the_composite_a_slow_sink_slows_the_run() {
    // Functional bounds, not a benchmark: the margins are wide on purpose.
    const DELAY: Duration = Duration::from_millis(150);

    // The baseline: attached directly, the run loop awaits the sink inline, so every event
    // costs the run the sink's whole delay.
    let direct = Arc::new(Sleeping::new(DELAY));
    let agent_direct = sequential_agent(direct.clone());
    let t = Instant::now();
    assert!(agent_direct.run("go").await.is_completed());
    let direct_elapsed = t.elapsed();
    let events = direct.calls.load(Ordering::SeqCst) as u32;
    assert!(events >= 12, "the sink saw {events} events");
    assert!(
        direct_elapsed >= DELAY * events,
        "direct: {direct_elapsed:?} for {events} events of {DELAY:?}"
    );

    // The same sink behind the composite: the run does not wait for it. Its whole budget is
    // half of what the inline sink cost (the run itself takes milliseconds).
    let isolated = Arc::new(Sleeping::new(DELAY));
    let sink = CompositeEventSink::isolate("slow", isolated.clone());
    let agent_isolated = sequential_agent(Arc::new(sink.clone()));
    let t = Instant::now();
    assert!(agent_isolated.run("go").await.is_completed());
    let isolated_elapsed = t.elapsed();
    assert!(
        isolated_elapsed < DELAY * events / 2,
        "isolated: {isolated_elapsed:?}, direct: {direct_elapsed:?} for {events} events"
    );
    // The slow sink really ran (it is isolated, not skipped).
    let deadline = Instant::now() + Duration::from_secs(10);
    while isolated.calls.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(isolated.calls.load(Ordering::SeqCst) >= 1);
    let _ = sink.shutdown(Duration::from_millis(100)).await;
}
