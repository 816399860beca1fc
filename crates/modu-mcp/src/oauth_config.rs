//! [`McpOAuthConfig`]: the authorization-code flow ([`crate::oauth`]) named in a server's
//! configuration (`auth.oauth` in JSON or a `modu.toml`).
//!
//! The configuration says what to ask for; the application supplies the person's consent, the
//! token store and the redirect URI, through [`McpConnector::with_configured_oauth`] (the
//! `modu` command uses a loopback redirect and its configured store's token store).
//!
//! ```
//! use modu_mcp::McpConfig;
//!
//! let config = McpConfig::from_json(serde_json::json!({"servers": [{
//!     "name": "crm", "transport": "streamable_http", "url": "https://crm.example/mcp",
//!     "auth": {"oauth": {"scopes": ["crm.read"]}}
//! }]}))?;
//! let oauth = config.servers[0].auth.as_ref().and_then(|a| a.oauth.as_ref());
//! assert_eq!(oauth.map(|o| o.scopes.clone()), Some(vec!["crm.read".to_owned()]));
//! # Ok::<(), modu_mcp::McpServerConfigurationError>(())
//! ```

use std::sync::Arc;

use serde::Deserialize;

use crate::auth::secret_from_env;
use crate::client::McpConnector;
use crate::error::{McpAuthError, McpError};
use crate::oauth::{McpConsentHandler, McpOAuth, McpTokenStore};

/// A server's authorization-code settings. Everything is optional: by default the client
/// registers itself dynamically and asks for the scopes the server's challenge or metadata
/// names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpOAuthConfig {
    /// Scopes to ask for.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// A client registered with the authorization server beforehand (instead of dynamic
    /// registration).
    #[serde(default)]
    pub client_id: Option<String>,
    /// The environment variable holding that client's secret (a confidential client).
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// The URL of a client ID metadata document to use as the client id (CIMD).
    #[serde(default)]
    pub client_metadata_url: Option<String>,
}

impl McpOAuthConfig {
    /// The flow for the server `server`: these settings with the application's redirect URI,
    /// consent handler and token store. Fails when the client secret's variable is unset.
    pub fn to_oauth(
        &self,
        server: &str,
        redirect_uri: &str,
        consent: Arc<dyn McpConsentHandler>,
        store: Arc<dyn McpTokenStore>,
    ) -> Result<McpOAuth, McpAuthError> {
        let mut oauth = McpOAuth::new(redirect_uri, consent).with_token_store(store);
        if !self.scopes.is_empty() {
            oauth = oauth.with_scopes(self.scopes.iter().cloned());
        }
        if let Some(client_id) = &self.client_id {
            let secret = match &self.client_secret_env {
                Some(var) => Some(secret_from_env(server, var, "OAuth client secret")?),
                None => None,
            };
            oauth = oauth.with_client(client_id.clone(), secret);
        }
        if let Some(url) = &self.client_metadata_url {
            oauth = oauth.with_client_metadata_url(url.clone());
        }
        Ok(oauth)
    }

    /// Checks the settings (the server's validation calls it); the message, if any.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.client_secret_env.is_some() && self.client_id.is_none() {
            return Err("auth.oauth.client_secret_env needs auth.oauth.client_id".into());
        }
        if self.client_id.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err("auth.oauth.client_id is empty".into());
        }
        if self.client_id.is_some() && self.client_metadata_url.is_some() {
            return Err("auth.oauth takes client_id or client_metadata_url, not both".into());
        }
        if let Some(url) = &self.client_metadata_url
            && !url.starts_with("https://")
        {
            return Err("auth.oauth.client_metadata_url must be an https URL".into());
        }
        Ok(())
    }
}

impl McpConnector {
    /// Gives every configured server with `auth.oauth` its authorization-code flow
    /// ([`McpConnector::with_oauth`]), built from its settings with `redirect_uri`, `consent`
    /// and `store`. Fails when a server's client secret variable is unset.
    pub fn with_configured_oauth(
        mut self,
        redirect_uri: &str,
        consent: Arc<dyn McpConsentHandler>,
        store: Arc<dyn McpTokenStore>,
    ) -> Result<Self, McpError> {
        let configured: Vec<(String, McpOAuthConfig)> = self
            .config()
            .servers
            .iter()
            .filter_map(|s| Some((s.name.clone(), s.auth.as_ref()?.oauth.clone()?)))
            .collect();
        for (server, settings) in configured {
            let oauth = settings.to_oauth(&server, redirect_uri, Arc::clone(&consent), Arc::clone(&store))?;
            self = self.with_oauth(server, oauth);
        }
        Ok(self)
    }
}
