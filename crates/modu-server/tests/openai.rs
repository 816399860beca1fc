//! The OpenAI-compatible endpoints over real HTTP on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{chat, failing_agent, post, serve, sse_data, weather_agent};
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

const TOKEN: &str = "test-token-alice";

async fn server(runs: Arc<AtomicUsize>) -> String {
    let tokens = BearerTokens::new().token(TOKEN, Principal::new("alice", ["weather"]));
    let app = ModuServer::new()
        .agent("weather", weather_agent(runs))
        .agent("broken", failing_agent())
        .auth(tokens)
        .router();
    serve(app).await
}

#[tokio::test]
async fn models_lists_every_mounted_agent_in_openai_format() {
    let base = server(Arc::default()).await;
    let body: Value = reqwest::Client::new()
        .get(format!("{base}/v1/models"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["broken", "weather"]);
    for model in body["data"].as_array().unwrap() {
        assert_eq!(model["object"], "model");
        assert_eq!(model["owned_by"], "modu");
        assert!(model["created"].as_u64().unwrap() > 1_600_000_000);
        // One model, as OpenAI's SDKs' `models.retrieve` asks for it: the same object.
        let url = format!("{base}/v1/models/{}", model["id"].as_str().unwrap());
        let one = reqwest::Client::new().get(url).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(one.status(), 200);
        assert_eq!(&one.json::<Value>().await.unwrap(), model);
    }
    let unknown = reqwest::Client::new()
        .get(format!("{base}/v1/models/nope"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let error = &unknown.json::<Value>().await.unwrap()["error"];
    assert_eq!(error["code"], "model_not_found", "{error}");
    let anonymous = reqwest::get(format!("{base}/v1/models/weather")).await.unwrap();
    assert_eq!(anonymous.status(), 401, "the route is behind the server's auth");
}

#[tokio::test]
async fn a_completion_runs_the_tool_on_the_server_and_answers_as_the_assistant() {
    let runs = Arc::new(AtomicUsize::new(0));
    let base = server(Arc::clone(&runs)).await;
    let (status, text, _) = post(
        &format!("{base}/v1/chat/completions"),
        Some(TOKEN),
        &chat("weather", false),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "weather");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(body["created"].as_u64().unwrap().abs_diff(now) < 60);
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["message"]["role"], "assistant");
    let content = choice["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("Forecast: "), "{content}");
    let tool_result: Value = serde_json::from_str(content.trim_start_matches("Forecast: ")).unwrap();
    assert_eq!(tool_result["forecast"], "sunny");
    // The run's user is the token's principal, not the payload's `user`.
    assert_eq!(tool_result["user"], "alice");
    assert_eq!(tool_result["roles"], json!(["weather"]));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Two model calls of 10 in / 5 out each.
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30})
    );
}

#[tokio::test]
async fn a_streamed_completion_is_chunks_then_usage_then_done() {
    let base = server(Arc::default()).await;
    let (status, text, headers) = post(
        &format!("{base}/v1/chat/completions"),
        Some(TOKEN),
        &chat("weather", true),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let data = sse_data(&text);
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for chunk in &chunks {
        assert_eq!(chunk["id"], id);
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "weather");
        assert!(chunk["created"].is_u64());
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let (usage_chunk, content_chunks) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["total_tokens"], 30);
    let (stop, deltas) = content_chunks.split_last().unwrap();
    assert_eq!(stop["choices"][0]["finish_reason"], "stop");
    assert_eq!(stop["choices"][0]["delta"], json!({}));
    let text: String = deltas
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap_or(""))
        .collect();
    assert!(text.starts_with("Forecast: {"), "{text}");
    assert!(text.contains("\"user\":\"alice\""), "{text}");
    assert!(deltas.iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
}

#[tokio::test]
async fn an_unknown_model_is_404_in_openai_error_format() {
    let base = server(Arc::default()).await;
    let (status, text, _) = post(
        &format!("{base}/v1/chat/completions"),
        Some(TOKEN),
        &chat("nope", false),
    )
    .await;
    assert_eq!(status, 404);
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("nope"));
}

#[tokio::test]
async fn client_side_tools_and_bad_messages_are_refused() {
    let base = server(Arc::default()).await;
    let url = format!("{base}/v1/chat/completions");
    let mut with_tools = chat("weather", false);
    with_tools["tools"] = json!([{"type": "function", "function": {"name": "x", "parameters": {}}}]);
    let (status, text, _) = post(&url, Some(TOKEN), &with_tools).await;
    assert_eq!(status, 400, "{text}");
    let (status, _, _) = post(&url, Some(TOKEN), &json!({"model": "weather", "messages": []})).await;
    assert_eq!(status, 400);
    let (status, text, _) = post(&url, Some(TOKEN), &json!({"model": "weather"})).await;
    assert_eq!(status, 400);
    assert!(text.contains("messages"), "{text}");
}

/// A message without content (`null` or missing) is 400 `invalid_request_error` naming the
/// field, as OpenAI answers it, and runs nothing; an assistant message with tool calls needs
/// no content, and a system prompt alone is taken, as OpenAI takes it.
#[tokio::test]
async fn a_message_without_content_is_refused() {
    let runs = Arc::new(AtomicUsize::new(0));
    let base = server(Arc::clone(&runs)).await;
    let url = format!("{base}/v1/chat/completions");
    let refused = [
        (json!([{"role": "user", "content": null}]), "messages[0].content"),
        (
            json!([{"role": "system", "content": "Be brief."}, {"role": "user"}]),
            "messages[1].content",
        ),
        (
            json!([{"role": "system", "content": null}, {"role": "user", "content": "hi"}]),
            "messages[0].content",
        ),
    ];
    for (messages, param) in refused {
        let request = json!({"model": "weather", "messages": messages});
        let (status, text, _) = post(&url, Some(TOKEN), &request).await;
        assert_eq!(status, 400, "{messages}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error", "{text}");
        assert_eq!(body["error"]["param"], param, "{text}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a refused request ran the agent");
    let with_call = json!({"model": "weather", "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    ]});
    let (status, text, _) = post(&url, Some(TOKEN), &with_call).await;
    assert_eq!(status, 200, "{text}");
    let system_only = json!({"model": "weather", "messages": [{"role": "system", "content": "Say hi."}]});
    let (status, text, _) = post(&url, Some(TOKEN), &system_only).await;
    assert_eq!(status, 200, "{text}");
    // OpenAI's own history: a refusal has null content.
    let refused_before = json!({"model": "weather", "messages": [
        {"role": "user", "content": "Something I may not answer"},
        {"role": "assistant", "content": null, "refusal": "I can't help with that."},
        {"role": "user", "content": "Weather in Paris?"}
    ]});
    let (status, text, _) = post(&url, Some(TOKEN), &refused_before).await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn a_tool_result_that_answers_no_call_is_refused() {
    let base = server(Arc::default()).await;
    let url = format!("{base}/v1/chat/completions");
    let orphan = json!({"model": "weather", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "ghost", "content": "x"}
    ]});
    let (status, text, _) = post(&url, Some(TOKEN), &orphan).await;
    assert_eq!(status, 400, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error", "{text}");
    assert!(body["error"]["message"].as_str().unwrap().contains("ghost"), "{text}");
    // A result that answers an earlier call is taken.
    let answered = json!({"model": "weather", "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"}
    ]});
    let (status, text, _) = post(&url, Some(TOKEN), &answered).await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn a_failed_run_reports_its_kind_and_never_the_providers_text() {
    let base = server(Arc::default()).await;
    let url = format!("{base}/v1/chat/completions");
    let (status, text, _) = post(&url, Some(TOKEN), &chat("broken", false)).await;
    assert_eq!(status, 502, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], "model_error");
    assert!(!text.contains("sk-leaked"), "{text}");

    let (status, text, _) = post(&url, Some(TOKEN), &chat("broken", true)).await;
    assert_eq!(status, 200);
    let data = sse_data(&text);
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "model_error");
    assert!(!text.contains("sk-leaked"), "{text}");
    assert!(!data.iter().any(|d| d == "[DONE]"));
}

#[tokio::test]
async fn a_run_that_waits_for_approval_is_409_approval_required() {
    let agent = modu_agent::Agent::builder(common::weather_model())
        .tool(common::weather_tool(Arc::default(), true))
        .checkpoint_store(Arc::new(modu_core::InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let base = serve(ModuServer::new().agent("weather", agent).router()).await;
    let (status, text, _) = post(&format!("{base}/v1/chat/completions"), None, &chat("weather", false)).await;
    assert_eq!(status, 409, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], "approval_required");
}

/// A run that pauses for approval over the OpenAI route is answered with a 409 naming its run:
/// with only that id (and the agent, the request's `model`) its owner lists the waiting calls,
/// approves them and resumes the run through run control, streamed and not.
#[tokio::test]
async fn a_paused_run_names_its_run_id_and_is_decided_and_resumed_through_run_control() {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = modu_agent::Agent::builder(common::weather_model())
        .tool(common::weather_tool(Arc::clone(&runs), true))
        .checkpoint_store(Arc::new(modu_core::InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let tokens = BearerTokens::new()
        .token(TOKEN, Principal::new("alice", ["weather"]))
        .token("test-token-mallory", Principal::new("mallory", ["weather"]));
    let base = serve(ModuServer::new().agent("weather", agent).auth(tokens).router()).await;
    let client = reqwest::Client::new();
    for (ran, stream) in [false, true].into_iter().enumerate() {
        let (status, text, _) = post(
            &format!("{base}/v1/chat/completions"),
            Some(TOKEN),
            &chat("weather", stream),
        )
        .await;
        let error: Value = if stream {
            assert_eq!(status, 200, "{text}");
            let data = sse_data(&text);
            serde_json::from_str(data.last().unwrap()).unwrap()
        } else {
            assert_eq!(status, 409, "{text}");
            serde_json::from_str(&text).unwrap()
        };
        let error = &error["error"];
        assert_eq!(error["code"], "approval_required", "{text}");
        let run_id = error["run_id"]
            .as_str()
            .expect("the 409 names the paused run")
            .to_owned();
        assert!(error["message"].as_str().unwrap().contains(&run_id), "{error}");
        assert_eq!(runs.load(Ordering::SeqCst), ran, "nothing ran before the approval");

        let runs_url = format!("{base}/agents/weather/runs/{run_id}");
        // Another user does not see it.
        let other = client
            .get(format!("{runs_url}/approvals"))
            .bearer_auth("test-token-mallory")
            .send()
            .await
            .unwrap();
        assert_eq!(other.status().as_u16(), 404);
        let listed: Value = client
            .get(format!("{runs_url}/approvals"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let call_id = listed["approvals"][0]["callId"].as_str().unwrap().to_owned();
        assert_eq!(listed["approvals"][0]["tool"], "get_weather", "{listed}");
        let (status, text, _) = post(&format!("{runs_url}/approve"), Some(TOKEN), &json!({"callId": call_id})).await;
        assert_eq!(status, 200, "{text}");
        let (status, text, _) = post(&format!("{runs_url}/resume"), Some(TOKEN), &json!({})).await;
        assert_eq!(status, 200, "{text}");
        let resumed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(resumed["status"], "completed", "{resumed}");
        assert_eq!(resumed["runId"], run_id.as_str());
        assert!(resumed["text"].as_str().unwrap().starts_with("Forecast: "), "{resumed}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "each approved call ran once");
}

/// OpenAI's SDKs retry a 409 or a 5xx twice unless the answer says `x-should-retry: false`; a
/// retry would run the agent again, its tools included.
#[tokio::test]
async fn a_failed_run_tells_openai_sdks_not_to_run_it_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    // Calls its tool for ever: the run ends at its tool-call limit, after the tool ran.
    let looping = modu_agent::Agent::builder(
        modu_testing::ScriptedModel::new()
            .tool_call("get_weather", json!({"city": "Paris"}))
            .cycle(),
    )
    .tool(common::weather_tool(Arc::clone(&runs), false))
    .limits(modu_agent::RunLimits::default().max_tool_calls(1))
    .build()
    .unwrap();
    let paused = modu_agent::Agent::builder(common::weather_model())
        .tool(common::weather_tool(Arc::default(), true))
        .checkpoint_store(Arc::new(modu_core::InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let app = ModuServer::new()
        .agent("looping", looping)
        .agent("paused", paused)
        .agent("broken", failing_agent());
    let base = serve(app.router()).await;
    let url = format!("{base}/v1/chat/completions");
    for (model, status, code) in [
        ("looping", 500, "max_tool_calls_exceeded"),
        ("paused", 409, "approval_required"),
        ("broken", 502, "model_error"),
    ] {
        let (got, text, headers) = post(&url, None, &chat(model, false)).await;
        assert_eq!(got, status, "{model}: {text}");
        assert!(text.contains(code), "{model}: {text}");
        assert_eq!(
            headers.get("x-should-retry").and_then(|v| v.to_str().ok()),
            Some("false"),
            "{model}: a retry would run the agent again"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // A request the server refused before any run may be sent again.
    let (got, _, headers) = post(&url, None, &chat("no-such-agent", false)).await;
    assert_eq!(got, 404);
    assert!(headers.get("x-should-retry").is_none());
}

#[tokio::test]
async fn reasoning_goes_out_as_reasoning_content_streamed_and_not() {
    let tokens = BearerTokens::new().token(TOKEN, Principal::new("alice", ["weather"]));
    let app = ModuServer::new()
        .agent("thinker", common::thinking_agent())
        .auth(tokens)
        .router();
    let base = serve(app).await;
    let url = format!("{base}/v1/chat/completions");

    let (status, text, _) = post(&url, Some(TOKEN), &chat("thinker", true)).await;
    assert_eq!(status, 200, "{text}");
    let data = sse_data(&text);
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let field = |name: &str| -> String {
        chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][name].as_str())
            .collect()
    };
    // vLLM's and llama.cpp's shape: `reasoning_content` deltas beside `content` deltas.
    assert_eq!(
        field("reasoning_content"),
        "The user wants the weather.The tool answered."
    );
    assert_eq!(field("content"), "Sunny.");

    let (status, text, _) = post(&url, Some(TOKEN), &chat("thinker", false)).await;
    assert_eq!(status, 200, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], "Sunny.");
    assert_eq!(
        message["reasoning_content"], "The tool answered.",
        "the answer's own reasoning"
    );

    // An answer without reasoning has no such field.
    let base = server(Arc::default()).await;
    let (_, text, _) = post(
        &format!("{base}/v1/chat/completions"),
        Some(TOKEN),
        &chat("weather", false),
    )
    .await;
    let body: Value = serde_json::from_str(&text).unwrap();
    assert!(body["choices"][0]["message"].get("reasoning_content").is_none());
}

/// An answer the model stopped at its output limit goes out with `finish_reason: "length"`,
/// as OpenAI sends it, streamed and not: a client that checks it knows the text is cut.
#[tokio::test]
async fn an_answer_cut_at_the_output_limit_finishes_with_length() {
    use modu_core::{ChatEvent, FinishReason};
    let model = modu_testing::ScriptedModel::new()
        .respond(|_: &modu_core::ChatRequest| {
            vec![
                ChatEvent::TextDelta {
                    text: "It is sunny and".into(),
                },
                ChatEvent::Finish {
                    reason: FinishReason::Length,
                },
            ]
        })
        .cycle();
    let agent = modu_agent::Agent::builder(model).name("cut").build().unwrap();
    let tokens = BearerTokens::new().token(TOKEN, Principal::new("alice", ["weather"]));
    let base = serve(ModuServer::new().agent("cut", agent).auth(tokens).router()).await;
    let url = format!("{base}/v1/chat/completions");

    let (status, text, _) = post(&url, Some(TOKEN), &chat("cut", false)).await;
    assert_eq!(status, 200, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "It is sunny and");

    let (status, text, _) = post(&url, Some(TOKEN), &chat("cut", true)).await;
    assert_eq!(status, 200, "{text}");
    let reasons: Vec<Value> = sse_data(&text)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| c["choices"][0].get("finish_reason").cloned())
        .filter(|r| !r.is_null())
        .collect();
    assert_eq!(reasons, [json!("length")], "{text}");
}

/// A run an input guardrail stopped is answered by its kind, `guardrail_tripped` (422: sending
/// it again does not help), and the tripwire's message stays in the log.
#[tokio::test]
async fn a_tripped_guardrail_is_reported_by_its_kind() {
    use modu_agent::guardrail::{self, Verdict};
    use modu_core::Tripwire;
    let never = guardrail::input("no_weather", |_ctx, _input| {
        Verdict::Trip(Tripwire::new(
            "off_topic",
            "weather questions are refused for erin@example.com",
        ))
    });
    let agent = modu_agent::Agent::builder(modu_testing::ScriptedModel::new().text("never"))
        .input_guardrail(never)
        .build()
        .unwrap();
    let tokens = BearerTokens::new().token(TOKEN, Principal::new("alice", ["weather"]));
    let base = serve(ModuServer::new().agent("guarded", agent).auth(tokens).router()).await;
    let (status, text, _) = post(
        &format!("{base}/v1/chat/completions"),
        Some(TOKEN),
        &chat("guarded", false),
    )
    .await;
    assert_eq!(status, 422, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], "guardrail_tripped", "{body}");
    assert!(!text.contains("erin@example.com"), "{text}");
}
