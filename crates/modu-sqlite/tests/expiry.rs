//! SQLite-specific expiry: expired checkpoints are physically deleted (rows counted with sqlx),
//! by `purge_expired` in batches of at most `PURGE_BATCH` and by every save in batches of at
//! most `SAVE_PRUNE_BATCH`; and a version-1 database upgrades in place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use modu_core::{CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore};
use modu_sqlite::sqlx::{self, SqlitePool};
use modu_sqlite::{PURGE_BATCH, SAVE_PRUNE_BATCH, SqliteCheckpointStore, SqliteConversationStore};

fn meta() -> CheckpointMeta {
    CheckpointMeta::new("agent", CheckpointStatus::Paused)
}

async fn rows(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM modu_checkpoints")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Inserts `n` checkpoints last touched in 1970: long expired for any TTL.
async fn insert_ancient(pool: &SqlitePool, prefix: &str, n: usize) {
    let mut tx = pool.begin().await.unwrap();
    for i in 0..n {
        sqlx::query(
            "INSERT INTO modu_checkpoints (run_id, state, touched_ms, agent, status, saved_ms)
             VALUES (?1, x'00ff', 1000, 'old', 'paused', 1000)",
        )
        .bind(format!("{prefix}-{i:05}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_expired_rows_at_most_a_batch_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteCheckpointStore::open(dir.path().join("purge.db"))
        .await
        .unwrap()
        .with_ttl(Duration::from_secs(3600));
    let pool = store.pool().clone();
    let expired = 2 * PURGE_BATCH as i64 + 234;
    insert_ancient(&pool, "old", expired as usize).await;
    store.save("fresh", &meta(), b"fresh").await.unwrap();
    // The save deleted exactly its small batch on the side.
    let after_save = expired - i64::from(SAVE_PRUNE_BATCH) + 1;
    assert_eq!(rows(&pool).await, after_save, "rows after one save");

    // Expired rows that are still in the table are never listed.
    let page = store.list(&CheckpointQuery::default()).await.unwrap();
    let ids: Vec<&str> = page.items.iter().map(|i| i.run_id.as_str()).collect();
    assert_eq!(ids, vec!["fresh"]);
    assert_eq!(page.next, None);

    // Each purge call deletes at most PURGE_BATCH rows, and says how many.
    let mut left = after_save - 1;
    let mut calls = 0;
    loop {
        let removed = store.purge_expired().await.unwrap();
        calls += 1;
        assert!(removed <= u64::from(PURGE_BATCH), "call {calls} removed {removed}");
        assert_eq!(removed as i64, left.min(i64::from(PURGE_BATCH)), "call {calls}");
        left -= removed as i64;
        assert_eq!(rows(&pool).await, left + 1, "rows after purge call {calls}");
        if removed == 0 {
            break;
        }
    }
    assert_eq!(calls, 4, "three calls with work (500, 500, 226), then 0");
    assert_eq!(rows(&pool).await, 1, "only the fresh checkpoint is left in the table");
    assert_eq!(store.load("fresh").await.unwrap().as_deref(), Some(&b"fresh"[..]));
}

/// Nobody calls `purge_expired`: saves alone delete the expired rows, a small batch each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_alone_keep_the_table_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteCheckpointStore::open(dir.path().join("saves.db"))
        .await
        .unwrap()
        .with_ttl(Duration::from_secs(3600));
    let pool = store.pool().clone();
    insert_ancient(&pool, "old", 100).await;
    let saves = 100usize.div_ceil(SAVE_PRUNE_BATCH as usize);
    for i in 0..saves {
        store.save(&format!("new-{i}"), &meta(), b"s").await.unwrap();
        let expected_old = 100 - ((i + 1) * SAVE_PRUNE_BATCH as usize).min(100);
        assert_eq!(
            rows(&pool).await,
            (expected_old + i + 1) as i64,
            "rows after save {i}: each save deletes at most {SAVE_PRUNE_BATCH} expired rows"
        );
    }
    let old: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM modu_checkpoints WHERE run_id LIKE 'old-%'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(old, 0, "every expired row is gone");
    // Overwriting one run again and again does not grow the table either.
    for _ in 0..20 {
        store.save("new-0", &meta(), b"again").await.unwrap();
    }
    assert_eq!(rows(&pool).await, saves as i64);
}

/// Expiry through the real clock: saved, not touched for longer than the TTL, purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_expired_by_time_is_purged_from_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteCheckpointStore::open(dir.path().join("clock.db"))
        .await
        .unwrap()
        .with_ttl(Duration::from_millis(300));
    let pool = store.pool().clone();
    store.save("paused-run", &meta(), b"waits for approval").await.unwrap();
    store.save("kept", &meta(), b"k").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(store.load("kept").await.unwrap().is_some(), "a load refreshes the TTL");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // 400 ms after its save, 200 ms after the load of the other one.
    assert_eq!(rows(&pool).await, 2, "nothing deleted yet: no access, no purge");
    assert_eq!(store.purge_expired().await.unwrap(), 1);
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    let left: Vec<String> = sqlx::query_scalar("SELECT run_id FROM modu_checkpoints")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, vec!["kept".to_owned()]);
}

/// A database written by schema version 1 (no checkpoint metadata, no last-append column)
/// upgrades in place: rows are kept, the run loop's JSON gives the agent, session and paused
/// state, other rows get defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_1_database_upgrades_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = SqlitePool::connect_with(options).await.unwrap();
    // The version-1 schema, as `migrate` of that version left it.
    sqlx::raw_sql(
        "CREATE TABLE modu_schema_migrations (
            version INTEGER PRIMARY KEY NOT NULL, description TEXT NOT NULL, applied_ms INTEGER NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::raw_sql(modu_sqlite::MIGRATIONS[0].2)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO modu_schema_migrations VALUES (1, 'init', 0)")
        .execute(&pool)
        .await
        .unwrap();
    let paused = serde_json::json!({
        "schema_version": 1, "run_id": "run-paused", "agent": "helper", "fingerprint": "f",
        "session_id": "s-9",
        "state": {"messages": [], "interruptions": [{"call_id": "c1"}]}
    });
    let running = serde_json::json!({
        "schema_version": 1, "run_id": "run-running", "agent": "helper", "fingerprint": "f",
        "session_id": null, "state": {"messages": []}
    });
    for (id, bytes, touched) in [
        ("run-paused", serde_json::to_vec(&paused).unwrap(), 1_700_000_000_000i64),
        ("run-running", serde_json::to_vec(&running).unwrap(), 1_700_000_001_000),
        ("run-garbage", vec![0xff, 0x00, b'{', 0x80], 1_700_000_002_000),
    ] {
        sqlx::query("INSERT INTO modu_checkpoints (run_id, state, touched_ms) VALUES (?1, ?2, ?3)")
            .bind(id)
            .bind(bytes)
            .bind(touched)
            .execute(&pool)
            .await
            .unwrap();
    }
    sqlx::query("INSERT INTO modu_sessions (session_id, next_seq, touched_ms) VALUES ('s-9', 0, 1700000003000)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;

    let ckpt = SqliteCheckpointStore::open(&path).await.unwrap();
    let version: i64 = sqlx::query_scalar("SELECT MAX(version) FROM modu_schema_migrations")
        .fetch_one(ckpt.pool())
        .await
        .unwrap();
    assert_eq!(version, modu_sqlite::MIGRATIONS.last().unwrap().0);
    let page = ckpt.list(&CheckpointQuery::default()).await.unwrap();
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let got: Vec<(String, String, CheckpointStatus, Option<String>, SystemTime)> = page
        .items
        .iter()
        .map(|i| {
            (
                i.run_id.clone(),
                i.meta.agent.clone(),
                i.meta.status,
                i.meta.session_id.clone(),
                i.updated_at,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "run-garbage".into(),
                String::new(),
                CheckpointStatus::Running,
                None,
                at(1_700_000_002_000)
            ),
            (
                "run-paused".into(),
                "helper".into(),
                CheckpointStatus::Paused,
                Some("s-9".into()),
                at(1_700_000_000_000)
            ),
            (
                "run-running".into(),
                "helper".into(),
                CheckpointStatus::Running,
                None,
                at(1_700_000_001_000)
            ),
        ]
    );
    assert_eq!(
        ckpt.load("run-paused").await.unwrap(),
        Some(serde_json::to_vec(&paused).unwrap()),
        "the state bytes are untouched"
    );
    let conv = SqliteConversationStore::from_pool(ckpt.pool().clone()).await.unwrap();
    let sessions = conv.list_sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].session_id, "s-9");
    assert_eq!(
        sessions[0].last_used,
        at(1_700_000_003_000),
        "last access stands in for the last append"
    );
}
