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
    let second = model.requests().pop().ok_or("no request")?;
    let tool = second
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .ok_or("no tool message")?;
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
    let second = model.requests().pop().ok_or("no request")?;
    let tool = second
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .ok_or("no tool message")?;
    assert!(tool.is_error);
    assert!(!tool.has_media());
    assert!(tool.text().contains("media_too_large"), "{}", tool.text());
    Ok(())
}
