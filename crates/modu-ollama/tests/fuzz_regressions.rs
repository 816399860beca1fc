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
