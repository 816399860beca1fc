//! `Last-Event-ID` is always a reconnect: a run no longer kept is gone (410), an id the run
//! never sent is gone, and a value that is not an event id is refused (400).

use super::*;

#[tokio::test]
async fn a_re_post_with_last_event_id_only_reconnects_and_a_run_no_longer_kept_is_gone() {
    let counts = Arc::new(Counts::default());
    let base = server(Arc::clone(&counts), |s| s).await;
    let url = format!("{base}/agui/slow");
    let reconnect = |run: &str, last_event_id: &str| {
        reqwest::Client::new()
            .post(&url)
            .bearer_auth(ERIN)
            .header("last-event-id", last_event_id)
            .json(&input("t1", run))
            .send()
    };

    // A run the server no longer keeps (here: one it never had; a finished run's entry is
    // dropped KEEP_FINISHED after its end, and the same lookup answers): 410 in the error
    // shape, and the request does not start the run.
    let response = reconnect("r1", "5").await.unwrap();
    assert_eq!(response.status(), 410);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "events_gone", "{body}");
    // The run-control route answers a reconnect the same way.
    let follow = format!("{base}/agents/slow/runs/r1/events");
    assert_eq!(Events::get(&follow, ERIN, Some(5)).await.status(), 410);
    // A Last-Event-ID that is no event id is refused, and starts nothing either.
    let response = reconnect("r1", "five").await.unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("Last-Event-ID"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(counts.model_calls.load(Ordering::SeqCst), 0, "no run was started");
    assert_eq!(Events::get(&follow, ERIN, None).await.status(), 404);

    // The run, started without Last-Event-ID, and a reconnect to it while it is kept.
    let all = Events::open(&url, ERIN, &input("t1", "r1"), None).await.rest().await;
    let replay = Events::open(&url, ERIN, &input("t1", "r1"), Some(2)).await.rest().await;
    assert_eq!(replay.first().unwrap().0, 3);
    assert_eq!(replay.len(), all.len() - 2);
    assert_eq!(counts.model_calls.load(Ordering::SeqCst), 2, "one run: two model calls");
    assert_eq!(counts.tool_started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_last_event_id_the_run_never_sent_is_gone_up_to_u64_max() {
    let counts = Arc::new(Counts::default());
    let base = server(Arc::clone(&counts), |s| s).await;
    let url = format!("{base}/agui/slow");
    let follow = format!("{base}/agents/slow/runs/r1/events");
    let mut events = Events::open(&url, ERIN, &input("t1", "r1"), None).await;
    events.next().await.unwrap();
    until("the tool to start", || counts.tool_started.load(Ordering::SeqCst) == 1).await;

    // While the run runs: past its last event, up to u64::MAX, is 410 on both reconnect
    // routes; a number past u64::MAX is no event id (400).
    for id in [u64::MAX, u64::MAX - 1, 1_000_000] {
        let response = Events::get(&follow, ERIN, Some(id)).await;
        assert_eq!(response.status(), 410, "{id}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "events_gone", "{body}");
        let response = reqwest::Client::new()
            .post(&url)
            .bearer_auth(ERIN)
            .header("last-event-id", id.to_string())
            .json(&input("t1", "r1"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 410, "{id}");
    }
    let response = reqwest::Client::new()
        .get(&follow)
        .bearer_auth(ERIN)
        .header("last-event-id", "18446744073709551616")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);

    // The run went on, and once it has ended the same holds.
    let rest = events.rest().await;
    let last = rest.last().unwrap().0;
    assert_eq!(Events::get(&follow, ERIN, Some(u64::MAX)).await.status(), 410);
    assert_eq!(Events::get(&follow, ERIN, Some(last + 1)).await.status(), 410);
    let response = Events::get(&follow, ERIN, Some(last)).await;
    assert_eq!(response.status(), 200, "caught up: nothing more");
    assert!(sse_json(&response.text().await.unwrap()).is_empty());
    assert_eq!(counts.tool_started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a2a_subscribe_to_task_with_a_last_event_id_the_task_never_sent_is_invalid_params() {
    let counts = Arc::new(Counts::default());
    let (_, url, events, task_id) = working_a2a_task(&counts).await;

    let subscribe = json!({"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": task_id}});
    // Not a server failure (-32603): the request asks for events that cannot be given.
    for (last_event_id, code) in [(u64::MAX.to_string(), -32602), ("x".to_owned(), -32600)] {
        let response = reqwest::Client::new()
            .post(&url)
            .bearer_auth(ERIN)
            .header("last-event-id", last_event_id.as_str())
            .json(&subscribe)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{last_event_id}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    let rest = events.rest().await;
    let last = &rest.last().unwrap().1["result"]["statusUpdate"]["status"]["state"];
    assert_eq!(last, "TASK_STATE_COMPLETED", "the task went on");
}

/// A finished run's `runId` re-POSTed without `Last-Event-ID` while the server keeps the run
/// (60 s after its end) is refused with 409 and runs nothing: the tool does not run twice, and
/// the run's events stay the ones a reconnect reads (`Last-Event-ID: 0`: all of them).
#[tokio::test]
async fn a_finished_runs_id_re_posted_without_last_event_id_is_refused_not_run_again() {
    let counts = Arc::new(Counts::default());
    let base = server(Arc::clone(&counts), |s| s).await;
    let url = format!("{base}/agui/slow");
    let all = Events::open(&url, ERIN, &input("t1", "r1"), None).await.rest().await;
    assert_eq!(all.last().unwrap().1["type"], "RUN_FINISHED", "{all:?}");
    for token in [ERIN, MALLORY] {
        let thread = if token == ERIN { "t1" } else { "t2" };
        let response = reqwest::Client::new()
            .post(&url)
            .bearer_auth(token)
            .json(&input(thread, "r1"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 409);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "run_id_in_use", "{body}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(counts.model_calls.load(Ordering::SeqCst), 2, "one run: two model calls");
    assert_eq!(counts.tool_started.load(Ordering::SeqCst), 1, "the tool ran once");
    let replay = Events::open(&url, ERIN, &input("t1", "r1"), Some(0)).await.rest().await;
    assert_eq!(replay, all, "the finished run's events, whole");
}

/// `SubscribeToTask` with a `Last-Event-ID` older than the events a working task's run still
/// keeps: invalid params saying so (not an internal error); without it, the task and the kept
/// updates.
#[tokio::test]
async fn a2a_subscribe_to_task_after_events_no_longer_kept_is_invalid_params_not_internal() {
    let deltas = modu_server::EVENT_BUFFER + 50;
    let model = flood_then_call(deltas, "x", "slow", "done");
    let started = Arc::new(AtomicUsize::new(0));
    let tool_started = Arc::clone(&started);
    let spec = ToolSpec::new("slow", "A slow tool", json!({"type": "object", "properties": {}}));
    let tool = FunctionTool::<()>::new(spec, move |_ctx, _args: Value| {
        tool_started.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            Ok(json!("ok"))
        }
    });
    let agent: Agent = Agent::builder(model).name("chatty").tool(tool).build().unwrap();
    let base = serve(ModuServer::new().agent("chatty", agent).auth(tokens()).router()).await;
    let url = format!("{base}/a2a/chatty");
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Talk"}]}}});
    let mut events = Events::open(&url, ERIN, &send, None).await;
    let (_, first) = events.next().await.unwrap();
    let task_id = first["result"]["task"]["id"].as_str().unwrap().to_owned();
    until("the tool to start", || started.load(Ordering::SeqCst) == 1).await;

    let subscribe = json!({"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": task_id}});
    let response = reqwest::Client::new()
        .post(&url)
        .bearer_auth(ERIN)
        .header("last-event-id", "1")
        .json(&subscribe)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["id"], 7, "{body}");
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no longer kept") && message.contains("Last-Event-ID"),
        "{body}"
    );
    // Without Last-Event-ID: the task as it stands, then the updates the run still keeps.
    let response = reqwest::Client::new()
        .post(&url)
        .bearer_auth(ERIN)
        .json(&subscribe)
        .send()
        .await
        .unwrap();
    let kept = sse_json(&response.text().await.unwrap());
    assert_eq!(kept[0]["result"]["task"]["id"], task_id.as_str());
    let last = &kept.last().unwrap()["result"]["statusUpdate"]["status"]["state"];
    assert_eq!(last, "TASK_STATE_COMPLETED", "{:?}", kept.last());
    drop(events);
}
