//! End to end with the real clients: the official OpenAI Python SDK, the A2A Python SDK
//! (`a2a-sdk`) and AG-UI's `HttpAgent` (`@ag-ui/client`, every event checked against
//! `@ag-ui/core`'s schemas).
//!
//! - `MODU_TEST_PYTHON_OPENAI`: `1` (run `python3`) or the path of a Python that has `openai`.
//! - `MODU_TEST_PYTHON_A2A`: the path of a Python that has `a2a-sdk` (1.x).
//! - `MODU_TEST_AGUI_CLIENT`: the `node_modules` folder holding `@ag-ui/client` and
//!   `@ag-ui/core` (or the folder that contains it); `MODU_TEST_NODE` names node (default `node`).
//!
//! Each test skips when its variable is unset, and fails under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{serve, weather_model, weather_tool};
use modu_agent::Agent;
use modu_core::{ConversationStore, InMemoryConversationStore, RbacToolAuthorizer};
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::Value;

const TOKEN: &str = "e2e-token";

async fn server(runs: Arc<AtomicUsize>, store: Arc<InMemoryConversationStore>) -> String {
    let agent = Agent::builder(weather_model())
        .name("weather")
        .tool(weather_tool(Arc::clone(&runs), false))
        .authorizer(Arc::new(RbacToolAuthorizer::new().allow("weather", ["get_weather"])))
        .conversation_store(store)
        .build()
        .unwrap();
    let approval = Agent::builder(weather_model())
        .tool(weather_tool(Arc::default(), true))
        .checkpoint_store(Arc::new(modu_core::InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    // `slow`: its tool takes a second, so a client can subscribe to its task while it works.
    let slow_tool = modu_core::FunctionTool::<()>::new(
        modu_core::ToolSpec::new(
            "get_weather",
            "The weather in a city, slowly",
            serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        ),
        |_ctx, _args: Value| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(serde_json::json!({"forecast": "sunny, eventually"}))
        },
    );
    let slow = Agent::builder(weather_model()).tool(slow_tool).build().unwrap();
    // `limited`: calls its tool for ever, so its run fails at its tool-call limit after one call.
    let limited = Agent::builder(
        modu_testing::ScriptedModel::new()
            .tool_call("get_weather", serde_json::json!({"city": "Paris"}))
            .cycle(),
    )
    .tool(weather_tool(Arc::clone(&runs), false))
    .limits(modu_agent::RunLimits::default().max_tool_calls(1))
    .build()
    .unwrap();
    let tokens = BearerTokens::new().token(TOKEN, Principal::new("erin", ["weather"]));
    let app = ModuServer::new()
        .agent("weather", agent)
        .agent("approval", approval)
        .agent("slow", slow)
        .agent("limited", limited)
        .auth(tokens);
    serve(app.router()).await
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    sky: String,
}

/// An agent whose answer is a `Forecast`, streamed in three pieces.
fn forecast_agent() -> Agent<(), Forecast> {
    let model = modu_testing::ScriptedModel::new()
        .text_deltas(["{\"city\": \"Par", "is\", \"sky\": \"sun", "ny\"}"])
        .cycle();
    Agent::builder(model).output::<Forecast>().build().unwrap()
}

fn script(name: &str) -> String {
    format!("{}/tests/scripts/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs a client script and returns the JSON it printed.
async fn run_client(mut command: tokio::process::Command) -> Value {
    command.kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the client script did not finish in 120 s")
        .expect("the client could not be started");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "client failed: {}\n{stderr}\n{stdout}",
        output.status
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("client printed no JSON ({e}): {stdout}\n{stderr}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_openai_python_sdk_completes_streamed_and_not() {
    let Some(python) = modu_testing::service_env("MODU_TEST_PYTHON_OPENAI") else {
        return;
    };
    let python = if python.trim() == "1" {
        "python3".to_owned()
    } else {
        python
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let base = server(Arc::clone(&runs), Arc::default()).await;
    let mut command = tokio::process::Command::new(python);
    command
        .arg(script("openai_client.py"))
        .arg(format!("{base}/v1"))
        .arg(TOKEN)
        .arg("weather");
    let out = run_client(command).await;

    assert_eq!(
        out["models"],
        serde_json::json!(["approval", "limited", "slow", "weather"])
    );
    let completion = &out["completion"];
    assert!(completion["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(completion["model"], "weather");
    assert_eq!(completion["role"], "assistant");
    assert_eq!(completion["finish_reason"], "stop");
    let content = completion["content"].as_str().unwrap();
    assert!(
        content.starts_with("Forecast: ") && content.contains("\"user\":\"erin\""),
        "{content}"
    );
    assert_eq!(completion["usage"]["prompt_tokens"], 20);
    assert_eq!(completion["usage"]["total_tokens"], 30);

    let stream = &out["stream"];
    assert_eq!(stream["ids"].as_array().unwrap().len(), 1, "one id for every chunk");
    assert_eq!(stream["objects"], serde_json::json!(["chat.completion.chunk"]));
    assert_eq!(stream["content"], content, "the streamed text is the same answer");
    assert_eq!(stream["finish_reasons"], serde_json::json!(["stop"]));
    assert_eq!(stream["usage"]["completion_tokens"], 10);

    assert_eq!(out["unknown_model"]["status"], 404);
    assert_eq!(out["unknown_model"]["code"], "model_not_found");
    assert_eq!(out["bad_key"]["status"], 401);
    // With its default retries, the SDK does not run a failed run again (x-should-retry).
    assert_eq!(out["failed_run"]["status"], 500);
    assert_eq!(out["failed_run"]["code"], "max_tool_calls_exceeded");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "the tool ran on the server, once per completion and once in the failed run"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ag_ui_http_agent_runs_and_every_event_fits_the_core_schemas() {
    let Some(modules) = modu_testing::service_env("MODU_TEST_AGUI_CLIENT") else {
        return;
    };
    let mut modules = PathBuf::from(modules);
    if !modules.ends_with("node_modules") {
        modules.push("node_modules");
    }
    assert!(
        modules.join("@ag-ui/client").is_dir(),
        "no @ag-ui/client in {}",
        modules.display()
    );
    let store = Arc::new(InMemoryConversationStore::new());
    let base = server(Arc::default(), Arc::clone(&store)).await;
    let thinker_tokens = BearerTokens::new().token(TOKEN, Principal::new("erin", ["weather"]));
    let thinker = serve(
        ModuServer::new()
            .agent("thinker", common::thinking_agent())
            .agent("forecast", forecast_agent())
            .auth(thinker_tokens)
            .router(),
    )
    .await;
    let node = std::env::var("MODU_TEST_NODE").unwrap_or_else(|_| "node".into());
    let mut command = tokio::process::Command::new(node);
    command
        .env("NODE_PATH", &modules)
        .arg(script("agui_client.cjs"))
        .arg(format!("{base}/agui/weather"))
        .arg(TOKEN)
        .arg(format!("{base}/agui/approval"))
        .arg(format!("{thinker}/agui/thinker"))
        .arg(format!("{thinker}/agui/forecast"));
    let out = run_client(command).await;

    // A structured output is the agent's state, as HttpAgent applies it: the output so far as
    // it streams, the whole output at the end.
    let forecast = &out["forecast"];
    assert_eq!(forecast["invalid"], serde_json::json!([]), "{forecast}");
    let whole = serde_json::json!({"output": {"city": "Paris", "sky": "sunny"}});
    assert_eq!(forecast["state"], whole, "{forecast}");
    let states = forecast["states"].as_array().unwrap();
    assert!(states.len() >= 3, "{forecast}");
    assert_eq!(states[0], serde_json::json!({"output": {"city": "Par"}}));
    assert_eq!(forecast["result"], whole["output"]);

    assert_eq!(out["protocolVersion"], "1.0");
    let runs = out["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for (i, run) in runs.iter().enumerate() {
        assert_eq!(
            run["invalid"],
            serde_json::json!([]),
            "run {i}: events outside the schemas"
        );
        let types: Vec<&str> = run["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "RUN_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED"
            ],
            "run {i}"
        );
        assert_eq!(run["events"][0]["runId"], format!("node-run-{i}"));
        assert_eq!(run["events"][0]["threadId"], "node-thread");
        assert!(run["result"].as_str().unwrap().starts_with("Forecast: "));
        // The client built the assistant's tool call, the tool's result and the answer.
        let roles: Vec<&str> = run["newMessages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["assistant", "tool", "assistant"], "run {i}");
    }
    let last = out["messages"].as_array().unwrap().last().unwrap();
    assert!(last["content"].as_str().unwrap().contains("\"user\":\"erin\""));
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("\"session\":\"node-thread\"")
    );
    // A run that waits for approval ends with an interrupt the client records as pending.
    let paused = &out["paused"];
    assert!(
        paused["events"].as_array().unwrap().iter().all(|e| e["valid"] == true),
        "{paused}"
    );
    assert_eq!(paused["outcome"], "interrupt");
    assert_eq!(paused["pendingInterrupts"][0]["reason"], "tool_approval");
    assert_eq!(paused["pendingInterrupts"][0]["metadata"]["tool"], "get_weather");
    // The next run answers the interrupt in `resume`: the paused run continues, streamed
    // under the new run id, and the client has no pending interrupt left.
    let resumed = &out["resumed"];
    assert!(
        resumed["events"].as_array().unwrap().iter().all(|e| e["valid"] == true),
        "{resumed}"
    );
    assert_eq!(resumed["events"][0]["type"], "RUN_STARTED");
    assert_eq!(resumed["events"][0]["runId"], "node-resumed");
    assert_eq!(resumed["outcome"], "success");
    assert!(
        resumed["result"].as_str().unwrap().starts_with("Forecast: "),
        "{resumed}"
    );
    assert_eq!(resumed["pendingInterrupts"], serde_json::json!([]));
    assert_eq!(
        resumed["roles"],
        serde_json::json!(["user", "assistant", "tool", "assistant"]),
        "the client's thread: the question, the approved call, its result, the answer"
    );
    // The second run sent the whole thread; the server appended only its new turn.
    assert_eq!(store.load("node-thread").await.unwrap().len(), 8);

    // Reasoning and streamed tool-call arguments pass the client's own event verification and
    // the core schemas.
    let thinker = &out["thinker"];
    assert_eq!(thinker["invalid"], serde_json::json!([]), "{thinker}");
    let types: Vec<&str> = thinker["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        types.iter().filter(|t| **t == "REASONING_MESSAGE_CONTENT").count(),
        3,
        "{types:?}"
    );
    assert_eq!(types.iter().filter(|t| **t == "TOOL_CALL_ARGS").count(), 2, "{types:?}");
    assert_eq!(types.last(), Some(&"RUN_FINISHED"));
    let roles: Vec<&str> = thinker["newMessages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert!(
        roles.contains(&"tool") && roles.last() == Some(&"assistant"),
        "{roles:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_a2a_sdk_client_sends_streams_and_answers_input_required() {
    let Some(python) = modu_testing::service_env("MODU_TEST_PYTHON_A2A") else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let base = server(Arc::clone(&runs), Arc::default()).await;
    let mut command = tokio::process::Command::new(python);
    command.arg(script("a2a_client.py")).arg(&base).arg(TOKEN);
    let out = run_client(command).await;

    // The card at A2A's well-known path names the JSON-RPC endpoint the client then used.
    let interface = &out["card"]["supportedInterfaces"][0];
    assert_eq!(interface["url"], format!("{base}/a2a/weather"));
    assert_eq!(interface["protocolBinding"], "JSONRPC");
    assert_eq!(out["card"]["capabilities"]["streaming"], true);

    // SendMessage: the task completes; the data part's mcp object reached the tool's run.
    let send = &out["send"];
    assert_eq!(send["kinds"], serde_json::json!(["task"]));
    assert_eq!(send["state"], "TASK_STATE_COMPLETED");
    let answer = send["answer"].as_str().unwrap();
    assert!(answer.starts_with("Forecast: "), "{answer}");
    assert!(answer.contains("\"user\":\"erin\""), "{answer}");
    assert!(answer.contains("\"mcp\":{\"servers\":[]}"), "{answer}");
    let got = &out["get"];
    assert_eq!(got["id"], send["taskId"]);
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["history"][0]["role"], "ROLE_USER");
    assert_eq!(got["history"][1]["role"], "ROLE_AGENT");
    // ListTasks: the SDK parses the page; the task just sent is on it, with its artifact.
    let listed = &out["list"];
    assert_eq!(listed["pageSize"], 10, "{listed}");
    let tasks = listed["tasks"].as_array().unwrap();
    let sent = tasks
        .iter()
        .find(|t| t["id"] == send["taskId"])
        .expect("the sent task is listed");
    assert_eq!(sent["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(
        sent["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Forecast: ")
    );

    // SendStreamingMessage: the task, a tool call, the answer streamed, the last status.
    let stream = &out["stream"];
    let kinds: Vec<&str> = stream["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"));
    assert!(kinds.contains(&"artifactUpdate"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"statusUpdate"));
    assert_eq!(stream["state"], "TASK_STATE_COMPLETED");
    assert!(stream["answer"].as_str().unwrap().starts_with("Forecast: "));

    // A run waiting for approval leaves its task input-required; "approve" resumes it.
    assert_eq!(out["paused"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let waiting = &out["pausedMessage"]["parts"][1]["data"]["approvals"][0];
    assert_eq!(waiting["tool"], "get_weather");
    assert_eq!(out["resumed"]["taskId"], out["paused"]["taskId"]);
    assert_eq!(out["resumed"]["state"], "TASK_STATE_COMPLETED");
    assert!(out["resumed"]["answer"].as_str().unwrap().starts_with("Forecast: "));
    // A rejection: the tool does not run, the model answers with the rejection.
    assert_eq!(out["rejected"]["state"], "TASK_STATE_COMPLETED");
    assert!(!out["rejected"]["answer"].as_str().unwrap().contains("sunny"));
    assert_eq!(out["cancelled"]["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(out["cancelEnded"], "TaskNotCancelableError");
    assert_eq!(out["missing"], "TaskNotFoundError");
    // SubscribeToTask: the sender left after the first response; the subscriber gets the task
    // as it stands, then its updates to the end.
    let subscribed = &out["subscribed"];
    assert_eq!(subscribed["taskId"], out["slowTask"]);
    assert_eq!(subscribed["kinds"][0], "task");
    assert_eq!(subscribed["state"], "TASK_STATE_COMPLETED", "{subscribed}");
    assert!(
        subscribed["answer"].as_str().unwrap().contains("sunny, eventually"),
        "{subscribed}"
    );
    assert_eq!(out["subscribeEnded"], "UnsupportedOperationError");
    // A polling client (`ClientConfig(polling=True)`, so `returnImmediately`) gets the task
    // while the slow tool works, then polls GetTask to its completion.
    let polled = &out["polled"];
    assert_eq!(polled["kinds"], serde_json::json!(["task"]), "{polled}");
    assert_eq!(polled["state"], "TASK_STATE_WORKING", "{polled}");
    let end = &out["polledEnd"];
    assert_eq!(end["id"], polled["taskId"]);
    assert_eq!(end["status"]["state"], "TASK_STATE_COMPLETED", "{end}");
    assert!(
        out["polls"].as_u64().unwrap() > 1,
        "the first poll found the task ended"
    );
    assert!(
        end["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("sunny, eventually"),
        "{end}"
    );
    // weather: 2 runs; approval: the approved call only.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
