//! The two meta tools the model sees by default (`mcp_search_tools` and `mcp_call_tool`), and
//! [`McpDirectTool`], one external tool offered under its own name.

use std::sync::Arc;

use async_trait::async_trait;
use modu_core::{RunContext, Tool, ToolError, ToolSpec};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::McpError;
use crate::output::unknown_tool;
use crate::registry::{McpToolDescriptor, split_external_name};
use crate::session::{CallScope, McpSession};
use crate::signals::{McpProgress, McpProgressListener};

/// The name of the search meta tool.
pub const SEARCH_TOOL_NAME: &str = "mcp_search_tools";
/// The name of the call meta tool.
pub const CALL_TOOL_NAME: &str = "mcp_call_tool";
/// The name of the resource listing meta tool.
pub const LIST_RESOURCES_TOOL_NAME: &str = "mcp_list_resources";
/// The name of the resource reading meta tool.
pub const READ_RESOURCE_TOOL_NAME: &str = "mcp_read_resource";
/// The default number of search results.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
/// The most search results one call returns.
pub const MAX_SEARCH_LIMIT: usize = 50;

/// Hides tools per request: called with the run's context and a tool; `false` hides it from
/// search and refuses calls to it.
pub type McpToolFilter<C> = Arc<dyn Fn(&RunContext<C>, &McpToolDescriptor) -> bool + Send + Sync>;

/// The run and call a tool call is made for (what its progress reports carry).
fn scope<C>(ctx: &RunContext<C>) -> CallScope<'_> {
    CallScope {
        run_id: Some(ctx.run_id()),
        call_id: ctx.call_id(),
    }
}

/// Makes the MCP call of a run's tool call; the server's progress notifications become the
/// run's `ToolProgress` events ([`RunContext::report_progress`]) as they arrive.
async fn call_reporting<C: Send + Sync + 'static>(
    session: &McpSession,
    ctx: &RunContext<C>,
    external_name: &str,
    arguments: Value,
) -> Result<Value, McpError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<McpProgress>();
    let also: McpProgressListener = Arc::new(move |p: &McpProgress| {
        let _ = tx.send(p.clone());
    });
    let call = session.call_in(external_name, arguments, scope(ctx), also);
    // Ends once the call has dropped its listener, after the last notification.
    let forward = async {
        while let Some(p) = rx.recv().await {
            ctx.report_progress(p.progress, p.total, p.message).await;
        }
    };
    tokio::join!(call, forward).0
}

fn visible<C>(filter: &Option<McpToolFilter<C>>, ctx: &RunContext<C>, tool: &McpToolDescriptor) -> bool {
    filter.as_ref().is_none_or(|f| f(ctx, tool))
}

/// `mcp_search_tools`: finds tools of the run's MCP servers by name and description words.
pub struct McpSearchTool<C> {
    session: Arc<McpSession>,
    filter: Option<McpToolFilter<C>>,
    spec: ToolSpec,
}

impl<C> McpSearchTool<C> {
    /// The search tool over a session.
    pub fn new(session: Arc<McpSession>, filter: Option<McpToolFilter<C>>) -> Self {
        let spec = ToolSpec::new(
            SEARCH_TOOL_NAME,
            "Search the tools of the connected MCP servers by words of their names and descriptions. \
             Returns matching tools with their input schemas; call one with mcp_call_tool.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for in tool names and descriptions; empty lists every tool."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "description": "The most tools to return (default 10)."}
                },
                "required": ["query"]
            }),
        )
        .idempotent(true)
        .repair_safe(true)
        .meta(true);
        McpSearchTool { session, filter, spec }
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for McpSearchTool<C> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &RunContext<C>, arguments: Value) -> Result<Value, ToolError> {
        let query = arguments.get("query").and_then(Value::as_str).unwrap_or_default();
        let limit = arguments
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_SEARCH_LIMIT, |l| usize::try_from(l).unwrap_or(MAX_SEARCH_LIMIT))
            .clamp(1, MAX_SEARCH_LIMIT);
        // A server that announced a change is listed again first.
        self.session.refresh_tools().await;
        Ok(self.session.search(query, limit, |t| visible(&self.filter, ctx, t)))
    }
}

/// What an approval request for an `mcp_call_tool` call shows: the external tool, not the meta
/// tool.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct McpApprovalDescription {
    /// The external tool name (`weather__forecast`): what the approval prompt and action
    /// reference name.
    pub tool_name: String,
    /// The tool's name on its server (`forecast`).
    pub mcp_tool_name: String,
    /// The server (`weather`).
    pub mcp_server: String,
    /// The arguments the tool would be called with.
    pub mcp_arguments: Value,
}

impl McpApprovalDescription {
    /// The approval request for call `call_id`: named after the external tool, with its
    /// arguments, and `mcp_tool_name`, `mcp_server`, `mcp_arguments` in the metadata.
    pub fn into_request(self, call_id: &str) -> modu_core::ApprovalRequest {
        let mut metadata = serde_json::Map::new();
        metadata.insert("mcp_tool_name".into(), Value::String(self.mcp_tool_name));
        metadata.insert("mcp_server".into(), Value::String(self.mcp_server));
        metadata.insert("mcp_arguments".into(), self.mcp_arguments.clone());
        modu_core::ApprovalRequest::new(call_id, self.tool_name, self.mcp_arguments).with_metadata(metadata)
    }
}

/// Builds the approval description for `mcp_call_tool` arguments (`{tool_name, arguments}`)
/// from the name alone, split at its first `__` (server names never contain `__` nor start
/// or end with `_`). `None` when the arguments do not name an external tool.
/// [`McpCallTool::approval_description`] takes the server and tool from the session's tools
/// instead.
pub fn approval_description(arguments: &Value) -> Option<McpApprovalDescription> {
    let tool_name = arguments.get("tool_name")?.as_str()?;
    let (server, tool) = split_external_name(tool_name)?;
    Some(McpApprovalDescription {
        tool_name: tool_name.to_owned(),
        mcp_tool_name: tool.to_owned(),
        mcp_server: server.to_owned(),
        mcp_arguments: arguments.get("arguments").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Decides which `mcp_call_tool` calls need a person's approval, from the run context and the
/// external tool being called.
pub type McpApprovalPolicy<C> = Arc<dyn Fn(&RunContext<C>, &McpApprovalDescription) -> bool + Send + Sync>;

/// `mcp_call_tool`: calls a tool found with `mcp_search_tools` by its external name.
pub struct McpCallTool<C> {
    session: Arc<McpSession>,
    filter: Option<McpToolFilter<C>>,
    approval: Option<McpApprovalPolicy<C>>,
    spec: ToolSpec,
}

impl<C> McpCallTool<C> {
    /// The call tool over a session.
    pub fn new(session: Arc<McpSession>, filter: Option<McpToolFilter<C>>) -> Self {
        let spec = ToolSpec::new(
            CALL_TOOL_NAME,
            "Call a tool of a connected MCP server by the name mcp_search_tools returned \
             (<server>__<tool>), with arguments fitting its input schema.",
            json!({
                "type": "object",
                "properties": {
                    "tool_name": {"type": "string", "description": "The tool's name as returned by mcp_search_tools."},
                    "arguments": {"type": "object", "description": "The tool's arguments."}
                },
                "required": ["tool_name"]
            }),
        )
        .repair_safe(true)
        .meta(true);
        McpCallTool {
            session,
            filter,
            approval: None,
            spec,
        }
    }

    /// Asks for a person's approval before the calls `policy` picks. The approval request names
    /// the external tool (`weather__forecast`) and carries `mcp_tool_name`, `mcp_server` and
    /// `mcp_arguments`; approve-always covers that external tool only.
    pub fn with_approval(mut self, policy: Option<McpApprovalPolicy<C>>) -> Self {
        self.approval = policy;
        self
    }

    /// The approval description for a call with these arguments, checked against the
    /// session's tools (an unknown tool is a `not_found` error): its server and tool are the
    /// listed tool's.
    pub fn approval_description(&self, arguments: &Value) -> Result<McpApprovalDescription, ToolError> {
        if let Some(description) = self.listed_description(arguments) {
            return Ok(description);
        }
        let description = approval_description(arguments).ok_or_else(|| {
            ToolError::validation("invalid_arguments", "tool_name must name a tool as <server>__<tool>")
        })?;
        Err(unknown_tool(&description.tool_name).to_tool_error())
    }

    /// The approval description of a call whose `tool_name` the session lists, with that
    /// tool's server and tool (never the name split again).
    fn listed_description(&self, arguments: &Value) -> Option<McpApprovalDescription> {
        let tool_name = arguments.get("tool_name")?.as_str()?;
        let descriptor = self.session.registry().get(tool_name).cloned()?;
        Some(McpApprovalDescription {
            tool_name: tool_name.to_owned(),
            mcp_tool_name: descriptor.tool.clone(),
            mcp_server: descriptor.server.clone(),
            mcp_arguments: arguments.get("arguments").cloned().unwrap_or_else(|| json!({})),
        })
    }

    /// The approval description of a call: the listed tool's when the session has it, else
    /// the name split ([`approval_description`]); `None` when the arguments name no external
    /// tool.
    fn describe(&self, arguments: &Value) -> Option<McpApprovalDescription> {
        self.listed_description(arguments)
            .or_else(|| approval_description(arguments))
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for McpCallTool<C> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &RunContext<C>, arguments: Value) -> Result<Value, ToolError> {
        let Some(tool_name) = arguments.get("tool_name").and_then(Value::as_str) else {
            return Err(ToolError::validation(
                "invalid_arguments",
                "tool_name is required: the name mcp_search_tools returned",
            ));
        };
        self.session.refresh_tools().await;
        let hidden = self
            .session
            .registry()
            .get(tool_name)
            .is_some_and(|t| !visible(&self.filter, ctx, t));
        if hidden {
            return Err(unknown_tool(tool_name).to_tool_error());
        }
        let tool_arguments = arguments.get("arguments").cloned().unwrap_or(Value::Null);
        let _asking = self.session.elicitations.register(ctx);
        call_reporting(&self.session, ctx, tool_name, tool_arguments)
            .await
            .map_err(|e| e.to_tool_error())
    }

    fn needs_approval(&self, ctx: &RunContext<C>, arguments: &Value) -> bool {
        match (&self.approval, self.describe(arguments)) {
            (Some(policy), Some(description)) => policy(ctx, &description),
            // Arguments that name no external tool fail in `call` without reaching a server.
            _ => false,
        }
    }

    /// The external tool a call runs (`server__tool`, as `mcp_search_tools` names it): what
    /// RBAC decides on, approvals show and events carry.
    fn identity(&self, arguments: &Value) -> std::borrow::Cow<'_, str> {
        match arguments.get("tool_name").and_then(Value::as_str) {
            Some(name) => std::borrow::Cow::Owned(name.to_owned()),
            None => std::borrow::Cow::Borrowed(CALL_TOOL_NAME),
        }
    }

    fn approval_request(&self, call_id: &str, arguments: &Value) -> modu_core::ApprovalRequest {
        match self.describe(arguments) {
            Some(d) => d.into_request(call_id),
            None => modu_core::ApprovalRequest::new(call_id, CALL_TOOL_NAME, arguments.clone()),
        }
    }
}

/// One external MCP tool offered to the model under its external name (`server__tool`), with
/// its own input schema: what [`crate::McpToolProvider::with_direct_tools`] gives a run instead
/// of the two meta tools. A policy that restricts tools by name (strict Plan-and-Execute's
/// per-step tools, an RBAC authorizer) then sees the external tools themselves.
pub struct McpDirectTool<C> {
    session: Arc<McpSession>,
    descriptor: Arc<McpToolDescriptor>,
    filter: Option<McpToolFilter<C>>,
    approval: Option<McpApprovalPolicy<C>>,
    spec: ToolSpec,
}

/// Whether `name` is a function name every OpenAI-compatible server accepts.
pub(crate) fn is_portable_tool_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl<C> McpDirectTool<C> {
    /// The tool `descriptor` of `session`; `None` when its external name is not a portable
    /// function name (letters, digits, `_`, `-`, at most 64 characters).
    pub fn new(
        session: Arc<McpSession>,
        descriptor: Arc<McpToolDescriptor>,
        filter: Option<McpToolFilter<C>>,
        approval: Option<McpApprovalPolicy<C>>,
    ) -> Option<Self> {
        if !is_portable_tool_name(&descriptor.external_name) {
            return None;
        }
        // A schema that does not compile is left to the server, as in mcp_call_tool.
        let parameters = if descriptor.has_valid_schema() && descriptor.input_schema.is_object() {
            descriptor.input_schema.clone()
        } else {
            json!({"type": "object"})
        };
        let spec = ToolSpec::new(
            descriptor.external_name.clone(),
            descriptor.description.clone(),
            parameters,
        );
        Some(McpDirectTool {
            session,
            descriptor,
            filter,
            approval,
            spec,
        })
    }

    fn description(&self, arguments: &Value) -> McpApprovalDescription {
        McpApprovalDescription {
            tool_name: self.descriptor.external_name.clone(),
            mcp_tool_name: self.descriptor.tool.clone(),
            mcp_server: self.descriptor.server.clone(),
            mcp_arguments: arguments.clone(),
        }
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for McpDirectTool<C> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// Visible to the filter, and still listed by its server (a tool the server removed is
    /// no longer offered once the change is listed).
    fn is_enabled(&self, ctx: &RunContext<C>) -> bool {
        visible(&self.filter, ctx, &self.descriptor)
            && self.session.registry().get(&self.descriptor.external_name).is_some()
    }

    async fn call(&self, ctx: &RunContext<C>, arguments: Value) -> Result<Value, ToolError> {
        if !visible(&self.filter, ctx, &self.descriptor) {
            return Err(unknown_tool(&self.descriptor.external_name).to_tool_error());
        }
        let _asking = self.session.elicitations.register(ctx);
        call_reporting(&self.session, ctx, &self.descriptor.external_name, arguments)
            .await
            .map_err(|e| e.to_tool_error())
    }

    fn needs_approval(&self, ctx: &RunContext<C>, arguments: &Value) -> bool {
        self.approval
            .as_ref()
            .is_some_and(|policy| policy(ctx, &self.description(arguments)))
    }

    fn approval_request(&self, call_id: &str, arguments: &Value) -> modu_core::ApprovalRequest {
        self.description(arguments).into_request(call_id)
    }
}

/// `mcp_list_resources`: the resources and resource templates of the run's MCP servers
/// ([`McpSession::list_resources`]).
pub struct McpListResourcesTool {
    session: Arc<McpSession>,
    spec: ToolSpec,
}

impl McpListResourcesTool {
    /// The listing tool over a session.
    pub fn new(session: Arc<McpSession>) -> Self {
        let spec = ToolSpec::new(
            LIST_RESOURCES_TOOL_NAME,
            "List the resources (documents, files, records) and resource templates of the connected \
             MCP servers. Read one with mcp_read_resource, by its server and uri (a template's uri \
             with its {placeholders} filled in).",
            json!({
                "type": "object",
                "properties": {
                    "server": {"type": "string", "description": "Only this server's resources (default: every server)."}
                }
            }),
        )
        .idempotent(true)
        .repair_safe(true);
        McpListResourcesTool { session, spec }
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for McpListResourcesTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _ctx: &RunContext<C>, arguments: Value) -> Result<Value, ToolError> {
        let server = arguments.get("server").and_then(Value::as_str);
        let listed = self
            .session
            .list_resources(server)
            .await
            .map_err(|e| e.to_tool_error())?;
        Ok(crate::output::cap_result(listed, self.session.default_max_result_bytes))
    }
}

/// `mcp_read_resource`: reads one resource of a run's MCP server by URI
/// ([`McpSession::read_resource`]).
pub struct McpReadResourceTool {
    session: Arc<McpSession>,
    spec: ToolSpec,
}

impl McpReadResourceTool {
    /// The reading tool over a session.
    pub fn new(session: Arc<McpSession>) -> Self {
        let spec = ToolSpec::new(
            READ_RESOURCE_TOOL_NAME,
            "Read a resource of a connected MCP server by its server and uri, as mcp_list_resources \
             lists them.",
            json!({
                "type": "object",
                "properties": {
                    "server": {"type": "string", "description": "The server, as mcp_list_resources names it."},
                    "uri": {"type": "string", "description": "The resource's uri (or a template's, filled in)."}
                },
                "required": ["server", "uri"]
            }),
        )
        .idempotent(true)
        .repair_safe(true);
        McpReadResourceTool { session, spec }
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for McpReadResourceTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _ctx: &RunContext<C>, arguments: Value) -> Result<Value, ToolError> {
        let (Some(server), Some(uri)) = (
            arguments.get("server").and_then(Value::as_str),
            arguments.get("uri").and_then(Value::as_str),
        ) else {
            return Err(ToolError::validation(
                "invalid_arguments",
                "server and uri are required, as mcp_list_resources returns them",
            ));
        };
        self.session
            .read_resource(server, uri)
            .await
            .map_err(|e| e.to_tool_error())
    }
}
