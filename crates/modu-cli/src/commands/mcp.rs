//! `modu mcp tools|resources|prompts`: connect to the configured MCP servers and list their
//! tools, list and read their resources, list and fetch their prompts.

use std::path::Path;

use clap::Subcommand;
use modu::mcp::{McpConnector, McpServerConfig, McpSession};
use serde_json::{Map, Value, json};

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
    /// List the resources and resource templates of every configured server (or one), as
    /// `resource|template<TAB>server<TAB>uri<TAB>name`; `read URI` prints one resource.
    Resources {
        /// `read URI`; without it, list.
        #[command(subcommand)]
        action: Option<ResourcesAction>,
        /// Only this server (`read` needs it when more than one server is configured).
        #[arg(long, value_name = "NAME", global = true)]
        server: Option<String>,
        /// Print JSON (the servers' descriptions, or the resource's contents).
        #[arg(long, global = true)]
        json: bool,
    },
    /// List the prompts of every configured server (or one), as
    /// `server<TAB>name<TAB>arguments<TAB>description`; `get NAME` fetches one.
    Prompts {
        /// `get NAME [--arg KEY=VALUE]...`; without it, list.
        #[command(subcommand)]
        action: Option<PromptsAction>,
        /// Only this server (`get` needs it when more than one server is configured).
        #[arg(long, value_name = "NAME", global = true)]
        server: Option<String>,
        /// Print JSON (the prompt descriptions, or the prompt's messages).
        #[arg(long, global = true)]
        json: bool,
    },
}

/// `modu mcp resources …`.
#[derive(Debug, Subcommand)]
pub enum ResourcesAction {
    /// List the resources and resource templates (the default).
    List,
    /// Print the contents of one resource: texts as they are, binary contents as a line
    /// naming their type and size.
    Read {
        /// The resource's URI (a listed one, or a template filled in).
        uri: String,
    },
}

/// `modu mcp prompts …`.
#[derive(Debug, Subcommand)]
pub enum PromptsAction {
    /// List the prompts (the default).
    List,
    /// Print a prompt fetched with its arguments: its messages' texts, one paragraph each.
    Get {
        /// The prompt's name.
        name: String,
        /// An argument, `KEY=VALUE` (repeat for several).
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
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
    let (server, json) = match cmd {
        McpCommand::Tools { server, json } => (server, json),
        McpCommand::Resources { action, server, json } => return resources(action, server, json, config).await,
        McpCommand::Prompts { action, server, json } => return prompts(action, server, json, config).await,
    };
    let loaded = load_config(config)?;
    let section = &loaded.config.mcp;
    let selected = select(&section.servers, server.as_deref())?;
    let Some(connector) = build::mcp_connector(section, &loaded.config.store)
        .await
        .map_err(Failure::Usage)?
    else {
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
                        outln!("{}\t{description}", tool.external_name)?;
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
        outln!("{text}")?;
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

/// The connector and the servers a `--server` option selects.
async fn connect(
    config: Option<&Path>,
    server: Option<&str>,
) -> Result<(std::sync::Arc<McpConnector>, Vec<McpServerConfig>), Failure> {
    let loaded = load_config(config)?;
    let section = &loaded.config.mcp;
    let selected: Vec<McpServerConfig> = select(&section.servers, server)?.into_iter().cloned().collect();
    let Some(connector) = build::mcp_connector(section, &loaded.config.store)
        .await
        .map_err(Failure::Usage)?
    else {
        return Err(Failure::Usage("MCP is turned off in the configuration".into()));
    };
    Ok((connector, selected))
}

/// The one server a `read` or `get` is for: `--server`, or the only one configured.
fn single(selected: Vec<McpServerConfig>, what: &str) -> Result<McpServerConfig, Failure> {
    let count = selected.len();
    let mut selected = selected.into_iter();
    match (selected.next(), count) {
        (Some(server), 1) => Ok(server),
        _ => Err(Failure::Usage(format!(
            "{what} needs --server NAME when more than one MCP server is configured"
        ))),
    }
}

/// Opens one server, runs `f` on the session, closes it; a failure (its message names the
/// server) as one line.
async fn with_server<T>(
    connector: &McpConnector,
    server: McpServerConfig,
    f: impl AsyncFnOnce(&McpSession, &str) -> Result<T, modu::mcp::McpError>,
) -> Result<T, String> {
    let name = server.name.clone();
    let one_line = |e: modu::mcp::McpError| crate::ui::one_line(&e.to_string());
    let session = connector.open_servers(vec![server]).await.map_err(one_line)?;
    let out = f(&session, &name).await;
    session.close().await;
    out.map_err(one_line)
}

fn print_json(value: &Value) -> CommandResult {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure::Invalid(e.to_string()))?;
    outln!("{text}")?;
    Ok(())
}

/// Each failure on stderr; exit code 1 when there was one.
fn report(failures: Vec<String>, what: &str) -> CommandResult {
    if failures.is_empty() {
        return Ok(());
    }
    for failure in &failures {
        eprintln!("error: {failure}");
    }
    Err(Failure::Invalid(format!(
        "{what} failed for {} server(s)",
        failures.len()
    )))
}

/// `modu mcp resources [list | read URI]`.
async fn resources(
    action: Option<ResourcesAction>,
    server: Option<String>,
    json: bool,
    config: Option<&Path>,
) -> CommandResult {
    let (connector, selected) = connect(config, server.as_deref()).await?;
    if let Some(ResourcesAction::Read { uri }) = action {
        let server = single(selected, "`modu mcp resources read`")?;
        let read = with_server(&connector, server, async |session, name| {
            session.read_resource(name, &uri).await
        })
        .await
        .map_err(Failure::Invalid)?;
        if json {
            return print_json(&read);
        }
        for content in read["contents"].as_array().into_iter().flatten() {
            match (content.get("text").and_then(Value::as_str), content.get("blob")) {
                (Some(text), _) => {
                    out!("{text}")?;
                    if !text.ends_with('\n') {
                        outln!()?;
                    }
                }
                (None, Some(blob)) => {
                    let mime = content.get("mimeType").and_then(Value::as_str).unwrap_or("binary");
                    let bytes = blob.as_str().map_or(0, |b| b.len() / 4 * 3);
                    outln!("[{mime} contents, about {bytes} bytes; --json prints them in base64]")?;
                }
                (None, None) => outln!("{content}")?,
            }
        }
        return Ok(());
    }
    // Without --server, a server that offers no resources lists none; with it, that is an error.
    let named = server.is_some();
    let mut failures = Vec::new();
    let mut resources = Vec::new();
    let mut templates = Vec::new();
    for server in selected {
        let listed = with_server(&connector, server, async |session, name| {
            session.list_resources(named.then_some(name)).await
        })
        .await;
        match listed {
            Ok(mut listed) => {
                resources.extend(take_array(&mut listed, "resources"));
                templates.extend(take_array(&mut listed, "resource_templates"));
            }
            Err(e) => failures.push(e),
        }
    }
    if json {
        print_json(&json!({"resources": resources, "resource_templates": templates}))?;
    } else {
        let field = |item: &Value, key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        for r in &resources {
            outln!(
                "resource\t{}\t{}\t{}",
                field(r, "server"),
                field(r, "uri"),
                field(r, "name")
            )?;
        }
        for t in &templates {
            outln!(
                "template\t{}\t{}\t{}",
                field(t, "server"),
                field(t, "uriTemplate"),
                field(t, "name")
            )?;
        }
    }
    report(failures, "listing resources")
}

fn take_array(value: &mut Value, key: &str) -> Vec<Value> {
    match value.get_mut(key).map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    }
}

/// `modu mcp prompts [list | get NAME --arg K=V...]`.
async fn prompts(
    action: Option<PromptsAction>,
    server: Option<String>,
    json: bool,
    config: Option<&Path>,
) -> CommandResult {
    if let Some(PromptsAction::Get { name, args }) = action {
        let mut arguments = Map::new();
        for arg in &args {
            let Some((key, value)) = arg.split_once('=') else {
                return Err(Failure::Usage(format!("--arg {arg:?} is not KEY=VALUE")));
            };
            arguments.insert(key.to_owned(), Value::String(value.to_owned()));
        }
        let (connector, selected) = connect(config, server.as_deref()).await?;
        let server = single(selected, "`modu mcp prompts get`")?;
        let prompt = with_server(&connector, server, async |session, server| {
            session.get_prompt(server, &name, arguments).await
        })
        .await
        .map_err(Failure::Invalid)?;
        if json {
            let messages: Vec<Value> = prompt
                .messages
                .iter()
                .map(|m| json!({"role": m.role, "text": m.text()}))
                .collect();
            return print_json(&json!({
                "server": prompt.server,
                "name": prompt.name,
                "description": prompt.description,
                "messages": messages,
            }));
        }
        outln!("{}", prompt.text())?;
        return Ok(());
    }
    let (connector, selected) = connect(config, server.as_deref()).await?;
    let named = server.is_some();
    let mut failures = Vec::new();
    let mut listed = Vec::new();
    for server in selected {
        match with_server(&connector, server, async |session, name| {
            session.list_prompts(named.then_some(name)).await
        })
        .await
        {
            Ok(prompts) => listed.extend(prompts),
            Err(e) => failures.push(e),
        }
    }
    if json {
        let value = serde_json::to_value(&listed).map_err(|e| Failure::Invalid(e.to_string()))?;
        print_json(&value)?;
    } else {
        for prompt in &listed {
            let arguments: Vec<String> = prompt
                .arguments
                .iter()
                .map(|a| {
                    if a.required {
                        a.name.clone()
                    } else {
                        format!("{}?", a.name)
                    }
                })
                .collect();
            let description = prompt.description.as_deref().unwrap_or_default();
            outln!(
                "{}\t{}\t{}\t{}",
                prompt.server,
                prompt.name,
                arguments.join(","),
                description.lines().next().unwrap_or_default()
            )?;
        }
    }
    report(failures, "listing prompts")
}
