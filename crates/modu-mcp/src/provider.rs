//! [`McpToolProvider`]: the connector as a per-run tool provider for modu agents.

use std::sync::Arc;

use async_trait::async_trait;
use modu_core::{RunContext, Tool, ToolProvider, ToolProviderError, ToolProviderErrorKind, ToolSession};
use serde_json::Value;

use crate::client::McpConnector;
use crate::elicitation::McpElicitationHandler;
use crate::error::McpError;
use crate::registry::McpToolDescriptor;
use crate::resolver::{McpSelectionRequest, selection_from_metadata};
use crate::sampling::McpSampling;
use crate::session::{McpSession, McpSessionOptions};
use crate::signals::{McpProgress, McpProgressListener};
use crate::tools::{
    McpApprovalDescription, McpApprovalPolicy, McpCallTool, McpDirectTool, McpListResourcesTool, McpReadResourceTool,
    McpSearchTool, McpToolFilter,
};

type SelectionFn<C> = Arc<dyn Fn(&RunContext<C>) -> Option<Value> + Send + Sync>;

/// Attaches MCP servers to every run of an agent.
///
/// `open` reads the run's server selection (by default `metadata["mcp"]["servers"]` of the
/// run, see [`RunContext::metadata`]), resolves it with the connector's resolver, opens every
/// selected server concurrently and returns a session with exactly two tools,
/// `mcp_search_tools` and `mcp_call_tool` (none when no server is selected). The run loop
/// closes the session when the run ends, whatever the outcome, which closes every server.
///
/// # Results
///
/// A result reaches the model with the server's credentials replaced by `[redacted]` and cut
/// to the server's result cap (`max_result_bytes` in its configuration, else
/// [`McpToolProvider::with_max_result_bytes`], else
/// [`crate::config::DEFAULT_MAX_RESULT_BYTES`]) with the marker function tools get. An answer
/// the server sends that cannot be decoded (not UTF-8, nested too deep, over the 16 MiB
/// message limit) fails the call at once with
/// [`crate::InvocationFailure::UndecodableResponse`] instead of waiting for its timeout.
///
/// # Tool filter, caching and changes
///
/// Tools are listed when a run opens its servers, and every run lists afresh (rmcp's response
/// cache is disabled, so a stale list is never served). Within a run, a server that sends
/// `notifications/tools/list_changed` is listed again before the next search or call
/// ([`McpSession::refresh_tools`]): the next `mcp_search_tools` finds an added tool, and a
/// call to a removed one fails with [`crate::InvocationFailure::ToolRemoved`]. The filter is
/// applied at every search and every call with the current [`RunContext`]: it hides tools per
/// request without re-listing, hidden tools are neither returned (nor counted in `total`) by
/// search, and calling one fails as an unknown tool.
///
/// # Sampling, progress, resources
///
/// [`McpToolProvider::with_sampling`] serves servers' sampling requests with a model (see
/// [`crate::sampling`]; the usage is added to the run's). [`McpToolProvider::with_progress`]
/// hands every call's progress to a listener.
/// [`McpToolProvider::with_resource_tools`] adds `mcp_list_resources` and `mcp_read_resource`.
///
/// # Direct tools
///
/// [`McpToolProvider::with_direct_tools`] offers every discovered tool under its external name
/// instead of the two meta tools — for a handful of tools, or for policies that restrict tools
/// by name (strict Plan-and-Execute plans name them per step). Each request then carries every
/// visible tool's schema, so prefer the meta tools for large catalogs.
///
/// The run loop calls [`McpToolSession::refresh`] (as [`ToolSession::refresh`]) before each
/// model request and reads [`McpToolSession::tools`] again when it reports a change: a tool a
/// server adds during the run is offered as a direct tool from the next model request of that
/// run; a removed one stops being offered ([`Tool::is_enabled`]) once the change is listed.
pub struct McpToolProvider<C> {
    connector: Arc<McpConnector>,
    filter: Option<McpToolFilter<C>>,
    selection: Option<SelectionFn<C>>,
    approval: Option<McpApprovalPolicy<C>>,
    direct: bool,
    resources: bool,
    max_result_bytes: Option<usize>,
    sampling: Option<McpSampling>,
    progress: Option<McpProgressListener>,
    elicitation: Option<Arc<dyn McpElicitationHandler>>,
}

impl<C> McpToolProvider<C> {
    /// A provider over a shared connector.
    pub fn new(connector: Arc<McpConnector>) -> Self {
        McpToolProvider {
            connector,
            filter: None,
            selection: None,
            approval: None,
            direct: false,
            resources: false,
            max_result_bytes: None,
            sampling: None,
            progress: None,
            elicitation: None,
        }
    }

    /// Serves the servers' sampling requests (`sampling/createMessage`) with this model,
    /// policy and limits, per run; what they use is added to the run's usage.
    pub fn with_sampling(mut self, sampling: McpSampling) -> Self {
        self.sampling = Some(sampling);
        self
    }

    /// Answers the servers' form elicitations with `handler` while the call waits, instead of
    /// pausing the run for them (see [`crate::elicitation`]): for programs whose person is
    /// there while the run goes on.
    pub fn with_elicitation(mut self, handler: impl McpElicitationHandler + 'static) -> Self {
        self.elicitation = Some(Arc::new(handler));
        self
    }

    /// Passes each progress notification of an MCP call (with the run id and the tool call
    /// id) to `listener` as it arrives: keep it short.
    pub fn with_progress(mut self, listener: impl Fn(&McpProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(listener));
        self
    }

    /// Adds `mcp_list_resources` and `mcp_read_resource`, over the servers' resources and
    /// resource templates (not subject to the tool filter).
    pub fn with_resource_tools(mut self) -> Self {
        self.resources = true;
        self
    }

    /// Caps every MCP tool result at `bytes` as the model sees it (its text, or its JSON as
    /// text), with the same visible marker as function tools' `max_result_bytes`, for servers
    /// whose configuration sets no `max_result_bytes` of its own (that one wins). Without
    /// this, the cap is [`crate::config::DEFAULT_MAX_RESULT_BYTES`]. Applies to
    /// `mcp_call_tool` and to direct tools alike.
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = Some(bytes);
        self
    }

    /// Offers each discovered tool under its external name (`server__tool`) with its own schema,
    /// instead of `mcp_search_tools` / `mcp_call_tool` (see "Direct tools" above). Tools whose
    /// external name is not a portable function name (letters, digits, `_`, `-`, at most 64
    /// characters) are left out, with a warning in the log.
    pub fn with_direct_tools(mut self) -> Self {
        self.direct = true;
        self
    }

    /// Asks for a person's approval before the MCP calls `policy` picks (from the run context
    /// and the external tool). The run pauses with an approval request naming the external
    /// tool (`weather__forecast`) with `mcp_tool_name`, `mcp_server` and `mcp_arguments`.
    pub fn with_approval(
        mut self,
        policy: impl Fn(&RunContext<C>, &McpApprovalDescription) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.approval = Some(Arc::new(policy));
        self
    }

    /// Hides tools per request (see the type's documentation).
    pub fn with_filter(
        mut self,
        filter: impl Fn(&RunContext<C>, &McpToolDescriptor) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }

    /// Reads the selection (`mcp.servers` value) through `source` instead of the run's
    /// metadata; `None` means "omitted" (every configured server).
    pub fn with_selection_source(
        mut self,
        source: impl Fn(&RunContext<C>) -> Option<Value> + Send + Sync + 'static,
    ) -> Self {
        self.selection = Some(Arc::new(source));
        self
    }

    /// The connector.
    pub fn connector(&self) -> &Arc<McpConnector> {
        &self.connector
    }
}

fn provider_error(e: McpError) -> ToolProviderError {
    let kind = match &e {
        McpError::Configuration(_) => ToolProviderErrorKind::Configuration,
        McpError::Auth(_) => ToolProviderErrorKind::Auth,
        McpError::Transport(_) => ToolProviderErrorKind::Unavailable,
        McpError::ToolDiscovery(_) => ToolProviderErrorKind::Discovery,
        McpError::ToolInvocation(_) | McpError::Request(_) => ToolProviderErrorKind::Other,
    };
    ToolProviderError::new("mcp", kind, e.to_string()).with_source(e)
}

#[async_trait]
impl<C: Send + Sync + 'static> ToolProvider<C> for McpToolProvider<C> {
    fn name(&self) -> &str {
        "mcp"
    }

    async fn open(&self, ctx: &RunContext<C>) -> Result<Box<dyn ToolSession<C>>, ToolProviderError> {
        let from_source = self.selection.as_ref().map(|source| source(ctx));
        let selection = match &from_source {
            Some(value) => value.as_ref(),
            None => selection_from_metadata(ctx.metadata()).map_err(|e| provider_error(e.into()))?,
        };
        let request = McpSelectionRequest {
            selection,
            metadata: Some(ctx.metadata()),
            user: Some(ctx.user()),
            run_id: Some(ctx.run_id()),
        };
        let mut options = McpSessionOptions::default();
        if let Some(sampling) = &self.sampling {
            let run = ctx.clone();
            options = options
                .with_sampling(sampling.clone())
                .with_sampling_usage(move |usage| run.add_usage(usage));
        }
        options.progress = self.progress.clone();
        options.elicitation = self.elicitation.clone();
        let mut session = self
            .connector
            .open_with_options(&request, options)
            .await
            .map_err(provider_error)?;
        if let Some(bytes) = self.max_result_bytes {
            session = session.with_default_max_result_bytes(bytes);
        }
        let session = Arc::new(session);
        // Direct tools: no mcp_search_tools, no search index either. Otherwise the index is
        // built by the run's first search (a run that never searches never pays for it).
        let mut tools = if self.direct {
            McpToolSession::direct(session, self.filter.clone(), self.approval.clone())
        } else {
            McpToolSession::with_approval(session, self.filter.clone(), self.approval.clone())
        };
        if self.resources {
            tools = tools.with_resource_tools();
        }
        Ok(Box::new(tools))
    }
}

/// What direct tools are rebuilt with: the filter and the approval policy.
type DirectRecipe<C> = (Option<McpToolFilter<C>>, Option<McpApprovalPolicy<C>>);

/// The tools one run got from [`McpToolProvider`].
pub struct McpToolSession<C> {
    session: Arc<McpSession>,
    /// The meta tools, or the direct tools as last built.
    tools: std::sync::RwLock<Vec<Arc<dyn Tool<C>>>>,
    /// Direct tools: how they are rebuilt after a change.
    direct: Option<DirectRecipe<C>>,
    /// The session's tools version the direct tools were built from.
    built: std::sync::atomic::AtomicU64,
    resource_tools: Vec<Arc<dyn Tool<C>>>,
}

impl<C: Send + Sync + 'static> McpToolSession<C> {
    /// The meta tools over a session (none when it has no server).
    pub fn new(session: Arc<McpSession>, filter: Option<McpToolFilter<C>>) -> Self {
        Self::with_approval(session, filter, None)
    }

    /// The meta tools over a session, with an approval policy for `mcp_call_tool`.
    pub fn with_approval(
        session: Arc<McpSession>,
        filter: Option<McpToolFilter<C>>,
        approval: Option<McpApprovalPolicy<C>>,
    ) -> Self {
        let tools: Vec<Arc<dyn Tool<C>>> = if session.server_names().is_empty() {
            Vec::new()
        } else {
            vec![
                Arc::new(McpSearchTool::new(Arc::clone(&session), filter.clone())),
                Arc::new(McpCallTool::new(Arc::clone(&session), filter).with_approval(approval)),
            ]
        };
        McpToolSession {
            session,
            tools: std::sync::RwLock::new(tools),
            direct: None,
            built: std::sync::atomic::AtomicU64::new(0),
            resource_tools: Vec::new(),
        }
    }

    /// Adds `mcp_list_resources` and `mcp_read_resource` (none when the session has no
    /// server).
    pub fn with_resource_tools(mut self) -> Self {
        if !self.session.server_names().is_empty() {
            self.resource_tools = vec![
                Arc::new(McpListResourcesTool::new(Arc::clone(&self.session))),
                Arc::new(McpReadResourceTool::new(Arc::clone(&self.session))),
            ];
        }
        self
    }

    /// Every discovered tool of a session under its external name (see
    /// [`McpToolProvider::with_direct_tools`]).
    pub fn direct(
        session: Arc<McpSession>,
        filter: Option<McpToolFilter<C>>,
        approval: Option<McpApprovalPolicy<C>>,
    ) -> Self {
        let version = session.tools_version();
        let tools = direct_tools(&session, &filter, &approval);
        McpToolSession {
            session,
            tools: std::sync::RwLock::new(tools),
            direct: Some((filter, approval)),
            built: std::sync::atomic::AtomicU64::new(version),
            resource_tools: Vec::new(),
        }
    }

    /// Lists again the tools of servers that announced a change, and, for direct tools,
    /// rebuilds them; `true` when [`ToolSession::tools`] now returns a different list (the
    /// meta tools never change). The run loop calls it (as [`ToolSession::refresh`]) before each
    /// model request, so tools added during the run are offered.
    pub async fn refresh(&self) -> bool {
        self.session.refresh_tools().await;
        let Some((filter, approval)) = &self.direct else {
            return false;
        };
        let version = self.session.tools_version();
        if self.built.swap(version, std::sync::atomic::Ordering::AcqRel) == version {
            return false;
        }
        let tools = direct_tools(&self.session, filter, approval);
        *self.tools.write().unwrap_or_else(std::sync::PoisonError::into_inner) = tools;
        true
    }

    /// The underlying session.
    pub fn session(&self) -> &Arc<McpSession> {
        &self.session
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> ToolSession<C> for McpToolSession<C> {
    fn tools(&self) -> Vec<Arc<dyn Tool<C>>> {
        let mut tools = self
            .tools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        tools.extend(self.resource_tools.iter().cloned());
        tools
    }

    async fn refresh(&self) -> bool {
        McpToolSession::refresh(self).await
    }

    async fn close(self: Box<Self>) {
        self.session.close().await;
    }
}

/// Every tool of the session's current list under its external name.
fn direct_tools<C: Send + Sync + 'static>(
    session: &Arc<McpSession>,
    filter: &Option<McpToolFilter<C>>,
    approval: &Option<McpApprovalPolicy<C>>,
) -> Vec<Arc<dyn Tool<C>>> {
    let mut tools: Vec<Arc<dyn Tool<C>>> = Vec::new();
    for descriptor in session.registry().tools() {
        match McpDirectTool::new(
            Arc::clone(session),
            Arc::clone(descriptor),
            filter.clone(),
            approval.clone(),
        ) {
            Some(tool) => tools.push(Arc::new(tool)),
            None => tracing::warn!(
                tool = %descriptor.external_name,
                "MCP tool left out: its name is not a portable function name"
            ),
        }
    }
    tools
}
