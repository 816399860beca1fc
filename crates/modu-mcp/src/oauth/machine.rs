//! What the flows without a person hold: a `private_key_jwt` signing key, an enterprise
//! identity provider.

use std::sync::Arc;

/// The signing algorithm of a `private_key_jwt` client assertion
/// ([`McpOAuth::private_key_jwt`](super::McpOAuth::private_key_jwt)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpJwtAlgorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256 (an RSA key).
    Rs256,
    /// RSASSA-PKCS1-v1_5 with SHA-384 (an RSA key).
    Rs384,
    /// RSASSA-PKCS1-v1_5 with SHA-512 (an RSA key).
    Rs512,
    /// ECDSA on P-256 with SHA-256 (an EC key).
    Es256,
    /// ECDSA on P-384 with SHA-384 (an EC key).
    Es384,
}

impl McpJwtAlgorithm {
    /// The algorithm's JOSE name (`"ES256"`, …); `None` for a name modu-mcp does not sign with.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "RS256" => McpJwtAlgorithm::Rs256,
            "RS384" => McpJwtAlgorithm::Rs384,
            "RS512" => McpJwtAlgorithm::Rs512,
            "ES256" => McpJwtAlgorithm::Es256,
            "ES384" => McpJwtAlgorithm::Es384,
            _ => return None,
        })
    }

    pub(crate) fn to_rmcp(self) -> rmcp::transport::auth::JwtSigningAlgorithm {
        use rmcp::transport::auth::JwtSigningAlgorithm as A;
        match self {
            McpJwtAlgorithm::Rs256 => A::RS256,
            McpJwtAlgorithm::Rs384 => A::RS384,
            McpJwtAlgorithm::Rs512 => A::RS512,
            McpJwtAlgorithm::Es256 => A::ES256,
            McpJwtAlgorithm::Es384 => A::ES384,
        }
    }
}

/// A `private_key_jwt` client's signing key (never shown).
#[derive(Clone)]
pub(crate) struct SigningKey {
    pub(crate) pem: Arc<[u8]>,
    pub(crate) algorithm: McpJwtAlgorithm,
}

/// The enterprise identity provider of a cross-app access flow
/// ([`McpOAuth::cross_app_access`](super::McpOAuth::cross_app_access)): where the user's ID token is exchanged (RFC 8693) for
/// an identity assertion grant for the MCP server's authorization server.
#[derive(Clone)]
pub struct McpIdentityProvider {
    pub(crate) issuer: String,
    pub(crate) token_endpoint: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: Option<String>,
}

impl std::fmt::Debug for McpIdentityProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpIdentityProvider")
            .field("issuer", &self.issuer)
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

impl McpIdentityProvider {
    /// The identity provider `issuer`, its token endpoint, and this application's client id
    /// there (a public client unless [`McpIdentityProvider::with_client_secret`]).
    pub fn new(issuer: impl Into<String>, token_endpoint: impl Into<String>, client_id: impl Into<String>) -> Self {
        McpIdentityProvider {
            issuer: issuer.into(),
            token_endpoint: token_endpoint.into(),
            client_id: client_id.into(),
            client_secret: None,
        }
    }

    /// Authenticates at the identity provider with this secret (`client_secret_basic`).
    pub fn with_client_secret(mut self, secret: impl Into<String>) -> Self {
        self.client_secret = Some(secret.into());
        self
    }
}

/// What a cross-app access flow exchanges.
#[derive(Clone)]
pub(crate) struct CrossApp {
    pub(crate) idp: McpIdentityProvider,
    pub(crate) id_token: String,
}

#[cfg(test)]
mod tests {
    use super::super::{Grant, McpOAuth};
    use super::*;

    #[test]
    fn machine_flows_never_show_their_secrets() {
        let flows = [
            McpOAuth::client_credentials("worker", "secret-one"),
            McpOAuth::private_key_jwt(
                "worker",
                b"-----BEGIN PRIVATE KEY-----secret-two".to_vec(),
                McpJwtAlgorithm::Es256,
            ),
            McpOAuth::cross_app_access(
                McpIdentityProvider::new("https://idp", "https://idp/token", "app").with_client_secret("secret-three"),
                "secret-four",
                "app",
                "secret-five",
            ),
        ];
        for flow in &flows {
            let shown = format!("{flow:?}");
            assert!(!shown.contains("secret-"), "{shown}");
            assert_ne!(flow.grant, Grant::AuthorizationCode);
        }
        assert_eq!(McpJwtAlgorithm::from_name("ES256"), Some(McpJwtAlgorithm::Es256));
        assert_eq!(McpJwtAlgorithm::from_name("HS256"), None);
    }
}
