//! The shared conformance suites of `modu-testing` on SQLite, one temporary database file per
//! case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_core::{CheckpointStore, ConversationStore, MemoryStateStore};
use modu_sqlite::{SqliteCheckpointStore, SqliteConversationStore, SqliteLeaseStore, SqliteMemoryStateStore};
use modu_testing::conformance::{self, FencedStores};

/// Fresh database paths in one temporary folder (nested, to check that folders are created).
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
        self.dir.path().join(format!("case-{n}")).join("store.db")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_conversation_store_conforms() {
    let files = Files::new();
    conformance::conversation_store_suite(|| {
        let path = files.next();
        async move { Arc::new(SqliteConversationStore::open(path).await.unwrap()) as Arc<dyn ConversationStore> }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_conversation_store_ttl_conforms() {
    let files = Files::new();
    conformance::conversation_store_ttl_suite(|ttl| {
        let path = files.next();
        async move {
            Arc::new(SqliteConversationStore::open(path).await.unwrap().with_ttl(ttl)) as Arc<dyn ConversationStore>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_checkpoint_store_conforms() {
    let files = Files::new();
    conformance::checkpoint_store_suite(|| {
        let path = files.next();
        async move { Arc::new(SqliteCheckpointStore::open(path).await.unwrap()) as Arc<dyn CheckpointStore> }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_checkpoint_store_ttl_conforms() {
    let files = Files::new();
    conformance::checkpoint_store_ttl_suite(|ttl| {
        let path = files.next();
        async move { Arc::new(SqliteCheckpointStore::open(path).await.unwrap().with_ttl(ttl)) as Arc<dyn CheckpointStore> }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_state_store_conforms() {
    let files = Files::new();
    conformance::memory_state_store_suite(|| {
        let path = files.next();
        async move { Arc::new(SqliteMemoryStateStore::open(path).await.unwrap()) as Arc<dyn MemoryStateStore> }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_state_store_ttl_conforms() {
    let files = Files::new();
    conformance::memory_state_store_ttl_suite(|ttl| {
        let path = files.next();
        async move {
            Arc::new(SqliteMemoryStateStore::open(path).await.unwrap().with_ttl(ttl)) as Arc<dyn MemoryStateStore>
        }
    })
    .await;
}

/// Leases and the fenced writes of the stores on one pool, a fresh file per case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_store_conforms() {
    let files = Files::new();
    conformance::lease_store_suite(|| {
        let path = files.next();
        async move { fenced_stores(modu_sqlite::open(path).await.unwrap(), None).await }
    })
    .await;
}

/// The same with TTLs on the stores (the fenced writes run the TTL bookkeeping too), and on an
/// in-memory database (one connection: every lease operation waits for the one before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_store_with_store_ttls_and_in_memory_conforms() {
    let files = Files::new();
    let ttl = std::time::Duration::from_secs(60);
    conformance::lease_store_suite(|| {
        let path = files.next();
        async move { fenced_stores(modu_sqlite::open(path).await.unwrap(), Some(ttl)).await }
    })
    .await;
    conformance::lease_store_suite(|| async {
        fenced_stores(modu_sqlite::open_in_memory().await.unwrap(), None).await
    })
    .await;
}

async fn fenced_stores(pool: sqlx::SqlitePool, ttl: Option<std::time::Duration>) -> FencedStores {
    let mut conversations = SqliteConversationStore::from_pool(pool.clone()).await.unwrap();
    let mut checkpoints = SqliteCheckpointStore::from_pool(pool.clone()).await.unwrap();
    if let Some(ttl) = ttl {
        conversations = conversations.with_ttl(ttl);
        checkpoints = checkpoints.with_ttl(ttl);
    }
    FencedStores {
        leases: Arc::new(SqliteLeaseStore::from_pool(pool).await.unwrap()),
        conversations: Arc::new(conversations),
        checkpoints: Arc::new(checkpoints),
    }
}

/// The in-memory database variant passes the suite too (one connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_memory_database_conforms() {
    conformance::conversation_store_suite(|| async {
        let pool = modu_sqlite::open_in_memory().await.unwrap();
        Arc::new(SqliteConversationStore::from_pool(pool).await.unwrap()) as Arc<dyn ConversationStore>
    })
    .await;
}

/// Two pools on one file (as two processes would have) append concurrently without loss, and
/// data written through one is read through the other after reopening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_pools_on_one_file_share_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = Arc::new(SqliteConversationStore::open(&path).await.unwrap());
    let b = Arc::new(SqliteConversationStore::open(&path).await.unwrap());
    let mut tasks = Vec::new();
    for t in 0..10 {
        let s = if t % 2 == 0 { Arc::clone(&a) } else { Arc::clone(&b) };
        tasks.push(tokio::spawn(async move {
            let batch: Vec<_> = (0..5).map(|i| modu_core::Message::user(format!("{t}:{i}"))).collect();
            s.append("s", &batch).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    drop((a, b));
    let reopened = SqliteConversationStore::open(&path).await.unwrap();
    let loaded = reopened.load("s").await.unwrap();
    assert_eq!(loaded.len(), 50);
    for chunk in loaded.chunks(5) {
        let t = chunk[0].text().split(':').next().unwrap().to_owned();
        let want: Vec<String> = (0..5).map(|i| format!("{t}:{i}")).collect();
        assert_eq!(chunk.iter().map(|m| m.text()).collect::<Vec<_>>(), want);
    }
}

/// Leases are shared by pools on one file (as by processes) and outlive them: of takers on two
/// pools exactly one gets the key, a fenced write through the other pool checks the same
/// lease, and a take after the file was closed and reopened gets a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_leases_are_shared_between_pools_and_survive_reopening() {
    use modu_core::{LeaseStore, StoreError};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let a = SqliteLeaseStore::open(&path).await.unwrap();
    let b = SqliteLeaseStore::open(&path).await.unwrap();
    let ttl = std::time::Duration::from_secs(60);
    let mut takers = Vec::new();
    for i in 0..8 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        takers.push(tokio::spawn(async move { s.acquire("s", &format!("w{i}"), ttl).await }));
    }
    let mut won = Vec::new();
    for t in takers {
        won.extend(t.await.unwrap().unwrap());
    }
    assert_eq!(won.len(), 1, "of 8 takers on two pools one wins: {won:?}");
    let lease = won.remove(0);
    let conversations = SqliteConversationStore::from_pool(b.pool().clone()).await.unwrap();
    conversations
        .append_fenced("s", &[modu_core::Message::user("mine")], &lease.fence())
        .await
        .unwrap();
    a.release(&lease).await.unwrap();
    let refused = conversations
        .append_fenced("s", &[modu_core::Message::user("late")], &lease.fence())
        .await;
    assert!(matches!(refused, Err(StoreError::Fenced { .. })), "{refused:?}");
    a.pool().close().await;
    b.pool().close().await;
    let reopened = SqliteLeaseStore::open(&path).await.unwrap();
    let next = reopened.acquire("s", "w9", ttl).await.unwrap().unwrap();
    assert!(next.token > lease.token, "{} after {}", next.token, lease.token);
}

/// A database migrated by a newer build is refused with a typed error.
#[tokio::test]
async fn sqlite_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let pool = modu_sqlite::open(&path).await.unwrap();
    sqlx::query("INSERT INTO modu_schema_migrations (version, description, applied_ms) VALUES (99, 'future', 0)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let err = SqliteCheckpointStore::open(&path).await.unwrap_err();
    assert!(matches!(err, modu_core::StoreError::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains("version 99"), "{err}");
}

/// An in-memory database is its one connection: sqlx's defaults close a connection idle for
/// 10 minutes or 30 minutes old, which dropped every table and row of `open_in_memory` (the
/// next query failed with "no such table"). Its pool keeps the connection for good.
#[tokio::test]
async fn an_in_memory_pool_never_closes_its_connection() {
    let pool = modu_sqlite::open_in_memory().await.unwrap();
    let options = pool.options();
    assert_eq!(
        options.get_idle_timeout(),
        None,
        "an idle in-memory database is dropped"
    );
    assert_eq!(
        options.get_max_lifetime(),
        None,
        "an in-memory database is dropped when its connection ages"
    );
    assert_eq!(options.get_max_connections(), 1);
}
