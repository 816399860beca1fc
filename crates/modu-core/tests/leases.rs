//! Session leases on the in-memory stores: the conformance suite, and what an agent does with
//! them (busy sessions, waiting, a run that lost its lease, orphaned runs recovered once).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use modu_core::{InMemoryCheckpointStore, InMemoryConversationStore, InMemoryLeaseStore};
use modu_testing::conformance::{self, FencedStores};

#[tokio::test]
async fn in_memory_leases_pass_the_conformance_suite() {
    conformance::lease_store_suite(|| async {
        let leases = InMemoryLeaseStore::new();
        FencedStores {
            conversations: Arc::new(leases.fence_conversations(InMemoryConversationStore::new())),
            checkpoints: Arc::new(leases.fence_checkpoints(InMemoryCheckpointStore::new())),
            leases: Arc::new(leases),
        }
    })
    .await;
}
