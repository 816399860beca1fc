//! `PostgresMcpTokenStore` on PostgreSQL (`MODU_POSTGRES_URL`): the shared token store suite
//! of `modu-mcp` (one fresh schema per case), the table, sharing between pools, and errors
//! that carry no secret.
#![cfg(feature = "mcp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use modu_mcp::oauth::token_store_conformance::{full_tokens, token_store_suite};
use modu_mcp::oauth::{McpStoredTokens, McpTokenStore};
use modu_postgres::PostgresMcpTokenStore;
use modu_postgres::sqlx;
use support::{fresh_pool, schema, url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_mcp_token_store_conforms() {
    let Some(url) = url() else { return };
    token_store_suite(|| {
        let url = url.clone();
        async move {
            let pool = fresh_pool(&url, "mcp-tokens").await;
            Arc::new(PostgresMcpTokenStore::from_pool(pool).await.unwrap()) as Arc<dyn McpTokenStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_shared_between_pools_and_are_json_rows() {
    let Some(url) = url() else { return };
    let name = schema("mcp-share");
    let a = PostgresMcpTokenStore::from_pool(modu_postgres::connect_in_schema(&url, &name).await.unwrap())
        .await
        .unwrap();
    let b = PostgresMcpTokenStore::from_pool(modu_postgres::connect_in_schema(&url, &name).await.unwrap())
        .await
        .unwrap();
    let tokens = full_tokens("client", "access-xyz", "refresh-xyz");
    a.save("files https://mcp.example.com/mcp", tokens.clone())
        .await
        .unwrap();
    assert_eq!(b.load("files https://mcp.example.com/mcp").await.unwrap(), Some(tokens));
    for i in 0..3 {
        b.save(
            "files https://mcp.example.com/mcp",
            McpStoredTokens::new("c", format!("access-{i}")),
        )
        .await
        .unwrap();
    }
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT key, tokens FROM modu_mcp_tokens")
        .fetch_all(a.pool())
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "a save upserts one row per key");
    let json: serde_json::Value = serde_json::from_str(&rows[0].1).unwrap();
    assert_eq!(json["access_token"], "access-2");
    b.clear("files https://mcp.example.com/mcp").await.unwrap();
    assert_eq!(a.load("files https://mcp.example.com/mcp").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_row_is_an_error_without_its_content() {
    let Some(url) = url() else { return };
    let store = PostgresMcpTokenStore::from_pool(fresh_pool(&url, "mcp-corrupt").await)
        .await
        .unwrap();
    for value in [
        // serde's own message for this would quote the string ("invalid type: string ...").
        r#"{"client_id":"c","access_token":"s3cret-access","expires_in":"s3cret-lifetime"}"#,
        "not json s3cret",
    ] {
        sqlx::query(
            "INSERT INTO modu_mcp_tokens (key, tokens, saved_at) VALUES ('k', $1, now())
             ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens",
        )
        .bind(value)
        .execute(store.pool())
        .await
        .unwrap();
        let err = store.load("k").await.unwrap_err();
        assert!(!err.message.contains("s3cret"), "{err}");
        assert!(err.message.contains("not valid JSON"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pool_is_an_error_naming_the_operation() {
    let Some(url) = url() else { return };
    let store = PostgresMcpTokenStore::from_pool(fresh_pool(&url, "mcp-closed").await)
        .await
        .unwrap();
    store.pool().close().await;
    let err = store
        .save("k", McpStoredTokens::new("c", "s3cret-access"))
        .await
        .unwrap_err();
    assert!(err.message.contains("mcp_token.save"), "{err}");
    assert!(!err.message.contains("s3cret"), "{err}");
}
