//! The glue between [`McpOAuth`] and rmcp's `auth` module: one [`OAuthFlow`] per (server,
//! URL) holds the authorization manager; `oauth_http` puts its token on every request and
//! runs the flow when the server challenges one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationRequest, AuthorizationSession,
    OAuthClientConfig, WWWAuthenticateParams,
};
use serde_json::Value;

use crate::error::{McpAuthError, redact};
use crate::oauth::{McpAuthorizationRequest, McpOAuth, McpStoredTokens};

mod machine;
mod store;

use store::StoreAdapter;

/// What the server answered a request with.
pub(crate) enum Challenge {
    /// 401: authorize (the `WWW-Authenticate` value; empty when the server sent none).
    Unauthorized(String),
    /// 403 `insufficient_scope`: step up to these scopes.
    InsufficientScope { header: String, scope: Option<String> },
}

/// The authorization state of one server: its tokens (in the store) and, once a challenge
/// was met, rmcp's authorization manager.
pub(crate) struct OAuthFlow {
    pub(crate) server: String,
    pub(crate) url: String,
    pub(crate) key: String,
    pub(crate) config: McpOAuth,
    manager: tokio::sync::Mutex<Option<AuthorizationManager>>,
    /// The last tokens handed out (newest last), for redaction.
    issued: std::sync::Mutex<VecDeque<String>>,
}

/// How many of the last tokens [`OAuthFlow::issued_tokens`] remembers.
const REMEMBERED: usize = 8;

/// Runs one of rmcp's token requests without logging: rmcp logs the authorization code and
/// the token endpoint's answer (its extra fields in the clear) at DEBUG. The flow logs its
/// own steps without secrets.
fn unlogged<F: std::future::Future>(future: F) -> tracing::instrument::WithDispatch<F> {
    use tracing::instrument::WithSubscriber;
    future.with_subscriber(tracing::subscriber::NoSubscriber::default())
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl OAuthFlow {
    pub(crate) fn new(server: &str, url: &str, config: McpOAuth) -> Self {
        OAuthFlow {
            server: server.to_owned(),
            url: url.to_owned(),
            key: format!("{server} {url}"),
            config,
            manager: tokio::sync::Mutex::new(None),
            issued: std::sync::Mutex::new(VecDeque::new()),
        }
    }

    /// The tokens handed out lately and the client secret: what errors and results must not show.
    pub(crate) fn issued_tokens(&self) -> Vec<String> {
        let issued = self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<String> = issued.iter().cloned().collect();
        out.extend(self.config.client_secret.iter().cloned());
        if let Some(cross_app) = &self.config.cross_app {
            out.push(cross_app.id_token.clone());
            out.extend(cross_app.idp.client_secret.iter().cloned());
        }
        out
    }

    pub(crate) fn remember(&self, token: &str) {
        let mut issued = self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if issued.iter().any(|t| t == token) {
            return;
        }
        if issued.len() >= REMEMBERED {
            issued.pop_front();
        }
        issued.push_back(token.to_owned());
    }

    pub(crate) fn fail(&self, message: impl Into<String>) -> McpAuthError {
        McpAuthError {
            server: self.server.clone(),
            message: redact(&message.into(), &self.issued_tokens()),
        }
    }

    pub(crate) fn auth_failure(&self, what: &str, e: &AuthError) -> McpAuthError {
        self.fail(format!("{what}: {}", describe_auth_error(e)))
    }

    async fn stored(&self) -> Result<Option<McpStoredTokens>, McpAuthError> {
        let stored = self
            .config
            .store
            .load(&self.key)
            .await
            .map_err(|e| self.fail(format!("the token store failed: {e}")))?;
        if let Some(tokens) = &stored {
            self.remember(&tokens.access_token);
            if let Some(refresh) = &tokens.refresh_token {
                self.remember(refresh);
            }
        }
        Ok(stored)
    }

    /// The token to send: the manager's (refreshed when it is about to expire) or the
    /// stored one; `None` when there is none yet (the request goes out without, and the
    /// server's challenge starts the flow).
    pub(crate) async fn token(&self) -> Result<Option<String>, McpAuthError> {
        let manager = self.manager.lock().await;
        self.token_locked(manager.as_ref()).await
    }

    async fn token_locked(&self, manager: Option<&AuthorizationManager>) -> Result<Option<String>, McpAuthError> {
        if let Some(manager) = manager {
            return match manager.get_access_token().await {
                Ok(token) => {
                    self.remember(&token);
                    Ok(Some(token))
                }
                Err(
                    AuthError::AuthorizationRequired
                    | AuthError::TokenRefreshRejected(_)
                    | AuthError::TokenRefreshFailed(_)
                    | AuthError::TokenExpired,
                ) => Ok(None),
                Err(e) => Err(self.auth_failure("the stored tokens could not be used", &e)),
            };
        }
        Ok(self
            .stored()
            .await?
            .filter(|t| !t.is_expired_at(now()))
            .map(|t| t.access_token))
    }

    /// A manager for this server, its metadata discovered from the challenge and its
    /// credentials in the connector's token store.
    pub(crate) async fn discover(&self, challenge: &str) -> Result<AuthorizationManager, McpAuthError> {
        Ok(self.discover_metadata(challenge).await?.0)
    }

    /// [`OAuthFlow::discover`], and the authorization server metadata it found.
    pub(crate) async fn discover_metadata(
        &self,
        challenge: &str,
    ) -> Result<(AuthorizationManager, AuthorizationMetadata), McpAuthError> {
        let mut manager = AuthorizationManager::new(self.url.as_str())
            .await
            .map_err(|e| self.auth_failure("OAuth could not start", &e))?;
        manager.set_credential_store(StoreAdapter {
            store: Arc::clone(&self.config.store),
            key: self.key.clone(),
        });
        let challenge = (!challenge.is_empty()).then_some(challenge);
        let resolution = manager
            .resolve_metadata_from_challenge(challenge)
            .await
            .map_err(|e| self.auth_failure("OAuth metadata discovery failed", &e))?;
        let metadata = resolution.metadata.clone();
        manager.set_metadata(resolution.metadata);
        Ok((manager, metadata))
    }

    /// Refreshes the stored tokens with their refresh token; `None` when there is none or
    /// the authorization server refused it.
    async fn try_refresh(&self, challenge: &str) -> Result<Option<(AuthorizationManager, String)>, McpAuthError> {
        let Some(stored) = self.stored().await? else {
            return Ok(None);
        };
        if stored.refresh_token.is_none() {
            return Ok(None);
        }
        let mut manager = self.discover(challenge).await?;
        // The redirect URI too: a later step-up sends the user through this client.
        let mut client = OAuthClientConfig::new(stored.client_id.clone(), self.config.redirect_uri.clone());
        if let (Some(id), Some(secret)) = (&self.config.client_id, &self.config.client_secret)
            && *id == stored.client_id
        {
            client = client.with_client_secret(secret.clone());
        }
        let configured = manager.configure_client(client);
        configured.map_err(|e| self.auth_failure("OAuth could not start", &e))?;
        match manager.refresh_token().await {
            Ok(response) => {
                let token = self.remember_response(&response)?;
                tracing::debug!(server = %self.server, "refreshed the OAuth access token");
                Ok(Some((manager, token)))
            }
            Err(e) => {
                tracing::debug!(server = %self.server, error = %describe_auth_error(&e), "refreshing the OAuth token failed");
                Ok(None)
            }
        }
    }

    /// A full authorization: discovery, client identification, consent, code exchange (or the
    /// flow's grant without a person).
    async fn authorize(&self, challenge: &str) -> Result<(AuthorizationManager, String), McpAuthError> {
        if let Some(granted) = self.machine_grant(challenge, None).await {
            return granted;
        }
        let manager = self.discover(challenge).await?;
        let config = &self.config;
        let mut request =
            AuthorizationRequest::new(config.redirect_uri.clone()).with_client_name(config.client_name.clone());
        request = if config.scopes.is_empty() {
            request.with_initial_scope_selection()
        } else {
            request.with_scopes(config.scopes.clone())
        };
        if let Some(id) = &config.client_id {
            request = request.with_preregistered_client(id.clone());
            if let Some(secret) = &config.client_secret {
                request = request.with_client_secret(secret.clone());
            }
        }
        if let Some(url) = &config.client_metadata_url {
            request = request.with_client_metadata_url(url.clone());
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| self.auth_failure("OAuth authorization could not start", &e))?;
        let url = session.get_authorization_url().to_owned();
        let (code, state, issuer) = self.consent(&url).await?;
        self.exchange(session, &code, &state, issuer.as_deref()).await
    }

    /// Exchanges an approved authorization for tokens (saved in the store by rmcp).
    async fn exchange(
        &self,
        session: AuthorizationSession,
        code: &str,
        state: &str,
        issuer: Option<&str>,
    ) -> Result<(AuthorizationManager, String), McpAuthError> {
        let response = unlogged(session.handle_callback_with_issuer(code, state, issuer))
            .await
            .map_err(|e| self.auth_failure("the authorization code could not be exchanged", &e))?;
        let token = self.remember_response(&response)?;
        tracing::debug!(server = %self.server, "OAuth authorization complete");
        Ok((session.auth_manager, token))
    }

    /// Remembers a token response's tokens (for redaction) and returns its access token.
    fn remember_response(&self, response: &impl serde::Serialize) -> Result<String, McpAuthError> {
        let value = serde_json::to_value(response).unwrap_or_default();
        if let Some(refresh) = value.get("refresh_token").and_then(Value::as_str) {
            self.remember(refresh);
        }
        let token = value
            .get("access_token")
            .and_then(Value::as_str)
            .ok_or_else(|| self.fail("the token endpoint's answer has no access_token"))?;
        self.remember(token);
        Ok(token.to_owned())
    }

    /// Asks the consent handler to approve `url`: its code, state and issuer.
    async fn consent(&self, url: &str) -> Result<(String, String, Option<String>), McpAuthError> {
        let scopes = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.query_pairs().find(|(k, _)| k == "scope").map(|(_, v)| v.into_owned()))
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let request = McpAuthorizationRequest {
            server: self.server.clone(),
            authorization_url: url.to_owned(),
            redirect_uri: self.config.redirect_uri.clone(),
            scopes,
        };
        tracing::debug!(server = %self.server, scopes = ?request.scopes, "asking for OAuth consent");
        let response = self
            .config
            .consent
            .authorize(&request)
            .await
            .map_err(|e| self.fail(format!("the authorization was not granted: {e}")))?;
        self.remember(&response.code);
        Ok((response.code, response.state, response.issuer))
    }

    /// Runs the flow for a challenge and returns the token to send again. `authorizations`
    /// counts the consent handler calls of this request; `refreshed` whether it refreshed.
    pub(crate) async fn answer(
        &self,
        sent: Option<&str>,
        challenge: Challenge,
        authorizations: &mut u32,
        refreshed: &mut bool,
    ) -> Result<String, McpAuthError> {
        let mut manager = self.manager.lock().await;
        // Another request may have authorized while this one waited.
        if let Some(current) = self.token_locked(manager.as_ref()).await?
            && sent != Some(current.as_str())
        {
            return Ok(current);
        }
        let max = self.config.max_authorizations;
        match challenge {
            Challenge::Unauthorized(header) => {
                if !*refreshed {
                    *refreshed = true;
                    if let Some((fresh, token)) = self.try_refresh(&header).await? {
                        *manager = Some(fresh);
                        return Ok(token);
                    }
                }
                if *authorizations >= max {
                    return Err(self.fail(format!(
                        "the server still requires authorization (HTTP 401) after {max} authorization(s)"
                    )));
                }
                *authorizations += 1;
                let (fresh, token) = self.authorize(&header).await?;
                *manager = Some(fresh);
                Ok(token)
            }
            Challenge::InsufficientScope { header, scope } => {
                let scope = scope.or_else(|| {
                    let base = reqwest::Url::parse(&self.url).ok()?;
                    WWWAuthenticateParams::parse(&header, &base).scope
                });
                if *authorizations >= max {
                    return Err(self.fail(match &scope {
                        Some(scope) => format!(
                            "the server still requires the scope {scope:?} (HTTP 403) after {max} authorization(s)"
                        ),
                        None => format!(
                            "the server still refuses the scopes granted (HTTP 403) after {max} authorization(s)"
                        ),
                    }));
                }
                *authorizations += 1;
                if let Some(granted) = self.machine_grant(&header, scope.as_deref()).await {
                    let (fresh, token) = granted?;
                    *manager = Some(fresh);
                    return Ok(token);
                }
                let Some(current) = manager.take() else {
                    let (fresh, token) = self.authorize(&header).await?;
                    *manager = Some(fresh);
                    return Ok(token);
                };
                let url = match current
                    .request_scope_upgrade(scope.as_deref().unwrap_or_default())
                    .await
                {
                    Ok(url) => url,
                    Err(e) => {
                        *manager = Some(current);
                        return Err(self.auth_failure("the scope step-up could not start", &e));
                    }
                };
                let session = AuthorizationSession::for_scope_upgrade(current, url.clone(), &self.config.redirect_uri);
                let (code, state, issuer) = match self.consent(&url).await {
                    Ok(granted) => granted,
                    Err(e) => {
                        *manager = Some(session.auth_manager);
                        return Err(e);
                    }
                };
                let (fresh, token) = self.exchange(session, &code, &state, issuer.as_deref()).await?;
                *manager = Some(fresh);
                Ok(token)
            }
        }
    }
}

/// A plain sentence for an rmcp auth error (no type names; secrets are redacted by the caller).
fn describe_auth_error(e: &AuthError) -> String {
    let text = match e {
        AuthError::AuthorizationRequired => "the server requires authorization".to_owned(),
        AuthError::HttpError(e) => format!("an OAuth request failed: {}", e.without_url_ref()),
        AuthError::NoAuthorizationSupport => "the server offers no OAuth authorization".to_owned(),
        AuthError::PkceUnsupported => "the authorization server does not support PKCE with S256".to_owned(),
        other => other.to_string(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// A reqwest error's message without its URL.
trait WithoutUrlRef {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrlRef for reqwest::Error {
    fn without_url_ref(&self) -> String {
        let mut text = self.to_string();
        if let Some(url) = self.url() {
            text = text
                .replace(&format!(" ({url})"), "")
                .replace(url.as_str(), "the server");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_errors_read_as_sentences_without_type_names() {
        let errors = [
            AuthError::AuthorizationRequired,
            AuthError::NoAuthorizationSupport,
            AuthError::PkceUnsupported,
            AuthError::TokenExchangeFailed("invalid_grant".into()),
            AuthError::RegistrationFailed("HTTP 400".into()),
            AuthError::AuthorizationServerMismatch {
                expected_issuer: "https://a.example".into(),
                received_issuer: "https://b.example".into(),
            },
        ];
        for e in &errors {
            let text = describe_auth_error(e);
            assert!(text.starts_with(|c: char| c.is_lowercase()), "{text}");
            for name in ["AuthError", "rmcp", "::", "{", "Some("] {
                assert!(!text.contains(name), "{text}");
            }
        }
    }
}
