//! Inputs the `ollama_ndjson` fuzz target found (fuzz/artifacts-regressions/ollama_ndjson/),
//! through the public client against the mock server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use modu_core::{ChatModel, ChatRequest, ChatResponseBuilder, Message};
use modu_ollama::OllamaClient;
use modu_testing::{MockOllamaServer, OllamaReply};
use serde_json::json;

/// A tool call whose `function.index` is `usize::MAX` overflowed the next-index counter (a
/// panic in debug builds); it is a call like any other.
#[tokio::test]
async fn a_tool_call_index_of_usize_max_does_not_overflow() {
    let server = MockOllamaServer::start().await.unwrap();
    server.push(OllamaReply::RawNdjson {
        lines: vec![
            json!({"message": {"tool_calls": [{"function": {"index": usize::MAX, "name": "f", "arguments": {"a": 1}}}]}, "done": true})
                .to_string(),
        ],
        drop_after: None,
    });
    let client = OllamaClient::new(server.base_url(), "llama3.2").unwrap();
    let mut stream = client
        .stream(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let mut builder = ChatResponseBuilder::default();
    while let Some(event) = stream.next().await {
        builder.push(event.unwrap());
    }
    let response = builder.finish().unwrap();
    assert_eq!(response.message.tool_calls.len(), 1);
    assert_eq!(response.message.tool_calls[0].name, "f");
    assert_eq!(response.message.tool_calls[0].arguments, r#"{"a":1}"#);
}

/// Bytes after the `done: true` line were parsed (and failed the answer) when they arrived in
/// the same network chunk as it, and ignored when they came later: the answer depended on
/// chunk boundaries. The stream ends at the `done` line either way.
#[tokio::test]
async fn what_follows_the_done_line_in_the_same_chunk_is_ignored() {
    let server = MockOllamaServer::start().await.unwrap();
    let text = json!({"message": {"role": "assistant", "content": "hello"}, "done": false}).to_string();
    let done =
        json!({"message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop"}).to_string();
    // One "line" of the mock holding the done line, a newline and garbage: one write.
    server.push(OllamaReply::RawNdjson {
        lines: vec![
            text,
            format!("{done}\n, \"done_reason\": not json\n{{\"message\": {{\"content\": \"more\"}}}}"),
        ],
        drop_after: None,
    });
    let client = OllamaClient::new(server.base_url(), "llama3.2").unwrap();
    let mut stream = client
        .stream(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let mut builder = ChatResponseBuilder::default();
    while let Some(event) = stream.next().await {
        builder.push(event.expect("nothing after the done line is read"));
    }
    assert_eq!(builder.finish().unwrap().message.text(), "hello");
}
