//! Streamed (and whole) answers: text deltas, finish and usage chunks, tool-call arguments
//! split over chunks, a missing `[DONE]`, a cut connection, bad chunks and error events, and a
//! streamed run's tool-call argument deltas.

use futures::StreamExt;
use modu_agent::Agent;
use modu_core::{ChatEvent, ChatModel, FinishReason, FunctionTool, ModelError, ToolCall};
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

use crate::support::{chunk, client, hi, sse, stream_fold, usage_chunk};

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

/// OpenRouter answers HTTP 200 once the model started, and a failure after that comes as an
/// error object in the body (`{"error": {"code": 502, "message": …}}`), not a completion.
#[tokio::test]
async fn an_error_object_in_a_200_completion_is_mapped() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::RawJson(
        json!({"error": {"code": 502, "message": "Provider returned error", "metadata": {"provider_name": "X"}}}),
    ));
    let err = client(&server).complete(hi()).await.unwrap_err();
    match &err {
        ModelError::Status { status: 502, body, .. } => assert!(body.contains("Provider returned error"), "{body}"),
        other => panic!("{other:?}"),
    }
    assert!(err.is_retryable());
    // An exhausted quota named by its code alone is OpenAI's 429, which no wait fixes.
    server.push(MockReply::RawJson(
        json!({"error": {"code": "insufficient_quota", "message": "You exceeded your current quota."}}),
    ));
    let err = client(&server).complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Status { status: 429, .. }), "{err:?}");
    assert!(!err.is_retryable());
    // An answer with choices is the answer, whatever `error` a proxy leaves beside it.
    server.push(MockReply::RawJson(json!({
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
        "error": ""
    })));
    let answer = client(&server).complete(hi()).await.unwrap();
    assert_eq!(answer.message.text(), "fine");
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

/// LiteLLM's proxy sends its error `code` as a string (`"code": "400"`), in the stream as in
/// its error bodies: the status it names counts, as a number's would.
#[tokio::test]
async fn litellm_string_codes_in_a_stream_error_name_the_status() {
    let server = MockOpenAiServer::start().await.unwrap();
    let litellm = |code: &str, message: &str| {
        json!({"error": {"message": message, "type": null, "param": null, "code": code}}).to_string()
    };
    server.push(sse(vec![
        chunk(json!({"content": "par"}), None),
        litellm(
            "400",
            "litellm.BadRequestError: VertexAIException - invalid maxOutputTokens",
        ),
        "[DONE]".into(),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    let err = r.unwrap_err();
    assert!(matches!(err, ModelError::Status { status: 400, .. }), "{err:?}");
    assert!(!err.is_retryable(), "a refused request is not retried: {err:?}");

    server.push(sse(vec![
        litellm("429", "litellm.RateLimitError: Resource has been exhausted"),
        "[DONE]".into(),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    assert!(matches!(r, Err(ModelError::RateLimited { .. })), "{r:?}");

    server.push(sse(vec![
        litellm("400", "This model's maximum context length is 8192 tokens."),
        "[DONE]".into(),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    assert!(matches!(r, Err(ModelError::ContextLengthExceeded { .. })), "{r:?}");
}
