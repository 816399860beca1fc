//! Tool calls and their results on Ollama's wire: the ids that tie a result to its call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use modu_core::{ChatModel, ChatRequest, Message, ToolCall};
use modu_ollama::OllamaClient;
use modu_testing::MockOllamaServer;
use serde_json::json;

/// Ollama's `api.Message` takes `tool_call_id` on a `role: tool` message and `id` on an
/// assistant's `tool_calls` (api/types.go); its renderers (Cohere, Gemma 4, templates using
/// `.ToolCallID`) tie each result to its call by them. With two calls of the same tool in one
/// turn, the tool name alone cannot tell the results apart.
#[tokio::test]
async fn tool_results_carry_the_id_of_the_call_they_answer() {
    let server = MockOllamaServer::start().await.unwrap();
    let client = OllamaClient::new(server.base_url(), "llama3.2").unwrap();
    let history = vec![
        Message::user("Weather in Paris and in Rome?"),
        Message::assistant_tool_calls(
            "",
            vec![
                ToolCall::new("call_paris", "get_weather", r#"{"city":"Paris"}"#),
                ToolCall::new("call_rome", "get_weather", r#"{"city":"Rome"}"#),
            ],
        ),
        Message::tool_result("call_rome", "get_weather", "25 degrees", false),
        Message::tool_result("call_paris", "get_weather", "18 degrees", false),
    ];
    client.complete(ChatRequest::new(history)).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(
        body["messages"][1]["tool_calls"],
        json!([
            {"id": "call_paris", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call_rome", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
        ])
    );
    assert_eq!(
        body["messages"][2],
        json!({"role": "tool", "content": "25 degrees", "tool_name": "get_weather", "tool_call_id": "call_rome"})
    );
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "content": "18 degrees", "tool_name": "get_weather", "tool_call_id": "call_paris"})
    );
}
