//! `RedisMcpTokenStore` against the Redis server at `REDIS_URL`: the shared token store
//! suite of `modu-mcp`, the key layout, persistence across store values, and errors that
//! carry no secret.
#![cfg(feature = "mcp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use modu_mcp::oauth::token_store_conformance::{full_tokens, token_store_suite};
use modu_mcp::oauth::{McpStoredTokens, McpTokenStore};
use modu_redis::RedisMcpTokenStore;
use modu_redis::redis::AsyncCommands;
use modu_redis::redis::aio::ConnectionManager;
use modu_testing::{service_env, unique_prefix};
use support::RedisServer;

async fn conn() -> Option<ConnectionManager> {
    let url = service_env("REDIS_URL")?;
    Some(
        modu_redis::connect(&url)
            .await
            .expect("REDIS_URL must point at a running redis-server"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_mcp_token_store_conforms() {
    let Some(conn) = conn().await else { return };
    token_store_suite(|| {
        let conn = conn.clone();
        async move {
            Arc::new(RedisMcpTokenStore::new(conn).with_prefix(unique_prefix("mcp-tokens"))) as Arc<dyn McpTokenStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_one_json_string_per_key_under_the_prefix() {
    let Some(mut conn) = conn().await else { return };
    let prefix = unique_prefix("mcp-layout");
    let store = RedisMcpTokenStore::new(conn.clone()).with_prefix(&prefix);
    let tokens = full_tokens("client", "access-xyz", "refresh-xyz");
    store
        .save("files https://mcp.example.com/mcp", tokens.clone())
        .await
        .unwrap();

    let key = format!("{prefix}:mcp-token:files https://mcp.example.com/mcp");
    let raw: String = conn.get(&key).await.unwrap();
    let json: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(json["access_token"], "access-xyz");
    assert_eq!(json["refresh_token"], "refresh-xyz");
    assert_eq!(json["client_id"], "client");
    let ttl: i64 = conn.ttl(&key).await.unwrap();
    assert_eq!(ttl, -1, "token entries do not expire");

    // Another store value on the same prefix (another process) sees the tokens; another
    // prefix does not.
    let again = RedisMcpTokenStore::connect(&service_env("REDIS_URL").unwrap())
        .await
        .unwrap()
        .with_prefix(&prefix);
    assert_eq!(
        again.load("files https://mcp.example.com/mcp").await.unwrap(),
        Some(tokens)
    );
    let other = RedisMcpTokenStore::new(conn.clone()).with_prefix(unique_prefix("mcp-layout"));
    assert_eq!(other.load("files https://mcp.example.com/mcp").await.unwrap(), None);

    store.clear("files https://mcp.example.com/mcp").await.unwrap();
    let exists: bool = conn.exists(&key).await.unwrap();
    assert!(!exists, "clear deletes the key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_prefix_is_the_crates() {
    let Some(mut conn) = conn().await else { return };
    let store = RedisMcpTokenStore::new(conn.clone());
    let key = unique_prefix("mcp-default");
    store.save(&key, McpStoredTokens::new("c", "a")).await.unwrap();
    let exists: bool = conn
        .exists(format!("{}:mcp-token:{key}", modu_redis::DEFAULT_PREFIX))
        .await
        .unwrap();
    store.clear(&key).await.unwrap();
    assert!(exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_entry_is_an_error_without_its_content() {
    let Some(mut conn) = conn().await else { return };
    let prefix = unique_prefix("mcp-corrupt");
    let store = RedisMcpTokenStore::new(conn.clone()).with_prefix(&prefix);
    // serde's own message for this would quote the string ("invalid type: string ...").
    let value = r#"{"client_id":"c","access_token":"s3cret-access","expires_in":"s3cret-lifetime"}"#;
    let _: () = conn.set(format!("{prefix}:mcp-token:k"), value).await.unwrap();
    let err = store.load("k").await.unwrap_err();
    assert!(!err.message.contains("s3cret"), "{err}");
    assert!(err.message.contains("not valid JSON"), "{err}");

    let _: () = conn
        .set(format!("{prefix}:mcp-token:k"), "not json s3cret")
        .await
        .unwrap();
    let err = store.load("k").await.unwrap_err();
    assert!(!err.message.contains("s3cret"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_gone_is_an_error_without_the_password() {
    // A port nothing listens on (bound and released), with a password in the URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://user:hunter2-pw@127.0.0.1:{port}/");
    match RedisMcpTokenStore::connect(&url).await {
        Ok(store) => {
            let err = store.load("k").await.unwrap_err();
            assert!(!err.message.contains("hunter2"), "{err}");
        }
        Err(err) => assert!(!err.to_string().contains("hunter2"), "{err}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_going_away_gives_errors_without_tokens_and_a_restart_keeps_them() {
    let Some(mut server) = RedisServer::try_start() else {
        return;
    };
    let store = RedisMcpTokenStore::new(modu_redis::connect(&server.url()).await.unwrap()).with_prefix("t");
    let tokens = full_tokens("client", "s3cret-access", "s3cret-refresh");
    store
        .save("files https://mcp.example.com/mcp", tokens.clone())
        .await
        .unwrap();

    server.kill();
    let err = store.load("files https://mcp.example.com/mcp").await.unwrap_err();
    assert!(err.message.contains("mcp_token.load"), "{err}");
    let err = store
        .save(
            "files https://mcp.example.com/mcp",
            McpStoredTokens::new("client", "s3cret-new"),
        )
        .await
        .unwrap_err();
    assert!(err.message.contains("mcp_token.save"), "{err}");
    assert!(!err.message.contains("s3cret"), "{err}");
    let err = store.clear("files https://mcp.example.com/mcp").await.unwrap_err();
    assert!(err.message.contains("mcp_token.clear"), "{err}");

    // The restarted server (append-only file) still has the tokens, and the first request
    // after the restart succeeds (sent again on a new connection).
    server.restart();
    assert_eq!(
        store.load("files https://mcp.example.com/mcp").await.unwrap(),
        Some(tokens)
    );
}
