//! An agent with server-everything attached over stdio. The model is scripted (no LLM needed):
//! it searches the MCP tools, calls `echo` through `mcp_call_tool`, then answers.
//!
//! ```sh
//! MODU_MCP_EVERYTHING=/path/to/node_modules/@modelcontextprotocol/server-everything/dist/index.js \
//!   cargo run -p modu-mcp --example everything
//! ```
#![allow(clippy::print_stdout)]

use std::sync::Arc;

use modu_agent::Agent;
use modu_core::Role;
use modu_mcp::{McpConfig, McpConnector, McpServerConfig, McpToolProvider};
use modu_testing::ScriptedModel;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(script) = std::env::var("MODU_MCP_EVERYTHING") else {
        println!("set MODU_MCP_EVERYTHING to server-everything's dist/index.js");
        return Ok(());
    };
    let config = McpConfig::new(vec![
        McpServerConfig::stdio("everything", "node").with_args([script, "stdio".into()]),
    ])?;
    let connector = Arc::new(McpConnector::new(config)?);

    let model = ScriptedModel::new()
        .tool_call("mcp_search_tools", json!({"query": "echo", "limit": 3}))
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "everything__echo", "arguments": {"message": "hello from modu"}}),
        )
        .text("The server echoed our greeting.");
    let agent: Agent<()> = Agent::builder(model.clone())
        .name("mcp-example")
        .instructions("Use the MCP tools when they help.")
        .tool_provider(McpToolProvider::new(connector))
        .build()?;

    let result = agent.run("Say hello through the echo tool.").await;
    let tools: Vec<String> = model.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    println!("tools offered to the model: {tools:?}");
    for message in result.messages().iter().filter(|m| m.role == Role::Tool) {
        println!("tool result: {}", message.text());
    }
    println!("answer: {}", result.into_result()?);
    Ok(())
}
