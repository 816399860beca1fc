//! `SqliteMcpTokenStore`: the shared token store suite of `modu-mcp` on temporary files and
//! in memory, the table, persistence across reopening, and errors that carry no secret.
#![cfg(feature = "mcp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_mcp::oauth::token_store_conformance::{full_tokens, token_store_suite};
use modu_mcp::oauth::{McpStoredTokens, McpTokenStore};
use modu_sqlite::SqliteMcpTokenStore;

/// Fresh database paths in one temporary folder.
struct Files {
    dir: tempfile::TempDir,
    n: AtomicUsize,
}

impl Files {
    fn new() -> Arc<Self> {
        Arc::new(Files {
            dir: tempfile::tempdir().unwrap(),
            n: AtomicUsize::new(0),
        })
    }
    fn next(&self) -> PathBuf {
        let n = self.n.fetch_add(1, Ordering::SeqCst);
        self.dir.path().join(format!("case-{n}")).join("tokens.db")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_mcp_token_store_on_a_file_conforms() {
    let files = Files::new();
    token_store_suite(|| {
        let path = files.next();
        async move { Arc::new(SqliteMcpTokenStore::open(path).await.unwrap()) as Arc<dyn McpTokenStore> }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_mcp_token_store_in_memory_conforms() {
    token_store_suite(|| async {
        let pool = modu_sqlite::open_in_memory().await.unwrap();
        Arc::new(SqliteMcpTokenStore::from_pool(pool).await.unwrap()) as Arc<dyn McpTokenStore>
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_survive_reopening_the_file_and_are_json_rows() {
    let files = Files::new();
    let path = files.next();
    let tokens = full_tokens("client", "access-xyz", "refresh-xyz");
    {
        let store = SqliteMcpTokenStore::open(&path).await.unwrap();
        store
            .save("files https://mcp.example.com/mcp", tokens.clone())
            .await
            .unwrap();
        store
            .save("other https://mcp.example.com/mcp", McpStoredTokens::new("c", "a"))
            .await
            .unwrap();
        store.clear("other https://mcp.example.com/mcp").await.unwrap();
        store.pool().close().await;
    }
    let store = SqliteMcpTokenStore::open(&path).await.unwrap();
    assert_eq!(
        store.load("files https://mcp.example.com/mcp").await.unwrap(),
        Some(tokens)
    );
    assert_eq!(store.load("other https://mcp.example.com/mcp").await.unwrap(), None);

    let rows: Vec<(String, String)> = sqlx::query_as("SELECT key, tokens FROM modu_mcp_tokens")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "a clear deletes the row; a save upserts one row per key");
    assert_eq!(rows[0].0, "files https://mcp.example.com/mcp");
    let json: serde_json::Value = serde_json::from_str(&rows[0].1).unwrap();
    assert_eq!(json["access_token"], "access-xyz");
    assert_eq!(json["refresh_token"], "refresh-xyz");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwriting_keeps_one_row_per_key() {
    let store = SqliteMcpTokenStore::from_pool(modu_sqlite::open_in_memory().await.unwrap())
        .await
        .unwrap();
    for i in 0..5 {
        store
            .save("k", McpStoredTokens::new("c", format!("access-{i}")))
            .await
            .unwrap();
    }
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM modu_mcp_tokens")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(store.load("k").await.unwrap().unwrap().access_token, "access-4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_comes_with_the_other_stores_migrations() {
    // A pool opened for the other stores already has the table (one schema for every build).
    let pool = modu_sqlite::open_in_memory().await.unwrap();
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'modu_mcp_tokens'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_row_is_an_error_without_its_content() {
    let store = SqliteMcpTokenStore::from_pool(modu_sqlite::open_in_memory().await.unwrap())
        .await
        .unwrap();
    for value in [
        // serde's own message for this would quote the string ("invalid type: string ...").
        r#"{"client_id":"c","access_token":"s3cret-access","expires_in":"s3cret-lifetime"}"#,
        "not json s3cret",
    ] {
        sqlx::query("INSERT OR REPLACE INTO modu_mcp_tokens (key, tokens, saved_ms) VALUES ('k', ?1, 0)")
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
    let store = SqliteMcpTokenStore::from_pool(modu_sqlite::open_in_memory().await.unwrap())
        .await
        .unwrap();
    store.pool().close().await;
    let err = store
        .save("k", McpStoredTokens::new("c", "s3cret-access"))
        .await
        .unwrap_err();
    assert!(err.message.contains("mcp_token.save"), "{err}");
    assert!(!err.message.contains("s3cret"), "{err}");
    let err = store.load("k").await.unwrap_err();
    assert!(err.message.contains("mcp_token.load"), "{err}");
}
