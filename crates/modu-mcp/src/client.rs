//! [`McpConnector`] opens a run's servers; [`McpSession`] holds them, the discovered tools,
//! and performs calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::join_all;
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::service::{ClientCacheConfig, ClientInitializeError, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransport, StreamableHttpClientTransportConfig};

use crate::http_client::UrlFreeHttp;
use rmcp::{Peer, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use crate::auth::{IssuedTokens, OAuthHttpClient, OAuthTokenSource, secret_from_env};
use crate::config::{McpConfig, McpServerConfig, McpTransport, OAuthClientCredentialsConfig, validate_all};
use crate::describe::{self, Cause, Described};
use crate::error::{
    McpAuthError, McpError, McpServerConfigurationError, McpToolDiscoveryError, McpTransportError, redact,
};
use crate::handler::{self, ModuClientHandler};
use crate::oauth::McpOAuth;
use crate::oauth_flow::OAuthFlow;
use crate::oauth_http::OAuthFlowHttpClient;
use crate::resolver::{DefaultServerResolver, McpRuntimeServerResolver, McpSelectionRequest};
use crate::sampling::Sampler;
use crate::session::{McpSession, McpSessionOptions};
use crate::signals::{ServerSignals, Watched};
use crate::stdio::{DecodeFailures, ExitStatusSlot, StderrTail, StdioTransport};

/// The most a tool's error text may take in the message the model sees.
pub(crate) const MAX_ERROR_TEXT: usize = 4000;

pub(crate) type Service = RunningService<RoleClient, ModuClientHandler>;

/// Opens MCP servers for runs. Build one per application and share it (`Arc`): it holds the
/// configuration, the pooled HTTP client, the resolver and the OAuth token cache.
pub struct McpConnector {
    config: McpConfig,
    http: reqwest::Client,
    resolver: Arc<dyn McpRuntimeServerResolver>,
    oauth: Mutex<HashMap<String, Arc<OAuthTokenSource>>>,
    /// The authorization-code flows given with [`McpConnector::with_oauth`], by server name.
    authorization: HashMap<String, McpOAuth>,
    /// Their state, by server name and URL.
    flows: Mutex<HashMap<(String, String), Arc<OAuthFlow>>>,
}

impl std::fmt::Debug for McpConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Redirects within the origin (scheme, host and port) the request went to are followed (at
/// most 10); one to another origin is not, so the configured headers and tokens never reach
/// it: the request fails with the redirect's status.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > 10 {
            attempt.error("too many redirects")
        } else {
            attempt.follow()
        }
    })
}

impl McpConnector {
    /// A connector for a validated configuration, with the default resolver (inline stdio
    /// servers refused) and a pooled HTTP client that follows no redirect to another origin.
    pub fn new(config: McpConfig) -> Result<Self, McpServerConfigurationError> {
        config.validate()?;
        let http = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(90))
            .redirect(same_origin_redirects())
            .build()
            .map_err(|e| McpServerConfigurationError::new(None, format!("the HTTP client could not be built: {e}")))?;
        Ok(McpConnector {
            config,
            http,
            resolver: Arc::new(DefaultServerResolver::new()),
            oauth: Mutex::new(HashMap::new()),
            authorization: HashMap::new(),
            flows: Mutex::new(HashMap::new()),
        })
    }

    /// A connector configured from `MODU_MCP__SERVERS` and `MODU_MCP__CONNECT_TIMEOUT_SECONDS`.
    pub fn from_env() -> Result<Self, McpServerConfigurationError> {
        Self::new(McpConfig::from_env()?)
    }

    /// Uses this HTTP client (share one pooled client across the application). Its redirect
    /// policy applies: reqwest's default follows redirects to other origins, carrying custom
    /// headers such as `X-Api-Key` along (set `reqwest::redirect::Policy::none()` to avoid it).
    pub fn with_http_client(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// Authorizes against the streamable-HTTP server named `server` with the OAuth
    /// authorization-code flow (see [`crate::oauth`]): a `401` with a `WWW-Authenticate`
    /// challenge starts it, a `403` `insufficient_scope` steps up. Its tokens are kept per
    /// server name and URL in the flow's token store and shared by every session of this
    /// connector. A server with a bearer token or client credentials in its configuration
    /// cannot also use this (opening it fails with a configuration error).
    pub fn with_oauth(mut self, server: impl Into<String>, oauth: McpOAuth) -> Self {
        self.authorization.insert(server.into(), oauth);
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
        self.open_with_options(request, McpSessionOptions::default()).await
    }

    /// Resolves the servers for a run and opens them with these options (sampling, progress).
    pub async fn open_with_options(
        &self,
        request: &McpSelectionRequest<'_>,
        options: McpSessionOptions,
    ) -> Result<McpSession, McpError> {
        let servers = self.resolver.resolve(&self.config, request).await?;
        self.open_servers_with(servers, options).await
    }

    /// Opens these servers concurrently, each within the connect timeout (spawn or connect,
    /// `initialize`, and `tools/list` through every page). If one fails, the others are
    /// closed and the first failure is returned.
    pub async fn open_servers(&self, servers: Vec<McpServerConfig>) -> Result<McpSession, McpError> {
        self.open_servers_with(servers, McpSessionOptions::default()).await
    }

    /// [`McpConnector::open_servers`] with options (sampling, progress).
    pub async fn open_servers_with(
        &self,
        servers: Vec<McpServerConfig>,
        options: McpSessionOptions,
    ) -> Result<McpSession, McpError> {
        validate_all(&servers)?;
        let timeout = self.config.connect_timeout();
        let sampler = options
            .sampling
            .clone()
            .map(|config| Arc::new(Sampler::new(config, options.sampling_usage.clone())));
        let elicitations = Arc::new(crate::elicitation::Elicitations::new(options.elicitation.clone()));
        let results = join_all(servers.into_iter().map(|server| {
            let sampler = sampler.clone();
            let elicitations = Arc::clone(&elicitations);
            async move {
                let name = server.name.clone();
                match tokio::time::timeout(timeout, self.open_server(server, sampler, elicitations)).await {
                    Ok(result) => result,
                    Err(_) => Err(McpError::Transport(McpTransportError {
                        server: name,
                        message: format!(
                            "did not connect and list its tools within {:.1}s",
                            timeout.as_secs_f64()
                        ),
                    })),
                }
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
        let mut session = McpSession::new(opened, sampler, options.progress);
        session.elicitations = elicitations;
        Ok(session)
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

    fn flow(&self, server: &str, url: &str) -> Option<Arc<OAuthFlow>> {
        let oauth = self.authorization.get(server)?;
        let mut flows = self.flows.lock().unwrap_or_else(PoisonError::into_inner);
        let flow = flows
            .entry((server.to_owned(), url.to_owned()))
            .or_insert_with(|| Arc::new(OAuthFlow::new(server, url, oauth.clone())));
        Some(Arc::clone(flow))
    }

    async fn open_server(
        &self,
        config: McpServerConfig,
        sampler: Option<Arc<Sampler>>,
        elicitations: Arc<crate::elicitation::Elicitations>,
    ) -> Result<(ServerConnection, Vec<rmcp::model::Tool>), McpError> {
        let name = config.name.clone();
        let mut secrets = config.inline_secrets();
        let mut credentials = config.inline_credentials();
        let decode_failures = Arc::new(DecodeFailures::default());
        let signals = Arc::new(ServerSignals::default());
        let handler = ModuClientHandler::new(&name, sampler, elicitations);
        let (service, child_pid, oauth) = match config.transport {
            McpTransport::Stdio => {
                let (service, pid) = self
                    .spawn_stdio(&config, &secrets, &decode_failures, handler, &signals)
                    .await?;
                (service, pid, None)
            }
            McpTransport::StreamableHttp => {
                let (service, oauth) = self
                    .connect_http(&config, &mut secrets, &mut credentials, handler, &signals)
                    .await?;
                (service, None, oauth)
            }
        };
        let peer = service.peer().clone();
        // A server must answer with the revision asked for or an older one it prefers; one
        // the client does not speak ends the connection (the lifecycle's "SHOULD disconnect").
        let answered = peer.peer_info().map(|info| info.protocol_version.clone());
        if let Some(version) = answered
            && !handler::speaks(&version)
        {
            let _ = service.cancel().await;
            return Err(McpError::Transport(McpTransportError {
                server: name,
                message: format!(
                    "initialize failed: the server answered with protocol version {version}, which this client does not speak (it speaks {} and older)",
                    handler::PROTOCOL_VERSION
                ),
            }));
        }
        peer.set_response_cache_config(ClientCacheConfig::disabled()).await;
        // The generation before the listing: a change announced while listing lists again.
        let listed = signals.tools_generation();
        // A server that declares no `tools` capability (one offering only resources or
        // prompts) may answer tools/list with an error: it has no tools, and opens all the same.
        let offers_tools = peer.peer_info().is_none_or(|info| info.capabilities.tools.is_some());
        let tools = match crate::listing::all_tools(&name, &peer).await {
            Ok(tools) => tools,
            Err(ServiceError::McpError(_)) if !offers_tools => Vec::new(),
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
            signals,
            tools_listed: std::sync::atomic::AtomicU64::new(listed),
        };
        Ok((connection, tools))
    }

    async fn spawn_stdio(
        &self,
        config: &McpServerConfig,
        secrets: &[String],
        decode_failures: &Arc<DecodeFailures>,
        handler: ModuClientHandler,
        signals: &Arc<ServerSignals>,
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
        match handler.serve(Watched::new(transport, Arc::clone(signals))).await {
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
        handler: ModuClientHandler,
        signals: &Arc<ServerSignals>,
    ) -> Result<(Service, Option<Arc<dyn IssuedTokens>>), McpError> {
        let name = config.name.as_str();
        let url = config.url.as_deref().unwrap_or_default();
        let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url);
        let auth = config.auth.clone().unwrap_or_default();
        let flow = self.flow(name, url);
        if flow.is_some()
            && (auth.bearer_token.is_some()
                || auth.bearer_token_env.is_some()
                || auth.oauth_client_credentials.is_some())
        {
            return Err(McpServerConfigurationError::new(
                Some(name),
                "the server has OAuth authorization (with_oauth) and a bearer token or client credentials; give it one",
            )
            .into());
        }
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
        let (result, oauth_source): (_, Option<Arc<dyn IssuedTokens>>) = if let Some(flow) = flow {
            if let Some(token) = flow.token().await? {
                found(token);
            }
            let client = OAuthFlowHttpClient {
                inner: UrlFreeHttp(self.http.clone()),
                flow: Arc::clone(&flow),
            };
            let transport = StreamableHttpClientTransport::with_client(client, transport_config);
            let result = handler.serve(Watched::new(transport, Arc::clone(signals))).await;
            for token in flow.issued_tokens() {
                found(token);
            }
            (result, Some(flow))
        } else if let Some(oauth) = &auth.oauth_client_credentials {
            if let Ok(secret) = std::env::var(&oauth.client_secret_env) {
                found(secret);
            }
            let tokens = self.token_source(oauth);
            // Fetch before connecting, so token endpoint failures surface as auth errors.
            let token = tokens.token(name).await?;
            found(token);
            let client = OAuthHttpClient {
                inner: UrlFreeHttp(self.http.clone()),
                tokens: Arc::clone(&tokens),
                server: Arc::from(name),
            };
            let transport = StreamableHttpClientTransport::with_client(client, transport_config);
            let result = handler.serve(Watched::new(transport, Arc::clone(signals))).await;
            (result, Some(tokens))
        } else {
            let transport =
                StreamableHttpClientTransport::with_client(UrlFreeHttp(self.http.clone()), transport_config);
            let result = handler.serve(Watched::new(transport, Arc::clone(signals))).await;
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
pub(crate) struct ServerConnection {
    pub(crate) name: String,
    pub(crate) call_timeout: Duration,
    /// The server's own result cap, when its configuration sets one.
    pub(crate) max_result_bytes: Option<usize>,
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) service: Mutex<Option<Service>>,
    /// Every secret value of the configuration: redacted from errors and logs.
    pub(crate) secrets: Vec<String>,
    /// The credentials: redacted from successful results too.
    pub(crate) credentials: Vec<String>,
    /// Where OAuth tokens come from (their latest values are credentials too).
    pub(crate) oauth: Option<Arc<dyn IssuedTokens>>,
    /// The calls the stdio transport failed itself (undecodable answers, broken session).
    pub(crate) decode_failures: Arc<DecodeFailures>,
    pub(crate) child_pid: Option<u32>,
    /// List changes and progress the server announced.
    pub(crate) signals: Arc<ServerSignals>,
    /// The tool generation ([`ServerSignals::tools_generation`]) the session's list reflects.
    pub(crate) tools_listed: std::sync::atomic::AtomicU64,
}

impl ServerConnection {
    /// `base` plus the OAuth tokens handed out so far.
    pub(crate) fn with_tokens(&self, base: &[String]) -> Vec<String> {
        let mut out = base.to_vec();
        if let Some(oauth) = &self.oauth {
            out.extend(oauth.issued_tokens());
        }
        out
    }

    pub(crate) async fn close(&self) {
        let service = self.service.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(service) = service
            && let Err(e) = service.cancel().await
        {
            tracing::warn!(server = %self.name, error = %e, "closing an MCP session failed");
        }
    }
}
