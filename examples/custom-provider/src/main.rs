//! A third party's own model provider and tool, built on `modu-core` alone.
//!
//! Run with: `cargo run -p modu-example-custom-provider`
//!
//! `RuleModel` is a tiny rule-based "model" implementing [`ChatModel`]: when it is offered the
//! `word_count` tool and has not called it yet, it calls it with the user's text; once the
//! result is there it answers with it. `WordCount` implements [`Tool`] by hand. Neither needs
//! anything but the core's traits.
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use modu_core::{
    ChatEvent, ChatModel, ChatRequest, ChatStream, FinishReason, Message, ModelError, Role, RunContext, Tool,
    ToolError, ToolSpec, Usage, async_trait,
};
use serde_json::{Value, json};

struct RuleModel;

#[async_trait]
impl ChatModel for RuleModel {
    fn model_name(&self) -> &str {
        "rule-model-1"
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let last = request.messages.last().ok_or_else(|| ModelError::InvalidRequest {
            message: "no messages".into(),
        })?;
        let mut events = Vec::new();
        if last.role == Role::Tool {
            events.push(ChatEvent::TextDelta {
                text: format!("Your text has {} words.", last.text()),
            });
            events.push(ChatEvent::Finish {
                reason: FinishReason::Stop,
            });
        } else if request.tools.iter().any(|t| t.name == "word_count") {
            events.push(ChatEvent::ToolCallDelta {
                index: 0,
                id: Some("call_1".into()),
                name: Some("word_count".into()),
                arguments: json!({ "text": last.text() }).to_string(),
            });
            events.push(ChatEvent::Finish {
                reason: FinishReason::ToolCalls,
            });
        } else {
            events.push(ChatEvent::TextDelta {
                text: "I can only count words.".into(),
            });
            events.push(ChatEvent::Finish {
                reason: FinishReason::Stop,
            });
        }
        let input = request.messages.iter().map(|m| m.text().len() as u64 / 4).sum();
        events.push(ChatEvent::Usage {
            usage: Usage::new(input, 8),
        });
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

struct WordCount {
    spec: ToolSpec,
}

impl WordCount {
    fn new() -> Self {
        WordCount {
            spec: ToolSpec::new(
                "word_count",
                "Count the words of a text",
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            )
            .idempotent(true),
        }
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for WordCount {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _ctx: &RunContext<C>, arguments: Value) -> Result<Value, ToolError> {
        let text = arguments["text"]
            .as_str()
            .ok_or_else(|| ToolError::validation("invalid_arguments", "text must be a string"))?;
        Ok(json!(text.split_whitespace().count()))
    }
}

/// One tool-using turn driven by hand through the contract alone: offer the tool, run the call
/// the model asks for, hand the result back, read the answer. In an application, `modu-agent`'s
/// `Agent` drives this loop (retries, limits, checkpoints, events) for any `ChatModel` and `Tool`.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = RuleModel;
    let tool = WordCount::new();
    let context = RunContext::new(Arc::new(()), "run-1");
    let mut messages = vec![Message::user("the quick brown fox jumps")];
    let offer = vec![Tool::<()>::spec(&tool).definition()];

    let first = model
        .complete(ChatRequest::new(messages.clone()).with_tools(offer.clone()))
        .await?;
    let call = first
        .message
        .tool_calls
        .first()
        .ok_or("the model did not call the tool")?
        .clone();
    messages.push(first.message);
    let value = tool.call(&context, call.parse_arguments()?).await?;
    messages.push(Message::tool_result(call.id, call.name, value.to_string(), false));

    let answer = model.complete(ChatRequest::new(messages).with_tools(offer)).await?;
    let output = answer.message.text();
    println!("{output}");
    assert_eq!(output, "Your text has 5 words.");
    Ok(())
}
