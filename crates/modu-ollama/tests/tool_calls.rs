//! Tool calls and their results on Ollama's wire: the ids that tie a result to its call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use modu_core::{ChatModel, ChatRequest, ChatResponseBuilder, Message, ToolCall};
use modu_ollama::OllamaClient;
use modu_testing::{MockOllamaServer, OllamaReply};
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

/// Ollama 0.12.0 to 0.20.5 left `function.index` at 0 for every parallel call of several
/// built-in parsers (gemma4, qwen3-vl, ministral, deepseek3, …; fixed by ollama#15467), and
/// `index` is never omitted on the wire: each call still came whole, with an id of its own.
/// Two such calls were merged into one call with both argument objects run together.
#[tokio::test]
async fn parallel_calls_that_share_function_index_stay_distinct() {
    let server = MockOllamaServer::start().await.unwrap();
    let client = OllamaClient::new(server.base_url(), "gemma4").unwrap();
    let call = |id: &str, city: &str| json!({"id": id, "function": {"index": 0, "name": "get_weather", "arguments": {"city": city}}});
    let line = |calls: Vec<serde_json::Value>| {
        json!({"model": "gemma4", "created_at": "2026-03-02T10:00:00.1Z",
               "message": {"role": "assistant", "content": "", "tool_calls": calls}, "done": false})
        .to_string()
    };
    let done = json!({"model": "gemma4", "created_at": "2026-03-02T10:00:00.3Z",
        "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop",
        "total_duration": 1_000_000u64, "prompt_eval_count": 30, "eval_count": 40});
    let want = vec![
        ToolCall::new("call_p4r1s0k7", "get_weather", r#"{"city":"Paris"}"#),
        ToolCall::new("call_r0m3x2y9", "get_weather", r#"{"city":"Rome"}"#),
    ];
    // Streamed: one line per call (the parser emits each as it closes), and both in one line.
    for lines in [
        vec![
            line(vec![call("call_p4r1s0k7", "Paris")]),
            line(vec![call("call_r0m3x2y9", "Rome")]),
            done.to_string(),
        ],
        vec![
            line(vec![call("call_p4r1s0k7", "Paris"), call("call_r0m3x2y9", "Rome")]),
            done.to_string(),
        ],
    ] {
        server.push(OllamaReply::RawNdjson {
            lines,
            drop_after: None,
        });
        let mut stream = client.stream(hi()).await.unwrap();
        let mut builder = ChatResponseBuilder::default();
        while let Some(event) = stream.next().await {
            builder.push(event.unwrap());
        }
        assert_eq!(builder.finish().unwrap().message.tool_calls, want);
    }
    // Not streamed: Ollama gathers the calls of every chunk into one answer.
    let mut answer = done.clone();
    answer["message"]["tool_calls"] = json!([call("call_p4r1s0k7", "Paris"), call("call_r0m3x2y9", "Rome")]);
    server.push(OllamaReply::RawNdjson {
        lines: vec![answer.to_string()],
        drop_after: None,
    });
    assert_eq!(client.complete(hi()).await.unwrap().message.tool_calls, want);
}

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Weather in Paris and in Rome?")])
}
