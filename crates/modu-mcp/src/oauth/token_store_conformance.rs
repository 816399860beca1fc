//! A conformance suite every [`McpTokenStore`] passes (in-memory, Redis, SQLite, …), for the
//! tests of the crates that implement one. Not a stable API: enabled by the `test-support`
//! feature.

use std::future::Future;
use std::sync::Arc;

use super::{McpStoredTokens, McpTokenStore};

/// Tokens with every field set, the access token `access` and the refresh token `refresh`.
pub fn full_tokens(client_id: &str, access: &str, refresh: &str) -> McpStoredTokens {
    let mut tokens = McpStoredTokens::new(client_id, access);
    tokens.token_type = "bearer".to_owned();
    tokens.refresh_token = Some(refresh.to_owned());
    tokens.expires_in = Some(3600);
    tokens.received_at = Some(1_767_225_600);
    tokens.scopes = vec!["files:read".to_owned(), "offline_access".to_owned()];
    tokens.issuer = Some("https://as.example.com".to_owned());
    tokens
}

async fn load(store: &dyn McpTokenStore, key: &str) -> Option<McpStoredTokens> {
    match store.load(key).await {
        Ok(tokens) => tokens,
        Err(e) => panic!("load({key:?}) failed: {e}"),
    }
}

async fn save(store: &dyn McpTokenStore, key: &str, tokens: McpStoredTokens) {
    if let Err(e) = store.save(key, tokens).await {
        panic!("save({key:?}) failed: {e}");
    }
}

async fn clear(store: &dyn McpTokenStore, key: &str) {
    if let Err(e) = store.clear(key).await {
        panic!("clear({key:?}) failed: {e}");
    }
}

/// Runs every case, each on a fresh store from `make` (a store whose keys no other case
/// or test sees: a new database, a unique key prefix). Panics on the first failure.
pub async fn token_store_suite<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn McpTokenStore>>,
{
    missing_key_is_none(&*make().await).await;
    round_trip(&*make().await).await;
    minimal_tokens_round_trip(&*make().await).await;
    save_overwrites(&*make().await).await;
    clear_forgets(&*make().await).await;
    keys_are_isolated(&*make().await).await;
    unusual_values_survive(&*make().await).await;
}

/// A key never saved loads as `None`, and clearing it is not an error.
pub async fn missing_key_is_none(store: &dyn McpTokenStore) {
    assert_eq!(load(store, "never-saved https://mcp.example.com/mcp").await, None);
    clear(store, "never-saved https://mcp.example.com/mcp").await;
    assert_eq!(load(store, "never-saved https://mcp.example.com/mcp").await, None);
}

/// Saved tokens load back equal, every field included.
pub async fn round_trip(store: &dyn McpTokenStore) {
    let key = "files https://mcp.example.com/mcp";
    let tokens = full_tokens("client-1", "access-1", "refresh-1");
    save(store, key, tokens.clone()).await;
    assert_eq!(load(store, key).await, Some(tokens.clone()));
    // A second load reads the same (loading does not consume).
    assert_eq!(load(store, key).await, Some(tokens));
}

/// Tokens with only an access token load back with no refresh token, expiry or scopes.
pub async fn minimal_tokens_round_trip(store: &dyn McpTokenStore) {
    let key = "minimal https://mcp.example.com/mcp";
    let tokens = McpStoredTokens::new("client", "access");
    save(store, key, tokens.clone()).await;
    let loaded = load(store, key).await;
    assert_eq!(loaded, Some(tokens));
    let loaded = loaded.unwrap_or_else(|| McpStoredTokens::new("", ""));
    assert_eq!(loaded.refresh_token, None);
    assert_eq!(loaded.expires_in, None);
    assert!(loaded.scopes.is_empty());
}

/// A save replaces what the key held (the refresh token included, when the new tokens
/// have none).
pub async fn save_overwrites(store: &dyn McpTokenStore) {
    let key = "files https://mcp.example.com/mcp";
    save(store, key, full_tokens("client-1", "access-1", "refresh-1")).await;
    let newer = McpStoredTokens::new("client-2", "access-2");
    save(store, key, newer.clone()).await;
    let loaded = load(store, key).await;
    assert_eq!(loaded, Some(newer));
    assert_eq!(loaded.and_then(|t| t.refresh_token), None);
    let newest = full_tokens("client-3", "access-3", "refresh-3");
    save(store, key, newest.clone()).await;
    assert_eq!(load(store, key).await, Some(newest));
}

/// A clear forgets the key; a later save stores again.
pub async fn clear_forgets(store: &dyn McpTokenStore) {
    let key = "files https://mcp.example.com/mcp";
    save(store, key, full_tokens("client", "access", "refresh")).await;
    clear(store, key).await;
    assert_eq!(load(store, key).await, None);
    clear(store, key).await;
    let again = McpStoredTokens::new("client", "access-again");
    save(store, key, again.clone()).await;
    assert_eq!(load(store, key).await, Some(again));
}

/// Keys that differ in the server name, the URL, case, a trailing part or a glob
/// character are separate entries: saving, overwriting or clearing one leaves the others.
pub async fn keys_are_isolated(store: &dyn McpTokenStore) {
    let keys = [
        "files https://a.example.com/mcp",
        "files https://b.example.com/mcp",
        "mail https://a.example.com/mcp",
        "Files https://a.example.com/mcp",
        "files https://a.example.com/mcp/",
        "files https://a.example.com/mcp2",
        "files https://a.example.com/*",
        "files",
        "",
    ];
    for (i, key) in keys.iter().enumerate() {
        save(
            store,
            key,
            full_tokens(&format!("client-{i}"), &format!("access-{i}"), "r"),
        )
        .await;
    }
    for (i, key) in keys.iter().enumerate() {
        let loaded = load(store, key).await.map(|t| t.access_token);
        assert_eq!(loaded, Some(format!("access-{i}")), "key {key:?}");
    }
    save(store, keys[0], McpStoredTokens::new("client-0", "access-0b")).await;
    clear(store, keys[1]).await;
    clear(store, keys[6]).await;
    assert_eq!(
        load(store, keys[0]).await.map(|t| t.access_token).as_deref(),
        Some("access-0b")
    );
    assert_eq!(load(store, keys[1]).await, None);
    assert_eq!(load(store, keys[6]).await, None);
    for (i, key) in keys.iter().enumerate().filter(|(i, _)| ![0, 1, 6].contains(i)) {
        let loaded = load(store, key).await.map(|t| t.access_token);
        assert_eq!(
            loaded,
            Some(format!("access-{i}")),
            "key {key:?} after the others changed"
        );
    }
}

/// Unicode, quotes, JSON-looking text, newlines and long (64 KiB) tokens survive a round
/// trip unchanged, in keys and values.
pub async fn unusual_values_survive(store: &dyn McpTokenStore) {
    let long_access: String = "eyJhbGciOiJSUzI1NiJ9.".repeat(3200);
    let long_refresh: String = "r€fresh-🔑-".repeat(5000);
    let mut tokens = full_tokens(
        "clïent-ид-客户 \"quoted\" 'single' \\ {\"json\":1}",
        &long_access,
        &long_refresh,
    );
    tokens.scopes = vec![
        "読み取り".to_owned(),
        "scope with spaces".to_owned(),
        "a\nb\tc".to_owned(),
    ];
    tokens.issuer = Some("https://émetteur.example/ä?x=1&y=\"2\"".to_owned());
    tokens.token_type = "Bearer".to_owned();
    let keys = [
        "fichiers-ファイル 🗂 https://mcp.例え.jp/mcp?q=ü&r='x'",
        "key with \"quotes\" and 'apostrophes'; DROP TABLE x; --",
        "glob * ? [a-z] \\ % _ chars",
    ];
    for key in keys {
        save(store, key, tokens.clone()).await;
    }
    for key in keys {
        let loaded = load(store, key).await;
        assert_eq!(
            loaded.as_ref().map(|t| t.access_token.len()),
            Some(long_access.len()),
            "key {key:?}"
        );
        assert_eq!(loaded, Some(tokens.clone()), "key {key:?}");
    }
    clear(store, keys[0]).await;
    assert_eq!(load(store, keys[0]).await, None);
    assert_eq!(load(store, keys[1]).await, Some(tokens));
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::token_store_suite;
    use crate::oauth::{InMemoryTokenStore, McpTokenStore};

    #[tokio::test]
    async fn in_memory_token_store_conforms() {
        token_store_suite(|| async { Arc::new(InMemoryTokenStore::new()) as Arc<dyn McpTokenStore> }).await;
    }
}
