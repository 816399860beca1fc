//! The shared conformance suites of `modu-testing`, against the Redis server at `REDIS_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use modu_core::{CheckpointMeta, CheckpointStatus, CheckpointStore, ConversationStore, MemoryStateStore};
use modu_redis::redis::aio::ConnectionManager;
use modu_redis::{RedisCheckpointStore, RedisConversationStore, RedisLeaseStore, RedisMemoryStateStore};
use modu_testing::conformance::FencedStores;
use modu_testing::{conformance, service_env, unique_prefix};

async fn conn() -> Option<ConnectionManager> {
    let url = service_env("REDIS_URL")?;
    Some(
        modu_redis::connect(&url)
            .await
            .expect("REDIS_URL must point at a running redis-server"),
    )
}

fn meta() -> CheckpointMeta {
    CheckpointMeta::new("agent", CheckpointStatus::Running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_conversation_store_conforms() {
    let Some(conn) = conn().await else { return };
    conformance::conversation_store_suite(|| {
        let conn = conn.clone();
        async move {
            Arc::new(RedisConversationStore::new(conn).with_prefix(unique_prefix("conv"))) as Arc<dyn ConversationStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_conversation_store_ttl_conforms() {
    let Some(conn) = conn().await else { return };
    conformance::conversation_store_ttl_suite(|ttl| {
        let conn = conn.clone();
        async move {
            Arc::new(
                RedisConversationStore::new(conn)
                    .with_prefix(unique_prefix("conv-ttl"))
                    .with_ttl(ttl),
            ) as Arc<dyn ConversationStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_checkpoint_store_conforms() {
    let Some(conn) = conn().await else { return };
    conformance::checkpoint_store_suite(|| {
        let conn = conn.clone();
        async move {
            Arc::new(RedisCheckpointStore::new(conn).with_prefix(unique_prefix("ckpt"))) as Arc<dyn CheckpointStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_checkpoint_store_ttl_conforms() {
    let Some(conn) = conn().await else { return };
    conformance::checkpoint_store_ttl_suite(|ttl| {
        let conn = conn.clone();
        async move {
            Arc::new(
                RedisCheckpointStore::new(conn)
                    .with_prefix(unique_prefix("ckpt-ttl"))
                    .with_ttl(ttl),
            ) as Arc<dyn CheckpointStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_memory_state_store_conforms() {
    let Some(conn) = conn().await else { return };
    conformance::memory_state_store_suite(|| {
        let conn = conn.clone();
        async move {
            Arc::new(RedisMemoryStateStore::new(conn).with_prefix(unique_prefix("mem"))) as Arc<dyn MemoryStateStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_memory_state_store_ttl_conforms() {
    let Some(conn) = conn().await else { return };
    conformance::memory_state_store_ttl_suite(|ttl| {
        let conn = conn.clone();
        async move {
            Arc::new(
                RedisMemoryStateStore::new(conn)
                    .with_prefix(unique_prefix("mem-ttl"))
                    .with_ttl(ttl),
            ) as Arc<dyn MemoryStateStore>
        }
    })
    .await;
}

/// Leases and the fenced writes of the stores on one prefix, a fresh prefix per case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lease_store_conforms() {
    let Some(conn) = conn().await else { return };
    conformance::lease_store_suite(|| {
        let conn = conn.clone();
        async move {
            let prefix = unique_prefix("lease");
            FencedStores {
                leases: Arc::new(RedisLeaseStore::new(conn.clone()).with_prefix(&prefix)),
                conversations: Arc::new(RedisConversationStore::new(conn.clone()).with_prefix(&prefix)),
                checkpoints: Arc::new(RedisCheckpointStore::new(conn).with_prefix(&prefix)),
            }
        }
    })
    .await;
}

/// The same with TTLs on the stores (the fenced scripts carry the expiry arguments too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lease_store_with_store_ttls_conforms() {
    let Some(conn) = conn().await else { return };
    let ttl = std::time::Duration::from_secs(60);
    conformance::lease_store_suite(|| {
        let conn = conn.clone();
        async move {
            let prefix = unique_prefix("lease-ttl");
            FencedStores {
                leases: Arc::new(RedisLeaseStore::new(conn.clone()).with_prefix(&prefix)),
                conversations: Arc::new(
                    RedisConversationStore::new(conn.clone())
                        .with_prefix(&prefix)
                        .with_ttl(ttl),
                ),
                checkpoints: Arc::new(RedisCheckpointStore::new(conn).with_prefix(&prefix).with_ttl(ttl)),
            }
        }
    })
    .await;
}

/// TTLs of the three stores are independent even on one connection and prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_ttls_are_independent() {
    let Some(conn) = conn().await else { return };
    let prefix = unique_prefix("indep");
    let conv = RedisConversationStore::new(conn.clone())
        .with_prefix(&prefix)
        .with_ttl(std::time::Duration::from_millis(400));
    let ckpt = RedisCheckpointStore::new(conn.clone())
        .with_prefix(&prefix)
        .with_ttl(std::time::Duration::from_secs(60));
    conv.append("s", &[modu_core::Message::user("hi")]).await.unwrap();
    ckpt.save("s", &meta(), b"state").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;
    assert!(conv.load("s").await.unwrap().is_empty(), "the conversation expired");
    assert_eq!(
        ckpt.load("s").await.unwrap().as_deref(),
        Some(&b"state"[..]),
        "the checkpoint did not"
    );
}

/// A list element that is not a message is reported as corrupted data, not a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_corrupted_message_is_a_typed_error() {
    let Some(mut conn) = conn().await else { return };
    let prefix = unique_prefix("corrupt");
    let store = RedisConversationStore::new(conn.clone()).with_prefix(&prefix);
    store.append("s", &[modu_core::Message::user("ok")]).await.unwrap();
    let _: () =
        modu_redis::redis::AsyncCommands::rpush(&mut conn, format!("{prefix}:conversation:s"), b"\xff{not json")
            .await
            .unwrap();
    let err = store.load("s").await.unwrap_err();
    assert!(matches!(err, modu_core::StoreError::Corrupted { .. }), "{err:?}");
    assert!(err.to_string().contains("message 1"), "{err}");
}

/// Errors name the operation and never carry a password from the URL.
#[tokio::test]
async fn redis_connect_error_hides_the_password() {
    // Nothing listens on port 1.
    let err = modu_redis::connect("redis://alice:hunter2@127.0.0.1:1/0")
        .await
        .unwrap_err();
    let text = format!("{err} / {err:?}");
    assert!(matches!(err, modu_core::StoreError::Backend { .. }), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}
