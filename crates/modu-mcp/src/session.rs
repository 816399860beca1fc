//! [`McpSession`]: the servers one run uses, the tools they offer (kept current when a server
//! announces a change), and calls to those tools.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use futures::future::join_all;
use rmcp::model::{CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::{Map, Value, json};

use crate::client::ServerConnection;
use crate::config::DEFAULT_MAX_RESULT_BYTES;
use crate::describe::{self, Cause, Described};
use crate::error::{InvocationFailure, McpAuthError, McpError, McpToolInvocationError, redact};
use crate::listing::{add_first, add_listed, all_tools};
use crate::output::{cap_error, removed_tool, tool_output, unknown_tool};
use crate::registry::{McpToolDescriptor, McpToolRegistry};
use crate::sampling::{McpSamplingUsage, Sampler};
pub use crate::session_options::McpSessionOptions;
use crate::signals::{McpProgress, McpProgressListener, ProgressRoute};

/// Who a call is made for: what its progress reports carry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CallScope<'a> {
    pub(crate) run_id: Option<&'a str>,
    pub(crate) call_id: Option<&'a str>,
}

/// The servers one run uses, and the tools they offer.
///
/// Close it with [`McpSession::close`] when the run ends ([`crate::McpToolProvider`] does);
/// dropping it without closing still stops the connections and kills stdio servers, but
/// without waiting for them.
pub struct McpSession {
    pub(crate) servers: Vec<Arc<ServerConnection>>,
    pub(crate) by_name: HashMap<String, usize>,
    /// The current tools: replaced as a whole when a server's list changes.
    registry: RwLock<Arc<McpToolRegistry>>,
    /// How often the tools changed since the session opened.
    tools_version: AtomicU64,
    /// Tools a server removed during the session (and did not add back): external name →
    /// server.
    removed: Mutex<HashMap<String, String>>,
    /// One listing at a time.
    refreshing: tokio::sync::Mutex<()>,
    pub(crate) default_max_result_bytes: usize,
    sampler: Option<Arc<Sampler>>,
    progress: Option<McpProgressListener>,
    /// The run calls in flight that a server's elicitation may ask through.
    pub(crate) elicitations: Arc<crate::elicitation::Elicitations>,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("servers", &self.server_names())
            .field("tools", &self.registry().len())
            .finish()
    }
}

impl McpSession {
    pub(crate) fn new(
        opened: Vec<(ServerConnection, Vec<rmcp::model::Tool>)>,
        sampler: Option<Arc<Sampler>>,
        progress: Option<McpProgressListener>,
    ) -> Self {
        let mut registry = McpToolRegistry::new();
        let mut servers = Vec::with_capacity(opened.len());
        let mut by_name = HashMap::new();
        for (connection, tools) in opened {
            add_listed(&mut registry, &connection.name, &tools);
            by_name.insert(connection.name.clone(), servers.len());
            servers.push(Arc::new(connection));
        }
        let mut session = McpSession::from_parts(registry, sampler, progress);
        session.servers = servers;
        session.by_name = by_name;
        session
    }

    fn from_parts(
        registry: McpToolRegistry,
        sampler: Option<Arc<Sampler>>,
        progress: Option<McpProgressListener>,
    ) -> Self {
        McpSession {
            servers: Vec::new(),
            by_name: HashMap::new(),
            registry: RwLock::new(Arc::new(registry)),
            tools_version: AtomicU64::new(0),
            removed: Mutex::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(()),
            default_max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            sampler,
            progress,
            elicitations: Arc::default(),
        }
    }

    /// A session with no servers (what `mcp.servers: []` opens).
    pub fn empty() -> Self {
        McpSession::new(Vec::new(), None, None)
    }

    /// A session with no servers over a given registry: search works, calls fail (for
    /// benchmarks and tests of search and filters). Its search index is built here.
    pub fn from_registry(registry: McpToolRegistry) -> Self {
        registry.build_index();
        McpSession::from_parts(registry, None, None)
    }

    /// Sets the result cap for servers whose configuration sets none (default
    /// [`DEFAULT_MAX_RESULT_BYTES`]; zero is taken as one byte).
    pub fn with_default_max_result_bytes(mut self, bytes: usize) -> Self {
        self.default_max_result_bytes = bytes.max(1);
        self
    }

    /// The result cap of a server's tools: its configured `max_result_bytes`, else the
    /// session's default. `None` for a server not in the session.
    pub fn max_result_bytes(&self, server: &str) -> Option<usize> {
        let connection = &self.servers[*self.by_name.get(server)?];
        Some(connection.max_result_bytes.unwrap_or(self.default_max_result_bytes))
    }

    /// The names of the open servers, in selection order.
    pub fn server_names(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.name.as_str()).collect()
    }

    /// The MCP protocol revision a server answered `initialize` with (the client asks for
    /// [`crate::PROTOCOL_VERSION`]; a server may choose an older one). `None` for a server not
    /// in the session.
    pub fn protocol_version(&self, server: &str) -> Option<String> {
        let connection = &self.servers[*self.by_name.get(server)?];
        connection
            .peer
            .peer_info()
            .map(|info| info.protocol_version.to_string())
    }

    /// The process ids of the stdio servers.
    pub fn child_pids(&self) -> Vec<u32> {
        self.servers.iter().filter_map(|s| s.child_pid).collect()
    }

    /// The tools as last listed: a snapshot (a later change replaces the registry, it does
    /// not change this one). [`McpSession::refresh_tools`] brings it up to date.
    pub fn registry(&self) -> Arc<McpToolRegistry> {
        Arc::clone(&self.registry.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// How often the tool list changed since the session opened (0 until a server announces
    /// a change and it is listed again): a direct-tools caller re-reads its tools when it grows.
    pub fn tools_version(&self) -> u64 {
        self.tools_version.load(Ordering::Acquire)
    }

    /// What this session's sampling requests used (all zero without sampling).
    pub fn sampling_usage(&self) -> McpSamplingUsage {
        self.sampler.as_ref().map(|s| s.usage()).unwrap_or_default()
    }

    /// Whether some server announced a tool change (`notifications/tools/list_changed`) that
    /// is not listed yet.
    pub fn tools_stale(&self) -> bool {
        self.servers.iter().any(|s| is_stale(s))
    }

    /// Lists again the tools of every server that announced a change since its last listing,
    /// and replaces the registry; `true` when it did. A tool a server no longer lists is
    /// refused from then on with [`InvocationFailure::ToolRemoved`]. A listing that fails or
    /// outlives the server's call timeout keeps that server's old tools (logged), until its
    /// next announcement. Cheap when nothing changed (one atomic read per server).
    ///
    /// The search tool and every call run this first, so the next `mcp_search_tools` after a
    /// change finds an added tool and a call to a removed one is refused.
    pub async fn refresh_tools(&self) -> bool {
        if !self.tools_stale() {
            return false;
        }
        let _one_at_a_time = self.refreshing.lock().await;
        let stale: Vec<&Arc<ServerConnection>> = self.servers.iter().filter(|s| is_stale(s)).collect();
        let listings = join_all(stale.into_iter().map(|server| async move {
            let generation = server.signals.tools_generation();
            let listed = tokio::time::timeout(server.call_timeout, all_tools(&server.name, &server.peer)).await;
            // Listed (or given up on) up to this generation: a failure is not retried at every call.
            server.tools_listed.store(generation, Ordering::Release);
            match listed {
                Ok(Ok(tools)) => Some((server.name.clone(), tools)),
                Ok(Err(e)) => {
                    let message = redact(&describe::service(&e).message, &server.with_tokens(&server.secrets));
                    tracing::warn!(server = %server.name, error = %message, "listing the changed MCP tools failed");
                    None
                }
                Err(_) => {
                    tracing::warn!(server = %server.name, "listing the changed MCP tools timed out");
                    None
                }
            }
        }))
        .await;
        let fresh: HashMap<String, Vec<rmcp::model::Tool>> = listings.into_iter().flatten().collect();
        if fresh.is_empty() {
            return false;
        }
        let old = self.registry();
        let mut next = McpToolRegistry::new();
        let mut gone = Vec::new();
        for server in &self.servers {
            let previous = old.tools().iter().filter(|d| d.server == server.name);
            match fresh.get(&server.name) {
                Some(tools) => {
                    let names: HashSet<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
                    gone.extend(
                        previous
                            .filter(|d| !names.contains(d.tool.as_str()))
                            .map(|d| (d.external_name.clone(), d.server.clone())),
                    );
                    add_listed(&mut next, &server.name, tools);
                }
                None => previous.for_each(|d| add_first(&mut next, Arc::clone(d))),
            }
        }
        tracing::debug!(tools = next.len(), removed = gone.len(), "MCP tools listed again");
        {
            let mut removed = self.removed.lock().unwrap_or_else(PoisonError::into_inner);
            removed.extend(gone);
            removed.retain(|name, _| next.get(name).is_none());
        }
        *self.registry.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
        self.tools_version.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// The error for a call to a tool the registry does not have: removed during the run, or
    /// never there.
    pub(crate) fn missing_tool(&self, external_name: &str) -> McpError {
        let removed = self
            .removed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(external_name)
            .cloned();
        match removed {
            Some(server) => removed_tool(external_name, &server),
            None => unknown_tool(external_name),
        }
    }

    /// The `mcp_search_tools` result: `{tools: [{name, description, input_schema}], count,
    /// total}`, hiding tools `visible` rejects. Searches the current snapshot: run
    /// [`McpSession::refresh_tools`] first to see announced changes.
    pub fn search(&self, query: &str, limit: usize, visible: impl Fn(&McpToolDescriptor) -> bool) -> Value {
        let registry = self.registry();
        let (hits, total) = registry.search(query, limit, visible);
        let tools: Vec<Value> = hits.iter().map(|t| t.search_entry()).collect();
        json!({ "count": tools.len(), "total": total, "tools": tools })
    }

    /// Calls a tool by its external name (`<server>__<tool>`): validates the arguments against
    /// its input schema, sends `tools/call` with the server's call timeout and normalises the
    /// result (`structuredContent` as is, otherwise the text contents: one text as a string,
    /// several as an array; non-text blocks as their JSON). A plain value the server's SDK
    /// wrapped as `structuredContent: {"result": …}` (FastMCP, the official Python SDK) comes
    /// back as that value, when the tool declares no output schema or only the wrapper's. A
    /// `structuredContent` that does not fit the output schema the tool declares, or a
    /// non-error result without one from a tool that declares an output schema, fails the
    /// call ([`InvocationFailure::InvalidOutput`], naming the tool and what does not fit).
    ///
    /// The result is what the model may see: the server's credentials (bearer token, OAuth
    /// tokens and client secret, header values, environment values under secret-looking
    /// names) are replaced by `[redacted]` in every string, and a result whose text (a string
    /// as is, other JSON serialised) is longer than the server's result cap
    /// ([`McpSession::max_result_bytes`]) comes back as that text cut with the marker of
    /// [`modu_core::tool::truncate_result`]. An answer that cannot be decoded fails the call
    /// as soon as it arrives ([`InvocationFailure::UndecodableResponse`]).
    ///
    /// Announced tool changes are listed first ([`McpSession::refresh_tools`]). With a progress
    /// listener ([`McpSessionOptions::with_progress`]) the call's progress goes there.
    pub async fn call_tool(&self, external_name: &str, arguments: Value) -> Result<Value, McpError> {
        self.call_scoped(external_name, arguments, CallScope::default(), self.progress.as_ref())
            .await
    }

    /// [`McpSession::call_tool`] with its progress going to `listener` (instead of the
    /// session's listener) as it arrives.
    pub async fn call_tool_with_progress(
        &self,
        external_name: &str,
        arguments: Value,
        listener: impl Fn(&McpProgress) + Send + Sync + 'static,
    ) -> Result<Value, McpError> {
        let listener: McpProgressListener = Arc::new(listener);
        self.call_scoped(external_name, arguments, CallScope::default(), Some(&listener))
            .await
    }

    /// A call made for a run's tool call: its progress carries the run and call ids, and goes
    /// to `also` as well as to the session's listener.
    pub(crate) async fn call_in(
        &self,
        external_name: &str,
        arguments: Value,
        scope: CallScope<'_>,
        also: McpProgressListener,
    ) -> Result<Value, McpError> {
        let listener: McpProgressListener = match self.progress.clone() {
            Some(session) => Arc::new(move |p: &McpProgress| (session(p), also(p)).1),
            None => also,
        };
        self.call_scoped(external_name, arguments, scope, Some(&listener)).await
    }

    async fn call_scoped(
        &self,
        external_name: &str,
        arguments: Value,
        scope: CallScope<'_>,
        listener: Option<&McpProgressListener>,
    ) -> Result<Value, McpError> {
        self.refresh_tools().await;
        let Some(descriptor) = self.registry().get(external_name).cloned() else {
            return Err(self.missing_tool(external_name));
        };
        let invocation = |failure: InvocationFailure, message: String| {
            McpError::ToolInvocation(McpToolInvocationError {
                server: Some(descriptor.server.clone()),
                tool: descriptor.external_name.clone(),
                failure,
                message,
            })
        };
        let arguments = match arguments {
            Value::Null => Map::new(),
            Value::Object(map) => map,
            _ => {
                return Err(invocation(
                    InvocationFailure::InvalidArguments,
                    "arguments must be a JSON object".into(),
                ));
            }
        };
        let as_value = Value::Object(arguments);
        if let Err(problems) = descriptor.validate_arguments(&as_value) {
            return Err(invocation(
                InvocationFailure::InvalidArguments,
                format!("the arguments do not fit the input schema of {external_name}: {problems}"),
            ));
        }
        let Value::Object(arguments) = as_value else {
            return Err(invocation(
                InvocationFailure::InvalidArguments,
                "arguments must be a JSON object".into(),
            ));
        };
        let Some(server) = self.by_name.get(&descriptor.server).map(|&i| &self.servers[i]) else {
            return Err(unknown_tool(external_name));
        };
        let params = CallToolRequestParams::new(descriptor.tool.clone()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let service_error = |e: ServiceError| {
            if let ServiceError::TransportSend(sent) = &e
                && let Some(problem) = http_decode_failure(sent)
            {
                let message = format!("{external_name} failed: the server's answer {problem}");
                return invocation(
                    InvocationFailure::UndecodableResponse,
                    redact(&message, &server.with_tokens(&server.secrets)),
                );
            }
            let (failure, message) = match &e {
                ServiceError::Timeout { timeout } => (
                    InvocationFailure::Timeout,
                    format!("{external_name} did not answer within {:.1}s", timeout.as_secs_f64()),
                ),
                ServiceError::McpError(data) => (
                    InvocationFailure::ProtocolError,
                    format!("the server answered with error {}: {}", data.code.0, data.message),
                ),
                ServiceError::UnexpectedResponse => (
                    InvocationFailure::UnexpectedResponse,
                    "the server's answer is not a tool result".to_owned(),
                ),
                _ => {
                    let Described { cause, message } = describe::service(&e);
                    if cause == Cause::Auth {
                        return McpError::Auth(McpAuthError {
                            server: server.name.clone(),
                            message: redact(&message, &server.with_tokens(&server.secrets)),
                        });
                    }
                    (
                        InvocationFailure::Transport,
                        format!("the connection to the MCP server {} failed: {message}", server.name),
                    )
                }
            };
            invocation(failure, redact(&message, &server.with_tokens(&server.secrets)))
        };
        let handle = server
            .peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(server.call_timeout))
            .await
            .map_err(service_error)?;
        let request_id = handle.id.clone();
        // rmcp gives every request a progress token; its progress goes to the listener until
        // the call ends (the guard drops).
        let _progress = listener.map(|listener| {
            server.signals.subscribe(
                &handle.progress_token,
                ProgressRoute {
                    template: McpProgress {
                        server: server.name.clone(),
                        tool: descriptor.external_name.clone(),
                        run_id: scope.run_id.map(str::to_owned),
                        call_id: scope.call_id.map(str::to_owned),
                        progress: 0.0,
                        total: None,
                        message: None,
                    },
                    listener: Arc::clone(listener),
                },
            )
        });
        // Dropped before the answer (the run was cancelled, or its tool timeout fired): tell the
        // server, which rmcp does only for its own timeout.
        let mut abandoned = CancelOnDrop {
            peer: server.peer.clone(),
            request_id: Some(request_id.clone()),
        };
        let response = handle.await_response().await;
        abandoned.request_id = None;
        // An error the stdio transport made up for an answer it could not decode.
        if let Err(ServiceError::McpError(_)) = &response
            && let Some(failure) = server.decode_failures.take(&request_id)
        {
            let (kind, message) = if failure.session_broken {
                (
                    InvocationFailure::Transport,
                    format!(
                        "the connection to the MCP server {} failed: {}",
                        server.name, failure.message
                    ),
                )
            } else {
                (
                    InvocationFailure::UndecodableResponse,
                    format!("{external_name} failed: {}", failure.message),
                )
            };
            return Err(invocation(kind, redact(&message, &server.with_tokens(&server.secrets))));
        }
        let response = response.map_err(service_error)?;
        let result = match response {
            ServerResult::CallToolResult(result) => result,
            ServerResult::EmptyResult(_) => CallToolResult::success(Vec::new()),
            _ => return Err(service_error(ServiceError::UnexpectedResponse)),
        };
        let error_secrets = server.with_tokens(&server.secrets);
        let result_secrets = server.with_tokens(&server.credentials);
        // A tool that declares an output schema MUST return structured results that fit it
        // (MCP 2025-06-18); a result without any is as wrong as one that does not fit.
        let misfit = match (&result.structured_content, &descriptor.output_schema) {
            _ if result.is_error == Some(true) => None,
            (Some(structured), _) => descriptor.validate_output(structured).err(),
            (None, Some(_)) => {
                Some("the tool declares an output schema but the result has no structuredContent".to_owned())
            }
            (None, None) => None,
        };
        if let Some(problems) = misfit {
            let message = format!(
                "the result of {external_name} does not fit the output schema the tool declares (the call ran: \
                     its effects, if any, happened; do not repeat it to get a result): {problems}"
            );
            return Err(invocation(
                InvocationFailure::InvalidOutput,
                redact(&cap_error(message), &error_secrets),
            ));
        }
        let max = server.max_result_bytes.unwrap_or(self.default_max_result_bytes);
        tool_output(
            result,
            descriptor.output_schema.as_ref(),
            &error_secrets,
            &result_secrets,
            max,
        )
        .map_err(|message| invocation(InvocationFailure::ToolError, message))
    }

    /// Closes every server concurrently (stdio servers: stdin closed, then SIGTERM, then kill,
    /// for the whole process group). Calls after closing fail with a transport error.
    pub async fn close(&self) {
        join_all(self.servers.iter().map(|s| s.close())).await;
    }
}

/// What was wrong with a streamable-HTTP answer rmcp could not decode (a JSON body that is not
/// a JSON-RPC message, or one over its size limit), worded like the stdio transport's
/// failures; `None` for other transport failures. (An SSE event that cannot be decoded is
/// dropped by rmcp; the request then fails when the stream ends, as a transport error.)
fn http_decode_failure(error: &rmcp::transport::DynamicTransportError) -> Option<String> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    match error.error.downcast_ref::<StreamableHttpError<reqwest::Error>>()? {
        StreamableHttpError::ResponseBodyTooLarge { max_size } => Some(format!(
            "is larger than the {} MiB message limit",
            max_size / (1024 * 1024)
        )),
        StreamableHttpError::UnexpectedServerResponse(message) => {
            let detail = message.strip_prefix("could not parse JSON response as ServerJsonRpcMessage: ")?;
            // `<serde error> at line L column C: <body>`: keep the error, never the body.
            let reason = detail.split(" at line ").next().unwrap_or_default();
            Some(match reason {
                "invalid unicode code point" => "is not valid UTF-8".to_owned(),
                "recursion limit exceeded" => "is nested more than 128 levels deep".to_owned(),
                other => format!(
                    "is not a valid JSON-RPC message ({})",
                    other.chars().take(120).collect::<String>()
                ),
            })
        }
        _ => None,
    }
}

/// Sends `notifications/cancelled` for a request whose caller stopped waiting (the call's
/// future was dropped), unless disarmed (`request_id` taken) once the answer arrived.
struct CancelOnDrop {
    peer: rmcp::Peer<rmcp::RoleClient>,
    request_id: Option<rmcp::model::RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(request_id) = self.request_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let params = rmcp::model::CancelledNotificationParam::new(
                Some(request_id),
                Some("the client stopped waiting for this call".to_owned()),
            );
            if let Err(e) = peer.notify_cancelled(params).await {
                // Described, not displayed: the HTTP client's error names the URL, which may
                // carry a secret (`?api_key=...`).
                let error = describe::service(&e).message;
                tracing::debug!(%error, "sending notifications/cancelled failed");
            }
        });
    }
}

fn is_stale(server: &ServerConnection) -> bool {
    server.signals.tools_generation() != server.tools_listed.load(Ordering::Acquire)
}
