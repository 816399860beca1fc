//! [`McpConnector`] opens a run's servers; [`McpSession`] holds them, the discovered tools,
//! and performs calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::join_all;
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ClientRequest,
    ContentBlock, Implementation, ServerResult,
};
use rmcp::service::{ClientCacheConfig, ClientInitializeError, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransport, StreamableHttpClientTransportConfig};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use crate::auth::{OAuthHttpClient, OAuthTokenSource, secret_from_env};
use crate::config::{
    DEFAULT_MAX_RESULT_BYTES, McpConfig, McpServerConfig, McpTransport, OAuthClientCredentialsConfig, validate_all,
};
use crate::describe::{self, Cause, Described};
use crate::error::{
    InvocationFailure, McpAuthError, McpError, McpServerConfigurationError, McpToolDiscoveryError,
    McpToolInvocationError, McpTransportError, redact, redact_value,
};
use crate::registry::{McpToolDescriptor, McpToolRegistry};
use crate::resolver::{DefaultServerResolver, McpRuntimeServerResolver, McpSelectionRequest};
use crate::stdio::{DecodeFailures, ExitStatusSlot, StderrTail, StdioTransport};

/// The most a tool's error text may take in the message the model sees.
pub(crate) const MAX_ERROR_TEXT: usize = 4000;

/// The client side of every connection: announces itself as `modu-mcp`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModuClientHandler;

impl ClientHandler for ModuClientHandler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("modu-mcp", env!("CARGO_PKG_VERSION")),
        )
    }
}

type Service = RunningService<RoleClient, ModuClientHandler>;

/// Opens MCP servers for runs. Build one per application and share it (`Arc`): it holds the
/// configuration, the pooled HTTP client, the resolver and the OAuth token cache.
pub struct McpConnector {
    config: McpConfig,
    http: reqwest::Client,
    resolver: Arc<dyn McpRuntimeServerResolver>,
    oauth: Mutex<HashMap<String, Arc<OAuthTokenSource>>>,
}

impl std::fmt::Debug for McpConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl McpConnector {
    /// A connector for a validated configuration, with the default resolver (inline stdio
    /// servers refused) and a pooled HTTP client.
    pub fn new(config: McpConfig) -> Result<Self, McpServerConfigurationError> {
        config.validate()?;
        let http = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| McpServerConfigurationError::new(None, format!("the HTTP client could not be built: {e}")))?;
        Ok(McpConnector {
            config,
            http,
            resolver: Arc::new(DefaultServerResolver::new()),
            oauth: Mutex::new(HashMap::new()),
        })
    }

    /// A connector configured from `MODU_MCP__SERVERS` and `MODU_MCP__CONNECT_TIMEOUT_SECONDS`.
    pub fn from_env() -> Result<Self, McpServerConfigurationError> {
        Self::new(McpConfig::from_env()?)
    }

    /// Uses this HTTP client (share one pooled client across the application).
    pub fn with_http_client(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// Uses this resolver instead of the default rules.
    pub fn with_resolver(mut self, resolver: Arc<dyn McpRuntimeServerResolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Keeps the default rules but accepts (or refuses) inline stdio servers.
    pub fn allow_inline_stdio(self, yes: bool) -> Self {
        self.with_resolver(Arc::new(DefaultServerResolver::new().allow_inline_stdio(yes)))
    }

    /// The configuration.
    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// Opens the servers a selection names (`None`: every configured server) — the value of
    /// a run's `mcp.servers`.
    pub async fn open_session(&self, selection: Option<&Value>) -> Result<McpSession, McpError> {
        self.open_with(&McpSelectionRequest::new(selection)).await
    }

    /// Resolves the servers for a run and opens them.
    pub async fn open_with(&self, request: &McpSelectionRequest<'_>) -> Result<McpSession, McpError> {
        let servers = self.resolver.resolve(&self.config, request).await?;
        self.open_servers(servers).await
    }

    /// Opens these servers concurrently, each within the connect timeout (spawn or connect,
    /// `initialize`, and `tools/list` through every page). If one fails, the others are
    /// closed and the first failure is returned.
    pub async fn open_servers(&self, servers: Vec<McpServerConfig>) -> Result<McpSession, McpError> {
        validate_all(&servers)?;
        let timeout = self.config.connect_timeout();
        let results = join_all(servers.into_iter().map(|server| async move {
            let name = server.name.clone();
            match tokio::time::timeout(timeout, self.open_server(server)).await {
                Ok(result) => result,
                Err(_) => Err(McpError::Transport(McpTransportError {
                    server: name,
                    message: format!(
                        "did not connect and list its tools within {:.1}s",
                        timeout.as_secs_f64()
                    ),
                })),
            }
        }))
        .await;
        let mut opened = Vec::new();
        let mut first_error = None;
        for result in results {
            match result {
                Ok(connection) => opened.push(connection),
                Err(e) => {
                    tracing::warn!(server = e.server().unwrap_or(""), error = %e, "MCP server failed to open");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            join_all(opened.into_iter().map(|(c, _)| async move { c.close().await })).await;
            return Err(e);
        }
        Ok(McpSession::new(opened))
    }

    fn token_source(&self, oauth: &OAuthClientCredentialsConfig) -> Arc<OAuthTokenSource> {
        let key = format!(
            "{}\u{1}{}\u{1}{}\u{1}{}",
            oauth.token_url,
            oauth.client_id,
            oauth.client_secret_env,
            oauth.scopes.join(" ")
        );
        let mut map = self.oauth.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            map.entry(key)
                .or_insert_with(|| Arc::new(OAuthTokenSource::new(oauth.clone(), self.http.clone()))),
        )
    }

    async fn open_server(
        &self,
        config: McpServerConfig,
    ) -> Result<(ServerConnection, Vec<rmcp::model::Tool>), McpError> {
        let name = config.name.clone();
        let mut secrets = config.inline_secrets();
        let mut credentials = config.inline_credentials();
        let decode_failures = Arc::new(DecodeFailures::default());
        let (service, child_pid, oauth) = match config.transport {
            McpTransport::Stdio => {
                let (service, pid) = self.spawn_stdio(&config, &secrets, &decode_failures).await?;
                (service, pid, None)
            }
            McpTransport::StreamableHttp => {
                let (service, oauth) = self.connect_http(&config, &mut secrets, &mut credentials).await?;
                (service, None, oauth)
            }
        };
        let peer = service.peer().clone();
        peer.set_response_cache_config(ClientCacheConfig::disabled()).await;
        let tools = match peer.list_all_tools().await {
            Ok(tools) => tools,
            Err(e) => {
                let _ = service.cancel().await;
                let Described { cause, message } = describe::service(&e);
                let message = redact(&message, &secrets);
                return Err(match cause {
                    Cause::Auth => McpError::Auth(McpAuthError { server: name, message }),
                    Cause::Other => McpError::ToolDiscovery(McpToolDiscoveryError {
                        server: name,
                        message: format!("tools/list failed: {message}"),
                    }),
                });
            }
        };
        tracing::debug!(server = %name, tools = tools.len(), "MCP server opened");
        let connection = ServerConnection {
            name,
            call_timeout: config.call_timeout(),
            max_result_bytes: config.max_result_bytes,
            peer,
            service: Mutex::new(Some(service)),
            secrets,
            credentials,
            oauth,
            decode_failures,
            child_pid,
        };
        Ok((connection, tools))
    }

    async fn spawn_stdio(
        &self,
        config: &McpServerConfig,
        secrets: &[String],
        decode_failures: &Arc<DecodeFailures>,
    ) -> Result<(Service, Option<u32>), McpError> {
        let transport_error = |message: String| {
            McpError::Transport(McpTransportError {
                server: config.name.clone(),
                message: redact(&message, secrets),
            })
        };
        let command = config.command.as_deref().unwrap_or_default();
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(&config.args).envs(&config.env).kill_on_drop(true);
        let mut wrapped = CommandWrap::from(cmd);
        // Its own process group: closing the session also ends the server's own children.
        wrapped.wrap(ProcessGroup::leader());
        let exit = ExitStatusSlot::default();
        let (transport, pid, stderr) =
            StdioTransport::spawn(wrapped, &config.name, Arc::clone(decode_failures), Arc::clone(&exit))
                .map_err(|e| transport_error(format!("could not start {command:?}: {e}")))?;
        let tail = Arc::new(StderrTail::default());
        let reader = stderr.map(|stderr| {
            let server = config.name.clone();
            let secrets = secrets.to_vec();
            let tail = Arc::clone(&tail);
            // Read to the end whatever the server writes (lines not in UTF-8, very long lines),
            // so it never blocks on a full pipe.
            tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(stderr);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match (&mut reader).take(8192).read_until(b'\n', &mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = redact(String::from_utf8_lossy(&buf).trim_end(), &secrets);
                            tracing::debug!(target: "modu_mcp::stderr", server = %server, "{line}");
                            tail.push(&line);
                        }
                    }
                }
            })
        });
        match ModuClientHandler.serve(transport).await {
            Ok(service) => Ok((service, pid)),
            Err(e) => {
                // An error the transport made up (the server's output ended) is not the server's.
                let made_up = matches!(e, ClientInitializeError::JsonRpcError(_))
                    .then(|| decode_failures.take_any())
                    .flatten();
                // The transport is dropped, so the server is killed and its stderr ends.
                if let Some(reader) = reader {
                    let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
                }
                let exited = *exit.lock().unwrap_or_else(PoisonError::into_inner);
                let reason = match (exited, made_up) {
                    // It exited by itself: that is the news, whatever the write or read saw.
                    (Some(status), _) => format!("the server exited before answering it ({status})"),
                    (None, Some(failure)) => failure.message,
                    (None, None) => describe::initialize(&e).message,
                };
                let mut message = format!("initialize failed: {reason}");
                if let Some(text) = tail.text() {
                    message.push_str("; the last lines of its stderr:\n");
                    message.push_str(&text);
                }
                Err(transport_error(message))
            }
        }
    }

    /// Connects to a streamable-HTTP server; the credentials it finds (a bearer token from the
    /// environment, the OAuth client secret and first token) are added to both lists.
    async fn connect_http(
        &self,
        config: &McpServerConfig,
        secrets: &mut Vec<String>,
        credentials: &mut Vec<String>,
    ) -> Result<(Service, Option<Arc<OAuthTokenSource>>), McpError> {
        let name = config.name.as_str();
        let url = config.url.as_deref().unwrap_or_default();
        let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url);
        let auth = config.auth.clone().unwrap_or_default();
        let mut headers = HashMap::new();
        for (key, value) in &auth.headers {
            let header = HeaderName::from_bytes(key.as_bytes());
            let value = HeaderValue::from_str(value);
            match (header, value) {
                (Ok(h), Ok(v)) => {
                    headers.insert(h, v);
                }
                _ => {
                    return Err(McpServerConfigurationError::new(
                        Some(name),
                        format!("auth.headers[{key:?}] is not a valid header"),
                    )
                    .into());
                }
            }
        }
        transport_config = transport_config.custom_headers(headers);
        let bearer = match (&auth.bearer_token, &auth.bearer_token_env) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(var)) => Some(secret_from_env(name, var, "bearer token")?),
            (None, None) => None,
        };
        let mut found = |secret: String| {
            secrets.push(secret.clone());
            credentials.push(secret);
        };
        if let Some(token) = bearer {
            found(token.clone());
            transport_config = transport_config.auth_header(token);
        }
        let (result, oauth_source) = if let Some(oauth) = &auth.oauth_client_credentials {
            if let Ok(secret) = std::env::var(&oauth.client_secret_env) {
                found(secret);
            }
            let tokens = self.token_source(oauth);
            // Fetch before connecting, so token endpoint failures surface as auth errors.
            let token = tokens.token(name).await?;
            found(token);
            let client = OAuthHttpClient {
                inner: self.http.clone(),
                tokens: Arc::clone(&tokens),
                server: Arc::from(name),
            };
            let result = ModuClientHandler
                .serve(StreamableHttpClientTransport::with_client(client, transport_config))
                .await;
            (result, Some(tokens))
        } else {
            let result = ModuClientHandler
                .serve(StreamableHttpClientTransport::with_client(
                    self.http.clone(),
                    transport_config,
                ))
                .await;
            (result, None)
        };
        match result {
            Ok(service) => Ok((service, oauth_source)),
            Err(e) => Err(init_error(name, &e, secrets)),
        }
    }
}

/// A failed `initialize` over streamable HTTP: an auth error when the server refused the
/// credentials (a 401 or 403, with a `WWW-Authenticate` challenge or without), else a
/// transport error.
fn init_error(server: &str, e: &ClientInitializeError, secrets: &[String]) -> McpError {
    let described = describe::initialize(e);
    if described.cause == Cause::Auth || e.is_authorization_required() {
        let message = if described.cause == Cause::Auth {
            described.message
        } else {
            "the server requires authorization (HTTP 401)".to_owned()
        };
        return McpError::Auth(McpAuthError {
            server: server.to_owned(),
            message: redact(&message, secrets),
        });
    }
    McpError::Transport(McpTransportError {
        server: server.to_owned(),
        message: redact(&format!("initialize failed: {}", described.message), secrets),
    })
}

/// One open server of a session.
struct ServerConnection {
    name: String,
    call_timeout: Duration,
    /// The server's own result cap, when its configuration sets one.
    max_result_bytes: Option<usize>,
    peer: Peer<RoleClient>,
    service: Mutex<Option<Service>>,
    /// Every secret value of the configuration: redacted from errors and logs.
    secrets: Vec<String>,
    /// The credentials: redacted from successful results too.
    credentials: Vec<String>,
    /// Where OAuth tokens come from (their latest values are credentials too).
    oauth: Option<Arc<OAuthTokenSource>>,
    /// The calls the stdio transport failed itself (undecodable answers, broken session).
    decode_failures: Arc<DecodeFailures>,
    child_pid: Option<u32>,
}

impl ServerConnection {
    /// `base` plus the OAuth tokens handed out so far.
    fn with_tokens(&self, base: &[String]) -> Vec<String> {
        let mut out = base.to_vec();
        if let Some(oauth) = &self.oauth {
            out.extend(oauth.issued_tokens());
        }
        out
    }

    async fn close(&self) {
        let service = self.service.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(service) = service
            && let Err(e) = service.cancel().await
        {
            tracing::warn!(server = %self.name, error = %e, "closing an MCP session failed");
        }
    }
}

/// The servers one run uses, and the tools they offer.
///
/// Close it with [`McpSession::close`] when the run ends ([`crate::McpToolProvider`] does);
/// dropping it without closing still stops the connections and kills stdio servers, but
/// without waiting for them.
pub struct McpSession {
    servers: Vec<Arc<ServerConnection>>,
    by_name: HashMap<String, usize>,
    registry: McpToolRegistry,
    default_max_result_bytes: usize,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("servers", &self.server_names())
            .field("tools", &self.registry.len())
            .finish()
    }
}

impl McpSession {
    fn new(opened: Vec<(ServerConnection, Vec<rmcp::model::Tool>)>) -> Self {
        let mut registry = McpToolRegistry::new();
        let mut servers = Vec::with_capacity(opened.len());
        let mut by_name = HashMap::new();
        for (connection, tools) in opened {
            for tool in tools {
                registry.insert(McpToolDescriptor::new(
                    connection.name.clone(),
                    tool.name.to_string(),
                    tool.description.as_deref().unwrap_or_default(),
                    Value::Object((*tool.input_schema).clone()),
                ));
            }
            by_name.insert(connection.name.clone(), servers.len());
            servers.push(Arc::new(connection));
        }
        McpSession {
            servers,
            by_name,
            registry,
            default_max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        }
    }

    /// A session with no servers (what `mcp.servers: []` opens).
    pub fn empty() -> Self {
        McpSession::new(Vec::new())
    }

    /// A session with no servers over a given registry: search works, calls fail (for
    /// benchmarks and tests of search and filters). Its search index is built here.
    pub fn from_registry(registry: McpToolRegistry) -> Self {
        registry.build_index();
        McpSession {
            servers: Vec::new(),
            by_name: HashMap::new(),
            registry,
            default_max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        }
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

    /// The process ids of the stdio servers.
    pub fn child_pids(&self) -> Vec<u32> {
        self.servers.iter().filter_map(|s| s.child_pid).collect()
    }

    /// The discovered tools.
    pub fn registry(&self) -> &McpToolRegistry {
        &self.registry
    }

    /// The `mcp_search_tools` result: `{tools: [{name, description, input_schema}], count,
    /// total}`, hiding tools `visible` rejects.
    pub fn search(&self, query: &str, limit: usize, visible: impl Fn(&McpToolDescriptor) -> bool) -> Value {
        let (hits, total) = self.registry.search(query, limit, visible);
        let tools: Vec<Value> = hits.iter().map(|t| t.search_entry()).collect();
        json!({ "count": tools.len(), "total": total, "tools": tools })
    }

    /// Calls a tool by its external name (`<server>__<tool>`): validates the arguments against
    /// its input schema, sends `tools/call` with the server's call timeout and normalises the
    /// result (`structuredContent` as is, otherwise the text contents: one text as a string,
    /// several as an array; non-text blocks as their JSON).
    ///
    /// The result is what the model may see: the server's credentials (bearer token, OAuth
    /// tokens and client secret, header values, environment values under secret-looking
    /// names) are replaced by `[redacted]` in every string, and a result whose text (a string
    /// as is, other JSON serialised) is longer than the server's result cap
    /// ([`McpSession::max_result_bytes`]) comes back as that text cut with the marker of
    /// [`modu_core::tool::truncate_result`]. An answer that cannot be decoded fails the call
    /// as soon as it arrives ([`InvocationFailure::UndecodableResponse`]).
    pub async fn call_tool(&self, external_name: &str, arguments: Value) -> Result<Value, McpError> {
        let Some(descriptor) = self.registry.get(external_name) else {
            return Err(unknown_tool(external_name));
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
        let response = handle.await_response().await;
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
        let max = server.max_result_bytes.unwrap_or(self.default_max_result_bytes);
        tool_output(result, &error_secrets, &result_secrets, max)
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

/// A tool result as the model gets it: `structuredContent` as is, else the normalised
/// contents, with `result_secrets` masked and capped at `max` bytes; an `isError` result is its
/// message (capped at [`MAX_ERROR_TEXT`], `error_secrets` masked) as the `Err`.
pub(crate) fn tool_output(
    result: CallToolResult,
    error_secrets: &[String],
    result_secrets: &[String],
    max: usize,
) -> Result<Value, String> {
    if result.is_error == Some(true) {
        let text = normalise_content(result.content);
        let mut message = match text {
            Value::String(s) => s,
            Value::Null => "the tool reported an error".to_owned(),
            other => other.to_string(),
        };
        if message.len() > MAX_ERROR_TEXT {
            let mut cut = MAX_ERROR_TEXT;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        return Err(redact(&message, error_secrets));
    }
    let mut value = match result.structured_content {
        Some(structured) => structured,
        None => normalise_content(result.content),
    };
    redact_value(&mut value, result_secrets);
    Ok(cap_result(value, max))
}

pub(crate) fn unknown_tool(external_name: &str) -> McpError {
    McpError::ToolInvocation(McpToolInvocationError {
        server: None,
        tool: external_name.to_owned(),
        failure: InvocationFailure::UnknownTool,
        message: format!("no MCP tool named {external_name:?} is available; call mcp_search_tools to find one"),
    })
}

/// Text contents gathered into one JSON value: one text → a string, several → an array of
/// strings, none → null; non-text blocks appear as their JSON.
pub(crate) fn normalise_content(mut content: Vec<ContentBlock>) -> Value {
    let item = |c: ContentBlock| match c {
        ContentBlock::Text(t) => Value::String(t.text),
        other => serde_json::to_value(&other).unwrap_or(Value::Null),
    };
    match content.len() {
        0 => Value::Null,
        1 if content[0].as_text().is_some() => content.pop().map_or(Value::Null, item),
        _ => Value::Array(content.into_iter().map(item).collect()),
    }
}

/// A result as the model may see it: a string cut to `max` bytes, other JSON unchanged when
/// its text (compact JSON, as the run loop writes it) fits, else that text cut — both with
/// the marker of [`modu_core::tool::truncate_result`], so MCP and function tools read alike.
pub(crate) fn cap_result(value: Value, max: usize) -> Value {
    match value {
        Value::String(text) => Value::String(modu_core::tool::truncate_result(text, Some(max))),
        other => {
            let text = other.to_string();
            if text.len() <= max {
                other
            } else {
                Value::String(modu_core::tool::truncate_result(text, Some(max)))
            }
        }
    }
}
