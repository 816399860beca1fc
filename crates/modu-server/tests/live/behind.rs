//! A client the server disconnects because it fell behind the run's log is told "the run goes
//! on": with `cancel_on_disconnect` too, that disconnect is the server's, not the client going
//! away, and the run is not cancelled by it.

use modu_core::{AgentEvent, CollectingEventSink};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_dropped_for_falling_behind_does_not_cancel_the_run() {
    let model = flood_then_call(5_000, &"x".repeat(200), "gate", "Done.");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let spec = ToolSpec::new("gate", "Waits", json!({"type": "object", "properties": {}}));
    let tool = {
        let (gate, started) = (Arc::clone(&gate), Arc::clone(&started));
        FunctionTool::<()>::new(spec, move |_ctx, _args: Value| {
            let (gate, started) = (Arc::clone(&gate), Arc::clone(&started));
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                let _open = gate.acquire().await.unwrap();
                Ok(json!("open"))
            }
        })
    };
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model)
        .tool(tool)
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let router = ModuServer::new()
        .agent("long", agent)
        .auth(tokens())
        .cancel_on_disconnect(true)
        .router();
    let base = serve(router).await;
    let mut events = Events::open(&format!("{base}/agui/long"), ERIN, &input("t-behind", "r-behind"), None).await;
    events.next().await.unwrap();
    // The reader stops reading while the run writes far more than the log holds, until the run
    // waits in its tool (or has ended).
    let ended = |e: &AgentEvent| matches!(e, AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. });
    let deadline = Instant::now() + Duration::from_secs(60);
    while started.load(Ordering::SeqCst) == 0 && !sink.events().iter().any(ended) {
        assert!(Instant::now() < deadline, "timed out waiting for the tool to start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // (What a client that fell behind is told carries no event id: read the rest raw.)
    let mut rest = events.buffer;
    rest.push_str(&events.response.text().await.unwrap());
    let rest = sse_json(&rest);
    let last = rest.last().unwrap();
    assert_eq!(last["code"], "events_dropped", "{last}");
    assert!(last["message"].as_str().unwrap().contains("the run goes on"), "{last}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.add_permits(1);
    until("the run to end", || sink.events().iter().any(ended)).await;
    let end = sink.events().into_iter().find(ended).unwrap();
    assert!(
        matches!(end, AgentEvent::RunCompleted { .. }),
        "the run was told to go on, yet it ended {end:?}"
    );
}
