//! [`StoreAdapter`]: the connector's [`McpTokenStore`] as rmcp's credential store, and the
//! conversions between their token records.

use std::sync::Arc;

use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};
use serde_json::{Value, json};

use crate::oauth::{McpStoredTokens, McpTokenStore};

/// rmcp's credential store on the connector's [`McpTokenStore`].
pub(super) struct StoreAdapter {
    pub(super) store: Arc<dyn McpTokenStore>,
    pub(super) key: String,
}

fn to_rmcp(tokens: McpStoredTokens) -> Result<StoredCredentials, AuthError> {
    let mut response = json!({
        "access_token": tokens.access_token,
        "token_type": tokens.token_type,
    });
    if let Some(refresh) = tokens.refresh_token {
        response["refresh_token"] = Value::String(refresh);
    }
    if let Some(expires_in) = tokens.expires_in {
        response["expires_in"] = Value::from(expires_in);
    }
    if !tokens.scopes.is_empty() {
        response["scope"] = Value::String(tokens.scopes.join(" "));
    }
    serde_json::from_value(json!({
        "client_id": tokens.client_id,
        "token_response": response,
        "granted_scopes": tokens.scopes,
        "token_received_at": tokens.received_at,
        "issuer": tokens.issuer,
    }))
    .map_err(|_| AuthError::CredentialStoreError("the stored tokens could not be read".to_owned()))
}

/// `None` for credentials without tokens (a client id only).
fn from_rmcp(credentials: &StoredCredentials) -> Option<McpStoredTokens> {
    let value = serde_json::to_value(credentials).ok()?;
    let response = value.get("token_response")?.as_object()?;
    let text =
        |map: &serde_json::Map<String, Value>, key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut tokens = McpStoredTokens::new(credentials.client_id.clone(), text(response, "access_token")?);
    if let Some(kind) = text(response, "token_type") {
        tokens.token_type = kind;
    }
    tokens.refresh_token = text(response, "refresh_token");
    tokens.expires_in = response.get("expires_in").and_then(Value::as_u64);
    tokens.received_at = credentials.token_received_at;
    tokens.scopes = credentials.granted_scopes.clone();
    tokens.issuer = credentials.issuer.clone();
    Some(tokens)
}

#[async_trait::async_trait]
impl CredentialStore for StoreAdapter {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let stored = self
            .store
            .load(&self.key)
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.message))?;
        stored.map(to_rmcp).transpose()
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        match from_rmcp(&credentials) {
            Some(tokens) => self.store.save(&self.key, tokens).await,
            None => self.store.clear(&self.key).await,
        }
        .map_err(|e| AuthError::CredentialStoreError(e.message))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store
            .clear(&self.key)
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_tokens_survive_the_round_trip_through_rmcp() {
        let mut tokens = McpStoredTokens::new("client-1", "access-1");
        tokens.refresh_token = Some("refresh-1".into());
        tokens.expires_in = Some(3600);
        tokens.received_at = Some(1_700_000_000);
        tokens.scopes = vec!["a".into(), "b".into()];
        tokens.issuer = Some("https://as.example".into());
        let back = from_rmcp(&to_rmcp(tokens.clone()).unwrap()).unwrap();
        assert_eq!(back, tokens);
    }
}
