//! Per-run server selection: [`McpRuntimeServerResolver`] and the default rules.

use async_trait::async_trait;
use modu_core::UserContext;
use serde_json::Value;

use crate::config::{McpConfig, McpServerConfig, McpTransport, validate_all};
use crate::error::McpServerConfigurationError;

/// What a resolver sees of a run.
#[derive(Clone, Copy, Debug)]
pub struct McpSelectionRequest<'a> {
    /// The run's `mcp.servers` value, `None` when the run did not give one.
    pub selection: Option<&'a Value>,
    /// The run's whole metadata map (for resolvers that read other keys).
    pub metadata: Option<&'a serde_json::Map<String, Value>>,
    /// Who the run is for, when known (for resolvers that load the user's connections).
    pub user: Option<&'a UserContext>,
    /// The run's id, when known.
    pub run_id: Option<&'a str>,
}

impl<'a> McpSelectionRequest<'a> {
    /// A request with just a selection.
    pub fn new(selection: Option<&'a Value>) -> Self {
        McpSelectionRequest {
            selection,
            metadata: None,
            user: None,
            run_id: None,
        }
    }
}

/// Resolves the servers one run uses.
///
/// The default, [`DefaultServerResolver`], applies the rules of `mcp.servers`. An application
/// that keeps users' connections in its own store implements this trait to turn connection
/// ids into configurations server-side, so that browser payloads carry ids, never endpoints or
/// tokens. Whatever a resolver returns is validated again (names unique, no `__`, …).
#[async_trait]
pub trait McpRuntimeServerResolver: Send + Sync {
    /// The servers for this run, in order.
    async fn resolve(
        &self,
        config: &McpConfig,
        request: &McpSelectionRequest<'_>,
    ) -> Result<Vec<McpServerConfig>, McpServerConfigurationError>;
}

/// The default selection rules for `mcp.servers`:
///
/// - omitted → every configured server;
/// - `[]` → no server;
/// - a string → the configured server of that name (unknown names are an error);
/// - an object → an inline server for this run only (validated, unknown fields rejected);
///   it may not shadow a configured name, and a `stdio` inline server is refused unless
///   [`DefaultServerResolver::allow_inline_stdio`] was set (a browser user registering an
///   arbitrary command would be remote code execution);
/// - a name used twice → error.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultServerResolver {
    allow_inline_stdio: bool,
}

impl DefaultServerResolver {
    /// The default rules, inline stdio servers refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts inline stdio servers (only when the selection comes from a trusted source).
    pub fn allow_inline_stdio(mut self, yes: bool) -> Self {
        self.allow_inline_stdio = yes;
        self
    }

    /// Applies the rules synchronously.
    pub fn resolve_selection(
        &self,
        config: &McpConfig,
        selection: Option<&Value>,
    ) -> Result<Vec<McpServerConfig>, McpServerConfigurationError> {
        let Some(selection) = selection else {
            return Ok(config.servers.clone());
        };
        let err = |server: Option<&str>, m: String| Err(McpServerConfigurationError::new(server, m));
        let Some(items) = selection.as_array() else {
            return err(
                None,
                "mcp.servers must be an array of server names and inline server objects".into(),
            );
        };
        let mut out: Vec<McpServerConfig> = Vec::with_capacity(items.len());
        for item in items {
            let server = match item {
                Value::String(name) => match config.servers.iter().find(|s| &s.name == name) {
                    Some(s) => s.clone(),
                    None => return err(Some(name), format!("no configured MCP server is named {name:?}")),
                },
                Value::Object(_) => {
                    let server = McpServerConfig::from_json(item.clone())?;
                    if config.servers.iter().any(|s| s.name == server.name) {
                        return err(
                            Some(&server.name),
                            format!(
                                "the inline server {:?} shadows a configured server of the same name",
                                server.name
                            ),
                        );
                    }
                    if server.transport == McpTransport::Stdio && !self.allow_inline_stdio {
                        return err(
                            Some(&server.name),
                            "inline stdio servers are refused (the application has not opted in)".into(),
                        );
                    }
                    server
                }
                _ => {
                    return err(
                        None,
                        "each entry of mcp.servers must be a server name or an inline server object".into(),
                    );
                }
            };
            if out.iter().any(|s| s.name == server.name) {
                return err(
                    Some(&server.name),
                    format!("the server {:?} is selected more than once", server.name),
                );
            }
            out.push(server);
        }
        validate_all(&out)?;
        Ok(out)
    }
}

#[async_trait]
impl McpRuntimeServerResolver for DefaultServerResolver {
    async fn resolve(
        &self,
        config: &McpConfig,
        request: &McpSelectionRequest<'_>,
    ) -> Result<Vec<McpServerConfig>, McpServerConfigurationError> {
        self.resolve_selection(config, request.selection)
    }
}

/// Reads `mcp.servers` out of a run's metadata map. `mcp` present but not an object is an
/// error; `mcp` without `servers` counts as omitted.
pub fn selection_from_metadata(
    metadata: &serde_json::Map<String, Value>,
) -> Result<Option<&Value>, McpServerConfigurationError> {
    match metadata.get("mcp") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(mcp)) => Ok(mcp.get("servers").filter(|v| !v.is_null())),
        Some(_) => Err(McpServerConfigurationError::new(
            None,
            "metadata.mcp must be an object with a `servers` array",
        )),
    }
}
