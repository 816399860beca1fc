//! Redis-specific expiry of checkpoints, against the server at `REDIS_URL`: Redis expires the
//! keys; the index entries they leave behind are never listed, and are removed by
//! `purge_expired` (at most `PURGE_BATCH` per call) and by saves (at most `SAVE_PRUNE_BATCH`).
//! Index sizes are read with ZCARD, so "removed" means gone from Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use modu_core::{
    CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore, MemoryStateStore, Message,
};
use modu_redis::redis::{self, aio::ConnectionManager};
use modu_redis::{PURGE_BATCH, RedisCheckpointStore, RedisConversationStore, RedisMemoryStateStore, SAVE_PRUNE_BATCH};
use modu_testing::{service_env, unique_prefix};

async fn conn() -> Option<ConnectionManager> {
    let url = service_env("REDIS_URL")?;
    Some(
        modu_redis::connect(&url)
            .await
            .expect("REDIS_URL must point at a running redis-server"),
    )
}

fn meta() -> CheckpointMeta {
    CheckpointMeta::new("agent", CheckpointStatus::Paused)
}

async fn zcard(conn: &ConnectionManager, key: &str) -> u64 {
    let mut c = conn.clone();
    redis::cmd("ZCARD").arg(key).query_async(&mut c).await.unwrap()
}

/// Index entries of `n` checkpoints whose keys are long gone (as Redis leaves them when the
/// keys expire): in the run-id index and due in 1970 in the expiry index.
async fn leave_expired_entries(conn: &ConnectionManager, prefix: &str, n: usize) {
    let mut pipe = redis::pipe();
    for i in 0..n {
        let id = format!("gone-{i:05}");
        pipe.zadd(format!("{prefix}:checkpoints"), &id, 0).ignore();
        pipe.zadd(format!("{prefix}:checkpoints-expiry"), &id, 1000).ignore();
    }
    let mut c = conn.clone();
    pipe.query_async::<()>(&mut c).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_keys_leave_index_entries_that_purge_removes() {
    let Some(conn) = conn().await else { return };
    let prefix = unique_prefix("ckpt-expiry");
    let store = RedisCheckpointStore::new(conn.clone())
        .with_prefix(&prefix)
        .with_ttl(Duration::from_millis(300));
    for i in 0..3 {
        store.save(&format!("run-{i}"), &meta(), b"s").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let index = format!("{prefix}:checkpoints");
    assert_eq!(
        zcard(&conn, &index).await,
        3,
        "Redis expired the keys, not the index entries"
    );
    let page = store.list(&CheckpointQuery::default()).await.unwrap();
    assert!(page.items.is_empty() && page.next.is_none(), "{page:?}");
    assert_eq!(store.purge_expired().await.unwrap(), 3);
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    assert_eq!(zcard(&conn, &index).await, 0);
    assert_eq!(zcard(&conn, &format!("{prefix}:checkpoints-expiry")).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_removes_at_most_a_batch_per_call_and_keeps_live_ones() {
    let Some(conn) = conn().await else { return };
    let prefix = unique_prefix("ckpt-purge");
    let store = RedisCheckpointStore::new(conn.clone())
        .with_prefix(&prefix)
        .with_ttl(Duration::from_secs(3600));
    store.save("live", &meta(), b"live").await.unwrap();
    let stale = 2 * PURGE_BATCH as usize + 123;
    leave_expired_entries(&conn, &prefix, stale).await;
    let index = format!("{prefix}:checkpoints");
    let mut left = stale as u64;
    let mut calls = 0;
    loop {
        let removed = store.purge_expired().await.unwrap();
        calls += 1;
        assert_eq!(removed, left.min(u64::from(PURGE_BATCH)), "call {calls}");
        left -= removed;
        assert_eq!(zcard(&conn, &index).await, left + 1, "index after call {calls}");
        if removed == 0 {
            break;
        }
    }
    assert_eq!(calls, 4);
    assert_eq!(store.load("live").await.unwrap().as_deref(), Some(&b"live"[..]));
    let page = store.list(&CheckpointQuery::default()).await.unwrap();
    assert_eq!(page.items.len(), 1);
}

/// Nobody calls `purge_expired`: every save with a TTL removes a few stale entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_prune_a_small_batch_of_stale_entries() {
    let Some(conn) = conn().await else { return };
    let prefix = unique_prefix("ckpt-prune");
    let store = RedisCheckpointStore::new(conn.clone())
        .with_prefix(&prefix)
        .with_ttl(Duration::from_secs(3600));
    leave_expired_entries(&conn, &prefix, 20).await;
    let index = format!("{prefix}:checkpoints");
    store.save("new-0", &meta(), b"s").await.unwrap();
    assert_eq!(zcard(&conn, &index).await, 20 - u64::from(SAVE_PRUNE_BATCH) + 1);
    store.save("new-1", &meta(), b"s").await.unwrap();
    store.save("new-2", &meta(), b"s").await.unwrap();
    assert_eq!(zcard(&conn, &index).await, 3, "only the live entries are left");
}

/// Many stale entries before the live ones: a page walks a bounded number of entries and hands
/// back a cursor; following the cursors reaches every live checkpoint, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_skips_stale_entries_with_bounded_pages() {
    let Some(conn) = conn().await else { return };
    let prefix = unique_prefix("ckpt-list");
    let store = RedisCheckpointStore::new(conn.clone())
        .with_prefix(&prefix)
        .with_ttl(Duration::from_secs(3600));
    // "gone-…" sorts before "live-…".
    leave_expired_entries(&conn, &prefix, 2500).await;
    let live: Vec<String> = (0..5).map(|i| format!("live-{i}")).collect();
    for id in &live {
        // Saves prune a few stale entries; 2500 leave plenty.
        store.save(id, &meta(), b"s").await.unwrap();
    }
    let mut seen = Vec::new();
    let mut query = CheckpointQuery::first(2);
    let mut pages = 0;
    loop {
        let page = store.list(&query).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        seen.extend(page.items.into_iter().map(|i| i.run_id));
        match page.next {
            Some(next) => query = CheckpointQuery::first(2).after(Some(next)),
            None => break,
        }
        assert!(pages < 50, "paging does not end");
    }
    assert_eq!(seen, live);
    assert!(
        pages > 3,
        "the stale entries took more than one page to walk ({pages} pages)"
    );
}

/// A TTL too long for Redis's clock (`Duration::MAX`) is an expiry that never comes in
/// practice, not an `invalid expire time` error on every write and read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_of_duration_max_works_on_every_store() {
    let Some(conn) = conn().await else { return };
    let prefix = unique_prefix("huge-ttl");
    let conversations = RedisConversationStore::new(conn.clone())
        .with_prefix(&prefix)
        .with_ttl(Duration::MAX);
    conversations.append("s", &[Message::user("hi")]).await.unwrap();
    assert_eq!(conversations.load("s").await.unwrap(), vec![Message::user("hi")]);
    let checkpoints = RedisCheckpointStore::new(conn.clone())
        .with_prefix(&prefix)
        .with_ttl(Duration::MAX);
    checkpoints.save("r", &meta(), b"state").await.unwrap();
    assert_eq!(checkpoints.load("r").await.unwrap().as_deref(), Some(&b"state"[..]));
    assert_eq!(
        checkpoints.list(&CheckpointQuery::default()).await.unwrap().items.len(),
        1
    );
    let memory = RedisMemoryStateStore::new(conn)
        .with_prefix(&prefix)
        .with_ttl(Duration::MAX);
    memory.put("k", "v").await.unwrap();
    assert_eq!(memory.get("k").await.unwrap().as_deref(), Some("v"));
}
