//! OAuth 2.1 for streamable-HTTP servers (the MCP authorization specification), on rmcp's
//! `auth` support: the authorization-code flow for a person ([`McpOAuth::new`]), and for
//! machines the client-credentials grant with a secret or a signed assertion
//! ([`McpOAuth::client_credentials`], [`McpOAuth::private_key_jwt`]) and enterprise-managed
//! cross-app access ([`McpOAuth::cross_app_access`]).
//!
//! Give a connector an [`McpOAuth`] for a server with
//! [`McpConnector::with_oauth`](crate::McpConnector::with_oauth). When that server answers
//! a request with `401` and a `WWW-Authenticate` challenge, the connector discovers the
//! authorization server (protected resource metadata, then authorization server metadata,
//! then the 2025-03-26 default endpoints), identifies the client (a pre-registered client,
//! a client ID metadata document URL, or dynamic client registration), chooses the scopes
//! (the challenge's `scope`, else the resource's `scopes_supported`, else none; plus
//! `offline_access` when the authorization server offers it), builds the authorization URL
//! (PKCE S256, `state`, the `resource` indicator) and hands it to the
//! [`McpConsentHandler`]. The handler returns the `code` and `state` the authorization
//! server redirected to; the connector exchanges them for tokens, saves them in the
//! [`McpTokenStore`] and sends the request again. A `403` with
//! `error="insufficient_scope"` asks again for the scopes held plus the ones required (step
//! up). Each request runs at most [`McpOAuth::with_max_authorizations`] authorizations
//! ([`DEFAULT_MAX_AUTHORIZATIONS`]); after that it fails with an
//! [`McpAuthError`](crate::McpAuthError). An expired or refused access token is refreshed
//! with the refresh token first, without asking the handler.
//!
//! Tokens, refresh tokens and the client secret never appear in errors or logs (they are
//! redacted like every other credential of the server).
//!
//! ```
//! use std::sync::Arc;
//! use modu_mcp::oauth::{
//!     InMemoryTokenStore, McpAuthorizationRequest, McpAuthorizationResponse, McpConsentError,
//!     McpConsentHandler, McpOAuth,
//! };
//!
//! struct Browser;
//!
//! #[async_trait::async_trait]
//! impl McpConsentHandler for Browser {
//!     async fn authorize(
//!         &self,
//!         request: &McpAuthorizationRequest,
//!     ) -> Result<McpAuthorizationResponse, McpConsentError> {
//!         // Open `request.authorization_url` in a browser and wait for the redirect to
//!         // `request.redirect_uri`; here the redirect is already known.
//!         McpAuthorizationResponse::from_redirect_url("http://127.0.0.1:8976/callback?code=c&state=s")
//!     }
//! }
//!
//! let oauth = McpOAuth::new("http://127.0.0.1:8976/callback", Arc::new(Browser))
//!     .with_token_store(Arc::new(InMemoryTokenStore::new()))
//!     .with_scopes(["files:read"]);
//! # let _ = oauth;
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// How many authorizations one request may run (the first one and step-ups) before it fails.
pub const DEFAULT_MAX_AUTHORIZATIONS: u32 = 3;

/// What the application is asked to let the user approve.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpAuthorizationRequest {
    /// The server (its name in the configuration) that asks for authorization.
    pub server: String,
    /// The authorization URL to open (it carries the PKCE challenge, `state`, the scopes and
    /// the `resource` indicator).
    pub authorization_url: String,
    /// The redirect URI the authorization server sends the user back to.
    pub redirect_uri: String,
    /// The scopes asked for (empty when none is requested).
    pub scopes: Vec<String>,
}

impl McpAuthorizationRequest {
    /// A request (for a consent handler's own tests).
    pub fn new(
        server: impl Into<String>,
        authorization_url: impl Into<String>,
        redirect_uri: impl Into<String>,
    ) -> Self {
        McpAuthorizationRequest {
            server: server.into(),
            authorization_url: authorization_url.into(),
            redirect_uri: redirect_uri.into(),
            scopes: Vec::new(),
        }
    }
}

/// What the authorization server redirected to: the authorization code and the `state`
/// (and its issuer, RFC 9207 `iss`, when it sent one).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpAuthorizationResponse {
    /// The authorization code.
    pub code: String,
    /// The `state` parameter, as received.
    pub state: String,
    /// The `iss` parameter, when present.
    pub issuer: Option<String>,
}

impl std::fmt::Debug for McpAuthorizationResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpAuthorizationResponse")
            .field("code", &"[redacted]")
            .field("state", &self.state)
            .field("issuer", &self.issuer)
            .finish()
    }
}

impl McpAuthorizationResponse {
    /// A response from its code and state.
    pub fn new(code: impl Into<String>, state: impl Into<String>) -> Self {
        McpAuthorizationResponse {
            code: code.into(),
            state: state.into(),
            issuer: None,
        }
    }

    /// Adds the `iss` parameter the authorization server sent.
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Reads `code`, `state` and `iss` from the URL the authorization server redirected to
    /// (a `Location` header, the request a loopback listener received). A redirect with
    /// `error=...` (the user declined) or without a code is a [`McpConsentError`].
    pub fn from_redirect_url(url: &str) -> Result<Self, McpConsentError> {
        let parsed =
            reqwest::Url::parse(url).map_err(|_| McpConsentError::new("the redirect URL is not a valid URL"))?;
        let params: HashMap<String, String> = parsed.query_pairs().into_owned().collect();
        if let Some(error) = params.get("error") {
            return Err(McpConsentError::new(match params.get("error_description") {
                Some(description) => format!("the authorization server refused: {error} ({description})"),
                None => format!("the authorization server refused: {error}"),
            }));
        }
        let code = params
            .get("code")
            .ok_or_else(|| McpConsentError::new("the redirect carries no authorization code"))?;
        let state = params
            .get("state")
            .ok_or_else(|| McpConsentError::new("the redirect carries no state"))?;
        let mut response = McpAuthorizationResponse::new(code, state);
        response.issuer = params.get("iss").cloned();
        Ok(response)
    }
}

/// The user did not approve (declined, closed the browser, timed out), or the redirect could
/// not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct McpConsentError {
    /// What happened (never a code or token).
    pub message: String,
}

impl McpConsentError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        McpConsentError {
            message: message.into(),
        }
    }
}

/// Lets the user approve an authorization: opens the authorization URL (a browser, a
/// device prompt) and returns what the authorization server redirected to.
#[async_trait]
pub trait McpConsentHandler: Send + Sync {
    /// Runs one authorization and returns its code and state.
    async fn authorize(&self, request: &McpAuthorizationRequest) -> Result<McpAuthorizationResponse, McpConsentError>;
}

/// The tokens of one server, as a [`McpTokenStore`] keeps them. Serializable, so a store
/// may persist them as JSON; its `Debug` hides the tokens.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct McpStoredTokens {
    /// The client id the tokens were issued to (registered, pre-registered or a metadata URL).
    pub client_id: String,
    /// The access token.
    pub access_token: String,
    /// The token type the authorization server named (`bearer`).
    #[serde(default = "bearer")]
    pub token_type: String,
    /// The refresh token, when one was issued.
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// The access token's lifetime in seconds, when the server gave one.
    #[serde(default)]
    pub expires_in: Option<u64>,
    /// When the access token was received (seconds since the Unix epoch).
    #[serde(default)]
    pub received_at: Option<u64>,
    /// The scopes granted.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The authorization server that issued them (its `issuer`), when known.
    #[serde(default)]
    pub issuer: Option<String>,
}

fn bearer() -> String {
    "bearer".to_owned()
}

impl std::fmt::Debug for McpStoredTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpStoredTokens")
            .field("client_id", &self.client_id)
            .field("access_token", &"[redacted]")
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| "[redacted]"))
            .field("expires_in", &self.expires_in)
            .field("received_at", &self.received_at)
            .field("scopes", &self.scopes)
            .field("issuer", &self.issuer)
            .finish()
    }
}

impl McpStoredTokens {
    /// Tokens with an access token only (no refresh token, no expiry).
    pub fn new(client_id: impl Into<String>, access_token: impl Into<String>) -> Self {
        McpStoredTokens {
            client_id: client_id.into(),
            access_token: access_token.into(),
            token_type: bearer(),
            refresh_token: None,
            expires_in: None,
            received_at: None,
            scopes: Vec::new(),
            issuer: None,
        }
    }

    /// Whether the access token's lifetime is over at `now` (seconds since the Unix
    /// epoch); `false` when its expiry is unknown.
    pub fn is_expired_at(&self, now: u64) -> bool {
        match (self.expires_in, self.received_at) {
            (Some(lifetime), Some(received)) => now >= received.saturating_add(lifetime),
            _ => false,
        }
    }
}

/// A token store failed (its backend, not the authorization server).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct McpTokenStoreError {
    /// What happened (never a token).
    pub message: String,
}

impl McpTokenStoreError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        McpTokenStoreError {
            message: message.into(),
        }
    }
}

/// Where a connector keeps each server's tokens, under a key naming the server and its URL
/// (`"<server name> <url>"`), so tokens are never sent to another URL.
#[async_trait]
pub trait McpTokenStore: Send + Sync {
    /// The tokens saved under `key`, if any.
    async fn load(&self, key: &str) -> Result<Option<McpStoredTokens>, McpTokenStoreError>;
    /// Saves (replaces) the tokens under `key`.
    async fn save(&self, key: &str, tokens: McpStoredTokens) -> Result<(), McpTokenStoreError>;
    /// Forgets the tokens under `key`.
    async fn clear(&self, key: &str) -> Result<(), McpTokenStoreError>;
}

/// A [`McpTokenStore`] in memory: tokens last as long as the process (the default).
#[derive(Debug, Default)]
pub struct InMemoryTokenStore {
    tokens: tokio::sync::RwLock<HashMap<String, McpStoredTokens>>,
}

impl InMemoryTokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl McpTokenStore for InMemoryTokenStore {
    async fn load(&self, key: &str) -> Result<Option<McpStoredTokens>, McpTokenStoreError> {
        Ok(self.tokens.read().await.get(key).cloned())
    }

    async fn save(&self, key: &str, tokens: McpStoredTokens) -> Result<(), McpTokenStoreError> {
        self.tokens.write().await.insert(key.to_owned(), tokens);
        Ok(())
    }

    async fn clear(&self, key: &str) -> Result<(), McpTokenStoreError> {
        self.tokens.write().await.remove(key);
        Ok(())
    }
}

/// Which OAuth grant an [`McpOAuth`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// A person consents ([`McpConsentHandler`]); PKCE, the authorization code.
    AuthorizationCode,
    /// The client authenticates as itself (`client_credentials`, SEP-1046); no person.
    ClientCredentials,
    /// Enterprise-managed authorization (SEP-990): the user's ID token is exchanged at the
    /// enterprise identity provider for an ID-JAG, which the JWT-bearer grant redeems.
    CrossAppAccess,
}

/// The consent handler of a flow that never asks a person ([`McpOAuth::client_credentials`]).
struct NoConsent;

#[async_trait]
impl McpConsentHandler for NoConsent {
    async fn authorize(&self, _request: &McpAuthorizationRequest) -> Result<McpAuthorizationResponse, McpConsentError> {
        Err(McpConsentError::new(
            "a client-credentials flow asks no person for consent",
        ))
    }
}

/// How the connector authorizes against one server: the authorization-code flow
/// ([`McpOAuth::new`], see the [module documentation](self)) or the client-credentials grant
/// ([`McpOAuth::client_credentials`]).
#[derive(Clone)]
pub struct McpOAuth {
    pub(crate) grant: Grant,
    pub(crate) signing_key: Option<SigningKey>,
    pub(crate) cross_app: Option<CrossApp>,
    pub(crate) consent: Arc<dyn McpConsentHandler>,
    pub(crate) store: Arc<dyn McpTokenStore>,
    pub(crate) redirect_uri: String,
    pub(crate) client_id: Option<String>,
    pub(crate) client_secret: Option<String>,
    pub(crate) client_metadata_url: Option<String>,
    pub(crate) client_name: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) max_authorizations: u32,
}

impl std::fmt::Debug for McpOAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpOAuth")
            .field("grant", &self.grant)
            .field(
                "signing_key",
                &self
                    .signing_key
                    .as_ref()
                    .map(|k| format!("[redacted {:?} key]", k.algorithm)),
            )
            .field("identity_provider", &self.cross_app.as_ref().map(|c| &c.idp))
            .field("redirect_uri", &self.redirect_uri)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "[redacted]"))
            .field("client_metadata_url", &self.client_metadata_url)
            .field("client_name", &self.client_name)
            .field("scopes", &self.scopes)
            .field("max_authorizations", &self.max_authorizations)
            .finish_non_exhaustive()
    }
}

impl McpOAuth {
    /// The flow with this redirect URI and consent handler, tokens in an
    /// [`InMemoryTokenStore`], dynamic client registration (client name `modu`), scopes
    /// chosen from the server's challenge and metadata, and at most
    /// [`DEFAULT_MAX_AUTHORIZATIONS`] authorizations per request.
    pub fn new(redirect_uri: impl Into<String>, consent: Arc<dyn McpConsentHandler>) -> Self {
        McpOAuth {
            grant: Grant::AuthorizationCode,
            signing_key: None,
            cross_app: None,
            consent,
            store: Arc::new(InMemoryTokenStore::new()),
            redirect_uri: redirect_uri.into(),
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            client_name: "modu".to_owned(),
            scopes: Vec::new(),
            max_authorizations: DEFAULT_MAX_AUTHORIZATIONS,
        }
    }

    /// The client-credentials grant (SEP-1046) for a machine client registered with the
    /// authorization server: when the server challenges, the connector discovers the
    /// authorization server as for the authorization-code flow (protected resource metadata,
    /// then authorization server metadata), and asks its token endpoint for a token with
    /// `grant_type=client_credentials`, the `resource` indicator and the configured scopes,
    /// authenticating with the secret as the metadata asks (`client_secret_post`, or
    /// `client_secret_basic` when that is the only method offered). No person is asked; a
    /// token that expires or is refused is fetched again the same way.
    /// Unlike [`McpAuthConfig`](crate::McpAuthConfig)'s, the token endpoint is discovered.
    ///
    /// ```
    /// use modu_mcp::oauth::McpOAuth;
    ///
    /// let secret = std::env::var("REPORTS_CLIENT_SECRET").unwrap_or_default();
    /// let oauth = McpOAuth::client_credentials("reports-worker", secret).with_scopes(["reports:read"]);
    /// # let _ = oauth;
    /// ```
    pub fn client_credentials(client_id: impl Into<String>, client_secret: impl Into<String>) -> Self {
        McpOAuth {
            grant: Grant::ClientCredentials,
            ..McpOAuth::new(String::new(), Arc::new(NoConsent)).with_client(client_id, Some(client_secret.into()))
        }
    }

    /// The client-credentials grant with `private_key_jwt` client authentication (RFC 7523):
    /// as [`McpOAuth::client_credentials`], but instead of a secret the client sends an
    /// assertion signed with `private_key_pem` (a PKCS#8 or PKCS#1 PEM key matching
    /// `algorithm`), whose `iss` and `sub` are the client id and whose `aud` is the
    /// authorization server's issuer, valid for five minutes. The authorization server's
    /// metadata must offer `private_key_jwt` (and the algorithm, when it lists algorithms).
    ///
    /// ```
    /// use modu_mcp::oauth::{McpJwtAlgorithm, McpOAuth};
    ///
    /// let pem = std::fs::read("reports-worker.key.pem").unwrap_or_default();
    /// let oauth = McpOAuth::private_key_jwt("reports-worker", pem, McpJwtAlgorithm::Es256);
    /// # let _ = oauth;
    /// ```
    pub fn private_key_jwt(
        client_id: impl Into<String>,
        private_key_pem: impl Into<Vec<u8>>,
        algorithm: McpJwtAlgorithm,
    ) -> Self {
        McpOAuth {
            grant: Grant::ClientCredentials,
            signing_key: Some(SigningKey {
                pem: Arc::from(private_key_pem.into()),
                algorithm,
            }),
            ..McpOAuth::new(String::new(), Arc::new(NoConsent)).with_client(client_id, None)
        }
    }

    /// Enterprise-managed authorization (cross-app access, SEP-990), with no consent screen:
    /// when the server challenges, the connector discovers its authorization server, exchanges
    /// the user's `id_token` at the enterprise identity provider (RFC 8693 token exchange,
    /// `requested_token_type` ID-JAG, `audience` the authorization server's issuer,
    /// `resource` the MCP server) and redeems the identity assertion at the authorization
    /// server with the JWT-bearer grant (RFC 7523), authenticating there as `client_id` with
    /// `client_secret` (`client_secret_basic`). The token is kept in the token store; when it
    /// expires the exchange runs again with the same ID token, so give the connector a new
    /// `McpOAuth` when the user signs in again.
    ///
    /// ```
    /// use modu_mcp::oauth::{McpIdentityProvider, McpOAuth};
    ///
    /// let idp = McpIdentityProvider::new("https://idp.example", "https://idp.example/token", "modu-app");
    /// let id_token = std::env::var("USER_ID_TOKEN").unwrap_or_default();
    /// let oauth = McpOAuth::cross_app_access(idp, id_token, "modu-app", "resource-client-secret");
    /// # let _ = oauth;
    /// ```
    pub fn cross_app_access(
        identity_provider: McpIdentityProvider,
        id_token: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        McpOAuth {
            grant: Grant::CrossAppAccess,
            cross_app: Some(CrossApp {
                idp: identity_provider,
                id_token: id_token.into(),
            }),
            ..McpOAuth::new(String::new(), Arc::new(NoConsent)).with_client(client_id, Some(client_secret.into()))
        }
    }

    /// Keeps tokens in this store (share one store between connectors to share tokens).
    pub fn with_token_store(mut self, store: Arc<dyn McpTokenStore>) -> Self {
        self.store = store;
        self
    }

    /// Uses a client registered with the authorization server beforehand (no dynamic
    /// registration); with a secret, the client authenticates at the token endpoint as the
    /// server's metadata asks (`client_secret_basic` unless only `client_secret_post` is
    /// offered).
    pub fn with_client(mut self, client_id: impl Into<String>, client_secret: Option<String>) -> Self {
        self.client_id = Some(client_id.into());
        self.client_secret = client_secret;
        self
    }

    /// Uses this HTTPS URL of a client ID metadata document as the client id when the
    /// authorization server supports them (`client_id_metadata_document_supported`); other
    /// servers get a dynamic registration. A pre-registered client ([`McpOAuth::with_client`])
    /// comes first.
    pub fn with_client_metadata_url(mut self, url: impl Into<String>) -> Self {
        self.client_metadata_url = Some(url.into());
        self
    }

    /// The client name a dynamic registration sends (default `modu`).
    pub fn with_client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// Asks for these scopes on the first authorization instead of choosing them from the
    /// server's challenge and metadata.
    pub fn with_scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// At most `n` authorizations (consent handler calls) per request, step-ups included;
    /// zero is taken as one.
    pub fn with_max_authorizations(mut self, n: u32) -> Self {
        self.max_authorizations = n.max(1);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_gives_code_state_and_issuer() {
        let r = McpAuthorizationResponse::from_redirect_url(
            "http://localhost:3000/callback?code=abc&state=xyz&iss=https%3A%2F%2Fas.example",
        )
        .unwrap();
        assert_eq!((r.code.as_str(), r.state.as_str()), ("abc", "xyz"));
        assert_eq!(r.issuer.as_deref(), Some("https://as.example"));
        assert!(!format!("{r:?}").contains("abc"));
    }

    #[test]
    fn a_refused_redirect_is_an_error() {
        let e =
            McpAuthorizationResponse::from_redirect_url("http://localhost/cb?error=access_denied&state=s").unwrap_err();
        assert!(e.message.contains("access_denied"), "{e}");
        assert!(McpAuthorizationResponse::from_redirect_url("http://localhost/cb?state=s").is_err());
    }

    #[test]
    fn stored_tokens_hide_their_tokens_and_know_their_expiry() {
        let mut t = McpStoredTokens::new("client", "secret-access");
        t.refresh_token = Some("secret-refresh".into());
        let shown = format!("{t:?}");
        assert!(
            !shown.contains("secret-access") && !shown.contains("secret-refresh"),
            "{shown}"
        );
        assert!(!t.is_expired_at(u64::MAX));
        t.expires_in = Some(60);
        t.received_at = Some(1000);
        assert!(!t.is_expired_at(1059));
        assert!(t.is_expired_at(1060));
    }
}

/// A conformance suite every [`McpTokenStore`] passes (in-memory, Redis, SQLite, …), for the
/// tests of the crates that implement one. Not a stable API: enabled by the `test-support`
/// feature.
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod token_store_conformance;

mod machine;
pub(crate) use machine::{CrossApp, SigningKey};
pub use machine::{McpIdentityProvider, McpJwtAlgorithm};
