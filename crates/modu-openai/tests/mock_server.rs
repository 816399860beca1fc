//! `MockOpenAiServer` features the client relies on in tests: large request bodies, and tool
//! calls with scripted ids (duplicate, missing) that reach the client as parsed `ToolCall`s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use modu_core::{ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, Message, ModelError, ToolCall};
use modu_openai::OpenAiClient;
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

fn client(server: &MockOpenAiServer) -> OpenAiClient {
    OpenAiClient::new(server.base_url(), "mock-model").unwrap()
}

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

async fn streamed(model: &OpenAiClient, request: ChatRequest) -> Result<ChatResponse, ModelError> {
    let mut stream = model.stream(request).await?;
    let mut builder = ChatResponseBuilder::default();
    while let Some(ev) = stream.next().await {
        builder.push(ev?);
    }
    builder.finish()
}

/// The answer to `reply`, streamed (`true`) or not.
async fn answer(server: &MockOpenAiServer, reply: MockReply, stream: bool) -> ChatResponse {
    server.push(reply);
    let model = client(server);
    if stream {
        streamed(&model, hi()).await.unwrap()
    } else {
        model.complete(hi()).await.unwrap()
    }
}

#[tokio::test]
async fn a_10_mb_tool_argument_is_accepted() {
    const { assert!(MockOpenAiServer::DEFAULT_BODY_LIMIT >= 16 * 1024 * 1024) };
    let server = MockOpenAiServer::start().await.unwrap();
    // 10 MiB of text, with quotes that JSON escaping doubles (the body is larger still).
    let data: String = "abc\"defgh\"".repeat(1024 * 1024);
    let args = json!({ "data": data }).to_string();
    assert!(args.len() > 10 * 1024 * 1024);
    let request = ChatRequest::new(vec![
        Message::user("store this"),
        Message::assistant_tool_calls("", vec![ToolCall::new("call_1", "store", args.clone())]),
        Message::tool_result("call_1", "store", "stored", false),
    ]);
    let response = client(&server).complete(request).await.unwrap();
    assert_eq!(response.message.text(), "The tool answered: stored");
    let received = server.requests();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].pointer("/messages/1/tool_calls/0/function/arguments"),
        Some(&Value::String(args))
    );
}

#[tokio::test]
async fn a_body_over_the_configured_limit_is_answered_413() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.body_limit(64 * 1024);
    let big = ChatRequest::new(vec![Message::user("x".repeat(100 * 1024))]);
    let err = client(&server).complete(big.clone()).await.unwrap_err();
    assert!(matches!(err, ModelError::Status { status: 413, .. }), "{err:?}");
    assert!(server.requests().is_empty(), "a refused body is not recorded");
    // Small requests still pass, and a higher limit lets the big one through.
    assert_eq!(
        client(&server).complete(hi()).await.unwrap().message.text(),
        "You said: hi"
    );
    server.body_limit(1024 * 1024);
    assert!(client(&server).complete(big).await.is_ok());
}

#[tokio::test]
async fn duplicate_ids_reach_the_client_unchanged() {
    let server = MockOpenAiServer::start().await.unwrap();
    for stream in [false, true] {
        let reply = MockReply::ToolCallsWithIds(vec![
            (Some("dup".into()), "add".into(), r#"{"a":1,"b":2}"#.into()),
            (Some("dup".into()), "mul".into(), r#"{"x":3}"#.into()),
        ]);
        let r = answer(&server, reply, stream).await;
        assert_eq!(
            r.message.tool_calls,
            vec![
                ToolCall::new("dup", "add", r#"{"a":1,"b":2}"#),
                ToolCall::new("dup", "mul", r#"{"x":3}"#),
            ],
            "stream: {stream}"
        );
    }
}

#[tokio::test]
async fn missing_ids_reach_the_client_as_distinct_ids_it_makes() {
    let server = MockOpenAiServer::start().await.unwrap();
    for stream in [false, true] {
        let reply = || {
            MockReply::ToolCallsWithIds(vec![
                (None, "a".into(), "{}".into()),
                (None, "b".into(), r#"{"k":"v"}"#.into()),
                (Some("given".into()), "c".into(), "{}".into()),
            ])
        };
        let first = answer(&server, reply(), stream).await.message.tool_calls;
        let second = answer(&server, reply(), stream).await.message.tool_calls;
        let names: Vec<&str> = first.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(first[1].arguments, r#"{"k":"v"}"#);
        assert_eq!(first[2].id, "given");
        assert_eq!(second[2].id, "given");
        let mut made: Vec<&str> = first[..2].iter().chain(&second[..2]).map(|c| c.id.as_str()).collect();
        assert!(made.iter().all(|id| !id.is_empty() && *id != "given"), "{made:?}");
        made.sort_unstable();
        made.dedup();
        assert_eq!(
            made.len(),
            4,
            "made ids are unique, across answers too (stream: {stream})"
        );
    }
}

/// The `tool_calls` deltas of a raw streamed answer, in order.
async fn raw_stream_deltas(server: &MockOpenAiServer) -> Vec<Value> {
    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let text = modu_openai::reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| {
            let v: Value = serde_json::from_str(d).unwrap();
            v.pointer("/choices/0/delta/tool_calls").cloned()
        })
        .flat_map(|calls| calls.as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn the_wire_is_openais_id_on_the_first_chunk_of_each_call_only() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::ToolCallsWithIds(vec![
        (
            Some("call_x".into()),
            "lookup".into(),
            r#"{"query":"a long query text here"}"#.into(),
        ),
        (None, "other".into(), r#"{"q":1}"#.into()),
    ]));
    let deltas = raw_stream_deltas(&server).await;
    for (index, id) in [(0, Some("call_x")), (1, None)] {
        let mine: Vec<&Value> = deltas.iter().filter(|d| d["index"] == index).collect();
        assert!(mine.len() >= 2, "name chunk, then argument chunks: {mine:?}");
        let head = mine[0];
        assert_eq!(head.get("id").and_then(Value::as_str), id, "{head}");
        assert_eq!(head["type"], "function");
        assert!(head.pointer("/function/name").is_some());
        for later in &mine[1..] {
            assert!(later.get("id").is_none() && later.get("type").is_none(), "{later}");
            assert!(later.pointer("/function/name").is_none(), "{later}");
        }
    }

    // Not streamed: each call has its id, or no `id` key at all.
    server.push(MockReply::ToolCallsWithIds(vec![
        (Some("call_x".into()), "lookup".into(), "{}".into()),
        (None, "other".into(), "{}".into()),
    ]));
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let v: Value = serde_json::from_str(
        &modu_openai::reqwest::Client::new()
            .post(format!("{}/chat/completions", server.base_url()))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let calls = v.pointer("/choices/0/message/tool_calls").unwrap();
    assert_eq!(calls[0]["id"], "call_x");
    assert!(calls[1].get("id").is_none(), "{calls}");
    assert_eq!(calls[1]["type"], "function");

    // The classic variant still gives every call a fresh id.
    server.push(MockReply::ToolCalls(vec![
        ("a".into(), "{}".into()),
        ("b".into(), "{}".into()),
    ]));
    let deltas = raw_stream_deltas(&server).await;
    let ids: Vec<&str> = deltas
        .iter()
        .filter_map(|d| d.get("id").and_then(Value::as_str))
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn complete_sends_stream_false_by_default_and_stream_true_with_always_stream() {
    let server = MockOpenAiServer::start().await.unwrap();
    let calls = || MockReply::ToolCalls(vec![("add".into(), r#"{"a":2,"b":3}"#.into())]);

    let default = client(&server);
    assert!(!default.always_streams());
    server.push(calls());
    let plain = default.complete(hi()).await.unwrap();

    let streaming = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("mock-model")
        .always_stream(true)
        .build()
        .unwrap();
    assert!(streaming.always_streams());
    assert!(streaming.with_model("other").always_streams());
    server.push(calls());
    let folded = streaming.complete(hi()).await.unwrap();

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["stream"], json!(false));
    assert_eq!(requests[0].get("stream_options"), None);
    assert_eq!(requests[1]["stream"], json!(true));
    assert_eq!(requests[1]["stream_options"], json!({"include_usage": true}));
    // The folded stream is the same answer as the JSON one (ids are fresh per reply).
    for r in [&plain, &folded] {
        let call = &r.message.tool_calls[0];
        assert_eq!(
            (call.name.as_str(), call.arguments.as_str()),
            ("add", r#"{"a":2,"b":3}"#)
        );
        assert!(call.id.starts_with("call_"));
        assert_eq!(r.finish_reason, Some(modu_core::FinishReason::ToolCalls));
        assert!(r.usage.total_tokens > 0);
    }
    assert_eq!(plain.usage, folded.usage);
}

#[tokio::test]
async fn always_stream_errors_are_the_streams_masked_errors() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.require_api_key("sk-secret-key-1234");
    let model = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("mock-model")
        .api_key("sk-wrong-key-5678")
        .always_stream(true)
        .build()
        .unwrap();
    let err = model.complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Authentication { .. }), "{err:?}");
    assert!(!format!("{err:?}").contains("sk-wrong-key-5678"));
}

#[tokio::test]
async fn the_mock_latency_delays_every_reply() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.latency(std::time::Duration::from_millis(120));
    let model = client(&server);
    let started = std::time::Instant::now();
    model.complete(hi()).await.unwrap();
    server.push(MockReply::Text("queued".into()));
    assert_eq!(streamed(&model, hi()).await.unwrap().message.text(), "queued");
    assert!(started.elapsed() >= std::time::Duration::from_millis(240));
}
