//! The memory-state cases: a [`MemoryStateStore`] puts, gets and deletes values by key; the
//! TTL cases expire idle values.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use modu_core::MemoryStateStore;

use super::{Case, CaseResult, TTL_UNDER_TEST, run_cases, short, store};

/// Runs the memory-state cases; `make` builds a fresh, empty store for every case.
pub async fn memory_state_store_suite<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn MemoryStateStore>>,
{
    run_cases("memory_state_store", make, MEMORY_CASES).await;
}

/// Runs the memory-state TTL cases; `make_with_ttl` builds a fresh store whose values expire
/// the given duration after their last access (put or get).
pub async fn memory_state_store_ttl_suite<F, Fut>(make_with_ttl: F)
where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = Arc<dyn MemoryStateStore>>,
{
    run_cases(
        "memory_state_store_ttl",
        || make_with_ttl(TTL_UNDER_TEST),
        MEMORY_TTL_CASES,
    )
    .await;
}

const MEMORY_CASES: &[Case<dyn MemoryStateStore>] = &[
    ("missing_key_is_none", |s| Box::pin(mem_missing(s))),
    ("put_get_overwrite_delete", |s| Box::pin(mem_put_get(s))),
    ("keys_are_isolated", |s| Box::pin(mem_isolated(s))),
    ("unicode_empty_and_large_values", |s| Box::pin(mem_values(s))),
    (
        "keys_up_to_max_memory_key_bytes_work_longer_or_nul_keys_are_refused",
        |s| Box::pin(super::ids::memory_keys(s)),
    ),
];

const MEMORY_TTL_CASES: &[Case<dyn MemoryStateStore>] = &[
    ("expires_after_ttl_without_access", |s| Box::pin(mem_ttl_expiry(s))),
    ("get_refreshes_ttl", |s| Box::pin(mem_ttl_refresh(s))),
];

async fn mem_missing(s: Arc<dyn MemoryStateStore>) -> CaseResult {
    check_eq!(store("get", s.get("nothing").await)?, None::<String>, "missing key");
    Ok(())
}

async fn mem_put_get(s: Arc<dyn MemoryStateStore>) -> CaseResult {
    store("put", s.put("summary:s1", "first summary").await)?;
    check_eq!(
        store("get", s.get("summary:s1").await)?,
        Some("first summary".to_owned()),
        "value"
    );
    store("put", s.put("summary:s1", "second").await)?;
    check_eq!(
        store("get", s.get("summary:s1").await)?,
        Some("second".to_owned()),
        "overwritten value"
    );
    store("delete", s.delete("summary:s1").await)?;
    check_eq!(
        store("get", s.get("summary:s1").await)?,
        None::<String>,
        "deleted value"
    );
    store("delete missing", s.delete("summary:s1").await)?;
    Ok(())
}

async fn mem_isolated(s: Arc<dyn MemoryStateStore>) -> CaseResult {
    for k in ["k", "k:1", "k*", "K"] {
        store("put", s.put(k, &format!("value of {k}")).await)?;
    }
    store("delete", s.delete("k*").await)?;
    check_eq!(store("get", s.get("k").await)?, Some("value of k".to_owned()), "k");
    check_eq!(
        store("get", s.get("k:1").await)?,
        Some("value of k:1".to_owned()),
        "k:1"
    );
    check_eq!(store("get", s.get("K").await)?, Some("value of K".to_owned()), "K");
    check_eq!(store("get", s.get("k*").await)?, None::<String>, "deleted k*");
    Ok(())
}

async fn mem_values(s: Arc<dyn MemoryStateStore>) -> CaseResult {
    let unicode = "요약: 사용자는 🦀 Rust를 좋아한다.\n\t\u{1b}[1m\u{2028}\"quoted\" \\ end";
    store("put", s.put("요약/세션", unicode).await)?;
    check_eq!(
        store("get", s.get("요약/세션").await)?,
        Some(unicode.to_owned()),
        "unicode value"
    );
    // PostgreSQL TEXT cannot hold a NUL character: a value is any string.
    let nul = "before\0after \u{0}";
    store("put", s.put("nul", nul).await)?;
    check_eq!(
        store("get", s.get("nul").await)?,
        Some(nul.to_owned()),
        "value with NUL characters"
    );
    store("put", s.put("empty", "").await)?;
    check_eq!(store("get", s.get("empty").await)?, Some(String::new()), "empty value");
    let big = "긴 요약 ".repeat(150_000);
    store("put", s.put("big", &big).await)?;
    check!(
        store("get", s.get("big").await)?.as_deref() == Some(big.as_str()),
        "large value changed"
    );
    Ok(())
}

async fn mem_ttl_expiry(s: Arc<dyn MemoryStateStore>) -> CaseResult {
    store("put", s.put("short", "v").await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(1.6)).await;
    check_eq!(
        store("get", s.get("short").await)?,
        None::<String>,
        "value after its TTL"
    );
    Ok(())
}

async fn mem_ttl_refresh(s: Arc<dyn MemoryStateStore>) -> CaseResult {
    store("put", s.put("touched", "v").await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    check_eq!(
        store("get", s.get("touched").await)?,
        Some("v".to_owned()),
        "value at 0.6 TTL"
    );
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    check_eq!(
        store("get", s.get("touched").await)?,
        Some("v".to_owned()),
        "value 0.6 TTL after a get (get must refresh the TTL)"
    );
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(1.6)).await;
    check_eq!(
        store("get", s.get("touched").await)?,
        None::<String>,
        "value 1.6 TTL after access"
    );
    Ok(())
}
