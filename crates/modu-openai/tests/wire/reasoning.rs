//! Reasoning: vLLM's and llama.cpp's reasoning fields read, sent back as configured, and
//! streamed and kept by a run.

use futures::StreamExt;
use modu_agent::Agent;
use modu_core::{ChatEvent, ChatModel, ChatRequest, Message, ToolCall};
use modu_openai::OpenAiClient;
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

use crate::support::{chunk, client, hi, sse, stream_fold, usage_chunk};

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
