//! Media in tool results: a tool that returns a `ToolContent` envelope gives the model a tool
//! message holding the parts; an inline part over the limit is a tool error the model sees.

use modu_agent::Agent;
use modu_core::media::{DEFAULT_MAX_INLINE_MEDIA_BYTES, ToolContent};
use modu_core::{ContentPart, FunctionTool, Role, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn camera(image_data: String) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("snapshot", "Take a picture", json!({"type": "object"})).max_result_bytes(8),
        move |_ctx, _args| {
            let data = image_data.clone();
            async move {
                Ok(ToolContent::new(vec![
                    ContentPart::text("a red dot on white, 1x1"),
                    ContentPart::image_base64("image/png", data),
                ])
                .into_value())
            }
        },
    )
}

/// The tool message of the model's last request.
fn last_tool_message(model: &ScriptedModel) -> Result<modu_core::Message, Box<dyn std::error::Error>> {
    let last = model.requests().pop().ok_or("no request")?;
    let tool = last.messages.iter().find(|m| m.role == Role::Tool).cloned();
    Ok(tool.ok_or("no tool message")?)
}

#[tokio::test]
async fn a_tool_result_with_an_image_reaches_the_model_as_parts() -> TestResult {
    let model = ScriptedModel::new().tool_call("snapshot", json!({})).text("a red dot");
    let agent = Agent::builder(model.clone())
        .tool(camera("iVBORw0KGgo=".into()))
        .build()?;
    let result = agent.run("what do you see?").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("a red dot"),
        "{:?}",
        result.error()
    );
    let tool = last_tool_message(&model)?;
    assert!(!tool.is_error);
    assert_eq!(
        tool.content,
        vec![
            // Text parts are cut at max_result_bytes; media are kept whole.
            ContentPart::text(modu_core::tool::truncate_result(
                "a red dot on white, 1x1".into(),
                Some(8)
            )),
            ContentPart::image_base64("image/png", "iVBORw0KGgo="),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn an_inline_image_over_the_limit_is_a_tool_error_the_model_sees() -> TestResult {
    let model = ScriptedModel::new().tool_call("snapshot", json!({})).text("no picture");
    let agent = Agent::builder(model.clone())
        .tool(camera("A".repeat(DEFAULT_MAX_INLINE_MEDIA_BYTES + 4)))
        .build()?;
    let result = agent.run("what do you see?").await;
    assert!(result.error().is_none(), "{:?}", result.error());
    let tool = last_tool_message(&model)?;
    assert!(tool.is_error);
    assert!(!tool.has_media());
    assert!(tool.text().contains("media_too_large"), "{}", tool.text());
    Ok(())
}

/// A model declared text-only (`.text_only()` on its client) takes no image: a tool that
/// returns one gives the model a tool error it can act on, instead of a request its provider
/// refuses, which would end the run after the tool's side effect.
#[tokio::test]
async fn an_image_for_a_text_only_model_is_a_tool_error_the_model_sees() -> TestResult {
    struct TextOnly(ScriptedModel);
    #[async_trait::async_trait]
    impl modu_core::ChatModel for TextOnly {
        fn model_name(&self) -> &str {
            "text-only"
        }
        async fn stream(
            &self,
            request: modu_core::ChatRequest,
        ) -> Result<modu_core::ChatStream, modu_core::ModelError> {
            // The check a provider runs before it sends (OpenAiClient, OllamaClient).
            modu_core::media::check_messages("text-only", &request.messages, self.input_modalities(), usize::MAX)?;
            self.0.stream(request).await
        }
        fn input_modalities(&self) -> modu_core::InputModalities {
            modu_core::InputModalities::text_only()
        }
    }
    let model = ScriptedModel::new()
        .tool_call("snapshot", json!({}))
        .text("I cannot see it");
    let agent = Agent::builder(TextOnly(model.clone()))
        .tool(camera("iVBORw0KGgo=".into()))
        .build()?;
    let result = agent.run("what do you see?").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("I cannot see it"),
        "{:?}",
        result.error()
    );
    let tool = last_tool_message(&model)?;
    assert!(tool.is_error);
    assert!(!tool.has_media());
    assert!(tool.text().contains("unsupported_media"), "{}", tool.text());
    Ok(())
}
