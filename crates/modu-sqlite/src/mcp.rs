//! MCP OAuth tokens in SQLite (the `mcp` feature).

use std::path::Path;

use async_trait::async_trait;
use modu_core::StoreError;
use modu_mcp::oauth::{McpStoredTokens, McpTokenStore, McpTokenStoreError};
use sqlx::sqlite::SqlitePool;

use crate::{migrate, now_ms, open, query_err};

/// The OAuth tokens of MCP servers in SQLite, for
/// [`McpOAuth::with_token_store`](modu_mcp::oauth::McpOAuth::with_token_store): one row per
/// entry in `modu_mcp_tokens` (`key`, `tokens` as JSON text, `saved_ms`), created by the
/// crate's migrations (`migrations/0004_mcp_tokens.sql`). `save` is one upsert
/// (`INSERT … ON CONFLICT (key) DO UPDATE`), `clear` one `DELETE`; the file may be shared
/// with the other stores of this crate and with other processes.
///
/// Errors are [`McpTokenStoreError`]s naming the operation, never a token or the stored
/// value. The tokens are stored as they are (not encrypted): protect the file as you
/// protect the credentials themselves.
///
/// ```
/// use std::sync::Arc;
/// use modu_mcp::oauth::{McpOAuth, McpStoredTokens, McpTokenStore};
/// use modu_sqlite::SqliteMcpTokenStore;
/// # use modu_mcp::oauth::{McpAuthorizationRequest, McpAuthorizationResponse, McpConsentError, McpConsentHandler};
/// # struct Browser;
/// # #[async_trait::async_trait]
/// # impl McpConsentHandler for Browser {
/// #     async fn authorize(&self, _: &McpAuthorizationRequest) -> Result<McpAuthorizationResponse, McpConsentError> {
/// #         Err(McpConsentError::new("no browser"))
/// #     }
/// # }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let pool = modu_sqlite::open(dir.path().join("agent.db")).await?;
/// let tokens = Arc::new(SqliteMcpTokenStore::from_pool(pool).await?);
/// let oauth = McpOAuth::new("http://127.0.0.1:8976/callback", Arc::new(Browser))
///     .with_token_store(tokens.clone());
///
/// // The connector loads and saves through the store; it can be used directly too.
/// tokens.save("files https://mcp.example.com/mcp", McpStoredTokens::new("client", "access")).await?;
/// let loaded = tokens.load("files https://mcp.example.com/mcp").await?;
/// assert_eq!(loaded.map(|t| t.access_token).as_deref(), Some("access"));
/// # let _ = oauth; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteMcpTokenStore {
    pool: SqlitePool,
}

impl SqliteMcpTokenStore {
    /// Opens (and creates) the database at `path` (see [`open`](crate::open)).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(SqliteMcpTokenStore {
            pool: open(path).await?,
        })
    }

    /// A store on an existing pool; applies the migrations.
    pub async fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(SqliteMcpTokenStore { pool })
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// A query failure as the token store error (sqlx's text names no bound value).
fn token_err(operation: &'static str) -> impl Fn(sqlx::Error) -> McpTokenStoreError {
    let err = query_err(operation);
    move |e| McpTokenStoreError::new(format!("sqlite token store: {}", err(e)))
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
impl McpTokenStore for SqliteMcpTokenStore {
    async fn load(&self, key: &str) -> Result<Option<McpStoredTokens>, McpTokenStoreError> {
        let raw: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT CAST(tokens AS BLOB) FROM modu_mcp_tokens WHERE key = ?1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(token_err("mcp_token.load"))?;
        raw.map(|bytes| serde_json::from_slice(&bytes).map_err(|e| undecodable(&e)))
            .transpose()
    }

    async fn save(&self, key: &str, tokens: McpStoredTokens) -> Result<(), McpTokenStoreError> {
        let value = serde_json::to_string(&tokens)
            .map_err(|_| McpTokenStoreError::new("the MCP tokens could not be encoded as JSON"))?;
        sqlx::query(
            "INSERT INTO modu_mcp_tokens (key, tokens, saved_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens, saved_ms = excluded.saved_ms",
        )
        .bind(key)
        .bind(value)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(token_err("mcp_token.save"))?;
        Ok(())
    }

    async fn clear(&self, key: &str) -> Result<(), McpTokenStoreError> {
        sqlx::query("DELETE FROM modu_mcp_tokens WHERE key = ?1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(token_err("mcp_token.clear"))?;
        Ok(())
    }
}
