//! MCP OAuth tokens in Redis (the `mcp` feature).

use async_trait::async_trait;
use modu_core::StoreError;
use modu_mcp::oauth::{McpStoredTokens, McpTokenStore, McpTokenStoreError};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;

use crate::{DEFAULT_PREFIX, with_retry};

/// The OAuth tokens of MCP servers in Redis, for
/// [`McpOAuth::with_token_store`](modu_mcp::oauth::McpOAuth::with_token_store): one string
/// per entry at `{prefix}:mcp-token:{key}` holding the [`McpStoredTokens`] as JSON, no
/// expiry (a refresh token outlives its access token; the connector refreshes or asks again
/// when the access token has expired).
///
/// `save` is one `SET` (it replaces the entry), `clear` one `DEL`; like the other stores of
/// this crate, an operation whose connection was lost is sent once more on a new connection.
/// Errors are [`McpTokenStoreError`]s naming the operation and the error class, never a
/// token, a password of the Redis URL or the stored value.
///
/// The tokens are stored as they are (not encrypted): protect the Redis server and its
/// backups as you protect the credentials themselves.
///
/// ```no_run
/// use std::sync::Arc;
/// use modu_mcp::oauth::{McpOAuth, McpStoredTokens, McpTokenStore};
/// use modu_redis::RedisMcpTokenStore;
/// # use modu_mcp::oauth::{McpAuthorizationRequest, McpAuthorizationResponse, McpConsentError, McpConsentHandler};
/// # struct Browser;
/// # #[async_trait::async_trait]
/// # impl McpConsentHandler for Browser {
/// #     async fn authorize(&self, _: &McpAuthorizationRequest) -> Result<McpAuthorizationResponse, McpConsentError> {
/// #         Err(McpConsentError::new("no browser"))
/// #     }
/// # }
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let conn = modu_redis::connect("redis://127.0.0.1:6379/0").await?;
/// let tokens = Arc::new(RedisMcpTokenStore::new(conn).with_prefix("myapp"));
/// let oauth = McpOAuth::new("http://127.0.0.1:8976/callback", Arc::new(Browser))
///     .with_token_store(tokens.clone());
///
/// // The connector loads and saves through the store; it can be used directly too.
/// tokens.save("files https://mcp.example.com/mcp", McpStoredTokens::new("client", "access")).await?;
/// assert!(tokens.load("files https://mcp.example.com/mcp").await?.is_some());
/// # let _ = oauth; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisMcpTokenStore {
    conn: ConnectionManager,
    prefix: String,
}

impl std::fmt::Debug for RedisMcpTokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMcpTokenStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisMcpTokenStore {
    /// A store on a connection, with the key prefix [`DEFAULT_PREFIX`].
    pub fn new(conn: ConnectionManager) -> Self {
        RedisMcpTokenStore {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }

    /// Connects to `url` (see [`connect`](crate::connect)).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(crate::connect(url).await?))
    }

    /// Uses `prefix` for keys (`{prefix}:mcp-token:{key}`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The Redis key of the entry `key`.
    fn redis_key(&self, key: &str) -> String {
        format!("{}:mcp-token:{key}", self.prefix)
    }
}

/// A store failure as the token store error (the text is the redacted [`StoreError`]).
fn token_err(e: StoreError) -> McpTokenStoreError {
    McpTokenStoreError::new(format!("redis token store: {e}"))
}

/// Stored bytes that are not tokens; the message gives the position and class of the fault
/// only, since serde's own text may quote the (secret) value.
fn undecodable(e: &serde_json::Error) -> McpTokenStoreError {
    McpTokenStoreError::new(format!(
        "stored MCP tokens are not valid JSON tokens ({:?} error at line {} column {})",
        e.classify(),
        e.line(),
        e.column()
    ))
}

#[async_trait]
impl McpTokenStore for RedisMcpTokenStore {
    async fn load(&self, key: &str) -> Result<Option<McpStoredTokens>, McpTokenStoreError> {
        let key = self.redis_key(key);
        let raw: Option<Vec<u8>> = with_retry(&self.conn, "mcp_token.load", |mut conn| {
            let key = &key;
            async move { conn.get(key).await }
        })
        .await
        .map_err(token_err)?;
        raw.map(|bytes| serde_json::from_slice(&bytes).map_err(|e| undecodable(&e)))
            .transpose()
    }

    async fn save(&self, key: &str, tokens: McpStoredTokens) -> Result<(), McpTokenStoreError> {
        let key = self.redis_key(key);
        let value = serde_json::to_vec(&tokens)
            .map_err(|_| McpTokenStoreError::new("the MCP tokens could not be encoded as JSON"))?;
        with_retry(&self.conn, "mcp_token.save", |mut conn| {
            let (key, value) = (&key, &value);
            async move { conn.set::<_, _, ()>(key, value).await }
        })
        .await
        .map_err(token_err)
    }

    async fn clear(&self, key: &str) -> Result<(), McpTokenStoreError> {
        let key = self.redis_key(key);
        let _: i64 = with_retry(&self.conn, "mcp_token.clear", |mut conn| {
            let key = &key;
            async move { conn.del(key).await }
        })
        .await
        .map_err(token_err)?;
        Ok(())
    }
}
