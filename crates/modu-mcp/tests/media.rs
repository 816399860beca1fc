//! End to end: an agent on the real `OpenAiClient` (against the mock OpenAI server) calls
//! server-everything's `get-tiny-image`; the next model request carries the image as an
//! `image_url` data-URL part.

mod support;

use std::sync::Arc;

use modu_agent::Agent;
use modu_mcp::{McpConfig, McpConnector, McpToolProvider};
use modu_openai::OpenAiClient;
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_image_reaches_the_next_model_request_as_an_image_url_part() -> TestResult {
    let Some(script) = support::everything() else {
        return Ok(());
    };
    let marker = support::marker("media-e2e");
    let config = McpConfig::new(vec![support::everything_stdio("everything", &script, &marker)])?;
    let connector = Arc::new(McpConnector::new(config)?);

    let server = MockOpenAiServer::start().await?;
    server.push(MockReply::ToolCalls(vec![(
        "mcp_call_tool".into(),
        json!({"tool_name": "everything__get-tiny-image", "arguments": {}}).to_string(),
    )]));
    server.push(MockReply::Text("It is the MCP logo.".into()));
    let model = OpenAiClient::new(server.base_url(), "mock-model")?;
    let agent: Agent<()> = Agent::builder(model)
        .tool_provider(McpToolProvider::new(connector))
        .build()?;
    let result = agent.run("Show me the tiny image.").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("It is the MCP logo."),
        "{:?}",
        result.error()
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1]["messages"].as_array().ok_or("no messages")?;
    // The tool message holds the result's text; the image follows in a user message.
    let tool = messages.iter().find(|m| m["role"] == "tool").ok_or("no tool message")?;
    let tool_text = tool["content"].as_str().ok_or("tool content is text")?;
    assert!(tool_text.contains("Here's the image you requested:"), "{tool_text}");
    let last = messages.last().ok_or("empty")?;
    assert_eq!(last["role"], "user");
    let parts = last["content"].as_array().ok_or("media message has parts")?;
    let image: Vec<&Value> = parts.iter().filter(|p| p["type"] == "image_url").collect();
    assert_eq!(image.len(), 1, "{parts:?}");
    let url = image[0]["image_url"]["url"].as_str().ok_or("url")?;
    assert!(
        url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{}",
        &url[..40.min(url.len())]
    );
    // The whole image, not cut at the tool's result cap.
    assert!(url.len() > 1_000);
    Ok(())
}
