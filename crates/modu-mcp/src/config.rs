//! Server configuration: [`McpConfig`], [`McpServerConfig`] and their validation.
//!
//! Configurations deserialise from JSON with unknown fields rejected, and load from the
//! environment (`MODU_MCP__SERVERS`, `MODU_MCP__CONNECT_TIMEOUT_SECONDS`). Their `Debug`
//! output never shows secrets: bearer tokens, header values, environment values of stdio
//! servers and the values of their arguments under secret-looking flags (`--api-key=...`,
//! `--token VALUE`) print as `<redacted>`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::error::McpServerConfigurationError;

/// The environment variable holding the configured servers (a JSON array).
pub const ENV_SERVERS: &str = "MODU_MCP__SERVERS";
/// The environment variable holding the connect timeout in seconds.
pub const ENV_CONNECT_TIMEOUT: &str = "MODU_MCP__CONNECT_TIMEOUT_SECONDS";
/// The default connect timeout (initialize + tool listing), in seconds.
pub const DEFAULT_CONNECT_TIMEOUT_SECONDS: f64 = 30.0;
/// The default per-call timeout, in seconds.
pub const DEFAULT_CALL_TIMEOUT_SECONDS: f64 = 60.0;
/// The default cap on one MCP tool result as the model sees it (its text, or its JSON as
/// text), in bytes: about 25,000 tokens. Longer results are cut with the same visible marker
/// as function tools' `max_result_bytes` ([`modu_core::tool::truncate_result`]).
pub const DEFAULT_MAX_RESULT_BYTES: usize = 100_000;

/// How to reach a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC over stdin/stdout.
    Stdio,
    /// An HTTP endpoint speaking MCP streamable HTTP.
    StreamableHttp,
}

/// OAuth2 client-credentials settings: the connector fetches a token from `token_url`, caches
/// it until shortly before it expires and fetches a new one then.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthClientCredentialsConfig {
    /// The token endpoint (http or https).
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// The environment variable holding the client secret.
    pub client_secret_env: String,
    /// Scopes to request (sent space-separated).
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl fmt::Debug for OAuthClientCredentialsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClientCredentialsConfig")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret_env", &self.client_secret_env)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// Credentials for a streamable-HTTP server.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpAuthConfig {
    /// Static headers sent with every request (values are secrets: never printed).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The environment variable holding a bearer token.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// A bearer token given inline (prefer `bearer_token_env` or a custom resolver: run
    /// metadata can travel to logs and model adapters).
    #[serde(default)]
    pub bearer_token: Option<String>,
    /// OAuth2 client-credentials settings.
    #[serde(default)]
    pub oauth_client_credentials: Option<OAuthClientCredentialsConfig>,
    /// OAuth authorization-code settings: a person signs in (the application supplies the
    /// consent: [`crate::McpConnector::with_configured_oauth`]).
    #[serde(default)]
    pub oauth: Option<crate::oauth_config::McpOAuthConfig>,
}

impl fmt::Debug for McpAuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: BTreeMap<&str, &str> = self.headers.keys().map(|k| (k.as_str(), "<redacted>")).collect();
        f.debug_struct("McpAuthConfig")
            .field("headers", &headers)
            .field("bearer_token_env", &self.bearer_token_env)
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "<redacted>"))
            .field("oauth_client_credentials", &self.oauth_client_credentials)
            .field("oauth", &self.oauth)
            .finish()
    }
}

/// One MCP server.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's name: unique within a run, without `__`, not starting or ending with `_`.
    /// Tools appear to the model as `<name>__<tool>`.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// The program to run (stdio).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments (stdio). The values of flags whose name looks secret (`--api-key=VALUE`,
    /// `--token VALUE`, `NAME=VALUE` under a secret-looking name) are secrets: never printed,
    /// redacted from errors and results.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables passed to the process (stdio; values are secrets).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The endpoint (streamable HTTP), http or https.
    #[serde(default)]
    pub url: Option<String>,
    /// Credentials (streamable HTTP).
    #[serde(default)]
    pub auth: Option<McpAuthConfig>,
    /// The most time one tool call may take, in seconds (default 60).
    #[serde(default = "default_call_timeout")]
    pub call_timeout_seconds: f64,
    /// The most bytes one result of this server's tools may take as the model sees it (its
    /// text, or its JSON as text); longer results are cut with a visible marker. Unset: the
    /// provider's default ([`crate::McpToolProvider::with_max_result_bytes`]), else
    /// [`DEFAULT_MAX_RESULT_BYTES`].
    #[serde(default)]
    pub max_result_bytes: Option<usize>,
}

fn default_call_timeout() -> f64 {
    DEFAULT_CALL_TIMEOUT_SECONDS
}

fn default_connect_timeout() -> f64 {
    DEFAULT_CONNECT_TIMEOUT_SECONDS
}

impl fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: BTreeMap<&str, &str> = self.env.keys().map(|k| (k.as_str(), "<redacted>")).collect();
        f.debug_struct("McpServerConfig")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &crate::secret_args::redacted_args(&self.args))
            .field("env", &env)
            .field("url", &self.url.as_deref().map(redacted_url))
            .field("auth", &self.auth)
            .field("call_timeout_seconds", &self.call_timeout_seconds)
            .field("max_result_bytes", &self.max_result_bytes)
            .finish()
    }
}

impl McpServerConfig {
    /// A stdio server running `command`.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>) -> Self {
        McpServerConfig {
            name: name.into(),
            transport: McpTransport::Stdio,
            command: Some(command.into()),
            args: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            auth: None,
            call_timeout_seconds: DEFAULT_CALL_TIMEOUT_SECONDS,
            max_result_bytes: None,
        }
    }

    /// A streamable-HTTP server at `url`.
    pub fn streamable_http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerConfig {
            name: name.into(),
            transport: McpTransport::StreamableHttp,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: Some(url.into()),
            auth: None,
            call_timeout_seconds: DEFAULT_CALL_TIMEOUT_SECONDS,
            max_result_bytes: None,
        }
    }

    /// Sets the arguments.
    pub fn with_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an environment variable for the process.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the credentials.
    pub fn with_auth(mut self, auth: McpAuthConfig) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Sets the call timeout.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout_seconds = timeout.as_secs_f64();
        self
    }

    /// Sets the result cap of this server's tools.
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = Some(bytes);
        self
    }

    /// Parses one server from JSON (unknown fields rejected) and validates it.
    pub fn from_json(value: serde_json::Value) -> Result<Self, McpServerConfigurationError> {
        let name = value.get("name").and_then(|n| n.as_str()).map(str::to_owned);
        let config: McpServerConfig = serde_json::from_value(value)
            .map_err(|e| McpServerConfigurationError::new(name.as_deref(), sanitize_serde_error(&e.to_string())))?;
        config.validate()?;
        Ok(config)
    }

    /// The call timeout as a duration.
    pub fn call_timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.call_timeout_seconds).unwrap_or(Duration::from_secs(60))
    }

    /// Checks the rules that do not depend on other servers: a non-empty name without `__`
    /// (letters, digits, `_`, `-`; not starting or ending with `_`), a command for stdio, an
    /// http(s) url for streamable HTTP, a positive call timeout and result cap, at most one
    /// bearer source, valid header names and OAuth settings.
    pub fn validate(&self) -> Result<(), McpServerConfigurationError> {
        let err = |m: String| Err(McpServerConfigurationError::new(Some(&self.name), m));
        validate_name(&self.name)?;
        if !(self.call_timeout_seconds.is_finite() && self.call_timeout_seconds > 0.0) {
            return err("call_timeout_seconds must be a positive number".into());
        }
        if self.max_result_bytes == Some(0) {
            return err("max_result_bytes must be a positive number".into());
        }
        match self.transport {
            McpTransport::Stdio => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return err("a stdio server needs a command".into());
                }
                if self.url.is_some() {
                    return err("a stdio server takes no url".into());
                }
                if self.auth.is_some() {
                    return err("a stdio server takes no auth (pass credentials through env)".into());
                }
            }
            McpTransport::StreamableHttp => {
                let Some(url) = self.url.as_deref() else {
                    return err("a streamable_http server needs a url".into());
                };
                check_http_url(url, "url").or_else(err)?;
                if self.command.is_some() || !self.args.is_empty() || !self.env.is_empty() {
                    return err("a streamable_http server takes no command, args or env".into());
                }
                if let Some(auth) = &self.auth {
                    let sources = usize::from(auth.bearer_token.is_some())
                        + usize::from(auth.bearer_token_env.is_some())
                        + usize::from(auth.oauth_client_credentials.is_some())
                        + usize::from(auth.oauth.is_some());
                    if sources > 1 {
                        return err(
                            "auth takes at most one of bearer_token, bearer_token_env, oauth_client_credentials and oauth"
                                .into(),
                        );
                    }
                    if let Some(oauth) = &auth.oauth {
                        oauth.check().or_else(err)?;
                    }
                    for name in auth.headers.keys() {
                        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                            return err(format!("auth.headers has an invalid header name {name:?}"));
                        }
                        if name.eq_ignore_ascii_case("authorization") && sources > 0 {
                            return err("auth.headers sets Authorization and a bearer source too".into());
                        }
                    }
                    if let Some(oauth) = &auth.oauth_client_credentials {
                        check_http_url(&oauth.token_url, "oauth_client_credentials.token_url").or_else(err)?;
                        if oauth.client_id.trim().is_empty() {
                            return err("oauth_client_credentials.client_id is empty".into());
                        }
                        if oauth.client_secret_env.trim().is_empty() {
                            return err("oauth_client_credentials.client_secret_env is empty".into());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The credentials this configuration holds, redacted from successful results too: header
    /// values, an inline bearer token, the values of secret-looking arguments, and environment
    /// values under secret-looking names (`GITHUB_TOKEN`, `OPENAI_API_KEY`, `DB_PASSWORD`, ...;
    /// the names [`modu_core::mask::SecretMasker`] treats as secret). Other environment values
    /// (`LOG_LEVEL=info`) are not, so that ordinary words stay in results.
    pub(crate) fn inline_credentials(&self) -> Vec<String> {
        let masker = modu_core::mask::SecretMasker::default();
        let mut out: Vec<String> = self
            .env
            .iter()
            .filter(|(key, _)| masker.is_secret_key(key))
            .map(|(_, value)| value.clone())
            .collect();
        if let Some(auth) = &self.auth {
            out.extend(auth.headers.values().cloned());
            out.extend(auth.bearer_token.clone());
        }
        out.extend(url_secrets(self.url.as_deref()));
        out.extend(crate::secret_args::arg_credentials(&self.args));
        out
    }

    /// The secret values this configuration holds (for redaction of errors and logs: every
    /// environment value, every header value, an inline bearer token, the URL's secrets, the
    /// values of secret-looking arguments).
    pub(crate) fn inline_secrets(&self) -> Vec<String> {
        let mut out: Vec<String> = self.env.values().cloned().collect();
        if let Some(auth) = &self.auth {
            out.extend(auth.headers.values().cloned());
            out.extend(auth.bearer_token.clone());
        }
        out.extend(url_secrets(self.url.as_deref()));
        out.extend(crate::secret_args::arg_secrets(&self.args));
        out
    }
}

/// The secrets an http(s) URL carries: the password of its user info and the values of query
/// parameters under secret-looking names (`?api_key=...`, `?token=...`; the names
/// [`modu_core::mask::SecretMasker`] treats as secret), as written and decoded.
pub(crate) fn url_secrets(url: Option<&str>) -> Vec<String> {
    let Some(parsed) = url.and_then(|u| reqwest::Url::parse(u).ok()) else {
        return Vec::new();
    };
    let masker = modu_core::mask::SecretMasker::default();
    let mut out = Vec::new();
    // The user info as the URL holds it (percent-encoded) and as it was likely written
    // (decoded: `päss`, `a b`); a user name alone is a token (`https://TOKEN@host`).
    let userinfo = match parsed.password().filter(|p| !p.is_empty()) {
        Some(password) => Some(password),
        None => Some(parsed.username()).filter(|u| !u.is_empty()),
    };
    if let Some(secret) = userinfo {
        out.push(secret.to_owned());
        out.push(
            percent_encoding::percent_decode_str(secret)
                .decode_utf8_lossy()
                .into_owned(),
        );
    }
    for pair in parsed.query().unwrap_or_default().split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !value.is_empty() && masker.is_secret_key(key) {
            out.push(value.to_owned());
        }
    }
    out.extend(
        parsed
            .query_pairs()
            .filter(|(key, value)| !value.is_empty() && masker.is_secret_key(key))
            .map(|(_, value)| value.into_owned()),
    );
    out.sort();
    out.dedup();
    out
}

/// `url` with its secrets ([`url_secrets`]) replaced by `[redacted]`, for `Debug`.
fn redacted_url(url: &str) -> String {
    crate::error::redact(url, &url_secrets(Some(url)))
}

/// Removes the offending value from serde's "invalid type/value" messages: the value may be a
/// secret given with the wrong type.
pub(crate) fn sanitize_serde_error(message: &str) -> String {
    for marker in ["invalid type: ", "invalid value: "] {
        if let Some(start) = message.find(marker) {
            let after = start + marker.len();
            if let Some(rel_end) = message[after..].find(", expected") {
                let kind = message[after..after + rel_end]
                    .split_whitespace()
                    .next()
                    .unwrap_or("value");
                return format!("{}{kind}{}", &message[..after], &message[after + rel_end..]);
            }
        }
    }
    message.to_owned()
}

fn check_http_url(url: &str, field: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .ok_or_else(|| format!("{field} must be an http(s) URL"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{field} has no host"));
    }
    reqwest::Url::parse(url).map_err(|_| format!("{field} is not a valid URL"))?;
    Ok(())
}

fn validate_name(name: &str) -> Result<(), McpServerConfigurationError> {
    let err = |m: &str| Err(McpServerConfigurationError::new(Some(name), m));
    if name.is_empty() {
        return Err(McpServerConfigurationError::new(None, "a server name is empty"));
    }
    if name.contains("__") {
        return err("a server name must not contain \"__\" (it separates server and tool names)");
    }
    if name.starts_with('_') || name.ends_with('_') {
        return err(
            "a server name must not start or end with '_' (server \"a_\" with tool \"b\" and server \"a\" with tool \"_b\" would both be \"a___b\")",
        );
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return err("a server name may contain only ASCII letters, digits, '_' and '-'");
    }
    Ok(())
}

/// Checks that names are unique across `servers` (and each server is valid).
pub(crate) fn validate_all(servers: &[McpServerConfig]) -> Result<(), McpServerConfigurationError> {
    let mut seen = BTreeSet::new();
    for server in servers {
        server.validate()?;
        if !seen.insert(server.name.as_str()) {
            return Err(McpServerConfigurationError::new(
                Some(&server.name),
                format!("the server name {:?} is used more than once", server.name),
            ));
        }
    }
    Ok(())
}

/// The connector's configuration: the servers the application allows, and how long to wait
/// for them to connect.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The configured servers.
    #[serde(default)]
    pub servers: Vec<McpServerConfig>,
    /// The most time opening a server may take (spawn/connect, initialize and tool listing),
    /// in seconds (default 30).
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_seconds: f64,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            servers: Vec::new(),
            connect_timeout_seconds: DEFAULT_CONNECT_TIMEOUT_SECONDS,
        }
    }
}

impl McpConfig {
    /// A validated configuration with these servers.
    pub fn new(servers: Vec<McpServerConfig>) -> Result<Self, McpServerConfigurationError> {
        let config = McpConfig {
            servers,
            ..McpConfig::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout_seconds = timeout.as_secs_f64();
        self
    }

    /// The connect timeout as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.connect_timeout_seconds).unwrap_or(Duration::from_secs(30))
    }

    /// Checks every server and that names are unique.
    pub fn validate(&self) -> Result<(), McpServerConfigurationError> {
        if !(self.connect_timeout_seconds.is_finite() && self.connect_timeout_seconds > 0.0) {
            return Err(McpServerConfigurationError::new(
                None,
                "connect_timeout_seconds must be a positive number",
            ));
        }
        validate_all(&self.servers)
    }

    /// Parses a configuration from JSON and validates it.
    pub fn from_json(value: serde_json::Value) -> Result<Self, McpServerConfigurationError> {
        let config: McpConfig = serde_json::from_value(value)
            .map_err(|e| McpServerConfigurationError::new(None, sanitize_serde_error(&e.to_string())))?;
        config.validate()?;
        Ok(config)
    }

    /// Loads the configuration from the process environment: `MODU_MCP__SERVERS` (a JSON array
    /// of servers, default `[]`) and `MODU_MCP__CONNECT_TIMEOUT_SECONDS` (default 30).
    pub fn from_env() -> Result<Self, McpServerConfigurationError> {
        Self::from_env_with(|key| std::env::var(key).ok())
    }

    /// Like [`McpConfig::from_env`], reading variables through `get` (for tests and for
    /// applications with their own settings source).
    pub fn from_env_with(get: impl Fn(&str) -> Option<String>) -> Result<Self, McpServerConfigurationError> {
        let mut config = McpConfig::default();
        if let Some(raw) = get(ENV_SERVERS).filter(|s| !s.trim().is_empty()) {
            let value: serde_json::Value = serde_json::from_str(&raw)
                .map_err(|e| McpServerConfigurationError::new(None, format!("{ENV_SERVERS} is not valid JSON: {e}")))?;
            if !value.is_array() {
                return Err(McpServerConfigurationError::new(
                    None,
                    format!("{ENV_SERVERS} must be a JSON array of servers"),
                ));
            }
            config.servers = serde_json::from_value(value).map_err(|e| {
                McpServerConfigurationError::new(
                    None,
                    format!("{ENV_SERVERS}: {}", sanitize_serde_error(&e.to_string())),
                )
            })?;
        }
        if let Some(raw) = get(ENV_CONNECT_TIMEOUT).filter(|s| !s.trim().is_empty()) {
            config.connect_timeout_seconds = raw.trim().parse().map_err(|_| {
                McpServerConfigurationError::new(None, format!("{ENV_CONNECT_TIMEOUT} must be a number of seconds"))
            })?;
        }
        config.validate()?;
        Ok(config)
    }
}
