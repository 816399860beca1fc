//! Wire tests: `OpenAiClient` against `MockOpenAiServer` (and a few hand-made servers), one
//! test per shape a real server sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use modu_agent::{Agent, RetryConfig};
use modu_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, FinishReason, FunctionTool, Message,
    ModelError, ResponseFormat, ToolCall, ToolChoice, ToolDefinition,
};
use modu_openai::{EmptyToolCallContent, OpenAiClient, TokenizeApi, VllmTokenCounter};
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

fn client(server: &MockOpenAiServer) -> OpenAiClient {
    OpenAiClient::new(server.base_url(), "mock-model").unwrap()
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

fn usage_chunk(prompt: u64, completion: u64) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
    .to_string()
}

fn sse(events: Vec<String>) -> MockReply {
    MockReply::RawSse {
        events,
        drop_after: None,
    }
}

/// Streams a request and folds the events, returning them too.
async fn stream_fold(model: &OpenAiClient, request: ChatRequest) -> (Vec<ChatEvent>, Result<ChatResponse, ModelError>) {
    let mut stream = match model.stream(request).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Err(e)),
    };
    let mut events = Vec::new();
    let mut builder = ChatResponseBuilder::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                events.push(ev.clone());
                builder.push(ev);
            }
            Err(e) => return (events, Err(e)),
        }
    }
    (events, builder.finish())
}

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

#[tokio::test]
async fn streams_text_then_finish_then_usage() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Text("Hello there, this answer spans several chunks.".into()));
    let (events, response) = stream_fold(&client(&server), hi()).await;
    let response = response.unwrap();
    assert_eq!(
        response.message.text(),
        "Hello there, this answer spans several chunks."
    );
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert!(response.usage.input_tokens > 0 && response.usage.output_tokens > 0);
    let texts = events
        .iter()
        .filter(|e| matches!(e, ChatEvent::TextDelta { .. }))
        .count();
    assert!(texts >= 2, "text came in several deltas: {events:?}");
    let finish_at = events
        .iter()
        .position(|e| matches!(e, ChatEvent::Finish { .. }))
        .unwrap();
    let usage_at = events
        .iter()
        .position(|e| matches!(e, ChatEvent::Usage { .. }))
        .unwrap();
    assert!(finish_at < usage_at, "usage comes in the last chunk");
    let body = &server.requests()[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
}

#[tokio::test]
async fn complete_sends_a_non_streaming_request() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Text("plain".into()));
    let r = client(&server).complete(hi()).await.unwrap();
    assert_eq!(r.message.text(), "plain");
    assert_eq!(r.usage.requests, 1);
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    let body = &server.requests()[0];
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());

    server.push(MockReply::ToolCalls(vec![("add".into(), r#"{"a":1,"b":2}"#.into())]));
    let r = client(&server).complete(hi()).await.unwrap();
    assert_eq!(r.message.tool_calls.len(), 1);
    assert_eq!(r.message.tool_calls[0].name, "add");
    assert_eq!(r.message.tool_calls[0].arguments, r#"{"a":1,"b":2}"#);
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn tool_call_arguments_split_over_many_chunks() {
    let server = MockOpenAiServer::start().await.unwrap();
    let args = r#"{"city": "Seoul", "units": "metric", "days": 3}"#;
    let pieces: Vec<String> = args
        .chars()
        .collect::<Vec<_>>()
        .chunks(4)
        .map(|c| c.iter().collect())
        .collect();
    assert!(pieces.len() >= 10);
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_w", "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
        None,
    )];
    for p in &pieces {
        events.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}),
            None,
        ));
    }
    events.push(chunk(json!({}), Some("tool_calls")));
    events.push(usage_chunk(10, 12));
    events.push("[DONE]".into());
    server.push(sse(events));
    let (events, r) = stream_fold(&client(&server), hi()).await;
    let r = r.unwrap();
    let deltas = events
        .iter()
        .filter(|e| matches!(e, ChatEvent::ToolCallDelta { .. }))
        .count();
    assert_eq!(deltas, pieces.len() + 1);
    assert_eq!(r.message.tool_calls, vec![ToolCall::new("call_w", "weather", args)]);
    let parsed: Value = serde_json::from_str(&r.message.tool_calls[0].arguments).unwrap();
    assert_eq!(parsed["days"], 3);
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(r.usage.total_tokens, 22);
}

#[tokio::test]
async fn two_parallel_tool_calls_interleaved_by_index() {
    let server = MockOpenAiServer::start().await.unwrap();
    let start = |i: usize, id: &str, name: &str| {
        chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            None,
        )
    };
    let frag = |i: usize, a: &str| {
        chunk(
            json!({"tool_calls": [{"index": i, "function": {"arguments": a}}]}),
            None,
        )
    };
    server.push(sse(vec![
        start(0, "call_a", "add"),
        start(1, "call_b", "mul"),
        frag(1, "{\"x\":"),
        frag(0, "{\"a\":"),
        frag(0, "1,\"b\":"),
        frag(1, "6,\"y\":7}"),
        frag(0, "2}"),
        chunk(json!({}), Some("tool_calls")),
        "[DONE]".into(),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    let calls = r.unwrap().message.tool_calls;
    assert_eq!(
        calls,
        vec![
            ToolCall::new("call_a", "add", r#"{"a":1,"b":2}"#),
            ToolCall::new("call_b", "mul", r#"{"x":6,"y":7}"#),
        ]
    );
}

#[tokio::test]
async fn id_and_name_repeated_in_every_chunk_are_taken_once() {
    let server = MockOpenAiServer::start().await.unwrap();
    let frag = |a: &str| {
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_r", "type": "function", "function": {"name": "lookup", "arguments": a}}]}),
            None,
        )
    };
    server.push(sse(vec![
        frag("{\"q\""),
        frag(":\"rust"),
        frag("\"}"),
        chunk(json!({}), Some("tool_calls")),
        "[DONE]".into(),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    assert_eq!(
        r.unwrap().message.tool_calls,
        vec![ToolCall::new("call_r", "lookup", r#"{"q":"rust"}"#)]
    );
}

#[tokio::test]
async fn usage_only_final_chunk() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(sse(vec![
        chunk(json!({"role": "assistant", "content": "ok"}), None),
        chunk(json!({}), Some("stop")),
        usage_chunk(7, 1),
        "[DONE]".into(),
    ]));
    let (events, r) = stream_fold(&client(&server), hi()).await;
    let r = r.unwrap();
    assert_eq!(r.usage.input_tokens, 7);
    assert_eq!(r.usage.output_tokens, 1);
    assert_eq!(r.usage.total_tokens, 8);
    assert!(matches!(events.last(), Some(ChatEvent::Usage { .. })));
}

#[tokio::test]
async fn missing_done_is_accepted_after_a_finish_reason() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(sse(vec![
        chunk(json!({"content": "complete"}), None),
        chunk(json!({}), Some("stop")),
        usage_chunk(3, 1),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    assert_eq!(r.unwrap().message.text(), "complete");
}

#[tokio::test]
async fn missing_done_without_a_finish_reason_is_a_transport_error() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(sse(vec![chunk(json!({"content": "cut he"}), None)]));
    let (events, r) = stream_fold(&client(&server), hi()).await;
    assert_eq!(events.len(), 1, "the text before the cut was delivered");
    let err = r.unwrap_err();
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn connection_dropped_mid_stream_is_a_transport_error() {
    let server = MockOpenAiServer::start().await.unwrap();
    let mut events = vec![chunk(json!({"content": "one "}), None)];
    events.extend((0..5).map(|_| chunk(json!({"content": "more "}), None)));
    events.push(chunk(json!({}), Some("stop")));
    events.push("[DONE]".into());
    server.push(MockReply::RawSse {
        events,
        drop_after: Some(3),
    });
    let (seen, r) = stream_fold(&client(&server), hi()).await;
    let err = r.unwrap_err();
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert!(seen.len() <= 3, "{seen:?}");
}

#[tokio::test]
async fn invalid_json_in_a_chunk_is_an_invalid_response() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(sse(vec![
        chunk(json!({"content": "fine"}), None),
        "{\"choices\": [ this is not json".into(),
        "[DONE]".into(),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    let err = r.unwrap_err();
    assert!(matches!(err, ModelError::InvalidResponse { .. }), "{err:?}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn an_error_event_inside_the_stream_is_mapped() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(sse(vec![
        json!({"error": {"message": "This model's maximum context length is 2048 tokens.", "type": "BadRequestError", "code": 400}}).to_string(),
        "[DONE]".into(),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    assert!(matches!(r, Err(ModelError::ContextLengthExceeded { .. })), "{r:?}");
    // vLLM's shape: a top-level error object.
    server.push(sse(vec![
        chunk(json!({"content": "par"}), None),
        json!({"object": "error", "message": "upstream failure", "type": "InternalServerError", "code": 500})
            .to_string(),
        "[DONE]".into(),
    ]));
    let (events, r) = stream_fold(&client(&server), hi()).await;
    assert_eq!(events.len(), 1);
    let err = r.unwrap_err();
    assert!(matches!(err, ModelError::Status { status: 500, .. }), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_honoured_by_the_agent_retry() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 429,
        body: json!({"error": {"message": "slow down", "type": "rate_limit_error"}}),
        headers: vec![("Retry-After".into(), "1".into())],
    });
    // The fallback answers the retry.
    let agent: Agent = Agent::builder(client(&server))
        .retry(RetryConfig::new(3).with_backoff(Duration::from_millis(10), Duration::from_millis(20)))
        .build()
        .unwrap();
    let started = Instant::now();
    let result = agent.run("hello").await;
    let elapsed = started.elapsed();
    assert_eq!(
        result.output().map(String::as_str),
        Some("You said: hello"),
        "{:?}",
        result.error()
    );
    assert_eq!(server.requests().len(), 2, "one 429, one success");
    assert!(
        elapsed >= Duration::from_millis(950),
        "the retry waited Retry-After (1 s), not the 10 ms backoff: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(5));
}

#[tokio::test]
async fn rate_limit_maps_to_rate_limited_with_the_wait() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 429,
        body: json!({"error": {"message": "slow down"}}),
        headers: vec![("Retry-After".into(), "7".into())],
    });
    let err = client(&server).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::RateLimited { retry_after: Some(d) } if d == Duration::from_secs(7)));
    assert!(err.is_retryable());

    server.push(MockReply::Error {
        status: 408,
        body: json!({"error": {"message": "request timeout"}}),
        headers: vec![],
    });
    let err = client(&server).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Status { status: 408, .. }), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn context_length_errors_from_vllm_and_llama_cpp() {
    let server = MockOpenAiServer::start().await.unwrap();
    // vLLM (OpenAI-style error object at the top level).
    server.push(MockReply::Error {
        status: 400,
        body: json!({"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4900 in the messages, 100 in the completion). Please reduce the length of the messages or completion.", "type": "BadRequestError", "param": null, "code": 400}),
        headers: vec![],
    });
    // llama.cpp's server.
    server.push(MockReply::Error {
        status: 400,
        body: json!({"error": {"code": 400, "message": "request (6022 tokens) exceeds the available context size (4096 tokens), try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}),
        headers: vec![],
    });
    // Another 400 is not a context error.
    server.push(MockReply::Error {
        status: 400,
        body: json!({"error": {"message": "'messages' must not be empty", "type": "invalid_request_error"}}),
        headers: vec![],
    });
    let c = client(&server);
    for who in ["vllm", "llama.cpp"] {
        let err = c.stream(hi()).await.err().unwrap();
        match err {
            ModelError::ContextLengthExceeded { message } => assert!(!message.is_empty(), "{who}"),
            other => panic!("{who}: {other:?}"),
        }
    }
    let err = c.complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Status { status: 400, .. }), "{err:?}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn api_key_is_sent_and_a_missing_key_is_an_authentication_error() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.require_api_key("sk-test");
    let err = client(&server).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Authentication { status: 401, .. }), "{err:?}");
    assert!(!err.is_retryable());
    let wrong = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .api_key("sk-wrong")
        .build()
        .unwrap();
    assert!(matches!(
        wrong.complete(hi()).await,
        Err(ModelError::Authentication { .. })
    ));
    let keyed = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .api_key("sk-test")
        .header("X-Route", "blue")
        .build()
        .unwrap();
    assert!(keyed.complete(hi()).await.is_ok());
    let headers = server.request_headers();
    let last = headers.last().unwrap();
    assert_eq!(last["authorization"], "Bearer sk-test");
    assert_eq!(last["x-route"], "blue");
    assert!(!format!("{keyed:?}").contains("sk-test"), "Debug never shows the key");
}

#[tokio::test]
async fn unknown_model_is_model_not_found() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 404,
        body: json!({"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError", "code": 404}}),
        headers: vec![],
    });
    let err = client(&server).with_model("nope").stream(hi()).await.err().unwrap();
    match err {
        ModelError::ModelNotFound { model, message } => {
            assert_eq!(model, "nope");
            assert!(message.contains("does not exist"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn server_errors_are_retryable_statuses() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 503,
        body: json!({"error": {"message": "overloaded"}}),
        headers: vec![("Retry-After".into(), "2".into())],
    });
    let err = client(&server).stream(hi()).await.err().unwrap();
    assert!(
        matches!(err, ModelError::Status { status: 503, retry_after: Some(d), .. } if d == Duration::from_secs(2)),
        "{err:?}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn connection_refused_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let c = OpenAiClient::new(format!("http://127.0.0.1:{port}/v1"), "m").unwrap();
    let err = c.stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(matches!(c.list_models().await, Err(ModelError::Transport { .. })));
}

#[tokio::test]
async fn a_request_timeout_is_a_timeout_error() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Delayed(
        Duration::from_secs(3),
        Box::new(MockReply::Text("late".into())),
    ));
    let c = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .request_timeout(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = c.complete(hi()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Timeout(d) if d == Duration::from_millis(200)),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A server that sends one SSE event, then keeps the connection open and reports when the
/// client closes it.
async fn slow_sse_server() -> (String, tokio::sync::oneshot::Receiver<Duration>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        // Read the request head and body (Content-Length).
        loop {
            let n = sock.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some(head_end) = text.find("\r\n\r\n") {
                let len = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if got.len() >= head_end + 4 + len {
                    break;
                }
            }
        }
        let event = format!("data: {}\n\n", chunk(json!({"content": "first"}), None));
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        sock.write_all(head.as_bytes()).await.unwrap();
        sock.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
            .await
            .unwrap();
        sock.flush().await.unwrap();
        let sent = Instant::now();
        // Never send more; wait for the client to hang up.
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = tx.send(sent.elapsed());
    });
    (url, rx)
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let (url, closed) = slow_sse_server().await;
    let c = OpenAiClient::new(url, "m").unwrap();
    let mut stream = c.stream(hi()).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, ChatEvent::TextDelta { text: "first".into() });
    drop(stream);
    let after = tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the server saw the connection close")
        .unwrap();
    assert!(after < Duration::from_secs(5));
}

/// An agent offers one shared tool list (an `Arc`) in every request; the client serialises it
/// once. Every request, streamed or not, with extras or not, still carries the list as it is,
/// and a changed list is sent changed.
#[tokio::test]
async fn a_shared_tool_list_is_sent_whole_in_every_request() {
    let server = MockOpenAiServer::start().await.unwrap();
    let c = client(&server);
    let add = ToolDefinition::new(
        "add",
        "Add two integers",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
    );
    let sub = ToolDefinition::new("sub", "Subtract", json!({"type": "object"}));
    let wire = |tools: &[&ToolDefinition]| {
        tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect::<Vec<_>>()
    };
    let mut shared = std::sync::Arc::new(vec![add.clone(), sub.clone()]);
    let request = |tools: &std::sync::Arc<Vec<ToolDefinition>>| {
        let mut req = ChatRequest::new(vec![Message::user("2+3?")]);
        req.tools = std::sync::Arc::clone(tools);
        req
    };
    for round in 0..2 {
        server.push(MockReply::Text("ok".into()));
        c.complete(request(&shared)).await.unwrap();
        server.push(MockReply::Text("ok".into()));
        let mut events = c.stream(request(&shared)).await.unwrap();
        while let Some(event) = events.next().await {
            event.unwrap();
        }
        server.push(MockReply::Text("ok".into()));
        c.complete(request(&shared).with_extra("seed", json!(1))).await.unwrap();
        let bodies = server.requests();
        for body in &bodies[round * 3..] {
            assert_eq!(body["tools"], json!(wire(&[&add, &sub])), "round {round}: {body}");
        }
    }
    // The list changed through `Arc::make_mut` (nobody else holds it): the next request
    // carries the change.
    std::sync::Arc::make_mut(&mut shared).pop();
    server.push(MockReply::Text("ok".into()));
    c.complete(request(&shared)).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(body["tools"], json!(wire(&[&add])));
}

#[tokio::test]
async fn request_body_shapes() {
    let server = MockOpenAiServer::start().await.unwrap();
    let c = client(&server);
    let tool = ToolDefinition::new(
        "add",
        "Add two integers",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
    );
    let history = vec![
        Message::system("be brief"),
        Message::user("2+3?"),
        Message::assistant_tool_calls("", vec![ToolCall::new("call_1", "add", r#"{"a":2,"b":3}"#)]),
        Message::tool_result("call_1", "add", "5", false),
    ];
    for (choice, wire) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::Required, json!("required")),
        (ToolChoice::None, json!("none")),
        (
            ToolChoice::Named("add".into()),
            json!({"type": "function", "function": {"name": "add"}}),
        ),
    ] {
        server.push(MockReply::Text("ok".into()));
        let mut req = ChatRequest::new(history.clone())
            .with_tools(vec![tool.clone()])
            .with_tool_choice(choice)
            .with_temperature(0.0)
            .with_max_tokens(64)
            .with_seed(7);
        req.parallel_tool_calls = Some(false);
        req.stop = vec!["</s>".into()];
        c.complete(req).await.unwrap();
        let body = server.requests().pop().unwrap();
        assert_eq!(body["tool_choice"], wire);
        assert_eq!(body["parallel_tool_calls"], false);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["stop"], json!(["</s>"]));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": tool.parameters}}])
        );
        assert!(body.get("response_format").is_none());
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "2+3?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "5"},
            ])
        );
    }

    // response_format json_schema, strict, and vLLM guided-decoding extras merged in.
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]});
    let req = ChatRequest::new(vec![Message::user("2+3?")])
        .with_response_format(ResponseFormat::new("Answer", schema.clone()))
        .with_extra("guided_decoding_backend", json!("xgrammar"))
        .with_extra("chat_template_kwargs", json!({"enable_thinking": false}))
        .with_extra("max_tokens", json!(5));
    c.complete(req).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "Answer", "schema": schema, "strict": true}})
    );
    assert_eq!(body["guided_decoding_backend"], "xgrammar");
    assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
    assert_eq!(body["max_tokens"], 5, "extras win over modu's own fields");
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());

    // `null` content on tool-call turns, when configured.
    let nulls = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .empty_tool_call_content(EmptyToolCallContent::Null)
        .build()
        .unwrap();
    nulls.complete(ChatRequest::new(history.clone())).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(body["messages"][2]["content"], Value::Null);
}

#[tokio::test]
async fn tool_call_turns_with_empty_or_null_content_are_read() {
    let server = MockOpenAiServer::start().await.unwrap();
    for content in [json!(""), Value::Null] {
        server.push(MockReply::RawJson(json!({
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": content,
                "tool_calls": [{"id": "3f1c0d2a9b8e4f7a6c5d4e3f2a1b0c9d", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
            "timings": {"prompt_n": 5}
        })));
        let r = client(&server).complete(hi()).await.unwrap();
        assert_eq!(r.message.text(), "");
        assert_eq!(r.message.tool_calls[0].id, "3f1c0d2a9b8e4f7a6c5d4e3f2a1b0c9d");
        assert_eq!(r.usage.total_tokens, 11);
    }
    // Streamed: llama.cpp's `content: ""` next to tool-call deltas, and `content: null`.
    server.push(sse(vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(
            json!({"content": null, "tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        "[DONE]".into(),
    ]));
    let (events, r) = stream_fold(&client(&server), hi()).await;
    assert!(!events.iter().any(|e| matches!(e, ChatEvent::TextDelta { .. })));
    assert_eq!(r.unwrap().message.tool_calls[0].name, "add");
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Sum {
    total: i64,
    explanation: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[tokio::test]
async fn agent_with_tools_and_structured_output_never_sends_both() {
    let server = MockOpenAiServer::start().await.unwrap();
    let add = FunctionTool::<()>::typed(
        "add",
        "Add two integers",
        |_ctx, a: AddArgs| async move { Ok(a.a + a.b) },
    );
    let agent = Agent::builder(client(&server))
        .output::<Sum>()
        .tool(add)
        .build()
        .unwrap();
    let result = agent.run("What is 2 + 3?").await;
    // The mock's answer fits the schema; serde parsed it into `Sum` (values are the mock's).
    let _sum: &Sum = result
        .output()
        .as_ref()
        .unwrap_or_else(|| panic!("{:?}", result.error()));
    let requests = server.requests();
    assert!(requests.len() >= 2, "{requests:?}");
    for body in &requests {
        let tools = body.get("tools").is_some();
        let format = body.get("response_format").is_some();
        assert!(tools != format, "exactly one of tools / response_format: {body}");
    }
    assert!(requests.last().unwrap()["response_format"]["json_schema"]["schema"].is_object());
    // The tool-call turn went back to the server in the wire shape.
    let second = &requests[1]["messages"];
    let assistant = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "add");
    let tool_msg = second.as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_msg["tool_call_id"], assistant["tool_calls"][0]["id"]);
}

#[tokio::test]
async fn list_models_reads_v1_models() {
    let server = MockOpenAiServer::start().await.unwrap();
    let models = client(&server).list_models().await.unwrap();
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].id, "mock-model");
    assert_eq!(models[0].owned_by.as_deref(), Some("modu-testing"));
}

#[test]
fn configuration_errors() {
    assert!(OpenAiClient::new("localhost:8000/v1", "m").is_err());
    assert!(OpenAiClient::new("http:///v1", "m").is_err());
    assert!(OpenAiClient::builder().model("m").build().is_err());
    assert!(
        OpenAiClient::builder()
            .base_url("http://h/v1")
            .model("m")
            .header("bad header", "x")
            .build()
            .is_err()
    );
    let c = OpenAiClient::new("http://127.0.0.1:8000/v1/", "m").unwrap();
    assert_eq!(c.base_url(), "http://127.0.0.1:8000/v1");
}

/// A vLLM- or llama.cpp-shaped tokenizer server.
async fn tokenizer_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>) {
    use axum::{Json, Router, extract::State, routing::post};
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>;
    let seen: Seen = Default::default();
    async fn tokenize(State(seen): State<Seen>, Json(body): Json<Value>) -> Json<Value> {
        seen.lock().unwrap().push(("/tokenize".into(), body.clone()));
        if let Some(messages) = body.get("messages").and_then(Value::as_array) {
            // vLLM: the chat template applied, then counted.
            let n = messages.len() as u64 * 5 + body.get("tools").map_or(0, |_| 40) + 3;
            Json(json!({"count": n, "max_model_len": 4096, "tokens": vec![1; n as usize]}))
        } else {
            let content = body["content"].as_str().unwrap_or("");
            let n = content.split_whitespace().count();
            Json(json!({"tokens": vec![1; n]}))
        }
    }
    async fn apply(State(seen): State<Seen>, Json(body): Json<Value>) -> Json<Value> {
        seen.lock().unwrap().push(("/apply-template".into(), body.clone()));
        let mut prompt = String::new();
        for m in body["messages"].as_array().unwrap() {
            prompt.push_str(&format!(
                "<|im_start|> {} {} <|im_end|> ",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or("")
            ));
        }
        Json(json!({"prompt": prompt}))
    }
    let app = Router::new()
        .route("/tokenize", post(tokenize))
        .route("/apply-template", post(apply))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

#[tokio::test]
async fn vllm_and_llama_cpp_tokenize_wire_shapes() {
    use modu_core::tokens::TokenCounter;
    let (url, seen) = tokenizer_server().await;
    let c = OpenAiClient::new(url, "served-name").unwrap();
    let messages = vec![Message::system("be brief"), Message::user("one two three")];
    let tools = vec![ToolDefinition::new("add", "Add", json!({"type": "object"}))];

    let vllm = VllmTokenCounter::new(&c);
    assert_eq!(vllm.api(), TokenizeApi::Vllm);
    assert_eq!(vllm.count_tokens(&messages, &[]).await.unwrap(), 13);
    let as_trait: &dyn TokenCounter = &vllm;
    assert_eq!(as_trait.count_tokens(&messages, &tools).await.unwrap(), 53);
    {
        let seen = seen.lock().unwrap();
        let (path, body) = &seen[1];
        assert_eq!(path, "/tokenize");
        assert_eq!(body["model"], "served-name");
        assert_eq!(body["add_generation_prompt"], true);
        assert_eq!(body["messages"][1], json!({"role": "user", "content": "one two three"}));
        assert_eq!(body["tools"][0]["function"]["name"], "add");
    }

    let llama = VllmTokenCounter::llama_cpp(&c);
    // "<|im_start|> system be brief <|im_end|> <|im_start|> user one two three <|im_end|>" = 11 words
    assert_eq!(llama.count_tokens(&messages, &[]).await.unwrap(), 11);
    let seen = seen.lock().unwrap();
    assert_eq!(seen[2].0, "/apply-template");
    assert_eq!(seen[3].0, "/tokenize");
    assert!(
        seen[3].1["content"]
            .as_str()
            .unwrap()
            .starts_with("<|im_start|> system")
    );
}

#[tokio::test]
async fn a_llama_cpp_server_is_not_mistaken_for_vllm() {
    // llama.cpp answers a vLLM-shaped /tokenize with an empty token list.
    use axum::{Json, Router, routing::post};
    let app = Router::new().route("/tokenize", post(|| async { Json(json!({"tokens": []})) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let c = OpenAiClient::new(format!("http://{addr}/v1"), "m").unwrap();
    let err = VllmTokenCounter::new(&c)
        .count_tokens(&[Message::user("hello")], &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::InvalidResponse { .. }), "{err:?}");
}

/// OpenAI's usage with details, as a reasoning model with a warm prompt cache reports it.
fn detailed_usage() -> Value {
    json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
           "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 192, "audio_tokens": 0,
               "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})
}

#[tokio::test]
async fn cached_and_reasoning_tokens_are_read_streamed_and_not() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(sse(vec![
        chunk(json!({"role": "assistant", "content": "ok"}), None),
        chunk(json!({}), Some("stop")),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
               "usage": detailed_usage()})
        .to_string(),
        "[DONE]".into(),
    ]));
    let (_, streamed) = stream_fold(&client(&server), hi()).await;
    let streamed = streamed.unwrap().usage;
    assert_eq!(
        (streamed.input_tokens, streamed.output_tokens, streamed.total_tokens),
        (2006, 300, 2306)
    );
    assert_eq!((streamed.cached_input_tokens, streamed.reasoning_tokens), (1920, 192));

    server.push(MockReply::RawJson(json!({
        "id": "chatcmpl-2", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": detailed_usage()})));
    let whole = client(&server).complete(hi()).await.unwrap().usage;
    assert_eq!((whole.cached_input_tokens, whole.reasoning_tokens), (1920, 192));

    // vLLM sends `null` details when prefix caching is off; a bare usage has no details.
    server.push(MockReply::RawJson(json!({
        "id": "chatcmpl-3", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, "prompt_tokens_details": null}})));
    let plain = client(&server).complete(hi()).await.unwrap().usage;
    assert_eq!(
        (plain.input_tokens, plain.cached_input_tokens, plain.reasoning_tokens),
        (5, 0, 0)
    );
}

#[tokio::test]
async fn a_run_adds_up_cached_tokens_over_its_requests() {
    let server = MockOpenAiServer::start().await.unwrap();
    let answer = |content: &str| {
        MockReply::RawJson(json!({
            "id": "chatcmpl-r", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": detailed_usage()}))
    };
    server.push(answer("one"));
    server.push(answer("two"));
    let agent = Agent::builder(client(&server)).build().unwrap();
    let first = agent.run("a").await;
    let second = agent.run("b").await;
    assert_eq!(first.usage().cached_input_tokens, 1920);
    assert_eq!((*first.usage() + *second.usage()).cached_input_tokens, 3840);
    assert_eq!(second.usage().reasoning_tokens, 192);
}

/// vLLM's reasoning parser streams `reasoning_content` (before 0.10) or `reasoning` (0.10 and
/// later) in the delta, before the answer's `content`.
#[tokio::test]
async fn vllm_reasoning_deltas_in_both_field_names() {
    for field in ["reasoning_content", "reasoning"] {
        let server = MockOpenAiServer::start().await.unwrap();
        server.push(sse(vec![
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({field: "The user greets. "}), None),
            chunk(json!({field: "Answer briefly."}), None),
            chunk(json!({"content": "Hello!"}), None),
            chunk(json!({}), Some("stop")),
            usage_chunk(12, 9),
            "[DONE]".into(),
        ]));
        let (events, response) = stream_fold(&client(&server), hi()).await;
        let response = response.unwrap();
        assert_eq!(
            events[..2],
            [
                ChatEvent::ReasoningDelta {
                    text: "The user greets. ".into()
                },
                ChatEvent::ReasoningDelta {
                    text: "Answer briefly.".into()
                }
            ],
            "{field}"
        );
        assert_eq!(
            response.message.reasoning().as_deref(),
            Some("The user greets. Answer briefly.")
        );
        assert_eq!(response.message.text(), "Hello!", "reasoning is not part of the text");
    }
}

/// llama.cpp's server with `--reasoning-format deepseek`, not streamed: `message.reasoning_content`.
#[tokio::test]
async fn llama_cpp_reasoning_content_in_a_whole_answer() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::RawJson(json!({
        "choices": [{"finish_reason": "stop", "index": 0, "message": {"role": "assistant",
            "reasoning_content": "Okay, 2 + 2.", "content": "4"}}],
        "created": 1_754_000_000, "model": "gpt-3.5-turbo", "system_fingerprint": "b6100-abc",
        "object": "chat.completion",
        "usage": {"completion_tokens": 20, "prompt_tokens": 10, "total_tokens": 30},
        "id": "chatcmpl-x", "timings": {"prompt_n": 10, "predicted_n": 20}})));
    let response = client(&server).complete(hi()).await.unwrap();
    assert_eq!(response.message.reasoning().as_deref(), Some("Okay, 2 + 2."));
    assert_eq!(response.message.text(), "4");
}

#[tokio::test]
async fn reasoning_is_sent_back_only_as_configured() {
    let thought = |text: &str, calls: Vec<ToolCall>| {
        let mut m = if calls.is_empty() {
            Message::assistant(text)
        } else {
            Message::assistant_tool_calls(text, calls)
        };
        m.content.insert(
            0,
            modu_core::ContentPart::Reasoning {
                text: format!("thinking about {text}"),
            },
        );
        m
    };
    let history = vec![
        Message::user("first"),
        thought("old answer", vec![]),
        Message::user("second"),
        thought("", vec![ToolCall::new("c1", "lookup", "{}")]),
        Message::tool_result("c1", "lookup", "found", false),
    ];
    let server = MockOpenAiServer::start().await.unwrap();
    let sent = |replay| {
        let server = &server;
        let history = history.clone();
        async move {
            server.push(MockReply::Text("ok".into()));
            let client = OpenAiClient::builder()
                .base_url(server.base_url())
                .model("m")
                .reasoning_replay(replay)
                .build()
                .unwrap();
            client
                .complete(ChatRequest::new(history).with_reasoning_effort(modu_core::ReasoningEffort::Low))
                .await
                .unwrap();
            let body = server.requests().pop().unwrap();
            assert_eq!(body["reasoning_effort"], "low");
            body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.get("reasoning_content").and_then(Value::as_str).map(str::to_owned))
                .collect::<Vec<_>>()
        }
    };
    // Default: never (DeepSeek-style servers answer 400 to reasoning in their input).
    assert_eq!(sent(modu_openai::ReasoningReplay::Never).await, vec![None; 5]);
    // Interleaved thinking: only the tool-call turn after the last user message.
    assert_eq!(
        sent(modu_openai::ReasoningReplay::ToolCallTurns).await,
        vec![None, None, None, Some("thinking about ".to_owned()), None]
    );
    assert_eq!(
        sent(modu_openai::ReasoningReplay::Always).await,
        vec![
            None,
            Some("thinking about old answer".to_owned()),
            None,
            Some("thinking about ".to_owned()),
            None
        ]
    );
}

/// A run streams reasoning as `ReasoningDelta` events and keeps it in the stored messages.
#[tokio::test]
async fn a_run_streams_and_keeps_reasoning() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(sse(vec![
        chunk(json!({"role": "assistant", "reasoning_content": "short thought"}), None),
        chunk(json!({"content": "answer"}), None),
        chunk(json!({}), Some("stop")),
        "[DONE]".into(),
    ]));
    let agent = Agent::builder(client(&server))
        .reasoning_effort(modu_core::ReasoningEffort::Medium)
        .build()
        .unwrap();
    let mut stream = agent.stream("hi");
    let mut reasoning = String::new();
    let mut result = None;
    while let Some(item) = stream.next().await {
        match item {
            modu_agent::StreamItem::Event(modu_core::AgentEvent::ReasoningDelta { text, step_id, .. }) => {
                assert_eq!(step_id, None);
                reasoning.push_str(&text);
            }
            modu_agent::StreamItem::Completed(r) => result = Some(r),
            modu_agent::StreamItem::Failed(r) => panic!("{:?}", r.error),
            _ => {}
        }
    }
    let result = result.unwrap();
    assert_eq!(reasoning, "short thought");
    assert_eq!(result.output, "answer");
    let last = result.report.messages.last().unwrap();
    assert_eq!(last.reasoning().as_deref(), Some("short thought"));
    assert_eq!(server.requests()[0]["reasoning_effort"], "medium");
}

/// A streamed run shows a tool call's arguments as they arrive (`ToolCallDelta`), before the
/// call starts; the fragments add up to the arguments the tool runs with.
#[tokio::test]
async fn a_streamed_run_emits_tool_call_argument_deltas() {
    let server = MockOpenAiServer::start().await.unwrap();
    let args = r#"{"city": "Seoul", "days": 3}"#;
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_w", "type": "function", "function": {"name": "weather", "arguments": ""}}]}),
        None,
    )];
    for piece in args.as_bytes().chunks(5) {
        let piece = std::str::from_utf8(piece).unwrap();
        events.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
            None,
        ));
    }
    events.push(chunk(json!({}), Some("tool_calls")));
    events.push("[DONE]".into());
    server.push(sse(events));
    server.push(MockReply::Text("Sunny.".into()));
    let weather = FunctionTool::<()>::new(
        modu_core::ToolSpec::new("weather", "Weather", json!({"type": "object"})),
        |_ctx, args| async move { Ok(json!({"days": args["days"]})) },
    );
    let agent = Agent::builder(client(&server)).tool(weather).build().unwrap();
    let mut stream = agent.stream("weather?");
    let (mut fragments, mut started, mut first_id) = (String::new(), None, None);
    while let Some(item) = stream.next().await {
        match item {
            modu_agent::StreamItem::Event(modu_core::AgentEvent::ToolCallDelta {
                index,
                id,
                tool,
                arguments,
                ..
            }) => {
                assert_eq!(index, 0);
                assert!(started.is_none(), "deltas come before the call starts");
                if first_id.is_none() {
                    first_id = id;
                    assert_eq!(tool.as_deref(), Some("weather"));
                }
                fragments.push_str(&arguments);
            }
            modu_agent::StreamItem::Event(modu_core::AgentEvent::ToolCallStarted { call_id, arguments, .. }) => {
                started = Some((call_id, arguments));
            }
            modu_agent::StreamItem::Completed(r) => assert_eq!(r.output, "Sunny."),
            modu_agent::StreamItem::Failed(r) => panic!("{:?}", r.error),
            _ => {}
        }
    }
    assert_eq!(fragments, args);
    let (call_id, arguments) = started.unwrap();
    assert_eq!(first_id.as_deref(), Some(call_id.as_str()));
    assert_eq!(arguments["days"], 3);
}
