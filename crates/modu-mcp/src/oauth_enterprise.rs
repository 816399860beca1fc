//! Enterprise-managed authorization (cross-app access, SEP-990) on rmcp's `enterprise`
//! module: the user's ID token becomes an ID-JAG at the identity provider, and the ID-JAG an
//! access token at the MCP server's authorization server.

use oauth2::ClientSecret;
use rmcp::transport::auth::AuthorizationManager;
use rmcp::transport::auth::enterprise::{
    EmaAuthorizationServer, EmaClientAuthentication, EmaError, EmaExchangeRequest, EmaExchangeStage,
};

use crate::error::McpAuthError;
use crate::oauth::McpStoredTokens;
use crate::oauth_flow::{OAuthFlow, now};

impl OAuthFlow {
    /// Discovery, the token exchange at the identity provider, the JWT-bearer grant at the
    /// authorization server; the token is saved in the token store, where the manager reads it.
    pub(crate) async fn cross_app_access(
        &self,
        challenge: &str,
        extra: Option<&str>,
    ) -> Result<(AuthorizationManager, String), McpAuthError> {
        let (Some(cross_app), Some(client_id), Some(secret)) = (
            &self.config.cross_app,
            &self.config.client_id,
            &self.config.client_secret,
        ) else {
            return Err(self.fail("cross-app access needs an identity provider, a client id and a secret"));
        };
        let (manager, metadata) = self.discover_metadata(challenge).await?;
        let Some(issuer) = metadata.issuer.clone() else {
            return Err(self.fail("the authorization server's metadata names no issuer, which cross-app access needs"));
        };
        let idp = &cross_app.idp;
        let mut idp_server = EmaAuthorizationServer::new(&idp.issuer, &idp.token_endpoint, &idp.client_id);
        if let Some(secret) = &idp.client_secret {
            idp_server = idp_server.with_client_authentication(EmaClientAuthentication::ClientSecretBasic(
                ClientSecret::new(secret.clone()),
            ));
        }
        let resource_server = EmaAuthorizationServer::new(&issuer, &metadata.token_endpoint, client_id)
            .with_client_authentication(EmaClientAuthentication::ClientSecretBasic(ClientSecret::new(
                secret.clone(),
            )));
        let scopes = self.machine_scopes(challenge, extra);
        let http = rmcp::transport::auth::default_oauth_http_client()
            .map_err(|e| self.auth_failure("OAuth could not start", &e))?;
        let token = EmaExchangeRequest::new_with_id_token(idp_server, resource_server, &self.url, &cross_app.id_token)
            .with_scopes(scopes)
            .exchange(&http, &http)
            .await
            .map_err(|e| self.fail(format!("cross-app access failed: {}", describe(&e))))?;
        let access = token.access_token.secret().clone();
        let mut stored = McpStoredTokens::new(client_id.clone(), access.clone());
        stored.expires_in = token.expires_in.map(|d| d.as_secs());
        stored.received_at = Some(now());
        let mut scopes: Vec<String> = token.scopes.into_iter().collect();
        scopes.sort();
        stored.scopes = scopes;
        stored.issuer = Some(issuer);
        self.config
            .store
            .save(&self.key, stored)
            .await
            .map_err(|e| self.fail(format!("the token store failed: {e}")))?;
        self.remember(&access);
        tracing::debug!(server = %self.server, "OAuth cross-app access token fetched");
        Ok((manager, access))
    }
}

/// A sentence for an exchange failure (no type names, no response bodies: rmcp keeps none).
fn describe(e: &EmaError) -> String {
    let stage = |s: &EmaExchangeStage| match s {
        EmaExchangeStage::IdentityProvider => "the identity provider",
        _ => "the authorization server",
    };
    match e {
        EmaError::InvalidRequest(why) => format!("the exchange request is invalid: {why}"),
        EmaError::InvalidResponse { stage: s, message } => format!("{} answered oddly: {message}", stage(s)),
        EmaError::RequestFailed(s) => format!("the request to {} failed", stage(s)),
        EmaError::InvalidGrant(s) => format!("{} refused the grant (invalid_grant)", stage(s)),
        EmaError::InsufficientUserAuthentication(s) => {
            format!(
                "{} wants the user to sign in again (insufficient_user_authentication)",
                stage(s)
            )
        }
        EmaError::OAuthRejected { stage: s, status, code } => {
            format!("{} answered HTTP {status}: {code}", stage(s))
        }
        other => other.to_string(),
    }
}
