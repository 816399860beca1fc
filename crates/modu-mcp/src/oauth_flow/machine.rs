//! The grants without a person: client credentials (with a secret or a signed assertion),
//! and the choice between them and cross-app access (`oauth_enterprise`).

use rmcp::transport::auth::{AuthorizationManager, ClientCredentialsConfig, WWWAuthenticateParams};

use super::OAuthFlow;
use crate::error::McpAuthError;
use crate::oauth::Grant;

impl OAuthFlow {
    /// The scopes a grant without a person asks for: the configured ones, then those the
    /// challenge names and `extra` (a step-up's), each once.
    pub(crate) fn machine_scopes(&self, challenge: &str, extra: Option<&str>) -> Vec<String> {
        let mut scopes = self.config.scopes.clone();
        let required = reqwest::Url::parse(&self.url)
            .ok()
            .and_then(|base| WWWAuthenticateParams::parse(challenge, &base).scope);
        for scope in required
            .iter()
            .map(String::as_str)
            .chain(extra)
            .flat_map(str::split_whitespace)
        {
            if !scopes.iter().any(|s| s == scope) {
                scopes.push(scope.to_owned());
            }
        }
        scopes
    }

    /// The client-credentials grant: discovery, then a token from the token endpoint for the
    /// configured scopes plus the ones the challenge names and `extra` (no person is asked).
    async fn client_credentials(
        &self,
        challenge: &str,
        extra: Option<&str>,
    ) -> Result<(AuthorizationManager, String), McpAuthError> {
        let mut manager = self.discover(challenge).await?;
        let Some(client_id) = &self.config.client_id else {
            return Err(self.fail("the client-credentials grant needs a client id"));
        };
        let scopes = self.machine_scopes(challenge, extra);
        let resource = Some(self.url.clone());
        let grant = match (&self.config.signing_key, &self.config.client_secret) {
            (Some(key), _) => ClientCredentialsConfig::PrivateKeyJwt {
                client_id: client_id.clone(),
                signing_key: key.pem.to_vec(),
                signing_algorithm: key.algorithm.to_rmcp(),
                token_endpoint_audience: None,
                scopes,
                resource,
            },
            (None, Some(secret)) => ClientCredentialsConfig::ClientSecret {
                client_id: client_id.clone(),
                client_secret: secret.clone(),
                scopes,
                resource,
            },
            (None, None) => return Err(self.fail("the client-credentials grant needs a secret or a signing key")),
        };
        manager
            .validate_client_credentials_metadata(&grant)
            .and_then(|()| manager.configure_client_credentials(&grant))
            .map_err(|e| self.auth_failure("the client-credentials grant could not start", &e))?;
        // rmcp's exchange future is not `Send` with `private_key_jwt` compiled in (it holds a
        // form serializer across an await), so it runs on a blocking thread of this runtime.
        let handle = tokio::runtime::Handle::current();
        let (manager, result) = tokio::task::spawn_blocking(move || {
            let result = handle.block_on(super::unlogged(manager.exchange_client_credentials(&grant)));
            (manager, result)
        })
        .await
        .map_err(|e| self.fail(format!("the client-credentials token request stopped: {e}")))?;
        let response =
            result.map_err(|e| self.auth_failure("the token endpoint refused the client credentials", &e))?;
        let token = self.remember_response(&response)?;
        tracing::debug!(server = %self.server, "OAuth client-credentials token fetched");
        Ok((manager, token))
    }

    /// The grant without a person this flow runs, for the scopes `extra` adds; `None` for the
    /// authorization-code flow.
    pub(super) async fn machine_grant(
        &self,
        challenge: &str,
        extra: Option<&str>,
    ) -> Option<Result<(AuthorizationManager, String), McpAuthError>> {
        Some(match self.config.grant {
            Grant::ClientCredentials => self.client_credentials(challenge, extra).await,
            Grant::CrossAppAccess => self.cross_app_access(challenge, extra).await,
            Grant::AuthorizationCode => return None,
        })
    }
}
