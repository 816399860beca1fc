//! The checkpoint cases: a [`CheckpointStore`] keeps each run's last state byte for byte, lists
//! runs with their meta in pages, and deletes them; the TTL cases expire and purge idle runs.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use modu_core::{CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, StoreError};

use super::{Case, CaseResult, TTL_UNDER_TEST, run_cases, short, store};

/// Runs the checkpoint cases; `make` builds a fresh, empty store for every case.
pub async fn checkpoint_store_suite<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn CheckpointStore>>,
{
    run_cases("checkpoint_store", make, CHECKPOINT_CASES).await;
}

/// Runs the checkpoint TTL cases; `make_with_ttl` builds a fresh store whose checkpoints expire
/// the given duration after they were last saved or loaded.
pub async fn checkpoint_store_ttl_suite<F, Fut>(make_with_ttl: F)
where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = Arc<dyn CheckpointStore>>,
{
    run_cases(
        "checkpoint_store_ttl",
        || make_with_ttl(TTL_UNDER_TEST),
        CHECKPOINT_TTL_CASES,
    )
    .await;
}

const CHECKPOINT_CASES: &[Case<dyn CheckpointStore>] = &[
    ("missing_run_is_none", |s| Box::pin(ckpt_missing(s))),
    ("save_load_round_trip", |s| Box::pin(ckpt_round_trip(s))),
    ("non_utf8_bytes_round_trip_exactly", |s| Box::pin(ckpt_binary(s))),
    ("empty_state_round_trips", |s| Box::pin(ckpt_empty(s))),
    ("overwrite_keeps_only_the_last", |s| Box::pin(ckpt_overwrite(s))),
    ("delete", |s| Box::pin(ckpt_delete(s))),
    ("large_state", |s| Box::pin(ckpt_large(s))),
    ("concurrent_saves_of_many_runs", |s| Box::pin(ckpt_concurrent(s))),
    ("unicode_run_ids", |s| Box::pin(ckpt_unicode_ids(s))),
    ("list_empty_store", |s| Box::pin(ckpt_list_empty(s))),
    ("list_shows_meta_and_update_time", |s| Box::pin(ckpt_list_meta(s))),
    ("list_pages_in_run_id_order", |s| Box::pin(ckpt_list_pages(s))),
    ("list_follows_overwrite_and_delete", |s| {
        Box::pin(ckpt_list_overwrite_delete(s))
    }),
    ("purge_without_ttl_removes_nothing", |s| Box::pin(ckpt_purge_nothing(s))),
    ("ids_up_to_max_id_bytes_work_longer_or_nul_ids_are_refused", |s| {
        Box::pin(super::ids::checkpoint_ids(s))
    }),
];

const CHECKPOINT_TTL_CASES: &[Case<dyn CheckpointStore>] = &[
    ("expires_after_ttl_without_access", |s| Box::pin(ckpt_ttl_expiry(s))),
    ("load_refreshes_ttl", |s| Box::pin(ckpt_ttl_refresh(s))),
    ("expired_are_not_listed_and_purge_removes_them", |s| {
        Box::pin(ckpt_ttl_list_purge(s))
    }),
];

fn meta() -> CheckpointMeta {
    CheckpointMeta::new("agent", CheckpointStatus::Running)
}

fn state_json(n: u32) -> Vec<u8> {
    format!("{{\"schema_version\":1,\"run_id\":\"run\",\"step\":{n},\"note\":\"체크포인트 ✓\"}}").into_bytes()
}

async fn ckpt_missing(s: Arc<dyn CheckpointStore>) -> CaseResult {
    check_eq!(
        store("load", s.load("no-such-run").await)?,
        None::<Vec<u8>>,
        "missing run"
    );
    Ok(())
}

async fn ckpt_round_trip(s: Arc<dyn CheckpointStore>) -> CaseResult {
    store("save", s.save("run-1", &meta(), &state_json(1)).await)?;
    check_eq!(
        store("load", s.load("run-1").await)?,
        Some(state_json(1)),
        "saved state"
    );
    // Loading does not consume it.
    check_eq!(
        store("load", s.load("run-1").await)?,
        Some(state_json(1)),
        "second load"
    );
    Ok(())
}

async fn ckpt_binary(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend([
        0xff, 0xfe, 0x00, 0x00, 0xc3, 0x28, 0xa0, 0xa1, 0xed, 0xa0, 0x80, 0xf8, 0x88, 0x80,
    ]);
    bytes.extend((0..=255u8).rev());
    check!(std::str::from_utf8(&bytes).is_err(), "test bytes should not be UTF-8");
    store("save", s.save("binary", &meta(), &bytes).await)?;
    check_eq!(
        store("load", s.load("binary").await)?,
        Some(bytes.clone()),
        "binary state"
    );
    let nul_only = vec![0u8; 17];
    store("save", s.save("nul", &meta(), &nul_only).await)?;
    check_eq!(store("load", s.load("nul").await)?, Some(nul_only), "NUL bytes");
    Ok(())
}

async fn ckpt_empty(s: Arc<dyn CheckpointStore>) -> CaseResult {
    store("save", s.save("empty", &meta(), &[]).await)?;
    check_eq!(
        store("load", s.load("empty").await)?,
        Some(Vec::<u8>::new()),
        "empty state"
    );
    Ok(())
}

async fn ckpt_overwrite(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let long = vec![b'x'; 10_000];
    store("save", s.save("run", &meta(), &long).await)?;
    store("save", s.save("run", &meta(), &state_json(2)).await)?;
    check_eq!(
        store("load", s.load("run").await)?,
        Some(state_json(2)),
        "overwritten state (no tail left)"
    );
    for n in 3..10 {
        store("save", s.save("run", &meta(), &state_json(n)).await)?;
    }
    check_eq!(
        store("load", s.load("run").await)?,
        Some(state_json(9)),
        "last of many saves"
    );
    Ok(())
}

async fn ckpt_delete(s: Arc<dyn CheckpointStore>) -> CaseResult {
    store("delete missing", s.delete("never").await)?;
    store("save", s.save("doomed", &meta(), &state_json(1)).await)?;
    store("save", s.save("kept", &meta(), &state_json(2)).await)?;
    store("delete", s.delete("doomed").await)?;
    check_eq!(store("load", s.load("doomed").await)?, None::<Vec<u8>>, "deleted run");
    check_eq!(store("load", s.load("kept").await)?, Some(state_json(2)), "other run");
    store("delete twice", s.delete("doomed").await)?;
    store("save again", s.save("doomed", &meta(), &state_json(3)).await)?;
    check_eq!(
        store("load", s.load("doomed").await)?,
        Some(state_json(3)),
        "saved after delete"
    );
    Ok(())
}

async fn ckpt_large(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let big: Vec<u8> = (0..2_500_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    store("save", s.save("big", &meta(), &big).await)?;
    let back = store("load", s.load("big").await)?.ok_or("large state missing")?;
    check!(
        back == big,
        "large state changed ({} bytes back, {} saved)",
        back.len(),
        big.len()
    );
    Ok(())
}

async fn ckpt_concurrent(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let mut handles = Vec::new();
    for t in 0..20u32 {
        let s = Arc::clone(&s);
        handles.push(tokio::spawn(async move {
            for n in 0..5 {
                s.save(&format!("run-{t}"), &meta(), &state_json(t * 100 + n)).await?;
            }
            Ok::<_, StoreError>(())
        }));
    }
    for h in handles {
        store("concurrent save", h.await.map_err(|e| format!("task panicked: {e}"))?)?;
    }
    for t in 0..20u32 {
        check_eq!(
            store("load", s.load(&format!("run-{t}")).await)?,
            Some(state_json(t * 100 + 4)),
            format!("run-{t}")
        );
    }
    Ok(())
}

async fn ckpt_unicode_ids(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let ids = ["실행-1", "run:🦀:*", "with space", "a", "ab"];
    for (i, id) in ids.iter().enumerate() {
        store("save", s.save(id, &meta(), &state_json(i as u32)).await)?;
    }
    for (i, id) in ids.iter().enumerate() {
        check_eq!(
            store("load", s.load(id).await)?,
            Some(state_json(i as u32)),
            format!("run {id:?}")
        );
    }
    Ok(())
}

async fn ckpt_list_empty(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let page = store("list", s.list(&CheckpointQuery::default()).await)?;
    check!(page.items.is_empty(), "empty store listed {:?}", page.items);
    check_eq!(page.next, None::<String>, "next page of an empty store");
    Ok(())
}

async fn ckpt_list_meta(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let before = std::time::SystemTime::now() - Duration::from_secs(2);
    let paused = CheckpointMeta::new("수리-agent", CheckpointStatus::Paused).with_session(Some("session-1"));
    store("save", s.save("run-b", &paused, &state_json(1)).await)?;
    store("save", s.save("run-a", &meta(), &state_json(2)).await)?;
    let after = std::time::SystemTime::now() + Duration::from_secs(2);
    let page = store("list", s.list(&CheckpointQuery::default()).await)?;
    let ids: Vec<&str> = page.items.iter().map(|i| i.run_id.as_str()).collect();
    check_eq!(ids, vec!["run-a", "run-b"], "listed run ids");
    check_eq!(page.items[0].meta, meta(), "run-a meta");
    check_eq!(page.items[1].meta, paused, "run-b meta (agent, status, session)");
    for item in &page.items {
        check!(
            item.updated_at >= before && item.updated_at <= after,
            "updated_at of {} is {:?}, not between {:?} and {:?}",
            item.run_id,
            item.updated_at,
            before,
            after
        );
    }
    check_eq!(page.next, None::<String>, "one page only");
    Ok(())
}

async fn ckpt_list_pages(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let mut ids: Vec<String> = (0..7).map(|i| format!("run-{}", (i * 5) % 7)).collect();
    ids.push("실행".into());
    ids.push("Z".into());
    for id in &ids {
        store("save", s.save(id, &meta(), &state_json(1)).await)?;
    }
    ids.sort();
    let mut seen = Vec::new();
    let mut query = CheckpointQuery::first(3);
    let mut pages = 0;
    loop {
        let page = store("list", s.list(&query).await)?;
        pages += 1;
        check!(
            page.items.len() <= 3,
            "page {pages} holds {} items, limit 3",
            page.items.len()
        );
        seen.extend(page.items.into_iter().map(|i| i.run_id));
        match page.next {
            Some(next) => query = CheckpointQuery::first(3).after(Some(next)),
            None => break,
        }
        check!(pages < 10, "paging does not end");
    }
    check_eq!(seen, ids, "all run ids, ascending, each once");
    check_eq!(pages, 3, "pages of 3 over 9 checkpoints");
    // A page after the last id is empty.
    let tail = store(
        "list",
        s.list(&CheckpointQuery::first(3).after(Some("실행\u{10ffff}"))).await,
    )?;
    check!(
        tail.items.is_empty() && tail.next.is_none(),
        "page after the last id: {:?}",
        tail
    );
    Ok(())
}

async fn ckpt_list_overwrite_delete(s: Arc<dyn CheckpointStore>) -> CaseResult {
    store("save", s.save("run", &meta(), &state_json(1)).await)?;
    let first = store("list", s.list(&CheckpointQuery::default()).await)?;
    let first_at = first
        .items
        .first()
        .map(|i| i.updated_at)
        .ok_or("saved run not listed")?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let failed = CheckpointMeta::new("agent", CheckpointStatus::Failed);
    store("save", s.save("run", &failed, &state_json(2)).await)?;
    let page = store("list", s.list(&CheckpointQuery::default()).await)?;
    check_eq!(page.items.len(), 1, "one entry per run after an overwrite");
    check_eq!(
        page.items[0].meta.status,
        CheckpointStatus::Failed,
        "status of the last save"
    );
    check!(
        page.items[0].updated_at > first_at,
        "updated_at did not move on overwrite ({:?} then {:?})",
        first_at,
        page.items[0].updated_at
    );
    store("delete", s.delete("run").await)?;
    let page = store("list", s.list(&CheckpointQuery::default()).await)?;
    check!(page.items.is_empty(), "deleted run still listed: {:?}", page.items);
    Ok(())
}

async fn ckpt_purge_nothing(s: Arc<dyn CheckpointStore>) -> CaseResult {
    store("save", s.save("run", &meta(), &state_json(1)).await)?;
    let removed = store("purge_expired", s.purge_expired().await)?;
    check_eq!(removed, 0, "purged from a store with fresh checkpoints");
    check_eq!(
        store("load", s.load("run").await)?,
        Some(state_json(1)),
        "state after purge"
    );
    Ok(())
}

async fn ckpt_ttl_list_purge(s: Arc<dyn CheckpointStore>) -> CaseResult {
    for i in 0..5 {
        store("save", s.save(&format!("old-{i}"), &meta(), &state_json(i)).await)?;
    }
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(1.6)).await;
    store("save", s.save("fresh", &meta(), &state_json(9)).await)?;
    let page = store("list", s.list(&CheckpointQuery::default()).await)?;
    let ids: Vec<&str> = page.items.iter().map(|i| i.run_id.as_str()).collect();
    check_eq!(ids, vec!["fresh"], "listed after the old ones expired");
    // Purge until nothing is left to remove; the fresh checkpoint survives.
    let mut rounds = 0;
    while store("purge_expired", s.purge_expired().await)? > 0 {
        rounds += 1;
        check!(rounds < 100, "purge_expired never reaches 0");
    }
    for i in 0..5 {
        check_eq!(
            store("load", s.load(&format!("old-{i}")).await)?,
            None::<Vec<u8>>,
            format!("old-{i} after purge")
        );
    }
    check_eq!(
        store("load", s.load("fresh").await)?,
        Some(state_json(9)),
        "fresh after purge"
    );
    let page = store("list", s.list(&CheckpointQuery::default()).await)?;
    check_eq!(page.items.len(), 1, "listed after purge");
    Ok(())
}

async fn ckpt_ttl_expiry(s: Arc<dyn CheckpointStore>) -> CaseResult {
    store("save", s.save("short", &meta(), &state_json(1)).await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(1.6)).await;
    check_eq!(
        store("load", s.load("short").await)?,
        None::<Vec<u8>>,
        "state after its TTL"
    );
    Ok(())
}

async fn ckpt_ttl_refresh(s: Arc<dyn CheckpointStore>) -> CaseResult {
    store("save", s.save("touched", &meta(), &state_json(1)).await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    check_eq!(
        store("load", s.load("touched").await)?,
        Some(state_json(1)),
        "state at 0.6 TTL"
    );
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    check_eq!(
        store("load", s.load("touched").await)?,
        Some(state_json(1)),
        "state 0.6 TTL after a load (load must refresh the TTL)"
    );
    // A save restarts the TTL too.
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    store("save", s.save("touched", &meta(), &state_json(2)).await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    check_eq!(
        store("load", s.load("touched").await)?,
        Some(state_json(2)),
        "state after a save"
    );
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(1.6)).await;
    check_eq!(
        store("load", s.load("touched").await)?,
        None::<Vec<u8>>,
        "state 1.6 TTL after access"
    );
    Ok(())
}
