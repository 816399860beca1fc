//! Conformance suites for store backends: every [`ConversationStore`], [`CheckpointStore`] and
//! [`MemoryStateStore`] implementation runs the same cases, so they all keep the semantics of
//! the in-memory reference stores in `modu-core`.
//!
//! Each suite takes a factory (`make`) that builds a fresh, empty store for every case (for
//! Redis: a store with a new key prefix; for SQLite: a new database file). The cases live in
//! tables (name, function); the suite runs every case, prints one line per case to stderr and
//! panics at the end naming every case that failed, so one run shows all breakages at once.
//!
//! The TTL suites take a factory that builds a store with a given TTL; they use
//! [`TTL_UNDER_TEST`] and sleep for a few multiples of it (about 3 s per case).
//!
//! ```
//! use std::sync::Arc;
//! use modu_core::{ConversationStore, InMemoryConversationStore};
//! use modu_testing::conformance;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! conformance::conversation_store_suite(|| async {
//!     Arc::new(InMemoryConversationStore::new()) as Arc<dyn ConversationStore>
//! })
//! .await;
//! # }
//! ```
//!
//! [`ConversationStore`]: modu_core::ConversationStore
//! [`CheckpointStore`]: modu_core::CheckpointStore
//! [`MemoryStateStore`]: modu_core::MemoryStateStore

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use modu_core::StoreError;

/// The TTL the TTL suites build their stores with. Cases sleep 0.6×, then 0.6× (the entry must
/// survive because the access in between refreshed it), then 1.6× (it must be gone).
pub const TTL_UNDER_TEST: Duration = Duration::from_millis(1000);

type CaseResult = Result<(), String>;
type BoxFut = Pin<Box<dyn Future<Output = CaseResult> + Send>>;
type Case<S> = (&'static str, fn(Arc<S>) -> BoxFut);

fn store<T>(what: &str, r: Result<T, StoreError>) -> Result<T, String> {
    r.map_err(|e| format!("{what} failed: {e}"))
}

macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

macro_rules! check_eq {
    ($left:expr, $right:expr, $what:expr) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(format!("{}: expected {:?}, got {:?}", $what, short(r), short(l)));
        }
    }};
}

mod checkpoint;
mod conversation;
mod ids;
mod lease;
mod memory;
pub use checkpoint::{checkpoint_store_suite, checkpoint_store_ttl_suite};
pub use conversation::{conversation_store_suite, conversation_store_ttl_suite};
pub use lease::{FencedStores, LEASE_TTL_UNDER_TEST, lease_store_suite};
pub use memory::{memory_state_store_suite, memory_state_store_ttl_suite};

/// Debug text of a value, cut to a readable length (large-message cases).
fn short<T: std::fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    if s.len() > 400 {
        let mut end = 400;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… ({} chars)", &s[..end], s.len())
    } else {
        s
    }
}

async fn run_cases<S: ?Sized, F, Fut>(suite: &str, make: F, cases: &[Case<S>])
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<S>>,
{
    let mut failed = Vec::new();
    for (name, case) in cases {
        let store = make().await;
        match case(store).await {
            Ok(()) => eprintln!("{suite}::{name} ... ok"),
            Err(e) => {
                eprintln!("{suite}::{name} ... FAILED: {e}");
                failed.push(format!("{name}: {e}"));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{suite}: {} of {} cases failed:\n  {}",
        failed.len(),
        cases.len(),
        failed.join("\n  ")
    );
}
