//! [`McpResourceContext`]: MCP resources as a run's context.
//!
//! A [`modu_core::ContextProvider`] that reads the resources it was given (server and URI: a
//! listed resource, or a template's URI filled in) once per run, before the run's first model
//! request, and adds each as an instruction block to every request of the run:
//!
//! ```text
//! MCP resource demo://resource/static/document/architecture.md (server everything):
//! <the resource's text>
//! ```
//!
//! A resource with several contents has them one after another; a binary content (a blob) is
//! named with its type and size, not included. The servers are opened for the reading only
//! (each once per run) and closed again. A resource that cannot be read ends the run with
//! `AgentError::ContextProvider` naming it: the context an application configured is not left
//! out silently. Each text content is cut to the server's result cap, with the marker tool
//! results have; binary contents are named whatever their size, never included.
//!
//! ```no_run
//! use std::sync::Arc;
//! use modu_agent::Agent;
//! use modu_mcp::{McpConfig, McpConnector, McpResourceContext};
//! use modu_testing::ScriptedModel;
//!
//! # fn build(config: McpConfig) -> Result<(), Box<dyn std::error::Error>> {
//! let connector = Arc::new(McpConnector::new(config)?);
//! let agent: Agent = Agent::builder(ScriptedModel::new().text("ok"))
//!     .context_provider(McpResourceContext::new(connector).resource("docs", "docs://handbook/intro"))
//!     .build()?;
//! # let _ = agent;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use modu_core::{ContextProvider, ContextProviderError, ModelContext, RunContext};
use serde_json::Value;

use crate::client::McpConnector;

/// The name [`McpResourceContext`] reports in errors.
const NAME: &str = "mcp_resources";

/// MCP resources put into every model request of a run as instruction blocks (see the
/// [module](crate::resource_context)).
pub struct McpResourceContext {
    connector: Arc<McpConnector>,
    /// (server, URI), in the order the blocks go in.
    resources: Vec<(String, String)>,
    /// The blocks of the runs in flight, by run id.
    per_run: Mutex<HashMap<String, Arc<Vec<String>>>>,
}

impl std::fmt::Debug for McpResourceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpResourceContext")
            .field("resources", &self.resources)
            .finish_non_exhaustive()
    }
}

impl McpResourceContext {
    /// No resources yet: add them with [`McpResourceContext::resource`].
    pub fn new(connector: Arc<McpConnector>) -> Self {
        McpResourceContext {
            connector,
            resources: Vec::new(),
            per_run: Mutex::new(HashMap::new()),
        }
    }

    /// Adds the resource `uri` of the configured server `server`.
    pub fn resource(mut self, server: impl Into<String>, uri: impl Into<String>) -> Self {
        self.resources.push((server.into(), uri.into()));
        self
    }

    /// Reads every resource: one block each, in order.
    async fn read_all(&self) -> Result<Vec<String>, ContextProviderError> {
        let fail = |message: String| ContextProviderError::new(NAME, message);
        let mut servers = Vec::new();
        for (server, _) in &self.resources {
            if servers.iter().any(|s: &crate::McpServerConfig| &s.name == server) {
                continue;
            }
            let config = self
                .connector
                .config()
                .servers
                .iter()
                .find(|s| &s.name == server)
                .cloned()
                .ok_or_else(|| fail(format!("no configured MCP server is named {server:?}")))?;
            servers.push(config);
        }
        if servers.is_empty() {
            return Ok(Vec::new());
        }
        let session = self
            .connector
            .open_servers(servers)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let mut blocks = Vec::with_capacity(self.resources.len());
        let mut failed = None;
        for (server, uri) in &self.resources {
            match session.read_resource_uncut(server, uri).await {
                Ok((read, max)) => blocks.push(block(server, uri, &cut_texts(read, max))),
                Err(e) => {
                    failed = Some(fail(format!("cannot read the resource {uri} of {server}: {e}")));
                    break;
                }
            }
        }
        session.close().await;
        match failed {
            Some(error) => Err(error),
            None => Ok(blocks),
        }
    }
}

/// A read with each text content cut to `max` bytes (with the marker of
/// [`modu_core::tool::truncate_result`], as tool results); blobs are left for [`block`] to name.
fn cut_texts(mut read: Value, max: usize) -> Value {
    if let Some(contents) = read.get_mut("contents").and_then(Value::as_array_mut) {
        for content in contents {
            if let Some(Value::String(text)) = content.get_mut("text") {
                *text = modu_core::tool::truncate_result(std::mem::take(text), Some(max));
            }
        }
    }
    read
}

/// One resource's instruction block.
fn block(server: &str, uri: &str, read: &Value) -> String {
    let mut out = format!("MCP resource {uri} (server {server}):");
    let contents = read["contents"].as_array().map(Vec::as_slice).unwrap_or_default();
    for content in contents {
        out.push('\n');
        if let Some(text) = content["text"].as_str() {
            out.push_str(text);
        } else if let Some(blob) = content["blob"].as_str() {
            let mime = content["mimeType"].as_str().unwrap_or("application/octet-stream");
            out.push_str(&format!(
                "[binary content, {mime}, {} bytes: not included]",
                blob.len() / 4 * 3
            ));
        }
    }
    // A read that is bare text (not a `{contents}` envelope) goes in as it is.
    if let Some(text) = read.as_str() {
        out.push('\n');
        out.push_str(text);
    }
    out
}

#[async_trait]
impl<C: Send + Sync + 'static> ContextProvider<C> for McpResourceContext {
    fn name(&self) -> &str {
        NAME
    }

    async fn invoking(&self, ctx: &RunContext<C>, context: &mut ModelContext) -> Result<(), ContextProviderError> {
        let cached = self
            .per_run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(ctx.run_id())
            .cloned();
        let blocks = match cached {
            Some(blocks) => blocks,
            None => {
                let blocks = Arc::new(self.read_all().await?);
                self.per_run
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(ctx.run_id().to_owned(), Arc::clone(&blocks));
                blocks
            }
        };
        context.instructions.extend(blocks.iter().cloned());
        Ok(())
    }

    async fn run_finished(&self, ctx: &RunContext<C>) {
        self.per_run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(ctx.run_id());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_holds_the_text_and_names_binary_content() {
        let read = serde_json::json!({"contents": [
            {"uri": "a://x", "text": "hello"},
            {"uri": "a://x", "blob": "AAAA", "mimeType": "image/png"}
        ]});
        assert_eq!(
            block("s", "a://x", &read),
            "MCP resource a://x (server s):\nhello\n[binary content, image/png, 3 bytes: not included]"
        );
        assert_eq!(
            block("s", "a://y", &Value::String("cut…".into())),
            "MCP resource a://y (server s):\ncut…"
        );
    }

    #[test]
    fn each_text_is_cut_and_blobs_are_left_for_the_block() {
        let read = serde_json::json!({"contents": [
            {"uri": "a://x", "text": "abcdef"},
            {"uri": "a://x", "blob": "AAAAAAAA"}
        ]});
        assert_eq!(
            block("s", "a://x", &cut_texts(read, 4)),
            "MCP resource a://x (server s):\nabcd\n…[truncated: 4 of 6 bytes shown]\n\
             [binary content, application/octet-stream, 6 bytes: not included]"
        );
    }
}
