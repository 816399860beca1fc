//! The conformance suites on the in-memory reference stores of `modu-core`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use modu_core::{
    CheckpointStore, ConversationStore, InMemoryCheckpointStore, InMemoryConversationStore, InMemoryMemoryStateStore,
    MemoryStateStore,
};
use modu_testing::conformance;

#[tokio::test]
async fn in_memory_conversation_store_conforms() {
    conformance::conversation_store_suite(|| async {
        Arc::new(InMemoryConversationStore::new()) as Arc<dyn ConversationStore>
    })
    .await;
}

#[tokio::test]
async fn in_memory_conversation_store_ttl_conforms() {
    conformance::conversation_store_ttl_suite(|ttl| async move {
        Arc::new(InMemoryConversationStore::with_ttl(ttl)) as Arc<dyn ConversationStore>
    })
    .await;
}

#[tokio::test]
async fn in_memory_checkpoint_store_conforms() {
    conformance::checkpoint_store_suite(|| async {
        Arc::new(InMemoryCheckpointStore::new()) as Arc<dyn CheckpointStore>
    })
    .await;
}

#[tokio::test]
async fn in_memory_checkpoint_store_ttl_conforms() {
    conformance::checkpoint_store_ttl_suite(|ttl| async move {
        Arc::new(InMemoryCheckpointStore::with_ttl(ttl)) as Arc<dyn CheckpointStore>
    })
    .await;
}

#[tokio::test]
async fn in_memory_memory_state_store_conforms() {
    conformance::memory_state_store_suite(|| async {
        Arc::new(InMemoryMemoryStateStore::new()) as Arc<dyn MemoryStateStore>
    })
    .await;
}

#[tokio::test]
async fn in_memory_memory_state_store_ttl_conforms() {
    conformance::memory_state_store_ttl_suite(|ttl| async move {
        Arc::new(InMemoryMemoryStateStore::with_ttl(ttl)) as Arc<dyn MemoryStateStore>
    })
    .await;
}
