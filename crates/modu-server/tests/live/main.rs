//! Runs in flight over real HTTP: cancelling a running run (run control and A2A `CancelTask`),
//! a run going on when its client disconnects, and reconnecting with `Last-Event-ID`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod behind;
#[path = "../common/mod.rs"]
mod common;
mod reconnect;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{post, serve, sse_json};
use modu_agent::Agent;
use modu_core::{ChatEvent, ChatRequest, FinishReason, FunctionTool, InMemoryCheckpointStore, Role, ToolSpec, Usage};
use modu_server::{BearerTokens, ModuServer, Principal};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

const ERIN: &str = "erin-token";
const MALLORY: &str = "mallory-token";

/// What the slow agent did so far.
#[derive(Default)]
struct Counts {
    model_calls: AtomicUsize,
    tool_started: AtomicUsize,
    tool_finished: AtomicUsize,
}

/// An agent whose model calls the tool `slow` (it takes `tool_time`), then answers
/// `Finished: <result>`; runs are checkpointed.
fn slow_agent(counts: Arc<Counts>, tool_time: Duration) -> Agent {
    let calls = Arc::clone(&counts);
    let model = ScriptedModel::new()
        .respond(move |request: &ChatRequest| {
            let n = calls.model_calls.fetch_add(1, Ordering::SeqCst);
            let usage = ChatEvent::Usage {
                usage: Usage::new(1, 1),
            };
            match request.messages.last() {
                Some(last) if last.role == Role::Tool => vec![
                    ChatEvent::TextDelta {
                        text: "Finished: ".into(),
                    },
                    ChatEvent::TextDelta { text: last.text() },
                    usage,
                    ChatEvent::Finish {
                        reason: FinishReason::Stop,
                    },
                ],
                _ => vec![
                    ChatEvent::ToolCallDelta {
                        index: 0,
                        id: Some(format!("call_{n}")),
                        name: Some("slow".into()),
                        arguments: "{}".into(),
                    },
                    usage,
                    ChatEvent::Finish {
                        reason: FinishReason::ToolCalls,
                    },
                ],
            }
        })
        .cycle();
    let spec = ToolSpec::new("slow", "A slow tool", json!({"type": "object", "properties": {}}));
    let tool = FunctionTool::<()>::new(spec, move |_ctx, _args: Value| {
        let counts = Arc::clone(&counts);
        async move {
            counts.tool_started.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(tool_time).await;
            counts.tool_finished.fetch_add(1, Ordering::SeqCst);
            Ok(json!("slow work done"))
        }
    });
    Agent::builder(model)
        .name("slow")
        .tool(tool)
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap()
}

/// A model that streams `deltas` text deltas of `delta`, then calls `tool` (no arguments), and
/// answers `answer` once it has the tool's result: a run whose log outgrows a slow reader.
fn flood_then_call(deltas: usize, delta: &str, tool: &str, answer: &str) -> ScriptedModel {
    let (delta, tool, answer) = (delta.to_owned(), tool.to_owned(), answer.to_owned());
    ScriptedModel::new()
        .respond(move |request: &ChatRequest| {
            if request.messages.last().is_some_and(|m| m.role == Role::Tool) {
                return vec![
                    ChatEvent::TextDelta { text: answer.clone() },
                    ChatEvent::Finish {
                        reason: FinishReason::Stop,
                    },
                ];
            }
            let mut events: Vec<ChatEvent> = (0..deltas)
                .map(|_| ChatEvent::TextDelta { text: delta.clone() })
                .collect();
            events.push(ChatEvent::ToolCallDelta {
                index: 0,
                id: Some("call_1".into()),
                name: Some(tool.clone()),
                arguments: "{}".into(),
            });
            events.push(ChatEvent::Finish {
                reason: FinishReason::ToolCalls,
            });
            events
        })
        .cycle()
}

fn tokens() -> BearerTokens {
    BearerTokens::new()
        .token(ERIN, Principal::new("erin", ["user"]))
        .token(MALLORY, Principal::new("mallory", ["user"]))
}

async fn server(counts: Arc<Counts>, configure: impl FnOnce(ModuServer) -> ModuServer) -> String {
    let agent = slow_agent(counts, Duration::from_millis(600));
    serve(configure(ModuServer::new().agent("slow", agent).auth(tokens())).router()).await
}

fn input(thread: &str, run: &str) -> Value {
    json!({"threadId": thread, "runId": run, "messages": [{"id": "u1", "role": "user", "content": "Work"}],
           "tools": [], "context": [], "forwardedProps": {}})
}

/// An SSE response read event by event.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn open(url: &str, token: &str, body: &Value, last_event_id: Option<u64>) -> Events {
        let mut request = reqwest::Client::new()
            .post(url)
            .bearer_auth(token)
            .header("accept", "text/event-stream")
            .json(body);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        Events {
            response,
            buffer: String::new(),
        }
    }

    async fn get(url: &str, token: &str, last_event_id: Option<u64>) -> reqwest::Response {
        let mut request = reqwest::Client::new().get(url).bearer_auth(token);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        request.send().await.unwrap()
    }

    /// The next event: its id and its data as JSON.
    async fn next(&mut self) -> Option<(u64, Value)> {
        loop {
            if let Some(cut) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..cut + 2).collect();
                let mut id = None;
                let mut data = Vec::new();
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().parse().unwrap());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                let id = id.expect("every event has an id");
                return Some((id, serde_json::from_str(&data.join("\n")).unwrap()));
            }
            match self.response.chunk().await.unwrap() {
                Some(bytes) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                None => return None,
            }
        }
    }

    async fn rest(mut self) -> Vec<(u64, Value)> {
        let mut out = Vec::new();
        while let Some(event) = self.next().await {
            out.push(event);
        }
        out
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A streamed A2A task on the `slow` agent, working (its tool started): the server's base URL,
/// the A2A endpoint, the sender's open stream and the task id.
async fn working_a2a_task(counts: &Arc<Counts>) -> (String, String, Events, String) {
    let base = server(Arc::clone(counts), |s| s).await;
    let url = format!("{base}/a2a/slow");
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Work"}]}}});
    let mut events = Events::open(&url, ERIN, &send, None).await;
    let (_, first) = events.next().await.unwrap();
    let task_id = first["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(first["result"]["task"]["status"]["state"], "TASK_STATE_WORKING");
    until("the tool to start", || counts.tool_started.load(Ordering::SeqCst) == 1).await;
    (base, url, events, task_id)
}

async fn get_json(url: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new().get(url).bearer_auth(token).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_cancelled_run_stops_at_its_next_boundary_keeps_its_checkpoint_and_resumes() {
    let counts = Arc::new(Counts::default());
    let base = server(Arc::clone(&counts), |s| s).await;
    let mut events = Events::open(&format!("{base}/agui/slow"), ERIN, &input("t1", "r1"), None).await;
    let (id, started) = events.next().await.unwrap();
    assert_eq!((id, started["type"].as_str()), (1, Some("RUN_STARTED")));
    until("the tool to start", || counts.tool_started.load(Ordering::SeqCst) == 1).await;

    // Only the run's owner may cancel it.
    let cancel = format!("{base}/agents/slow/runs/r1/cancel");
    assert_eq!(post(&cancel, Some(MALLORY), &json!({})).await.0, 404);
    let (status, body, _) = post(&cancel, Some(ERIN), &json!({})).await;
    assert_eq!(status, 202, "{body}");

    // The run stops at once: the (non-blocking) tool in flight is abandoned, the model is not
    // asked again.
    let rest: Vec<Value> = events.rest().await.into_iter().map(|(_, e)| e).collect();
    let last = rest.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{rest:?}");
    assert_eq!(last["code"], "cancelled");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        counts.tool_finished.load(Ordering::SeqCst),
        0,
        "the abandoned call did not finish"
    );
    assert_eq!(counts.model_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        post(&cancel, Some(ERIN), &json!({})).await.0,
        404,
        "an ended run cannot be cancelled"
    );

    // The checkpoint is kept: resuming runs the abandoned call again and finishes the run.
    let (status, body, _) = post(&format!("{base}/agents/slow/runs/r1/resume"), Some(ERIN), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["text"], "Finished: slow work done");
    assert_eq!(counts.tool_started.load(Ordering::SeqCst), 2);
    assert_eq!(counts.tool_finished.load(Ordering::SeqCst), 1);
    assert_eq!(
        counts.model_calls.load(Ordering::SeqCst),
        2,
        "the model's tool call was not asked again"
    );
}

#[tokio::test]
async fn a2a_cancel_task_cancels_a_working_task_whose_run_can_then_be_resumed() {
    let counts = Arc::new(Counts::default());
    let (base, url, events, task_id) = working_a2a_task(&counts).await;

    let cancel = json!({"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": task_id}});
    let (_, body, _) = post(&url, Some(MALLORY), &cancel).await;
    assert!(
        serde_json::from_str::<Value>(&body).unwrap()["error"].is_object(),
        "{body}"
    );
    let (status, body, _) = post(&url, Some(ERIN), &cancel).await;
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["result"]["status"]["state"], "TASK_STATE_CANCELED", "{body}");

    // The stream ends on the cancelled state; the model was not asked again.
    let rest: Vec<Value> = events.rest().await.into_iter().map(|(_, e)| e).collect();
    let last = &rest.last().unwrap()["result"]["statusUpdate"];
    assert_eq!(last["status"]["state"], "TASK_STATE_CANCELED", "{rest:?}");
    assert_eq!(counts.model_calls.load(Ordering::SeqCst), 1);
    let get = json!({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": task_id}});
    let (_, body, _) = post(&url, Some(ERIN), &get).await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["result"]["status"]["state"], "TASK_STATE_CANCELED");

    // The run's checkpoint is kept: run control resumes it to its end.
    let resume = format!("{base}/agents/slow/runs/{task_id}/resume");
    let (status, body, _) = post(&resume, Some(ERIN), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["status"], "completed");
    assert_eq!(
        counts.tool_started.load(Ordering::SeqCst),
        2,
        "the abandoned call runs again"
    );
    assert_eq!(counts.tool_finished.load(Ordering::SeqCst), 1);
    assert_eq!(counts.model_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_run_goes_on_when_its_client_disconnects_and_a_reconnect_replays_from_last_event_id() {
    let counts = Arc::new(Counts::default());
    let base = server(Arc::clone(&counts), |s| s).await;
    let url = format!("{base}/agui/slow");
    let mut events = Events::open(&url, ERIN, &input("t1", "r1"), None).await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(events.next().await.unwrap());
    }
    assert_eq!(seen.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2]);
    drop(events); // the client goes away mid-run
    // While it runs its id is taken; someone else cannot attach to it (the thread is not theirs).
    assert_eq!(post(&url, Some(ERIN), &input("t1", "r1")).await.0, 409);
    let response = reqwest::Client::new()
        .post(&url)
        .bearer_auth(MALLORY)
        .header("last-event-id", "1")
        .json(&input("t1", "r1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);

    // The run finishes on its own.
    until("the run to finish without its client", || {
        counts.model_calls.load(Ordering::SeqCst) == 2
    })
    .await;

    // Reconnecting to the same run with Last-Event-ID: the events after it, to the end.
    let replay = Events::open(&url, ERIN, &input("t1", "r1"), Some(2)).await.rest().await;
    let ids: Vec<u64> = replay.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (3..3 + ids.len() as u64).collect::<Vec<_>>(), "ids follow on");
    let types: Vec<&str> = replay.iter().map(|(_, e)| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.last(), Some(&"RUN_FINISHED"), "{types:?}");
    assert!(types.contains(&"TOOL_CALL_RESULT") && types.contains(&"TEXT_MESSAGE_CONTENT"));

    // The run-control route follows it too, from the start without Last-Event-ID; not for others.
    let follow = format!("{base}/agents/slow/runs/r1/events");
    let response = Events::get(&follow, ERIN, None).await;
    assert_eq!(response.status(), 200);
    let all = sse_json(&response.text().await.unwrap());
    assert_eq!(all.len(), 2 + replay.len());
    assert_eq!(all[0]["type"], "RUN_STARTED");
    assert_eq!(Events::get(&follow, MALLORY, None).await.status(), 404);
    assert_eq!(counts.tool_started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_reconnect_older_than_the_replay_buffer_is_gone() {
    let deltas = modu_server::EVENT_BUFFER + 50;
    let model = ScriptedModel::new().text_deltas(std::iter::repeat_n("x", deltas));
    let agent: Agent = Agent::builder(model).name("chatty").build().unwrap();
    let base = serve(ModuServer::new().agent("chatty", agent).auth(tokens()).router()).await;
    let url = format!("{base}/agui/chatty");
    let all = Events::open(&url, ERIN, &input("t1", "r1"), None).await.rest().await;
    assert!(all.len() > modu_server::EVENT_BUFFER, "{}", all.len());
    let last = all.last().unwrap().0;

    let follow = format!("{base}/agents/chatty/runs/r1/events");
    assert_eq!(Events::get(&follow, ERIN, Some(1)).await.status(), 410);
    let response = Events::get(&follow, ERIN, Some(last - 3)).await;
    assert_eq!(response.status(), 200);
    let tail = sse_json(&response.text().await.unwrap());
    assert_eq!(tail.len(), 3);
    assert_eq!(tail[2]["type"], "RUN_FINISHED");
    // Without Last-Event-ID: the newest EVENT_BUFFER events.
    let kept = sse_json(&Events::get(&follow, ERIN, None).await.text().await.unwrap());
    assert_eq!(kept.len(), modu_server::EVENT_BUFFER);
}

#[tokio::test]
async fn with_cancel_on_disconnect_a_client_going_away_cancels_its_run() {
    let counts = Arc::new(Counts::default());
    let base = server(Arc::clone(&counts), |s| s.cancel_on_disconnect(true)).await;
    let mut events = Events::open(&format!("{base}/agui/slow"), ERIN, &input("t1", "r1"), None).await;
    events.next().await.unwrap();
    until("the tool to start", || counts.tool_started.load(Ordering::SeqCst) == 1).await;
    drop(events);

    let follow = format!("{base}/agents/slow/runs/r1/events");
    let mut end = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(10);
    while end["type"] != "RUN_ERROR" {
        assert!(Instant::now() < deadline, "the run did not end cancelled: {end}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Following (from its last event) once the run has ended does not hold it up.
        let response = Events::get(&follow, ERIN, None).await;
        end = sse_json(&response.text().await.unwrap()).pop().unwrap_or_default();
    }
    assert_eq!(end["code"], "cancelled");
    assert_eq!(
        counts.model_calls.load(Ordering::SeqCst),
        1,
        "the model was not asked again"
    );
    assert_eq!(
        counts.tool_finished.load(Ordering::SeqCst),
        0,
        "the tool in flight was abandoned"
    );
    let (status, body) = get_json(&format!("{base}/agents/slow/runs/r1/approvals"), ERIN).await;
    assert_eq!(status, 200, "the checkpoint is kept: {body}");
}

#[tokio::test]
async fn a2a_subscribe_to_task_follows_a_working_task_to_its_end() {
    let counts = Arc::new(Counts::default());
    let (_, url, events, task_id) = working_a2a_task(&counts).await;
    drop(events); // the sender goes away; the task goes on

    let subscribe = json!({"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask", "params": {"id": task_id}});
    let (status, body, _) = post(&url, Some(MALLORY), &subscribe).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        -32001,
        "another caller's task does not exist for them: {body}"
    );

    // The owner: the task as it stands first, then its updates (from its first) to the end,
    // each a response to the subscribe request.
    let (status, body, headers) = post(&url, Some(ERIN), &subscribe).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let all = sse_json(&body);
    assert!(all.iter().all(|e| e["id"] == 7 && e["jsonrpc"] == "2.0"), "{all:?}");
    assert_eq!(all[0]["result"]["task"]["id"], task_id.as_str());
    assert_eq!(all[0]["result"]["task"]["status"]["state"], "TASK_STATE_WORKING");
    assert_eq!(
        all[1]["result"]["task"]["id"],
        task_id.as_str(),
        "the replay starts at the first update"
    );
    let tool_call = all.iter().find_map(|e| {
        e["result"]["statusUpdate"]["status"]["message"]["parts"][0]["data"]["toolCall"]["name"].as_str()
    });
    assert_eq!(tool_call, Some("slow"), "{all:?}");
    let answer = all
        .iter()
        .rev()
        .find_map(|e| e["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str());
    assert_eq!(answer, Some("Finished: slow work done"), "{all:?}");
    let last = &all.last().unwrap()["result"]["statusUpdate"]["status"]["state"];
    assert_eq!(last, "TASK_STATE_COMPLETED", "{all:?}");
    assert_eq!(
        counts.tool_started.load(Ordering::SeqCst),
        1,
        "subscribing runs nothing"
    );

    // An ended task cannot be subscribed to.
    let (_, body, _) = post(&url, Some(ERIN), &subscribe).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        -32004,
        "{body}"
    );
}

#[tokio::test]
async fn a_streamed_resume_is_cancelled_at_its_next_boundary_and_resumes_again() {
    let counts = Arc::new(Counts::default());
    let base = server(Arc::clone(&counts), |s| s).await;
    let mut events = Events::open(&format!("{base}/agui/slow"), ERIN, &input("t1", "r1"), None).await;
    events.next().await.unwrap();
    until("the tool to start", || counts.tool_started.load(Ordering::SeqCst) == 1).await;
    let cancel = format!("{base}/agents/slow/runs/r1/cancel");
    assert_eq!(post(&cancel, Some(ERIN), &json!({})).await.0, 202);
    assert_eq!(events.rest().await.last().unwrap().1["code"], "cancelled");

    // Resumed as a stream, and cancelled again while the call runs a second time.
    let resume = format!("{base}/agents/slow/runs/r1/resume");
    let mut resumed = Events::open(&resume, ERIN, &json!({}), None).await;
    let (_, first) = resumed.next().await.unwrap();
    assert_eq!(first["type"], "RUN_STARTED");
    until("the tool to start again", || {
        counts.tool_started.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(post(&cancel, Some(MALLORY), &json!({})).await.0, 404);
    assert_eq!(post(&cancel, Some(ERIN), &json!({})).await.0, 202);
    let rest: Vec<Value> = resumed.rest().await.into_iter().map(|(_, e)| e).collect();
    let last = rest.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["code"].as_str()),
        (Some("RUN_ERROR"), Some("cancelled")),
        "{rest:?}"
    );
    assert_eq!(
        counts.model_calls.load(Ordering::SeqCst),
        1,
        "the model was not asked again"
    );

    // Its checkpoint was kept through both: a third resume finishes the run.
    let (status, body, _) = post(&resume, Some(ERIN), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["text"], "Finished: slow work done");
    assert_eq!(counts.tool_started.load(Ordering::SeqCst), 3);
    assert_eq!(counts.tool_finished.load(Ordering::SeqCst), 1);
    assert_eq!(counts.model_calls.load(Ordering::SeqCst), 2);
}
