//! The shared conformance suites of `modu-testing` on PostgreSQL (`MODU_POSTGRES_URL`), one
//! fresh schema per case; plus what sharing one database between pools (processes) means.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use modu_core::{
    CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore, MemoryStateStore, Message,
    StoreError,
};
use modu_postgres::sqlx;
use modu_postgres::{PostgresCheckpointStore, PostgresConversationStore, PostgresMemoryStateStore, PostgresStores};
use modu_testing::conformance;
use support::{fresh_pool, schema, url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_conversation_store_conforms() {
    let Some(url) = url() else { return };
    conformance::conversation_store_suite(|| {
        let url = url.clone();
        async move {
            let pool = fresh_pool(&url, "conv").await;
            Arc::new(PostgresConversationStore::from_pool(pool).await.unwrap()) as Arc<dyn ConversationStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_conversation_store_ttl_conforms() {
    let Some(url) = url() else { return };
    conformance::conversation_store_ttl_suite(|ttl| {
        let url = url.clone();
        async move {
            let pool = fresh_pool(&url, "conv-ttl").await;
            Arc::new(PostgresConversationStore::from_pool(pool).await.unwrap().with_ttl(ttl))
                as Arc<dyn ConversationStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_checkpoint_store_conforms() {
    let Some(url) = url() else { return };
    conformance::checkpoint_store_suite(|| {
        let url = url.clone();
        async move {
            let pool = fresh_pool(&url, "ckpt").await;
            Arc::new(PostgresCheckpointStore::from_pool(pool).await.unwrap()) as Arc<dyn CheckpointStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_checkpoint_store_ttl_conforms() {
    let Some(url) = url() else { return };
    conformance::checkpoint_store_ttl_suite(|ttl| {
        let url = url.clone();
        async move {
            let pool = fresh_pool(&url, "ckpt-ttl").await;
            Arc::new(PostgresCheckpointStore::from_pool(pool).await.unwrap().with_ttl(ttl)) as Arc<dyn CheckpointStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_memory_state_store_conforms() {
    let Some(url) = url() else { return };
    conformance::memory_state_store_suite(|| {
        let url = url.clone();
        async move {
            let pool = fresh_pool(&url, "mem").await;
            Arc::new(PostgresMemoryStateStore::from_pool(pool).await.unwrap()) as Arc<dyn MemoryStateStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_memory_state_store_ttl_conforms() {
    let Some(url) = url() else { return };
    conformance::memory_state_store_ttl_suite(|ttl| {
        let url = url.clone();
        async move {
            let pool = fresh_pool(&url, "mem-ttl").await;
            Arc::new(PostgresMemoryStateStore::from_pool(pool).await.unwrap().with_ttl(ttl))
                as Arc<dyn MemoryStateStore>
        }
    })
    .await;
}

/// `PostgresStores` (one pool, three stores) passes the suites too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stores_bundle_conforms() {
    let Some(url) = url() else { return };
    conformance::conversation_store_suite(|| {
        let url = url.clone();
        async move {
            let stores = PostgresStores::connect_in_schema(&url, &schema("bundle"))
                .await
                .unwrap();
            Arc::new(stores.conversations) as Arc<dyn ConversationStore>
        }
    })
    .await;
    conformance::memory_state_store_suite(|| {
        let url = url.clone();
        async move {
            let stores = PostgresStores::connect_in_schema(&url, &schema("bundle"))
                .await
                .unwrap();
            Arc::new(stores.memory) as Arc<dyn MemoryStateStore>
        }
    })
    .await;
}

/// Two pools on one schema (as two processes would have) append concurrently without loss,
/// and data written through them is read through a third pool after they are closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_pools_on_one_schema_share_and_persist() {
    let Some(url) = url() else { return };
    let schema = schema("shared");
    let a = Arc::new(PostgresStores::connect_in_schema(&url, &schema).await.unwrap());
    let b = Arc::new(PostgresStores::connect_in_schema(&url, &schema).await.unwrap());
    let mut tasks = Vec::new();
    for t in 0..10 {
        let s = if t % 2 == 0 { Arc::clone(&a) } else { Arc::clone(&b) };
        tasks.push(tokio::spawn(async move {
            let batch: Vec<_> = (0..5).map(|i| Message::user(format!("{t}:{i}"))).collect();
            s.conversations.append("s", &batch).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    a.checkpoints
        .save("run", &CheckpointMeta::new("agent", CheckpointStatus::Paused), b"state")
        .await
        .unwrap();
    a.pool().close().await;
    b.pool().close().await;
    let reopened = PostgresStores::connect_in_schema(&url, &schema).await.unwrap();
    let loaded = reopened.conversations.load("s").await.unwrap();
    assert_eq!(loaded.len(), 50);
    for chunk in loaded.chunks(5) {
        let t = chunk[0].text().split(':').next().unwrap().to_owned();
        let want: Vec<String> = (0..5).map(|i| format!("{t}:{i}")).collect();
        assert_eq!(chunk.iter().map(|m| m.text()).collect::<Vec<_>>(), want);
    }
    assert_eq!(
        reopened.checkpoints.load("run").await.unwrap().as_deref(),
        Some(&b"state"[..])
    );
}

/// Schemas isolate: the same ids in two schemas of one database do not see each other, and a
/// schema name with quotes, spaces and backslashes is used as it is (quoted, not injected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schemas_isolate_and_odd_names_work() {
    let Some(url) = url() else { return };
    let odd = format!("a b\"c\\d; DROP {}", &schema("odd")[..30]);
    let x = PostgresStores::connect_in_schema(&url, &odd).await.unwrap();
    let y = PostgresStores::connect_in_schema(&url, &schema("other")).await.unwrap();
    x.conversations.append("s", &[Message::user("in x")]).await.unwrap();
    y.conversations.append("s", &[Message::user("in y")]).await.unwrap();
    x.memory.put("k", "x").await.unwrap();
    assert_eq!(x.conversations.load("s").await.unwrap(), vec![Message::user("in x")]);
    assert_eq!(y.conversations.load("s").await.unwrap(), vec![Message::user("in y")]);
    assert_eq!(y.memory.get("k").await.unwrap(), None);
    let in_schema: String = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(x.pool())
        .await
        .unwrap();
    assert_eq!(in_schema, odd);
    // A name PostgreSQL would truncate is refused with a typed error.
    let err = PostgresStores::connect_in_schema(&url, &"x".repeat(64))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("63 bytes"), "{err}");
}

/// `connect(url)` puts the tables where the URL's `search_path` says (here the schema made by
/// `connect_in_schema`), so both constructors reach the same data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connect_follows_the_urls_search_path() {
    let Some(url) = url() else { return };
    let schema = format!("plain_{}", uuid_like());
    let first = PostgresStores::connect_in_schema(&url, &schema).await.unwrap();
    first
        .checkpoints
        .save("r1", &CheckpointMeta::new("a", CheckpointStatus::Failed), b"1")
        .await
        .unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    let with_path = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    let second = PostgresCheckpointStore::connect(&with_path).await.unwrap();
    let page = second.list(&CheckpointQuery::default()).await.unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].run_id, "r1");
    assert_eq!(page.items[0].meta.status, CheckpointStatus::Failed);
}

/// A plain identifier (lower case, digits, `_`) unique to this run.
fn uuid_like() -> String {
    schema("u").rsplit(':').next().unwrap().to_ascii_lowercase()
}

/// A schema migrated by a newer build is refused with a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_newer_schema_is_refused() {
    let Some(url) = url() else { return };
    let schema = schema("newer");
    let pool = modu_postgres::connect_in_schema(&url, &schema).await.unwrap();
    sqlx::query("INSERT INTO modu_schema_migrations (version, description, applied_ms) VALUES (99, 'future', 0)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let err = modu_postgres::connect_in_schema(&url, &schema).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("version 99"), "{err}");
}
