//! A third party's own model provider and tool, built on `modu-core` alone.
//!
//! Run with: `cargo run -p modu-example-custom-provider`
//!
//! `RuleModel` is a tiny rule-based "model" implementing [`ChatModel`]: when it is offered the
//! `word_count` tool and has not called it yet, it calls it with the user's text; once the
//! result is there it answers with it. `WordCount` implements [`Tool`] by hand. Neither needs
//! anything but the core's traits.
#![allow(clippy::print_stdout)]

use async_trait::async_trait;
use modu_core::{
    Agent, ChatEvent, ChatModel, ChatRequest, ChatStream, FinishReason, ModelError, Role, RunContext, Tool, ToolError,
    ToolSpec, Usage,
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

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), modu_core::AgentError> {
    let agent = Agent::builder(RuleModel)
        .name("word-counter")
        .tool(WordCount::new())
        .build()?;
    let result = agent.run("the quick brown fox jumps").await;
    let output = result.into_result()?;
    println!("{output}");
    assert_eq!(output, "Your text has 5 words.");
    Ok(())
}
