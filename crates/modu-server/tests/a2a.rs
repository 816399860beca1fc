//! The A2A endpoint on the wire: JSON-RPC errors, the MCP selection of a data part, and tasks
//! seen by their owner only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{post, serve, sse_json, weather_agent};
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

const ERIN: &str = "erin-token";
const MALLORY: &str = "mallory-token";

async fn server() -> String {
    let tokens = BearerTokens::new()
        .token(ERIN, Principal::new("erin", ["weather"]))
        .token(MALLORY, Principal::new("mallory", ["weather"]));
    serve(
        ModuServer::new()
            .agent("weather", weather_agent(Arc::default()))
            .auth(tokens)
            .router(),
    )
    .await
}

fn send(method: &str, parts: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": method,
           "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": parts}}})
}

async fn rpc(base: &str, token: &str, body: &Value) -> Value {
    let (status, text, _) = post(&format!("{base}/a2a/weather"), Some(token), body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn a_data_part_selects_the_mcp_servers_and_inline_stdio_is_refused() {
    let base = server().await;
    let answer = rpc(
        &base,
        ERIN,
        &send(
            "SendMessage",
            json!([{"text": "Weather?"}, {"data": {"mcp": {"servers": ["time"]}}}]),
        ),
    )
    .await;
    assert_eq!(answer["id"], 7);
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let text = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"mcp\":{\"servers\":[\"time\"]}"), "{text}");

    let stdio = json!([{"text": "Weather?"}, {"data": {"mcp": {"servers": [{"name": "sh", "transport": "stdio", "command": "sh"}]}}}]);
    let refused = rpc(&base, ERIN, &send("SendMessage", stdio)).await;
    assert_eq!(refused["error"]["code"], -32602);
    assert!(refused["error"]["message"].as_str().unwrap().contains("stdio"));
    let twice = json!([{"text": "Weather?"}, {"data": {"mcp": {"servers": []}}}, {"data": {"mcp": {"servers": []}}}]);
    assert_eq!(
        rpc(&base, ERIN, &send("SendMessage", twice)).await["error"]["code"],
        -32602
    );
}

#[tokio::test]
async fn json_rpc_errors_have_the_codes_a2a_names() {
    let base = server().await;
    let (status, text, _) = post(&format!("{base}/a2a/weather"), Some(ERIN), &json!("not an object")).await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["error"]["code"], -32600);
    let unknown = rpc(
        &base,
        ERIN,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "Nope", "params": {}}),
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32601);
    let get = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "missing"}});
    assert_eq!(rpc(&base, ERIN, &get).await["error"]["code"], -32001);
    // An id that is not a string, a number or null makes the request invalid: nothing runs.
    for id in [json!({"a": 1}), json!([1]), json!(true)] {
        let mut bad = send("SendMessage", json!([{"text": "Weather?"}]));
        bad["id"] = id.clone();
        let refused = rpc(&base, ERIN, &bad).await;
        assert_eq!(refused["error"]["code"], -32600, "{id}: {refused}");
        assert_eq!(refused["id"], Value::Null, "{id}: {refused}");
    }
    // Any number (negative, fractional) and any string are ids, answered under the same id.
    for id in [json!(-1), json!(1.5), json!("x")] {
        let mut asked = get.clone();
        asked["id"] = id.clone();
        let answered = rpc(&base, ERIN, &asked).await;
        assert_eq!(answered["error"]["code"], -32001, "{id}: {answered}");
        assert_eq!(answered["id"], id, "{id}: {answered}");
    }
    let listed = json!({"jsonrpc": "2.0", "id": "l", "method": "ListTasks", "params": {}});
    assert_eq!(
        rpc(&base, ERIN, &listed).await["result"]["tasks"],
        json!([]),
        "no task ran"
    );
    let push = json!({"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig", "params": {}});
    assert_eq!(rpc(&base, ERIN, &push).await["error"]["code"], -32003);
    let file = send("SendMessage", json!([{"url": "https://example.com/x.png"}]));
    assert_eq!(rpc(&base, ERIN, &file).await["error"]["code"], -32005);
    // A contextId no store can keep as a session id (too long, a NUL) is invalid params,
    // before anything runs; not a store failure.
    for context in ["c".repeat(5_000), "a\u{0}b".to_owned()] {
        let mut long = send("SendMessage", json!([{"text": "Weather?"}]));
        long["params"]["message"]["contextId"] = json!(context);
        let refused = rpc(&base, ERIN, &long).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert!(
            refused["error"]["message"].as_str().unwrap().contains("contextId"),
            "{refused}"
        );
    }
    // Not authenticated: 401 before any JSON-RPC.
    let (status, _, _) = post(&format!("{base}/a2a/weather"), None, &get).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_task_is_its_owners_only_and_streams_as_json_rpc_responses() {
    let base = server().await;
    let response = reqwest::Client::new()
        .post(format!("{base}/a2a/weather"))
        .bearer_auth(ERIN)
        .json(&send("SendStreamingMessage", json!([{"text": "Weather?"}])))
        .send()
        .await
        .unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse_json(&response.text().await.unwrap());
    assert!(events.iter().all(|e| e["jsonrpc"] == "2.0" && e["id"] == 7));
    let task_id = events[0]["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(events[0]["result"]["task"]["status"]["state"], "TASK_STATE_WORKING");
    let tool = events
        .iter()
        .find_map(|e| e["result"]["statusUpdate"]["status"]["message"]["parts"][0]["data"]["toolCall"].as_object())
        .expect("the tool call as a working status update");
    assert_eq!(tool["name"], "get_weather");
    let last = &events.last().unwrap()["result"]["statusUpdate"];
    assert_eq!(last["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(last["taskId"], task_id.as_str());

    let get = json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id, "historyLength": 1}});
    let mine = rpc(&base, ERIN, &get).await;
    assert_eq!(mine["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(mine["result"]["history"].as_array().unwrap().len(), 1);
    assert_eq!(rpc(&base, MALLORY, &get).await["error"]["code"], -32001);
    let cancel = json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": task_id}});
    assert_eq!(rpc(&base, ERIN, &cancel).await["error"]["code"], -32002);

    // The one agent's card is at the root as well, naming its endpoint.
    let card: Value = reqwest::Client::new()
        .get(format!("{base}/.well-known/agent-card.json"))
        .bearer_auth(ERIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["supportedInterfaces"][0]["url"], format!("{base}/a2a/weather"));
}

#[tokio::test]
async fn list_tasks_pages_the_callers_tasks_newest_first_with_filters() {
    let base = server().await;
    let in_context = |context: &str, text: &str| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage",
               "params": {"message": {"messageId": text, "role": "ROLE_USER", "contextId": context,
                                      "parts": [{"text": text}]}}})
    };
    let mut mine = Vec::new();
    for (context, text) in [("c1", "one"), ("c2", "two"), ("c1", "three")] {
        let answer = rpc(&base, ERIN, &in_context(context, text)).await;
        mine.push(answer["result"]["task"]["id"].as_str().unwrap().to_owned());
    }
    rpc(&base, MALLORY, &in_context("m", "hers")).await;
    let list = |params: Value| json!({"jsonrpc": "2.0", "id": 9, "method": "ListTasks", "params": params});

    // Erin's three, newest first, without artifacts unless asked.
    let all = rpc(&base, ERIN, &list(json!({}))).await["result"].clone();
    let ids: Vec<&str> = all["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [mine[2].as_str(), mine[1].as_str(), mine[0].as_str()]);
    assert_eq!(
        (all["totalSize"].clone(), all["pageSize"].clone()),
        (json!(3), json!(50))
    );
    assert_eq!(all["nextPageToken"], "");
    assert!(all["tasks"][0].get("artifacts").is_none(), "{all}");
    let with = rpc(
        &base,
        ERIN,
        &list(json!({"includeArtifacts": true, "historyLength": 1})),
    )
    .await;
    assert!(with["result"]["tasks"][0]["artifacts"][0]["parts"][0]["text"].is_string());
    assert_eq!(with["result"]["tasks"][0]["history"].as_array().unwrap().len(), 1);

    // Pages of two: the token of the first names the second.
    let first = rpc(&base, ERIN, &list(json!({"pageSize": 2}))).await["result"].clone();
    assert_eq!(first["tasks"].as_array().unwrap().len(), 2);
    let token = first["nextPageToken"].as_str().unwrap().to_owned();
    assert!(!token.is_empty());
    // A task created between two pages does not push the first page's last task onto the
    // second (an offset token listed it twice); it comes first in a new listing.
    let newer = rpc(&base, ERIN, &in_context("c3", "four")).await["result"]["task"]["id"].clone();
    let second = rpc(&base, ERIN, &list(json!({"pageSize": 2, "pageToken": token}))).await["result"].clone();
    let second_ids: Vec<&str> = second["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(second_ids, [mine[0].as_str()], "{second}");
    assert_eq!(second["nextPageToken"], "");
    let fresh = rpc(&base, ERIN, &list(json!({"pageSize": 2}))).await["result"].clone();
    assert_eq!(fresh["tasks"][0]["id"], newer);
    mine.push(newer.as_str().unwrap().to_owned());

    // Filters: a context, a state.
    let c1 = rpc(&base, ERIN, &list(json!({"contextId": "c1"}))).await["result"].clone();
    assert_eq!(c1["totalSize"], 2);
    let done = rpc(&base, ERIN, &list(json!({"status": "TASK_STATE_COMPLETED"}))).await["result"].clone();
    assert_eq!(done["totalSize"], 4);
    let waiting = rpc(&base, ERIN, &list(json!({"status": "TASK_STATE_INPUT_REQUIRED"}))).await["result"].clone();
    assert_eq!(waiting["totalSize"], 0);

    // Mallory sees hers only.
    let hers = rpc(&base, MALLORY, &list(json!({}))).await["result"].clone();
    assert_eq!(hers["totalSize"], 1);
    assert!(!mine.iter().any(|id| hers["tasks"][0]["id"] == id.as_str()));

    // Bad requests are invalid params.
    for params in [
        json!({"pageSize": 101}),
        json!({"pageSize": -1}),
        json!({"pageToken": "x"}),
        json!({"status": "TASK_STATE_NAPPING"}),
        json!({"statusTimestampAfter": "2026-01-01T00:00:00Z"}),
    ] {
        let refused = rpc(&base, ERIN, &list(params.clone())).await;
        assert_eq!(refused["error"]["code"], -32602, "{params}: {refused}");
    }
}

/// A JSON-RPC notification (a request without `id`) gets no reply (JSON-RPC 2.0, 4.1): 204
/// without a body, whatever its method. It is not run: no task, no tool call. A request with
/// `"id": null` is not a notification, and an invalid request is still answered.
#[tokio::test]
async fn a_notification_gets_no_reply_and_runs_nothing() {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tokens = BearerTokens::new().token(ERIN, Principal::new("erin", ["weather"]));
    let app = ModuServer::new()
        .agent("weather", weather_agent(Arc::clone(&runs)))
        .auth(tokens)
        .router();
    let base = serve(app).await;
    let url = format!("{base}/a2a/weather");
    let mut message = send("SendMessage", json!([{"text": "Weather in Paris?"}]));
    message.as_object_mut().unwrap().remove("id");
    for body in [
        message,
        json!({"jsonrpc": "2.0", "method": "ListTasks", "params": {}}),
        json!({"jsonrpc": "2.0", "method": "Nope"}),
    ] {
        let (status, text, _) = post(&url, Some(ERIN), &body).await;
        assert_eq!(status, 204, "{body}: {text}");
        assert!(text.is_empty(), "{body}: {text}");
    }
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a notification runs nothing"
    );
    let listed = rpc(
        &base,
        ERIN,
        &json!({"jsonrpc": "2.0", "id": null, "method": "ListTasks", "params": {}}),
    )
    .await;
    assert_eq!(listed["id"], Value::Null);
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let invalid = rpc(&base, ERIN, &json!({"jsonrpc": "2.0", "params": {}})).await;
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
}

/// An agent whose `get_weather` needs approval and holds every call until `gate` has a permit.
async fn gated_server(gate: Arc<tokio::sync::Semaphore>) -> String {
    let tool = common::gated_weather_tool(Arc::default(), gate, true);
    let agent = modu_agent::Agent::builder(common::weather_model())
        .tool(tool)
        .checkpoint_store(Arc::new(modu_core::InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let tokens = BearerTokens::new().token(ERIN, Principal::new("erin", ["weather"]));
    serve(ModuServer::new().agent("weather", agent).auth(tokens).router()).await
}

/// `SubscribeToTask` on a task whose paused run was resumed through AG-UI or run control
/// (streamed: that run's events are AG-UI events) follows it as `GetTask` does: the working
/// task, then, when the run ends, its answer and its last status, all A2A stream responses.
/// With `Last-Event-ID` it is refused (those updates carry no event ids).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_to_task_follows_a_task_resumed_through_ag_ui_or_run_control() {
    for via in ["agui", "control"] {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let base = gated_server(Arc::clone(&gate)).await;
        let a2a = format!("{base}/a2a/weather");
        let message =
            json!({"messageId": "m1", "role": "ROLE_USER", "contextId": "c1", "parts": [{"text": "Weather?"}]});
        let sent = rpc(
            &base,
            ERIN,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}),
        )
        .await;
        let task_id = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
        assert_eq!(
            sent["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{sent}"
        );
        let resumed = if via == "agui" {
            let body = json!({"threadId": "c1", "runId": "agui-resume", "messages": [], "tools": [], "context": [],
                "resume": [{"interruptId": format!("{task_id}#call_0"), "status": "resolved", "payload": {"approved": true}}]});
            reqwest::Client::new()
                .post(format!("{base}/agui/weather"))
                .bearer_auth(ERIN)
                .json(&body)
        } else {
            let approve = format!("{base}/agents/weather/runs/{task_id}/approve");
            assert_eq!(post(&approve, Some(ERIN), &json!({"callId": "call_0"})).await.0, 200);
            reqwest::Client::new()
                .post(format!("{base}/agents/weather/runs/{task_id}/resume"))
                .bearer_auth(ERIN)
                .header("accept", "text/event-stream")
                .json(&json!({}))
        };
        let resumed = resumed.send().await.unwrap();
        assert_eq!(resumed.status(), 200, "{via}");
        let get = rpc(
            &base,
            ERIN,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}),
        )
        .await;
        assert_eq!(get["result"]["status"]["state"], "TASK_STATE_WORKING", "{via}: {get}");

        let subscribe = json!({"jsonrpc": "2.0", "id": 3, "method": "SubscribeToTask", "params": {"id": task_id}});
        // With Last-Event-ID (say, the id of the last update of the task's first run, before
        // it paused): refused, saying why, not a stream that ignores it.
        let response = reqwest::Client::new()
            .post(&a2a)
            .bearer_auth(ERIN)
            .header("last-event-id", "2")
            .timeout(std::time::Duration::from_secs(10))
            .json(&subscribe)
            .send()
            .await
            .unwrap();
        let status = response.status();
        // A stream that ignored Last-Event-ID would wait for the run (gated) and time out.
        let text = response
            .text()
            .await
            .unwrap_or_else(|e| panic!("{via}: no answer, the Last-Event-ID was ignored: {e}"));
        assert_eq!(status, 200, "{via}");
        let refused: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{via}: not an error: {text}"));
        assert_eq!(refused["error"]["code"], -32602, "{via}: {refused}");
        let why = refused["error"]["message"].as_str().unwrap();
        assert!(why.contains("Last-Event-ID") && why.contains("resumed"), "{via}: {why}");
        let response = reqwest::Client::new()
            .post(&a2a)
            .bearer_auth(ERIN)
            .json(&subscribe)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{via}");
        gate.add_permits(10);
        let text = response.text().await.unwrap();
        let responses = sse_json(&text);
        assert!(!responses.is_empty(), "{via}: not a stream: {text}");
        assert!(
            responses.iter().all(|r| r["id"] == 3 && r.get("result").is_some()),
            "{via}: {text}"
        );
        let results: Vec<&Value> = responses.iter().map(|r| &r["result"]).collect();
        assert_eq!(
            results[0]["task"]["status"]["state"], "TASK_STATE_WORKING",
            "{via}: {text}"
        );
        let last = results.last().unwrap();
        assert_eq!(
            last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{via}: {text}"
        );
        let answer = results
            .iter()
            .find_map(|r| r["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
            .unwrap_or_else(|| panic!("{via}: no answer in {text}"));
        assert!(answer.starts_with("Forecast: "), "{via}: {answer}");
        resumed.text().await.unwrap();
    }
}

/// A JSON-RPC batch (a JSON array, as JSON-RPC 2.0 defines it, which A2A 1.0 takes as it is) gets an
/// array of its requests' responses, in order: notifications get none, an entry that is not a
/// request gets `-32600` with `id` null, a streaming method `-32600` saying to send it alone.
/// An empty batch is one `-32600` object; a batch of notifications only gets no reply (204).
#[tokio::test]
async fn a_batch_gets_an_array_of_its_requests_responses() {
    let base = server().await;
    let url = format!("{base}/a2a/weather");
    let mut streamed = send("SendStreamingMessage", json!([{"text": "Weather?"}]));
    streamed["id"] = json!("s");
    let batch = json!([
        send("SendMessage", json!([{"text": "Weather in Paris?"}])),
        {"jsonrpc": "2.0", "id": "g", "method": "GetTask", "params": {"id": "no-such-task"}},
        {"jsonrpc": "2.0", "method": "ListTasks", "params": {}},
        42,
        streamed,
        {"jsonrpc": "2.0", "id": null, "method": "ListTasks", "params": {}},
    ]);
    let (status, text, _) = post(&url, Some(ERIN), &batch).await;
    assert_eq!(status, 200, "{text}");
    let responses: Vec<Value> = serde_json::from_str(&text).unwrap();
    let ids: Vec<&Value> = responses.iter().map(|r| &r["id"]).collect();
    assert_eq!(
        ids,
        [&json!(7), &json!("g"), &Value::Null, &json!("s"), &Value::Null],
        "{text}"
    );
    assert!(responses.iter().all(|r| r["jsonrpc"] == "2.0"), "{text}");
    let task = &responses[0]["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{text}");
    assert!(responses[1]["error"]["code"].is_i64(), "{text}");
    assert_eq!(responses[2]["error"]["code"], -32600, "{text}");
    assert_eq!(responses[3]["error"]["code"], -32600, "{text}");
    let message = responses[3]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("SendStreamingMessage") && message.contains("alone"),
        "{text}"
    );
    assert_eq!(responses[4]["result"]["tasks"].as_array().unwrap().len(), 1, "{text}");

    let (status, text, _) = post(&url, Some(ERIN), &json!([])).await;
    assert_eq!(status, 200, "{text}");
    let empty: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(empty["id"], Value::Null, "{text}");
    assert_eq!(empty["error"]["code"], -32600, "{text}");

    let notifications = json!([{"jsonrpc": "2.0", "method": "ListTasks"}, {"jsonrpc": "2.0", "method": "Nope"}]);
    let (status, text, _) = post(&url, Some(ERIN), &notifications).await;
    assert_eq!(status, 204, "{text}");
    assert!(text.is_empty(), "{text}");

    // Over 32 entries: one error, and none of them runs (the task list still holds one task).
    let too_many = Value::Array((0..33).map(|_| send("SendMessage", json!([{"text": "Hi"}]))).collect());
    let (status, text, _) = post(&url, Some(ERIN), &too_many).await;
    assert_eq!(status, 200, "{text}");
    let refused: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(refused["id"], Value::Null, "{text}");
    assert_eq!(refused["error"]["code"], -32600, "{text}");
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("at most 32"),
        "{text}"
    );
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}});
    let (_, text, _) = post(&url, Some(ERIN), &list).await;
    let listed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(listed["result"]["tasks"].as_array().unwrap().len(), 1, "{text}");
}

/// `SendMessage`'s `configuration.historyLength` bounds the history of the task it answers
/// with, as `GetTask`'s does: 0 is none, 1 the newest message, unset all; a negative one is
/// -32602.
#[tokio::test]
async fn send_message_answers_with_at_most_history_length_messages() {
    let base = server().await;
    let mut lengths = Vec::new();
    for length in [json!(0), json!(1), Value::Null] {
        let mut body = send("SendMessage", json!([{"text": "Weather in Paris?"}]));
        body["params"]["configuration"] = json!({"historyLength": length});
        let answer = rpc(&base, ERIN, &body).await;
        let task = &answer["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
        lengths.push(task["history"].as_array().unwrap().len());
    }
    assert_eq!(lengths[..2], [0, 1]);
    assert!(lengths[2] >= 2, "unset: the whole history, {lengths:?}");
    let mut body = send("SendMessage", json!([{"text": "Weather in Paris?"}]));
    body["params"]["configuration"] = json!({"historyLength": -1});
    assert_eq!(rpc(&base, ERIN, &body).await["error"]["code"], -32602);
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    sky: String,
}

/// `configuration.acceptedOutputModes` is read: a client that takes none of the media types
/// the agent answers in (a structured agent's `application/json`, as its card says) gets
/// -32005 ContentTypeNotSupportedError and nothing runs; one that takes them (or any type,
/// or gives no list) gets the answer.
#[tokio::test]
async fn accepted_output_modes_the_agent_cannot_answer_in_are_refused() {
    let model = modu_testing::ScriptedModel::new()
        .text("{\"city\": \"Paris\", \"sky\": \"sunny\"}")
        .cycle();
    let agent = modu_agent::Agent::builder(model.clone())
        .output::<Forecast>()
        .build()
        .unwrap();
    let tokens = BearerTokens::new().token(ERIN, Principal::new("erin", ["weather"]));
    let base = serve(ModuServer::new().agent("weather", agent).auth(tokens).router()).await;
    for method in ["SendMessage", "SendStreamingMessage"] {
        for modes in [json!(["text/plain"]), json!(["text/*", "image/png"])] {
            let mut body = send(method, json!([{"text": "Weather in Paris?"}]));
            body["params"]["configuration"] = json!({"acceptedOutputModes": modes});
            let answer = rpc(&base, ERIN, &body).await;
            assert_eq!(answer["error"]["code"], -32005, "{method} {modes}: {answer}");
        }
    }
    assert!(model.requests().is_empty(), "a refused request ran the agent");
    for modes in [
        json!(["text/plain", "application/json"]),
        json!(["*/*"]),
        json!([]),
        Value::Null,
    ] {
        let mut body = send("SendMessage", json!([{"text": "Weather in Paris?"}]));
        body["params"]["configuration"] = json!({"acceptedOutputModes": modes});
        let answer = rpc(&base, ERIN, &body).await;
        let task = &answer["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{modes}: {answer}");
        assert_eq!(task["artifacts"][0]["parts"][0]["data"]["sky"], "sunny", "{answer}");
    }
    // A text agent answers text: a client taking text/plain only gets it.
    let text = server().await;
    let mut body = send("SendMessage", json!([{"text": "Weather in Paris?"}]));
    body["params"]["configuration"] = json!({"acceptedOutputModes": ["text/plain"]});
    let answer = rpc(&text, ERIN, &body).await;
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
}
