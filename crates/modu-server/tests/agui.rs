//! The AG-UI endpoint over real HTTP on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{failing_agent, post, serve, sse_json, weather_agent, weather_model, weather_tool};
use modu_agent::Agent;
use modu_core::{ConversationStore, InMemoryCheckpointStore, InMemoryConversationStore, RbacToolAuthorizer};
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

const TOKEN: &str = "agui-token";

fn tokens() -> BearerTokens {
    BearerTokens::new().token(TOKEN, Principal::new("alice", ["weather"]))
}

fn input(thread: &str, run: &str, messages: Value) -> Value {
    json!({
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {"mcp": {"servers": ["docs", {"name": "crm", "transport": "streamable_http", "url": "https://crm.example/mcp"}]},
                           "user": "mallory", "roles": ["admin"]},
    })
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_run_streams_ag_ui_events_in_order_with_the_tool_result() {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = ModuServer::new()
        .agent("weather", weather_agent(Arc::clone(&runs)))
        .auth(tokens())
        .router();
    let base = serve(app).await;
    let body = input("thread-1", "run-1", json!([user("u1", "Weather in Paris?")]));
    let (status, text, headers) = post(&format!("{base}/agui/weather"), Some(TOKEN), &body).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse_json(&text);
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            // The result goes out as the call ends, before the next model call.
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ],
        "{text}"
    );
    assert_eq!(events[0]["threadId"], "thread-1");
    assert_eq!(events[0]["runId"], "run-1");
    let call_id = events[1]["toolCallId"].as_str().unwrap();
    assert_eq!(events[1]["toolCallName"], "get_weather");
    assert!(events[1]["parentMessageId"].is_string());
    assert_eq!(
        serde_json::from_str::<Value>(events[2]["delta"].as_str().unwrap()).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(events[3]["toolCallId"], call_id);
    let message_id = &events[5]["messageId"];
    assert_eq!(events[5]["role"], "assistant");
    assert!(events[6..9].iter().all(|e| &e["messageId"] == message_id));
    assert_ne!(
        message_id, &events[1]["parentMessageId"],
        "each model call is its own message"
    );
    let result = &events[4];
    assert_eq!(result["toolCallId"], call_id);
    assert_eq!(result["role"], "tool");
    let seen: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    // RBAC user and roles from the token; the session is the thread; forwardedProps.mcp is the
    // run's `mcp` metadata; the payload's own user and roles are ignored.
    assert_eq!(seen["user"], "alice");
    assert_eq!(seen["roles"], json!(["weather"]));
    assert_eq!(seen["session"], "thread-1");
    assert_eq!(seen["mcp"]["servers"][0], "docs");
    assert_eq!(seen["mcp"]["servers"][1]["name"], "crm");
    let finished = &events[9];
    assert_eq!(finished["threadId"], "thread-1");
    assert_eq!(finished["runId"], "run-1");
    assert_eq!(finished["outcome"], json!({"type": "success"}));
    assert!(finished["result"].as_str().unwrap().starts_with("Forecast: "));
    assert_eq!(finished["usage"][0]["inputTokens"], 20);
    assert_eq!(finished["usage"][0]["outputTokens"], 10);
    assert!(events.iter().all(|e| e["timestamp"].is_u64()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_thread_is_the_session_and_only_the_new_turn_is_appended() {
    let store = Arc::new(InMemoryConversationStore::new());
    let agent = Agent::builder(weather_model())
        .tool(weather_tool(Arc::default(), false))
        .authorizer(Arc::new(RbacToolAuthorizer::new().allow("weather", ["get_weather"])))
        .conversation_store(store.clone())
        .build()
        .unwrap();
    let base = serve(ModuServer::new().agent("weather", agent).auth(tokens()).router()).await;
    let url = format!("{base}/agui/weather");
    let (status, text, _) = post(&url, Some(TOKEN), &input("t-2", "r-1", json!([user("u1", "first")]))).await;
    assert_eq!(status, 200, "{text}");
    let stored = store.load("t-2").await.unwrap();
    assert_eq!(stored.len(), 4, "user, tool call, tool result, answer");
    // The client sends the whole thread again, with the answer it got and a new question.
    let history = json!([
        user("u1", "first"),
        {"id": "a1", "role": "assistant", "content": "Forecast: sunny"},
        user("u2", "second"),
    ]);
    let (status, text, _) = post(&url, Some(TOKEN), &input("t-2", "r-2", history)).await;
    assert_eq!(status, 200, "{text}");
    let stored = store.load("t-2").await.unwrap();
    assert_eq!(stored.len(), 8);
    assert_eq!(stored[4].text(), "second");
    // A request with no new user message is refused.
    let (status, _, _) = post(
        &url,
        Some(TOKEN),
        &input(
            "t-2",
            "r-3",
            json!([user("u1", "x"), {"id": "a", "role": "assistant", "content": "y"}]),
        ),
    )
    .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn a_paused_run_ends_with_an_interrupt_and_its_run_id_cannot_be_reused() {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(weather_model())
        .tool(weather_tool(Arc::clone(&runs), true))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let base = serve(ModuServer::new().agent("weather", agent).router()).await;
    let url = format!("{base}/agui/weather");
    let body = input("t-3", "paused-run", json!([user("u1", "Weather?")]));
    let (status, text, _) = post(&url, None, &body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse_json(&text);
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED"
        ],
        "{text}"
    );
    let outcome = &events[4]["outcome"];
    assert_eq!(outcome["type"], "interrupt");
    assert_eq!(outcome["interrupts"][0]["toolCallId"], events[1]["toolCallId"]);
    assert_eq!(outcome["interrupts"][0]["reason"], "tool_approval");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the call waits for approval");
    // The paused run's checkpoint is not overwritten by a new request with its id.
    let (status, text, _) = post(&url, None, &body).await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("run_id_in_use"));
}

#[tokio::test]
async fn inline_stdio_servers_and_malformed_input_are_refused() {
    let base = serve(
        ModuServer::new()
            .agent("weather", weather_agent(Arc::default()))
            .router(),
    )
    .await;
    let url = format!("{base}/agui/weather");
    let mut body = input("t", "r", json!([user("u", "hi")]));
    body["forwardedProps"]["mcp"] = json!({"servers": [{"name": "sh", "transport": "stdio", "command": "sh"}]});
    let (status, text, _) = post(&url, None, &body).await;
    assert_eq!(status, 400);
    assert!(text.contains("stdio"), "{text}");
    body["forwardedProps"]["mcp"] = json!(["docs"]);
    assert_eq!(post(&url, None, &body).await.0, 400);
    let bad_id = input("t", "no spaces allowed", json!([user("u", "hi")]));
    assert_eq!(post(&url, None, &bad_id).await.0, 400);
    let mut resume = input("t", "r", json!([user("u", "hi")]));
    resume["resume"] = json!([{"interruptId": "x", "status": "resolved"}]);
    assert_eq!(post(&url, None, &resume).await.0, 400);
    let (status, text, _) = post(&format!("{base}/agui/other"), None, &input("t", "r", json!([]))).await;
    assert_eq!(status, 404, "{text}");
}

#[tokio::test]
async fn a_failed_run_ends_with_run_error_without_the_providers_text() {
    let base = serve(ModuServer::new().agent("broken", failing_agent()).router()).await;
    let (status, text, _) = post(
        &format!("{base}/agui/broken"),
        None,
        &input("t", "r", json!([user("u", "hi")])),
    )
    .await;
    assert_eq!(status, 200);
    let events = sse_json(&text);
    assert_eq!(types(&events), ["RUN_STARTED", "RUN_ERROR"], "{text}");
    assert_eq!(events[1]["code"], "model_error");
    assert!(!text.contains("sk-leaked"), "{text}");
}

#[tokio::test]
async fn a_strict_plan_and_execute_run_streams_only_its_final_answer() {
    use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
    let plan = json!({"steps": [{"description": "Look up the weather", "allowed_tools": ["get_weather"]}]});
    let model = modu_testing::ScriptedModel::new()
        .text(plan.to_string())
        .tool_call("get_weather", json!({"city": "Paris"}))
        .text(json!({"status": "completed", "result": "sunny"}).to_string())
        .text_deltas(["It is ", "sunny."]);
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(model)
        .tool(weather_tool(Arc::clone(&runs), false))
        .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let base = serve(ModuServer::new().agent("strict", agent).router()).await;
    let (status, text, _) = post(
        &format!("{base}/agui/strict"),
        None,
        &input("t", "strict-1", json!([user("u", "Weather?")])),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let events = sse_json(&text);
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ],
        "{text}"
    );
    assert_eq!(events[5]["result"], "It is sunny.");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        !text.contains("\"forecast\""),
        "no tool result of a strict run on the wire: {text}"
    );
}

#[tokio::test]
async fn reasoning_and_tool_call_arguments_stream_as_they_arrive() {
    let app = ModuServer::new()
        .agent("thinker", common::thinking_agent())
        .auth(tokens())
        .router();
    let base = serve(app).await;
    let body = input("thread-t", "run-t", json!([user("u1", "Weather in Paris?")]));
    let (status, text, _) = post(&format!("{base}/agui/thinker"), Some(TOKEN), &body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse_json(&text);
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            // The call is announced with its first fragment, its arguments as they stream.
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ],
        "{text}"
    );
    let reasoning_id = &events[1]["messageId"];
    assert!(events[2..7].iter().all(|e| &e["messageId"] == reasoning_id));
    assert_eq!(events[2]["role"], "reasoning");
    let thought: String = events[3..5].iter().map(|e| e["delta"].as_str().unwrap()).collect();
    assert_eq!(thought, "The user wants the weather.");
    assert_eq!(events[7]["toolCallId"], "call_think");
    assert_eq!(events[7]["toolCallName"], "get_weather");
    let args: String = events[8..10].iter().map(|e| e["delta"].as_str().unwrap()).collect();
    assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), json!({"city": "Paris"}));
    assert!(events[8..11].iter().all(|e| e["toolCallId"] == "call_think"));
    assert_ne!(
        &events[12]["messageId"], reasoning_id,
        "each model call reasons in its own message"
    );
    assert_eq!(
        events[11]["toolCallId"], "call_think",
        "the result answers the streamed call"
    );
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    sky: String,
}

#[tokio::test]
async fn a_structured_output_streams_as_state_snapshots() {
    let model = modu_testing::ScriptedModel::new().text_deltas(["{\"city\": \"Par", "is\", \"sky\": \"sun", "ny\"}"]);
    let agent = Agent::builder(model).output::<Forecast>().build().unwrap();
    let app = ModuServer::new().agent("forecast", agent).auth(tokens()).router();
    let base = serve(app).await;
    let body = input("thread-s", "run-s", json!([user("u1", "Weather in Paris?")]));
    let (status, text, _) = post(&format!("{base}/agui/forecast"), Some(TOKEN), &body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse_json(&text);
    let snapshots: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "STATE_SNAPSHOT")
        .map(|e| &e["snapshot"]["output"])
        .collect();
    assert!(snapshots.len() >= 3, "{events:?}");
    // Each snapshot is the output so far; the last is the whole output, right before the end.
    assert_eq!(snapshots[0], &json!({"city": "Par"}));
    assert_eq!(snapshots.last().unwrap(), &&json!({"city": "Paris", "sky": "sunny"}));
    let n = events.len();
    assert_eq!(types(&events)[n - 2..], ["STATE_SNAPSHOT", "RUN_FINISHED"]);
    assert_eq!(events[n - 1]["result"], json!({"city": "Paris", "sky": "sunny"}));

    // A text agent's run has no state.
    let runs = Arc::new(AtomicUsize::new(0));
    let app = ModuServer::new()
        .agent("weather", weather_agent(runs))
        .auth(tokens())
        .router();
    let base = serve(app).await;
    let (_, text, _) = post(&format!("{base}/agui/weather"), Some(TOKEN), &body).await;
    assert!(!types(&sse_json(&text)).contains(&"STATE_SNAPSHOT"));
}

#[tokio::test]
async fn a_tools_progress_goes_out_as_a_custom_event_between_its_start_and_result() {
    let tool = modu_core::FunctionTool::<()>::new(
        modu_core::ToolSpec::new("count", "Counts to two", json!({"type": "object"})),
        |ctx: modu_core::RunContext<()>, _args: Value| async move {
            ctx.report_progress(1.0, Some(2.0), Some("one".into())).await;
            ctx.report_progress(2.0, Some(2.0), None).await;
            Ok(json!("counted"))
        },
    );
    let model = modu_testing::ScriptedModel::new()
        .tool_call("count", json!({}))
        .text("Counted.");
    let agent = Agent::builder(model).tool(tool).build().unwrap();
    let base = serve(ModuServer::new().agent("counter", agent).auth(tokens()).router()).await;
    let body = input("thread-p", "run-p", json!([user("u1", "Count.")]));
    let (status, text, _) = post(&format!("{base}/agui/counter"), Some(TOKEN), &body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse_json(&text);
    let kinds = types(&events);
    let start = kinds.iter().position(|t| *t == "TOOL_CALL_START").unwrap();
    let result = kinds.iter().position(|t| *t == "TOOL_CALL_RESULT").unwrap();
    let custom: Vec<(usize, &Value)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "CUSTOM")
        .collect();
    assert_eq!(custom.len(), 2, "{kinds:?}");
    let call_id = &events[start]["toolCallId"];
    for (i, e) in &custom {
        assert!(start < *i && *i < result, "{kinds:?}");
        assert_eq!(e["name"], "modu.tool_progress");
        assert_eq!(&e["value"]["toolCallId"], call_id);
        assert_eq!(e["value"]["total"], 2.0);
    }
    assert_eq!(custom[0].1["value"]["progress"], 1.0);
    assert_eq!(custom[0].1["value"]["message"], "one");
    assert_eq!(custom[1].1["value"]["progress"], 2.0);
}

/// A client that reads so slowly that it falls more than the run's event log behind is told so
/// (`RUN_ERROR` `events_dropped`) before its stream ends, instead of a stream that just stops
/// without `RUN_FINISHED`: the run itself goes on and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_falls_behind_the_log_is_told_before_its_stream_ends() {
    use futures::StreamExt;
    use modu_core::{AgentEvent, ChatEvent, CollectingEventSink, FinishReason};
    let delta = "x".repeat(200);
    let model = modu_testing::ScriptedModel::new().respond(move |_: &modu_core::ChatRequest| {
        let mut events: Vec<ChatEvent> = (0..5_000)
            .map(|_| ChatEvent::TextDelta { text: delta.clone() })
            .collect();
        events.push(ChatEvent::Finish {
            reason: FinishReason::Stop,
        });
        events
    });
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model).event_sink(sink.clone()).build().unwrap();
    let base = serve(ModuServer::new().agent("long", agent).auth(tokens()).router()).await;
    let body = input("t-slow", "r-slow", json!([user("u1", "Write a lot.")]));
    let mut response = reqwest::Client::new()
        .post(format!("{base}/agui/long"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    // The reader stops reading until the run has finished (it runs on its own task).
    let finished = async {
        while !sink
            .events()
            .iter()
            .any(|e| matches!(e, AgentEvent::RunCompleted { .. }))
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), finished)
        .await
        .expect("the run finishes without its reader");
    let mut text = String::from_utf8(first.to_vec()).unwrap();
    let mut rest = response.bytes_stream();
    while let Some(chunk) = rest.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let events = sse_json(&text);
    assert!(events.len() < 5_000, "the reader fell behind: {} events", events.len());
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{last}");
    assert_eq!(last["code"], "events_dropped", "{last}");
    assert!(last["message"].as_str().unwrap().contains("behind"), "{last}");
}
