//! A lock held past the busy timeout is `StoreError::Timeout`, as PostgreSQL's lock timeout
//! is: a caller that retries on a timeout treats both backends alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use modu_core::{ConversationStore, Message, StoreError};
use modu_sqlite::SqliteConversationStore;
use modu_sqlite::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_held_past_the_busy_timeout_is_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("modu.db");
    // This worker's store, with a short busy timeout (`open` creates and migrates the file).
    let other = modu_sqlite::open(&path).await.unwrap();
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .busy_timeout(Duration::from_millis(200));
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let store = SqliteConversationStore::from_pool(pool).await.unwrap();
    // Another process's writer holds the write lock.
    let mut writer = other.acquire().await.unwrap();
    modu_sqlite::sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *writer)
        .await
        .unwrap();
    let err = store.append("s1", &[Message::user("hi")]).await.unwrap_err();
    assert!(matches!(err, StoreError::Timeout), "{err:?}");
    // Once the lock is released, the same append goes through.
    modu_sqlite::sqlx::query("ROLLBACK")
        .execute(&mut *writer)
        .await
        .unwrap();
    store.append("s1", &[Message::user("hi")]).await.unwrap();
    assert_eq!(store.load("s1").await.unwrap().len(), 1);
}
