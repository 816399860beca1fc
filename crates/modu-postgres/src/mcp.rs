//! MCP OAuth tokens in PostgreSQL (the `mcp` feature).

use async_trait::async_trait;
use modu_core::StoreError;
use modu_mcp::oauth::{McpStoredTokens, McpTokenStore, McpTokenStoreError};
use sqlx::postgres::PgPool;

use crate::{connect, migrate, query_err};

/// The OAuth tokens of MCP servers in PostgreSQL, for
/// [`McpOAuth::with_token_store`](modu_mcp::oauth::McpOAuth::with_token_store): one row per
/// entry in `modu_mcp_tokens` (`key`, `tokens` as JSON text, `saved_at`) of the store's
/// schema, created by the crate's migrations (`migrations/0003_mcp_tokens.sql`). `save` is
/// one upsert (`INSERT … ON CONFLICT (key) DO UPDATE`), `clear` one `DELETE`; every process
/// on the database shares the tokens.
///
/// Errors are [`McpTokenStoreError`]s naming the operation, never a token, the stored value
/// or a password of the URL. The tokens are stored as they are (not encrypted): protect the
/// database and its backups as you protect the credentials themselves.
///
/// ```no_run
/// use std::sync::Arc;
/// use modu_mcp::oauth::{McpOAuth, McpStoredTokens, McpTokenStore};
/// use modu_postgres::PostgresMcpTokenStore;
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
/// let pool = modu_postgres::connect("postgres://modu@127.0.0.1:5432/modu").await?;
/// let tokens = Arc::new(PostgresMcpTokenStore::from_pool(pool).await?);
/// let oauth = McpOAuth::new("http://127.0.0.1:8976/callback", Arc::new(Browser))
///     .with_token_store(tokens.clone());
///
/// // The connector loads and saves through the store; it can be used directly too.
/// tokens.save("files https://mcp.example.com/mcp", McpStoredTokens::new("client", "access")).await?;
/// assert!(tokens.load("files https://mcp.example.com/mcp").await?.is_some());
/// # let _ = oauth; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresMcpTokenStore {
    pool: PgPool,
}

impl PostgresMcpTokenStore {
    /// Connects to the database at `url` (see [`connect`](crate::connect)).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresMcpTokenStore {
            pool: connect(url).await?,
        })
    }

    /// A store on an existing pool; applies the migrations.
    pub async fn from_pool(pool: PgPool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(PostgresMcpTokenStore { pool })
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// A query failure as the token store error (the crate's redacted text; sqlx's names no
/// bound value).
fn token_err(operation: &'static str) -> impl Fn(sqlx::Error) -> McpTokenStoreError {
    let err = query_err(operation);
    move |e| McpTokenStoreError::new(format!("postgres token store: {}", err(e)))
}

/// A stored value that is not tokens; the message gives the position and class of the fault
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
impl McpTokenStore for PostgresMcpTokenStore {
    async fn load(&self, key: &str) -> Result<Option<McpStoredTokens>, McpTokenStoreError> {
        let raw: Option<String> = sqlx::query_scalar("SELECT tokens FROM modu_mcp_tokens WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(token_err("mcp_token.load"))?;
        raw.map(|text| serde_json::from_str(&text).map_err(|e| undecodable(&e)))
            .transpose()
    }

    async fn save(&self, key: &str, tokens: McpStoredTokens) -> Result<(), McpTokenStoreError> {
        let value = serde_json::to_string(&tokens)
            .map_err(|_| McpTokenStoreError::new("the MCP tokens could not be encoded as JSON"))?;
        sqlx::query(
            "INSERT INTO modu_mcp_tokens (key, tokens, saved_at) VALUES ($1, $2, clock_timestamp())
             ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens, saved_at = excluded.saved_at",
        )
        .bind(key)
        .bind(value)
        .execute(&self.pool)
        .await
        .map_err(token_err("mcp_token.save"))?;
        Ok(())
    }

    async fn clear(&self, key: &str) -> Result<(), McpTokenStoreError> {
        sqlx::query("DELETE FROM modu_mcp_tokens WHERE key = $1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(token_err("mcp_token.clear"))?;
        Ok(())
    }
}
