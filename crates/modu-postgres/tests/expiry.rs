//! PostgreSQL-specific expiry: expired checkpoints are physically deleted (rows counted with
//! sqlx), by `purge_expired` in batches of at most `PURGE_BATCH` and by every save in batches
//! of at most `SAVE_PRUNE_BATCH`; expired sessions take their messages with them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use modu_core::{CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore, Message};
use modu_postgres::sqlx::{self, PgPool};
use modu_postgres::{PURGE_BATCH, PostgresCheckpointStore, PostgresConversationStore, SAVE_PRUNE_BATCH};
use support::{fresh_pool, url};

fn meta() -> CheckpointMeta {
    CheckpointMeta::new("agent", CheckpointStatus::Paused)
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

async fn rows(pool: &PgPool) -> i64 {
    count(pool, "SELECT COUNT(*) FROM modu_checkpoints").await
}

/// Inserts `n` checkpoints last touched in 1970: long expired for any TTL.
async fn insert_ancient(pool: &PgPool, prefix: &str, n: usize) {
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:05}")).collect();
    sqlx::query(
        "INSERT INTO modu_checkpoints (run_id, state, touched_ms, agent, status, saved_ms)
         SELECT id, '\\x00ff'::bytea, 1000, 'old', 'paused', 1000 FROM UNNEST($1::text[]) AS id",
    )
    .bind(&ids)
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_expired_rows_at_most_a_batch_per_call() {
    let Some(url) = url() else { return };
    let pool = fresh_pool(&url, "purge").await;
    let store = PostgresCheckpointStore::from_pool(pool.clone())
        .await
        .unwrap()
        .with_ttl(Duration::from_secs(3600));
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
    let Some(url) = url() else { return };
    let pool = fresh_pool(&url, "saves").await;
    let store = PostgresCheckpointStore::from_pool(pool.clone())
        .await
        .unwrap()
        .with_ttl(Duration::from_secs(3600));
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
    let old = count(&pool, "SELECT COUNT(*) FROM modu_checkpoints WHERE run_id LIKE 'old-%'").await;
    assert_eq!(old, 0, "every expired row is gone");
    // Overwriting one run again and again does not grow the table either.
    for _ in 0..20 {
        store.save("new-0", &meta(), b"again").await.unwrap();
    }
    assert_eq!(rows(&pool).await, saves as i64);
}

/// Concurrent saves with a TTL prune without waiting for each other (`SKIP LOCKED`) and
/// together delete every expired row exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_saves_prune_without_conflict() {
    let Some(url) = url() else { return };
    let pool = fresh_pool(&url, "conc-prune").await;
    let store = PostgresCheckpointStore::from_pool(pool.clone())
        .await
        .unwrap()
        .with_ttl(Duration::from_secs(3600));
    insert_ancient(&pool, "old", 200).await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                store.save(&format!("new-{t}-{i}"), &meta(), b"s").await?;
            }
            Ok::<_, modu_core::StoreError>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    // 80 saves × up to 8 each would cover 640 rows; all 200 are gone, the 80 new ones stay.
    assert_eq!(rows(&pool).await, 80);
}

/// Expiry through the real clock: saved, not touched for longer than the TTL, purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_expired_by_time_is_purged_from_the_table() {
    let Some(url) = url() else { return };
    let pool = fresh_pool(&url, "clock").await;
    let store = PostgresCheckpointStore::from_pool(pool.clone())
        .await
        .unwrap()
        .with_ttl(Duration::from_millis(300));
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

/// An expired session is deleted with its messages: by `purge_expired` (all of them) and by
/// its next append, which starts it afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_sessions_are_deleted_with_their_messages() {
    let Some(url) = url() else { return };
    let pool = fresh_pool(&url, "conv-purge").await;
    let store = PostgresConversationStore::from_pool(pool.clone())
        .await
        .unwrap()
        .with_ttl(Duration::from_millis(2000));
    for s in ["a", "b", "c"] {
        store
            .append(
                s,
                &[Message::user(format!("{s}1")), Message::assistant(format!("{s}2"))],
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(store.load("c").await.unwrap().len(), 2, "a load refreshes the TTL");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // a and b: 2.6 s since their append; c: 1.3 s since its load (wide margins: a loaded
    // machine must not make c expire too).
    assert_eq!(count(&pool, "SELECT COUNT(*) FROM modu_messages").await, 6);
    // "a" comes back to life by an append: its old messages are gone, numbering restarts.
    store.append("a", &[Message::user("again")]).await.unwrap();
    assert_eq!(store.load("a").await.unwrap(), vec![Message::user("again")]);
    assert_eq!(store.purge_expired().await.unwrap(), 1, "only b had expired");
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    let sessions: Vec<String> = sqlx::query_scalar("SELECT session_id FROM modu_sessions ORDER BY session_id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(sessions, ["a", "c"]);
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM modu_messages").await,
        3,
        "a's new message and c's two"
    );
    let seq: i64 = count(&pool, "SELECT MIN(seq) FROM modu_messages WHERE session_id = 'a'").await;
    assert_eq!(seq, 0);
}

/// A delete that meets an append in flight (here: a transaction that did what `append` does
/// and has not committed yet) waits for it and deletes its messages too: no message outlives
/// its session, and a later append starts the numbering at 0 without a key conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_during_an_append_leaves_no_orphan_messages() {
    let Some(url) = url() else { return };
    let pool = fresh_pool(&url, "del-race").await;
    let store = PostgresConversationStore::from_pool(pool.clone()).await.unwrap();
    store.append("s", &[Message::user("first")]).await.unwrap();

    let mut append = pool.begin().await.unwrap();
    let next: i64 = sqlx::query_scalar(
        "UPDATE modu_sessions SET next_seq = next_seq + 1 WHERE session_id = 's' RETURNING next_seq",
    )
    .fetch_one(&mut *append)
    .await
    .unwrap();
    sqlx::query("INSERT INTO modu_messages (session_id, seq, message) VALUES ('s', $1, $2)")
        .bind(next - 1)
        .bind(serde_json::to_string(&Message::user("in flight")).unwrap())
        .execute(&mut *append)
        .await
        .unwrap();
    let delete = tokio::spawn({
        let store = store.clone();
        async move { store.delete("s").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!delete.is_finished(), "the delete waits for the append in flight");
    append.commit().await.unwrap();
    delete.await.unwrap().unwrap();

    let orphans = count(
        &pool,
        "SELECT COUNT(*) FROM modu_messages m WHERE NOT EXISTS
            (SELECT 1 FROM modu_sessions s WHERE s.session_id = m.session_id)",
    )
    .await;
    assert_eq!(orphans, 0);
    store.append("s", &[Message::user("fresh")]).await.unwrap();
    assert_eq!(store.load("s").await.unwrap(), vec![Message::user("fresh")]);
}
