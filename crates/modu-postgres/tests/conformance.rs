//! The shared conformance suites of `modu-testing` on PostgreSQL (`MODU_POSTGRES_URL`), one
//! fresh schema per case; plus what sharing one database between pools (processes) means.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use modu_core::{
    CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore, LeaseStore,
    MemoryStateStore, Message, StoreError,
};
use modu_postgres::sqlx;
use modu_postgres::{
    PostgresCheckpointStore, PostgresConversationStore, PostgresLeaseStore, PostgresMemoryStateStore, PostgresStores,
};
use modu_testing::conformance::{self, FencedStores};
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

/// Leases and the fenced writes of the stores on one pool, a fresh schema per case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_store_conforms() {
    let Some(url) = url() else { return };
    conformance::lease_store_suite(|| {
        let url = url.clone();
        async move {
            let pool = fresh_pool(&url, "lease").await;
            FencedStores {
                leases: Arc::new(PostgresLeaseStore::from_pool(pool.clone()).await.unwrap()),
                conversations: Arc::new(PostgresConversationStore::from_pool(pool.clone()).await.unwrap()),
                checkpoints: Arc::new(PostgresCheckpointStore::from_pool(pool).await.unwrap()),
            }
        }
    })
    .await;
}

/// The same through `PostgresStores`, with TTLs on the stores (the fenced writes run the TTL
/// bookkeeping too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_store_bundle_with_store_ttls_conforms() {
    let Some(url) = url() else { return };
    conformance::lease_store_suite(|| {
        let url = url.clone();
        async move {
            let stores = PostgresStores::connect_in_schema(&url, &schema("lease-ttl"))
                .await
                .unwrap()
                .with_ttl(std::time::Duration::from_secs(60));
            FencedStores {
                leases: Arc::new(stores.leases),
                conversations: Arc::new(stores.conversations),
                checkpoints: Arc::new(stores.checkpoints),
            }
        }
    })
    .await;
}

/// A take-over waits for a fenced write in flight. The write checked the lease while it was
/// live and holds the lease row `FOR SHARE` until it commits, so the new holder's take is
/// ordered after the write, even when the old lease expires by the clock meanwhile; the old
/// holder's next write is refused. The write is held mid-transaction by a lock on its session
/// row, and every wait is observed through `pg_blocking_pids`, not guessed with sleeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_take_over_waits_for_a_fenced_write_in_flight() {
    use std::time::Duration;
    let Some(url) = url() else { return };
    let stores = PostgresStores::connect_in_schema(&url, &schema("in-flight"))
        .await
        .unwrap();
    let ttl = Duration::from_millis(300);
    let a = stores.leases.acquire("s", "a", ttl).await.unwrap().unwrap();
    stores
        .conversations
        .append_fenced("s", &[Message::user("first")], &a.fence())
        .await
        .unwrap();

    let mut blocker = stores.pool().begin().await.unwrap();
    let blocker_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *blocker)
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM modu_sessions WHERE session_id = 's' FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let (conversations, fence) = (stores.conversations.clone(), a.fence());
    let write = tokio::spawn(async move {
        conversations
            .append_fenced("s", &[Message::user("under a")], &fence)
            .await
    });
    // The write passed its lease check and waits for the session row.
    let writer_pid = blocked_by(stores.pool(), blocker_pid).await;
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let leases = stores.leases.clone();
    let take = tokio::spawn(async move { leases.acquire("s", "b", Duration::from_secs(60)).await });
    // The take-over waits for the writer's share lock on the lease row.
    blocked_by(stores.pool(), writer_pid).await;
    assert!(!take.is_finished() && !write.is_finished());

    blocker.rollback().await.unwrap();
    write
        .await
        .unwrap()
        .expect("the write checked a live lease: it is applied");
    let b = take
        .await
        .unwrap()
        .unwrap()
        .expect("after the write, b takes the expired lease");
    assert!(b.token > a.token);
    let late = stores
        .conversations
        .append_fenced("s", &[Message::user("late")], &a.fence())
        .await;
    assert!(matches!(late, Err(StoreError::Fenced { .. })), "{late:?}");
    let texts: Vec<String> = stores
        .conversations
        .load("s")
        .await
        .unwrap()
        .iter()
        .map(Message::text)
        .collect();
    assert_eq!(texts, vec!["first", "under a"]);
}

/// The pid of a backend waiting for a lock `pid` holds (polls for up to 10 s).
async fn blocked_by(pool: &sqlx::PgPool, pid: i32) -> i32 {
    for _ in 0..400 {
        let waiting: Option<i32> =
            sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) LIMIT 1")
                .bind(pid)
                .fetch_optional(pool)
                .await
                .unwrap();
        if let Some(waiting) = waiting {
            return waiting;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("no backend waited for a lock of backend {pid}");
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

/// A database migrated before memory values became bytes (schema version 3, `value TEXT`)
/// keeps its values: migration 4 converts them in place, and the store then also takes values
/// with NUL characters, which TEXT refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_memory_values_survive_the_migration_to_bytes() {
    let Some(url) = url() else { return };
    let schema = schema("mem-v3");
    let pool = modu_postgres::connect_in_schema(&url, &schema).await.unwrap();
    // Back to version 3, as an older build left the schema, with a value in it.
    sqlx::raw_sql(
        "ALTER TABLE modu_memory_state ALTER COLUMN value TYPE TEXT USING convert_from(value, 'UTF8');
         DELETE FROM modu_schema_migrations WHERE version = 4;
         INSERT INTO modu_memory_state (key, value, touched_ms) VALUES ('modu:summary:s', '요약 ✓ \"json\"', 0);",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let stores = PostgresStores::connect_in_schema(&url, &schema).await.unwrap();
    assert_eq!(
        stores.memory.get("modu:summary:s").await.unwrap().as_deref(),
        Some("요약 ✓ \"json\"")
    );
    stores.memory.put("nul", "a\0b").await.unwrap();
    assert_eq!(stores.memory.get("nul").await.unwrap().as_deref(), Some("a\0b"));
    let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM modu_schema_migrations")
        .fetch_one(stores.pool())
        .await
        .unwrap();
    assert_eq!(version, modu_postgres::MIGRATIONS.last().unwrap().0);
}
