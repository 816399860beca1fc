//! `modu mcp tools [--server NAME]`: connect to the configured MCP servers and list their tools.

use std::path::Path;

use clap::Subcommand;
use modu_mcp::McpServerConfig;
use serde_json::json;

use super::{CommandResult, Failure, load_config};
use crate::build;

/// `modu mcp …`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// List the tools of every configured server (or one), as `server__tool<TAB>description`.
    Tools {
        /// Only this server.
        #[arg(long, value_name = "NAME")]
        server: Option<String>,
        /// Print the tools (with their input schemas) as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The servers a `--server` option selects.
pub fn select<'a>(servers: &'a [McpServerConfig], name: Option<&str>) -> Result<Vec<&'a McpServerConfig>, Failure> {
    if servers.is_empty() {
        return Err(Failure::Usage(
            "no MCP servers are configured: add [[mcp.servers]] to modu.toml or set MODU_MCP__SERVERS".into(),
        ));
    }
    match name {
        None => Ok(servers.iter().collect()),
        Some(name) => match servers.iter().find(|s| s.name == name) {
            Some(s) => Ok(vec![s]),
            None => {
                let known: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
                Err(Failure::Usage(format!(
                    "no MCP server named `{name}` (configured: {})",
                    known.join(", ")
                )))
            }
        },
    }
}

/// Runs an `mcp` subcommand. Each server is opened on its own, so one broken server does not
/// hide the others' tools; any failure makes the exit code 1.
pub async fn run(cmd: McpCommand, config: Option<&Path>) -> CommandResult {
    let McpCommand::Tools { server, json } = cmd;
    let loaded = load_config(config)?;
    let section = &loaded.config.mcp;
    let selected = select(&section.servers, server.as_deref())?;
    let Some(connector) = build::mcp_connector(section).map_err(Failure::Usage)? else {
        return Ok(());
    };
    let mut broken = Vec::new();
    let mut listed = Vec::new();
    for server in selected {
        match connector.open_servers(vec![server.clone()]).await {
            Ok(session) => {
                for tool in session.registry().tools() {
                    if json {
                        listed.push(json!({
                            "server": tool.server,
                            "tool": tool.tool,
                            "name": tool.external_name,
                            "description": tool.description,
                            "input_schema": tool.input_schema,
                        }));
                    } else {
                        let description = tool.description.lines().next().unwrap_or_default();
                        println!("{}\t{description}", tool.external_name);
                    }
                }
                session.close().await;
            }
            Err(e) => {
                eprintln!(
                    "error: MCP server {}: {}",
                    server.name,
                    crate::ui::one_line(&e.to_string())
                );
                broken.push(server.name.clone());
            }
        }
    }
    if json {
        let text = serde_json::to_string_pretty(&listed).map_err(|e| Failure::Invalid(e.to_string()))?;
        println!("{text}");
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(Failure::Invalid(format!(
            "cannot open MCP server(s): {}",
            broken.join(", ")
        )))
    }
}
