//! Run control over HTTP and AG-UI's interrupt/resume: a paused run's approvals are listed,
//! decided and resumed by its owner only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{post, serve, sse_json, weather_model, weather_tool};
use modu_agent::Agent;
use modu_core::{FunctionTool, InMemoryCheckpointStore, InMemoryConversationStore, ToolSpec};
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

const ERIN: &str = "erin-token";
const MALLORY: &str = "mallory-token";

async fn server(runs: Arc<AtomicUsize>) -> String {
    let agent = Agent::builder(weather_model())
        .tool(weather_tool(runs, true))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .build()
        .unwrap();
    let tokens = BearerTokens::new()
        .token(ERIN, Principal::new("erin", ["weather"]))
        .token(MALLORY, Principal::new("mallory", ["weather"]));
    serve(ModuServer::new().agent("approval", agent).auth(tokens).router()).await
}

fn input(thread: &str, run: &str) -> Value {
    json!({"threadId": thread, "runId": run, "messages": [{"id": "u1", "role": "user", "content": "Weather?"}],
           "tools": [], "context": [], "forwardedProps": {}})
}

/// Starts a run over AG-UI that pauses for approval; returns its interrupt.
async fn paused(base: &str, thread: &str, run: &str) -> Value {
    let (status, body, _) = post(&format!("{base}/agui/approval"), Some(ERIN), &input(thread, run)).await;
    assert_eq!(status, 200, "{body}");
    let events = sse_json(&body);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{body}");
    assert_eq!(last["outcome"]["type"], "interrupt");
    last["outcome"]["interrupts"][0].clone()
}

async fn get(url: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new().get(url).bearer_auth(token).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn an_ag_ui_resume_answers_the_interrupt_and_streams_the_rest_of_the_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let base = server(Arc::clone(&runs)).await;
    let interrupt = paused(&base, "t1", "r1").await;
    assert_eq!(interrupt["id"], "r1#call_0");
    assert_eq!(interrupt["toolCallId"], "call_0");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran before the approval");

    let url = format!("{base}/agui/approval");
    // Answered by another user, from another thread, or without a decision: refused.
    let mut resume = input("t1", "r2");
    resume["resume"] = json!([{"interruptId": "r1#call_0", "status": "resolved", "payload": {"approved": true}}]);
    assert_eq!(post(&url, Some(MALLORY), &resume).await.0, 404);
    let mut elsewhere = resume.clone();
    elsewhere["threadId"] = json!("t2");
    assert_eq!(post(&url, Some(ERIN), &elsewhere).await.0, 404);
    let mut undecided = resume.clone();
    undecided["resume"][0]["payload"] = json!({"maybe": true});
    assert_eq!(post(&url, Some(ERIN), &undecided).await.0, 400);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let (status, body, _) = post(&url, Some(ERIN), &resume).await;
    assert_eq!(status, 200, "{body}");
    let events = sse_json(&body);
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ],
        "{body}"
    );
    assert_eq!(events[0]["runId"], "r2");
    assert_eq!(events[1]["toolCallId"], "call_0");
    assert_eq!(events[6]["outcome"]["type"], "success");
    assert!(events[6]["result"].as_str().unwrap().starts_with("Forecast: "));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the approved call ran once");
    // The run is over: answering again finds nothing to resume (under the finished resume's
    // own runId, still kept, it is refused before that: that id names the finished run).
    assert_eq!(post(&url, Some(ERIN), &resume).await.0, 409);
    let mut again = resume.clone();
    again["runId"] = json!("r3");
    assert_eq!(post(&url, Some(ERIN), &again).await.0, 404);

    // The thread's history holds the whole run.
    let roles = history_roles(&base).await;
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
}

#[tokio::test]
async fn an_ag_ui_resume_with_a_wrong_interrupt_records_no_decision() {
    let runs = Arc::new(AtomicUsize::new(0));
    let base = server(Arc::clone(&runs)).await;
    let interrupt = paused(&base, "t1", "r1").await;
    let url = format!("{base}/agui/approval");
    let entry =
        |id: &str, approved: bool| json!({"interruptId": id, "status": "resolved", "payload": {"approved": approved}});
    // An approval beside an entry for a call that does not wait, or beside a second answer
    // to the same interrupt: refused, and the approval is not recorded.
    let mut wrong = input("t1", "r2");
    wrong["resume"] = json!([entry("r1#call_0", true), entry("r1#no_such_call", true)]);
    let (status, body, _) = post(&url, Some(ERIN), &wrong).await;
    assert_eq!(status, 404, "{body}");
    let mut twice = input("t1", "r3");
    twice["resume"] = json!([entry("r1#call_0", true), entry("r1#call_0", false)]);
    let (status, body, _) = post(&url, Some(ERIN), &twice).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(interrupt["id"], "r1#call_0");

    // So the person can still reject it.
    let mut reject = input("t1", "r4");
    reject["resume"] = json!([entry("r1#call_0", false)]);
    let (status, body, _) = post(&url, Some(ERIN), &reject).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sse_json(&body).last().unwrap()["type"], "RUN_FINISHED", "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the rejected call never ran");
}

#[tokio::test]
async fn approvals_are_listed_decided_and_resumed_over_http_by_their_owner_only() {
    let runs = Arc::new(AtomicUsize::new(0));
    let base = server(Arc::clone(&runs)).await;
    paused(&base, "s1", "a1").await;
    paused(&base, "s1", "a2").await;

    let (status, listed) = get(&format!("{base}/agents/approval/runs/a1/approvals"), ERIN).await;
    assert_eq!(status, 200);
    assert_eq!(listed["sessionId"], "s1");
    assert_eq!(listed["approvals"][0]["callId"], "call_0");
    assert_eq!(listed["approvals"][0]["tool"], "get_weather");
    assert_eq!(listed["approvals"][0]["arguments"], json!({"city": "Paris"}));
    let (status, _) = get(&format!("{base}/agents/approval/runs/a1/approvals"), MALLORY).await;
    assert_eq!(status, 404, "another user's run does not exist for them");
    let (_, session) = get(&format!("{base}/agents/approval/sessions/s1/approvals"), ERIN).await;
    let ids: Vec<&str> = session["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a1", "a2"]);
    let (status, _) = get(&format!("{base}/agents/approval/sessions/s1/approvals"), MALLORY).await;
    assert_eq!(status, 404, "another user's session does not exist for them");

    // Approve a1 and resume it as JSON.
    let approve = format!("{base}/agents/approval/runs/a1/approve");
    assert_eq!(post(&approve, Some(MALLORY), &json!({"callId": "call_0"})).await.0, 404);
    assert_eq!(post(&approve, Some(ERIN), &json!({"callId": "nope"})).await.0, 404);
    let (status, body, _) = post(&approve, Some(ERIN), &json!({"callId": "call_0"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "deciding does not run the call");
    let resume = format!("{base}/agents/approval/runs/a1/resume");
    assert_eq!(post(&resume, Some(MALLORY), &json!({})).await.0, 404);
    let (status, body, _) = post(&resume, Some(ERIN), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let done: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(done["status"], "completed");
    assert!(done["text"].as_str().unwrap().contains("sunny"), "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Reject a2 and resume it as an SSE stream of AG-UI events.
    let reject = format!("{base}/agents/approval/runs/a2/reject");
    let (status, _, _) = post(
        &reject,
        Some(ERIN),
        &json!({"callId": "call_1", "message": "not today"}),
    )
    .await;
    assert_eq!(status, 200);
    let response = reqwest::Client::new()
        .post(format!("{base}/agents/approval/runs/a2/resume"))
        .bearer_auth(ERIN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let events = sse_json(&response.text().await.unwrap());
    assert_eq!(events[0]["type"], "RUN_STARTED");
    assert_eq!(events[0]["threadId"], "s1");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED");
    assert_eq!(last["outcome"]["type"], "success");
    assert!(last["result"].as_str().unwrap().contains("not today"), "{last}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the rejected call did not run");
    let (_, session) = get(&format!("{base}/agents/approval/sessions/s1/approvals"), ERIN).await;
    assert_eq!(session["runs"], json!([]));
}

/// A server whose tool needs approval and holds every call until `gate` has a permit.
async fn gated_server(runs: Arc<AtomicUsize>, gate: Arc<tokio::sync::Semaphore>) -> String {
    let agent = Agent::builder(weather_model())
        .tool(common::gated_weather_tool(runs, gate, true))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .build()
        .unwrap();
    let tokens = BearerTokens::new().token(ERIN, Principal::new("erin", ["weather"]));
    serve(ModuServer::new().agent("approval", agent).auth(tokens).router()).await
}

async fn until_tool_runs(runs: &AtomicUsize, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while runs.load(Ordering::SeqCst) < n {
        assert!(std::time::Instant::now() < deadline, "the tool did not start");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn agui_resume(thread: &str, run: &str, interrupt: &str) -> Value {
    let mut resume = input(thread, run);
    resume["resume"] = json!([{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]);
    resume
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_being_resumed_cannot_be_resumed_again_from_any_endpoint() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let base = gated_server(Arc::clone(&runs), Arc::clone(&gate)).await;
    let agui = format!("{base}/agui/approval");
    let interrupt = paused(&base, "t1", "p1").await;
    let interrupt = interrupt["id"].as_str().unwrap().to_owned();

    // The AG-UI resume (under the new run id r2) runs the approved call, held by the gate.
    let first = tokio::spawn({
        let (agui, resume) = (agui.clone(), agui_resume("t1", "r2", &interrupt));
        async move { post(&agui, Some(ERIN), &resume).await }
    });
    until_tool_runs(&runs, 1).await;

    // Meanwhile the paused run p1 is taken: another AG-UI resume (another run id), a
    // run-control resume (JSON or streamed) are refused with 409.
    let (status, body, _) = post(&agui, Some(ERIN), &agui_resume("t1", "r3", &interrupt)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "run_id_in_use"
    );
    let control = format!("{base}/agents/approval/runs/p1/resume");
    let (status, body, _) = post(&control, Some(ERIN), &json!({})).await;
    assert_eq!(status, 409, "{body}");
    let streamed = reqwest::Client::new()
        .post(&control)
        .bearer_auth(ERIN)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status().as_u16(), 409);
    // The claim is no more than that: p1's own (paused) stream is still the one followed.
    let response = reqwest::Client::new()
        .get(format!("{base}/agents/approval/runs/p1/events"))
        .bearer_auth(ERIN)
        .send()
        .await
        .unwrap();
    let original = sse_json(&response.text().await.unwrap());
    assert_eq!(original[0]["runId"], "p1");
    assert_eq!(original.last().unwrap()["outcome"]["type"], "interrupt");

    gate.add_permits(100);
    let (status, body, _) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let events = sse_json(&body);
    assert_eq!(events.last().unwrap()["outcome"]["type"], "success", "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the approved call ran once");

    // The turn is stored once, and nothing is left to resume.
    let roles = history_roles(&base).await;
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(post(&control, Some(ERIN), &json!({})).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_control_resume_in_flight_refuses_ag_ui_and_a2a_resumes_of_the_same_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let base = gated_server(Arc::clone(&runs), Arc::clone(&gate)).await;

    // An A2A task that waits for approval: its run is paused under the task id.
    let a2a = format!("{base}/a2a/approval");
    let send = |parts: Value, task: Option<&str>| {
        let mut message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": parts});
        if let Some(task) = task {
            message["taskId"] = json!(task);
        }
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
    };
    let (_, body, _) = post(&a2a, Some(ERIN), &send(json!([{"text": "Weather?"}]), None)).await;
    let task: Value = serde_json::from_str(&body).unwrap();
    let task = &task["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{body}");
    let (task_id, context) = (task["id"].as_str().unwrap(), task["contextId"].as_str().unwrap());

    // Run control approves the call and resumes the run; the gate holds the call.
    let approve = format!("{base}/agents/approval/runs/{task_id}/approve");
    assert_eq!(post(&approve, Some(ERIN), &json!({"callId": "call_0"})).await.0, 200);
    let first = tokio::spawn({
        let resume = format!("{base}/agents/approval/runs/{task_id}/resume");
        async move { post(&resume, Some(ERIN), &json!({})).await }
    });
    until_tool_runs(&runs, 1).await;

    // The A2A continuation of the task is refused as a task that is running already; the task
    // follows the run resumed through run control (working); an AG-UI resume of its run is
    // refused with 409.
    let (_, body, _) = post(&a2a, Some(ERIN), &send(json!([{"text": "approve"}]), Some(task_id))).await;
    let refused: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refused["error"]["code"], -32004, "{body}");
    let get_task = json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}});
    let (_, body, _) = post(&a2a, Some(ERIN), &get_task).await;
    let got: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_WORKING", "{body}");
    let resume = agui_resume(context, "r9", &format!("{task_id}#call_0"));
    let (status, body, _) = post(&format!("{base}/agui/approval"), Some(ERIN), &resume).await;
    assert_eq!(status, 409, "{body}");

    gate.add_permits(100);
    let (status, body, _) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["status"], "completed");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the approved call ran once");
    // The task ended with its run, with the run's answer.
    let (_, body, _) = post(&a2a, Some(ERIN), &get_task).await;
    let got: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    assert!(
        !got["result"]["artifacts"].as_array().is_none_or(Vec::is_empty),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_task_resumed_through_run_control_streamed_ends_with_its_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(100));
    let base = gated_server(Arc::clone(&runs), gate).await;
    let a2a = format!("{base}/a2a/approval");
    let message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Weather?"}]});
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}});
    let (_, body, _) = post(&a2a, Some(ERIN), &send).await;
    let task: Value = serde_json::from_str(&body).unwrap();
    let task_id = task["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        task["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{body}"
    );

    let approve = format!("{base}/agents/approval/runs/{task_id}/approve");
    assert_eq!(post(&approve, Some(ERIN), &json!({"callId": "call_0"})).await.0, 200);
    let response = reqwest::Client::new()
        .post(format!("{base}/agents/approval/runs/{task_id}/resume"))
        .bearer_auth(ERIN)
        .header("accept", "text/event-stream")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = sse_json(&response.text().await.unwrap());
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED", "{events:?}");
    let get_task = json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}});
    let (_, body, _) = post(&a2a, Some(ERIN), &get_task).await;
    let got: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_task_resumed_through_ag_ui_is_cancelled_by_cancel_task() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let base = gated_server(Arc::clone(&runs), Arc::clone(&gate)).await;
    let a2a = format!("{base}/a2a/approval");
    let message = json!({"messageId": "m1", "role": "ROLE_USER", "contextId": "c1", "parts": [{"text": "Weather?"}]});
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}});
    let (_, body, _) = post(&a2a, Some(ERIN), &send).await;
    let task: Value = serde_json::from_str(&body).unwrap();
    let task_id = task["result"]["task"]["id"].as_str().unwrap().to_owned();
    // The task's paused run is resumed over AG-UI (the context is the thread), under a new id.
    let resume = agui_resume("c1", "agui-resume", &format!("{task_id}#call_0"));
    let agui = tokio::spawn({
        let url = format!("{base}/agui/approval");
        async move { post(&url, Some(ERIN), &resume).await }
    });
    until_tool_runs(&runs, 1).await;
    let get_task = json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}});
    let (_, body, _) = post(&a2a, Some(ERIN), &get_task).await;
    assert!(body.contains("TASK_STATE_WORKING"), "{body}");

    let cancel = json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": task_id}});
    let (_, body, _) = post(&a2a, Some(ERIN), &cancel).await;
    let cancelled: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cancelled["result"]["status"]["state"], "TASK_STATE_CANCELED", "{body}");
    // The resumed run stops (at the latest once its tool call ends): its stream ends with the
    // cancellation, and the task stays cancelled.
    gate.add_permits(1);
    let (status, body, _) = agui.await.unwrap();
    assert_eq!(status, 200);
    let last = sse_json(&body).pop().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{body}");
    assert_eq!(last["code"], "cancelled", "{body}");
    let (_, body, _) = post(&a2a, Some(ERIN), &get_task).await;
    assert!(body.contains("TASK_STATE_CANCELED"), "{body}");
}

/// The roles of session `t1`'s stored messages on the `approval` agent, in order.
async fn history_roles(base: &str) -> Vec<String> {
    let (status, history) = get(&format!("{base}/agents/approval/sessions/t1/messages"), ERIN).await;
    assert_eq!(status, 200, "{history}");
    history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect()
}

/// With session leases, a run of a session another run holds fails with `SessionBusy`: the
/// client is told so by its kind (`session_busy`, 409 as JSON), to try again once the session
/// is free, not a bare `run_failed` 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_is_reported_as_session_busy() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let leases = modu_core::InMemoryLeaseStore::new();
    let agent = Agent::builder(weather_model())
        .tool(common::gated_weather_tool(Arc::clone(&runs), Arc::clone(&gate), true))
        .checkpoint_store(Arc::new(leases.fence_checkpoints(InMemoryCheckpointStore::new())))
        .conversation_store(Arc::new(leases.fence_conversations(InMemoryConversationStore::new())))
        .session_leases(
            leases,
            modu_core::LeaseOptions::new().wait(std::time::Duration::from_millis(50)),
        )
        .build()
        .unwrap();
    let tokens = BearerTokens::new().token(ERIN, Principal::new("erin", ["weather"]));
    let base = serve(ModuServer::new().agent("approval", agent).auth(tokens).router()).await;
    // Two runs of the thread wait for approval; both are approved.
    for (run, call) in [("r1", "call_0"), ("r2", "call_1")] {
        assert_eq!(paused(&base, "t1", run).await["toolCallId"], call);
        let url = format!("{base}/agents/approval/runs/{run}/approve");
        assert_eq!(post(&url, Some(ERIN), &json!({"callId": call})).await.0, 200);
    }
    // r1 resumes and holds the session while its tool waits at the gate.
    let first = tokio::spawn({
        let url = format!("{base}/agents/approval/runs/r1/resume");
        async move { post(&url, Some(ERIN), &json!({})).await }
    });
    until_tool_runs(&runs, 1).await;

    let (status, body, _) = post(&format!("{base}/agui/approval"), Some(ERIN), &input("t1", "r3")).await;
    assert_eq!(status, 200, "{body}");
    let last = sse_json(&body).pop().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{body}");
    assert_eq!(last["code"], "session_busy", "{body}");
    let resume_r2 = format!("{base}/agents/approval/runs/r2/resume");
    let (status, body, _) = post(&resume_r2, Some(ERIN), &json!({})).await;
    assert_eq!(status, 409, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "session_busy");

    // Once the session is free, the same resume goes through.
    gate.add_permits(2);
    let (status, body, _) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = post(&resume_r2, Some(ERIN), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A paused run decided on a worker whose agent changed (another tool: a deploy in progress)
/// is refused by its kind, `resume_incompatible` (409), not as a bare `run_failed` 500, so the
/// client can tell it will not go through by trying again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_by_a_changed_agent_is_reported_as_resume_incompatible() {
    let runs = Arc::new(AtomicUsize::new(0));
    let checkpoints = Arc::new(InMemoryCheckpointStore::new());
    let conversations = Arc::new(InMemoryConversationStore::new());
    let tokens = || BearerTokens::new().token(ERIN, Principal::new("erin", ["weather"]));
    let old = Agent::builder(weather_model())
        .tool(weather_tool(Arc::clone(&runs), true))
        .checkpoint_store(checkpoints.clone())
        .conversation_store(conversations.clone())
        .build()
        .unwrap();
    let extra = FunctionTool::<()>::new(
        ToolSpec::new("get_time", "The time.", json!({"type": "object"})),
        |_, _| async { Ok(json!("noon")) },
    );
    let new = Agent::builder(weather_model())
        .tool(weather_tool(Arc::clone(&runs), true))
        .tool(extra)
        .checkpoint_store(checkpoints)
        .conversation_store(conversations)
        .build()
        .unwrap();
    let base = serve(ModuServer::new().agent("approval", old).auth(tokens()).router()).await;
    let other = serve(ModuServer::new().agent("approval", new).auth(tokens()).router()).await;
    assert_eq!(paused(&base, "t1", "r1").await["toolCallId"], "call_0");

    let url = format!("{other}/agents/approval/runs/r1/approve");
    let (status, body, _) = post(&url, Some(ERIN), &json!({"callId": "call_0"})).await;
    assert_eq!(status, 409, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "resume_incompatible", "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the approved call did not run");
}
