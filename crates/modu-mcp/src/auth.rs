//! Credentials for streamable-HTTP servers: bearer tokens from the environment and OAuth2
//! client credentials with a token cache.
//!
//! rmcp's own OAuth support discovers the authorization server from the MCP endpoint and, for
//! client credentials, cannot fetch a new token once the first one expires (there is no
//! refresh token in that grant). The configuration here names the token endpoint directly, so
//! the connector fetches tokens itself and hands them to rmcp's reqwest transport per request
//! through [`OAuthHttpClient`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use serde::Deserialize;
use sse_stream::Sse;

use crate::config::OAuthClientCredentialsConfig;
use crate::error::{McpAuthError, redact};

/// Reads an environment variable holding a secret; a missing or empty one is an auth error
/// naming the variable (never its value).
pub(crate) fn secret_from_env(server: &str, var: &str, what: &str) -> Result<String, McpAuthError> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(McpAuthError {
            server: server.to_owned(),
            message: format!("the environment variable {var} ({what}) is not set"),
        }),
    }
}

/// A source of tokens whose latest values must be redacted like the configured secrets.
pub(crate) trait IssuedTokens: Send + Sync {
    /// The tokens handed out lately.
    fn issued_tokens(&self) -> Vec<String>;
}

impl IssuedTokens for OAuthTokenSource {
    fn issued_tokens(&self) -> Vec<String> {
        OAuthTokenSource::issued_tokens(self)
    }
}

impl IssuedTokens for crate::oauth_flow::OAuthFlow {
    fn issued_tokens(&self) -> Vec<String> {
        crate::oauth_flow::OAuthFlow::issued_tokens(self)
    }
}

#[derive(Clone)]
struct CachedToken {
    access_token: String,
    /// When to stop using it (expiry minus a safety margin); `None` when the endpoint gave no
    /// `expires_in`.
    refresh_at: Option<Instant>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<f64>,
}

#[derive(Deserialize)]
struct TokenErrorResponse {
    error: String,
}

/// Fetches and caches OAuth2 client-credentials tokens for one (token endpoint, client id,
/// scopes, secret variable) combination. Shared by every run of a connector, so a token is
/// reused across runs until shortly before it expires.
pub(crate) struct OAuthTokenSource {
    config: OAuthClientCredentialsConfig,
    http: reqwest::Client,
    state: tokio::sync::Mutex<Option<CachedToken>>,
    /// The last tokens handed out (newest last), for redaction.
    issued: std::sync::Mutex<std::collections::VecDeque<String>>,
}

impl OAuthTokenSource {
    pub(crate) fn new(config: OAuthClientCredentialsConfig, http: reqwest::Client) -> Self {
        OAuthTokenSource {
            config,
            http,
            state: tokio::sync::Mutex::new(None),
            issued: std::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// How many of the last tokens [`OAuthTokenSource::issued_tokens`] remembers.
    const REMEMBERED: usize = 4;

    /// The last few tokens fetched (a server may echo any token still in use), to redact them
    /// from what the server sends back.
    pub(crate) fn issued_tokens(&self) -> Vec<String> {
        let issued = self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        issued.iter().cloned().collect()
    }

    /// A valid token: the cached one, or a new one from the token endpoint.
    pub(crate) async fn token(&self, server: &str) -> Result<String, McpAuthError> {
        let mut state = self.state.lock().await;
        if let Some(cached) = state.as_ref()
            && cached.refresh_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(cached.access_token.clone());
        }
        let fresh = self.fetch(server).await?;
        let token = fresh.access_token.clone();
        *state = Some(fresh);
        let mut issued = self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if issued.len() >= Self::REMEMBERED {
            issued.pop_front();
        }
        issued.push_back(token.clone());
        drop(issued);
        Ok(token)
    }

    /// Forgets `token` if it is the cached one (the server rejected it).
    pub(crate) async fn invalidate(&self, token: &str) {
        let mut state = self.state.lock().await;
        if state.as_ref().is_some_and(|c| c.access_token == token) {
            *state = None;
        }
    }

    async fn fetch(&self, server: &str) -> Result<CachedToken, McpAuthError> {
        let secret = secret_from_env(server, &self.config.client_secret_env, "OAuth client secret")?;
        let secrets = [secret.clone()];
        let fail = |message: String| McpAuthError {
            server: server.to_owned(),
            message: redact(&message, &secrets),
        };
        let mut form: Vec<(&str, &str)> = vec![
            ("grant_type", "client_credentials"),
            ("client_id", &self.config.client_id),
            ("client_secret", &secret),
        ];
        let scope = self.config.scopes.join(" ");
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        let started = Instant::now();
        let response = self
            .http
            .post(&self.config.token_url)
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&form)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| fail(format!("the token endpoint could not be reached: {}", e.without_url())))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| {
            fail(format!(
                "the token endpoint's answer could not be read: {}",
                e.without_url()
            ))
        })?;
        if !status.is_success() {
            let code = serde_json::from_slice::<TokenErrorResponse>(&body)
                .map(|e| format!(" ({})", e.error))
                .unwrap_or_default();
            return Err(fail(format!(
                "the token endpoint refused the request: HTTP {}{code}",
                status.as_u16()
            )));
        }
        let parsed: TokenResponse = serde_json::from_slice(&body)
            .map_err(|_| fail("the token endpoint's answer has no access_token".to_owned()))?;
        if parsed.access_token.is_empty() {
            return Err(fail("the token endpoint returned an empty access_token".to_owned()));
        }
        let refresh_at = parsed
            .expires_in
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .map(|lifetime| {
                let margin = (lifetime / 4).min(Duration::from_secs(30));
                started + lifetime.saturating_sub(margin)
            });
        tracing::debug!(server, "fetched an OAuth client-credentials token");
        Ok(CachedToken {
            access_token: parsed.access_token,
            refresh_at,
        })
    }
}

/// A pooled reqwest client that puts a fresh client-credentials token on every request and,
/// when the server answers 401, drops the token and retries once with a new one.
#[derive(Clone)]
pub(crate) struct OAuthHttpClient {
    pub(crate) inner: crate::http_client::UrlFreeHttp,
    pub(crate) tokens: Arc<OAuthTokenSource>,
    pub(crate) server: Arc<str>,
}

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

impl OAuthHttpClient {
    async fn token(&self) -> HttpResult<String> {
        self.tokens
            .token(&self.server)
            .await
            // The auth error itself, so the session reports it as one (see `describe`).
            .map_err(|e| StreamableHttpError::Io(std::io::Error::other(e)))
    }

    async fn with_token<T, F, Fut>(&self, call: F) -> HttpResult<T>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = HttpResult<T>>,
    {
        let token = self.token().await?;
        match call(token.clone()).await {
            Err(e)
                if matches!(e, StreamableHttpError::AuthRequired(_)) || crate::describe::is_plain_unauthorized(&e) =>
            {
                self.tokens.invalidate(&token).await;
                let fresh = self.token().await?;
                call(fresh).await
            }
            other => other,
        }
    }
}

impl StreamableHttpClient for OAuthHttpClient {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = HttpResult<StreamableHttpPostResponse>> + Send + '_ {
        self.with_token(move |token| {
            self.inner.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                Some(token),
                custom_headers.clone(),
            )
        })
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = HttpResult<StreamableHttpPostResponse>> + Send + '_ {
        self.with_token(move |token| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                Some(token),
                custom_headers.clone(),
                limits,
            )
        })
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = HttpResult<()>> + Send + '_ {
        self.with_token(move |token| {
            self.inner
                .delete_session(uri.clone(), session_id.clone(), Some(token), custom_headers.clone())
        })
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = HttpResult<BoxStream<'static, Result<Sse, SseError>>>> + Send + '_ {
        self.with_token(move |token| {
            self.inner.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                Some(token),
                custom_headers.clone(),
            )
        })
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = HttpResult<BoxStream<'static, Result<Sse, SseError>>>> + Send + '_ {
        self.with_token(move |token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                Some(token),
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
    }
}
