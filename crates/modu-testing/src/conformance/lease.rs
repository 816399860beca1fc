//! The lease cases: a [`LeaseStore`] and the conversation and checkpoint stores of the same
//! backend, whose fenced writes check its leases.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use modu_core::{
    CheckpointMeta, CheckpointStatus, CheckpointStore, ConversationStore, Fence, Lease, LeaseStore, Message, StoreError,
};

use super::{BoxFut, run_cases, short, store};

/// The ttl the lease cases take leases for; they sleep about 1.5× of it to let one expire.
pub const LEASE_TTL_UNDER_TEST: Duration = Duration::from_millis(400);

/// One backend's leases with the conversation and checkpoint stores that check them.
#[derive(Clone)]
pub struct FencedStores {
    /// The leases.
    pub leases: Arc<dyn LeaseStore>,
    /// Conversations whose `append_fenced` and `delete_fenced` check `leases`.
    pub conversations: Arc<dyn ConversationStore>,
    /// Checkpoints whose `save_fenced` and `delete_fenced` check `leases`.
    pub checkpoints: Arc<dyn CheckpointStore>,
}

/// Runs the lease cases; `make` builds fresh, empty stores for every case.
pub async fn lease_store_suite<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = FencedStores>,
{
    run_cases("lease_store", || async { Arc::new(make().await) }, LEASE_CASES).await;
}

type LeaseCase = (&'static str, fn(Arc<FencedStores>) -> BoxFut);

const LEASE_CASES: &[LeaseCase] = &[
    ("a_lease_is_exclusive", |s| Box::pin(exclusive(s))),
    ("released_lease_is_taken_with_a_larger_token", |s| Box::pin(released(s))),
    ("tokens_grow_across_takes", |s| Box::pin(tokens_grow(s))),
    ("an_expired_lease_is_taken_over", |s| Box::pin(expired(s))),
    ("renewal_keeps_a_lease", |s| Box::pin(renewal(s))),
    ("renewing_a_released_lease_fails", |s| Box::pin(renew_released(s))),
    ("releasing_a_lost_lease_leaves_the_new_one", |s| {
        Box::pin(release_lost(s))
    }),
    ("of_concurrent_takers_one_wins", |s| Box::pin(concurrent(s))),
    ("keys_are_independent", |s| Box::pin(independent(s))),
    ("a_fenced_append_writes_under_a_live_lease", |s| {
        Box::pin(append_live(s))
    }),
    ("a_fenced_append_after_take_over_is_refused", |s| {
        Box::pin(append_taken(s))
    }),
    ("a_fenced_append_after_expiry_is_refused", |s| {
        Box::pin(append_expired(s))
    }),
    ("a_fenced_delete_under_a_live_lease_deletes", |s| {
        Box::pin(delete_live(s))
    }),
    (
        "a_fenced_delete_with_a_stale_or_foreign_fence_is_refused_and_the_history_stays",
        |s| Box::pin(delete_stale(s)),
    ),
    ("fenced_checkpoint_writes_follow_the_lease", |s| {
        Box::pin(checkpoints(s))
    }),
    ("a_fenced_write_after_release_is_refused", |s| {
        Box::pin(after_release(s))
    }),
    ("a_renewed_lease_is_not_taken_by_its_holder_again", |s| {
        Box::pin(renewed_not_reentrant(s))
    }),
    ("a_lease_with_a_huge_ttl_is_held_renewed_and_fences", |s| {
        Box::pin(huge_ttl(s))
    }),
    ("keys_up_to_max_id_bytes_work_longer_or_nul_keys_are_refused", |s| {
        Box::pin(super::ids::lease_keys(s))
    }),
];

async fn take(s: &FencedStores, key: &str, holder: &str) -> Result<Lease, String> {
    store("acquire", s.leases.acquire(key, holder, LEASE_TTL_UNDER_TEST).await)?
        .ok_or_else(|| format!("{holder} could not take the free key {key}"))
}

/// A lease that stays live through a case's several round trips, however slow the machine:
/// for a holder the case never lets expire.
async fn take_lasting(s: &FencedStores, key: &str, holder: &str) -> Result<Lease, String> {
    store("acquire", s.leases.acquire(key, holder, Duration::from_secs(60)).await)?
        .ok_or_else(|| format!("{holder} could not take the free key {key}"))
}

async fn expire() {
    tokio::time::sleep(LEASE_TTL_UNDER_TEST * 3 / 2).await;
}

fn fenced<T>(what: &str, r: Result<T, StoreError>) -> Result<(), String> {
    match r {
        Err(StoreError::Fenced { .. }) => Ok(()),
        Err(e) => Err(format!("{what}: expected StoreError::Fenced, got {e}")),
        Ok(_) => Err(format!("{what}: expected StoreError::Fenced, the write was accepted")),
    }
}

async fn exclusive(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    check!(
        a.key == "s1" && a.holder == "a",
        "the lease names its key and holder: {a:?}"
    );
    let b = store("acquire", s.leases.acquire("s1", "b", LEASE_TTL_UNDER_TEST).await)?;
    check!(b.is_none(), "a second holder took a live lease: {b:?}");
    let again = store("acquire", s.leases.acquire("s1", "a", LEASE_TTL_UNDER_TEST).await)?;
    check!(
        again.is_none(),
        "a lease is not re-entrant, but its holder took it again: {again:?}"
    );
    Ok(())
}

async fn released(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    store("release", s.leases.release(&a).await)?;
    let b = take(&s, "s1", "b").await?;
    check!(b.token > a.token, "tokens must grow: {} after {}", b.token, a.token);
    Ok(())
}

async fn tokens_grow(s: Arc<FencedStores>) -> Result<(), String> {
    let mut last = 0;
    for i in 0..4 {
        let lease = take(&s, "s1", &format!("w{i}")).await?;
        check!(
            lease.token > last,
            "take {i}: token {} is not above {last}",
            lease.token
        );
        last = lease.token;
        store("release", s.leases.release(&lease).await)?;
    }
    Ok(())
}

async fn expired(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    expire().await;
    let b = take(&s, "s1", "b").await?;
    check!(b.token > a.token, "tokens must grow: {} after {}", b.token, a.token);
    fenced("renewing the lost lease", s.leases.renew(&a).await)?;
    Ok(())
}

async fn renewal(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    for _ in 0..4 {
        tokio::time::sleep(LEASE_TTL_UNDER_TEST / 3).await;
        store("renew", s.leases.renew(&a).await)?;
    }
    let b = store("acquire", s.leases.acquire("s1", "b", LEASE_TTL_UNDER_TEST).await)?;
    check!(b.is_none(), "a renewed lease was taken over: {b:?}");
    let append = s
        .conversations
        .append_fenced("s1", &[Message::user("still mine")], &a.fence())
        .await;
    store("append_fenced under a renewed lease", append)?;
    Ok(())
}

async fn renew_released(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    store("release", s.leases.release(&a).await)?;
    fenced("renewing a released lease", s.leases.renew(&a).await)
}

async fn release_lost(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    expire().await;
    let b = take(&s, "s1", "b").await?;
    store("releasing a lost lease", s.leases.release(&a).await)?;
    let c = store("acquire", s.leases.acquire("s1", "c", LEASE_TTL_UNDER_TEST).await)?;
    check!(c.is_none(), "releasing the old lease freed the new one: {c:?}");
    store("renew of the new lease", s.leases.renew(&b).await)?;
    Ok(())
}

async fn concurrent(s: Arc<FencedStores>) -> Result<(), String> {
    let takers = (0..16).map(|i| {
        let s = Arc::clone(&s);
        async move { s.leases.acquire("s1", &format!("w{i}"), LEASE_TTL_UNDER_TEST).await }
    });
    let mut won = 0;
    for r in futures::future::join_all(takers).await {
        if store("acquire", r)?.is_some() {
            won += 1;
        }
    }
    check!(won == 1, "{won} of 16 concurrent takers got the lease");
    Ok(())
}

async fn independent(s: Arc<FencedStores>) -> Result<(), String> {
    take(&s, "s1", "a").await?;
    take(&s, "s2", "b").await?;
    Ok(())
}

async fn append_live(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    let msgs = [Message::user("hi"), Message::assistant("hello")];
    store(
        "append_fenced",
        s.conversations.append_fenced("s1", &msgs, &a.fence()).await,
    )?;
    let loaded = store("load", s.conversations.load("s1").await)?;
    check_eq!(loaded.len(), 2, "messages stored");
    Ok(())
}

async fn append_taken(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    expire().await;
    let b = take(&s, "s1", "b").await?;
    let stale = s
        .conversations
        .append_fenced("s1", &[Message::user("stale")], &a.fence())
        .await;
    fenced("append under the taken-over lease", stale)?;
    let fresh = s
        .conversations
        .append_fenced("s1", &[Message::user("fresh")], &b.fence())
        .await;
    store("append under the new lease", fresh)?;
    let loaded = store("load", s.conversations.load("s1").await)?;
    check_eq!(
        loaded.iter().map(Message::text).collect::<Vec<_>>(),
        vec!["fresh".to_owned()],
        "history after a refused stale write"
    );
    Ok(())
}

async fn append_expired(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    expire().await;
    let late = s
        .conversations
        .append_fenced("s1", &[Message::user("late")], &a.fence())
        .await;
    fenced("append under an expired lease", late)?;
    let forged = s
        .conversations
        .append_fenced("s1", &[Message::user("forged")], &Fence::new("s1", a.token + 100))
        .await;
    fenced("append with a token never handed out", forged)?;
    let loaded = store("load", s.conversations.load("s1").await)?;
    check!(loaded.is_empty(), "a refused write left messages: {loaded:?}");
    Ok(())
}

async fn delete_live(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take_lasting(&s, "s1", "a").await?;
    let msgs = [Message::user("hi"), Message::assistant("hello")];
    store(
        "append_fenced",
        s.conversations.append_fenced("s1", &msgs, &a.fence()).await,
    )?;
    store(
        "append to another session",
        s.conversations.append("s2", &[Message::user("other")]).await,
    )?;
    store(
        "delete_fenced under the live lease",
        s.conversations.delete_fenced("s1", &a.fence()).await,
    )?;
    let loaded = store("load", s.conversations.load("s1").await)?;
    check!(loaded.is_empty(), "the session survived its fenced delete: {loaded:?}");
    let listed: Vec<String> = store("list_sessions", s.conversations.list_sessions().await)?
        .into_iter()
        .map(|summary| summary.session_id)
        .collect();
    check_eq!(listed, vec!["s2".to_owned()], "sessions after the fenced delete");
    store(
        "delete_fenced of a session that does not exist",
        s.conversations.delete_fenced("s1", &a.fence()).await,
    )?;
    Ok(())
}

/// A delete under a lease that expired, was taken over, was released or was never handed out
/// deletes nothing, and the holder's history stays whole.
async fn delete_stale(s: Arc<FencedStores>) -> Result<(), String> {
    let texts = |loaded: Vec<Message>| loaded.iter().map(Message::text).collect::<Vec<_>>();
    let a = take(&s, "s1", "a").await?;
    store(
        "append under a",
        s.conversations
            .append_fenced("s1", &[Message::user("one")], &a.fence())
            .await,
    )?;
    expire().await;
    fenced(
        "delete under an expired lease",
        s.conversations.delete_fenced("s1", &a.fence()).await,
    )?;
    let b = take_lasting(&s, "s1", "b").await?;
    store(
        "append under b",
        s.conversations
            .append_fenced("s1", &[Message::user("two")], &b.fence())
            .await,
    )?;
    fenced(
        "delete under the taken-over lease",
        s.conversations.delete_fenced("s1", &a.fence()).await,
    )?;
    fenced(
        "delete with a token never handed out",
        s.conversations
            .delete_fenced("s1", &Fence::new("s1", b.token + 100))
            .await,
    )?;
    check_eq!(
        texts(store("load", s.conversations.load("s1").await)?),
        vec!["one".to_owned(), "two".to_owned()],
        "history after refused deletes"
    );
    store(
        "append under b after the refused deletes",
        s.conversations
            .append_fenced("s1", &[Message::user("three")], &b.fence())
            .await,
    )?;
    store("release", s.leases.release(&b).await)?;
    fenced(
        "delete after release",
        s.conversations.delete_fenced("s1", &b.fence()).await,
    )?;
    check_eq!(
        texts(store("load", s.conversations.load("s1").await)?),
        vec!["one".to_owned(), "two".to_owned(), "three".to_owned()],
        "history after a refused delete following release"
    );
    store("unfenced delete", s.conversations.delete("s1").await)?;
    let loaded = store("load", s.conversations.load("s1").await)?;
    check!(loaded.is_empty(), "the unfenced delete left messages: {loaded:?}");
    Ok(())
}

async fn checkpoints(s: Arc<FencedStores>) -> Result<(), String> {
    let meta = CheckpointMeta::new("agent", CheckpointStatus::Running).with_session(Some("s1"));
    let a = take(&s, "s1", "a").await?;
    store(
        "save_fenced",
        s.checkpoints.save_fenced("r1", &meta, b"one", &a.fence()).await,
    )?;
    check_eq!(
        store("load", s.checkpoints.load("r1").await)?,
        Some(b"one".to_vec()),
        "saved state"
    );
    expire().await;
    let b = take(&s, "s1", "b").await?;
    fenced(
        "save under the taken-over lease",
        s.checkpoints.save_fenced("r1", &meta, b"stale", &a.fence()).await,
    )?;
    fenced(
        "delete under the taken-over lease",
        s.checkpoints.delete_fenced("r1", &a.fence()).await,
    )?;
    check_eq!(
        store("load", s.checkpoints.load("r1").await)?,
        Some(b"one".to_vec()),
        "state after refused stale writes"
    );
    store(
        "save under the new lease",
        s.checkpoints.save_fenced("r1", &meta, b"two", &b.fence()).await,
    )?;
    check_eq!(
        store("load", s.checkpoints.load("r1").await)?,
        Some(b"two".to_vec()),
        "state saved by the new holder"
    );
    store(
        "delete under the new lease",
        s.checkpoints.delete_fenced("r1", &b.fence()).await,
    )?;
    check_eq!(
        store("load", s.checkpoints.load("r1").await)?,
        None,
        "state after the new holder deleted it"
    );
    Ok(())
}

async fn after_release(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    store("release", s.leases.release(&a).await)?;
    let late = s
        .conversations
        .append_fenced("s1", &[Message::user("after release")], &a.fence())
        .await;
    fenced("append after release", late)?;
    let meta = CheckpointMeta::new("agent", CheckpointStatus::Running).with_session(Some("s1"));
    fenced(
        "save after release",
        s.checkpoints.save_fenced("r1", &meta, b"late", &a.fence()).await,
    )?;
    check!(
        store("load", s.conversations.load("s1").await)?.is_empty(),
        "a refused append wrote"
    );
    check_eq!(
        store("load", s.checkpoints.load("r1").await)?,
        None,
        "a refused save wrote"
    );
    Ok(())
}

async fn renewed_not_reentrant(s: Arc<FencedStores>) -> Result<(), String> {
    let a = take(&s, "s1", "a").await?;
    store("renew", s.leases.renew(&a).await)?;
    let again = store("acquire", s.leases.acquire("s1", "a", LEASE_TTL_UNDER_TEST).await)?;
    check!(again.is_none(), "the holder took its renewed lease again: {again:?}");
    Ok(())
}

/// `LeaseOptions::ttl` takes any duration: one too long for the backend's clock (up to
/// `Duration::MAX`) is a lease that does not expire in practice, not an error or a panic.
async fn huge_ttl(s: Arc<FencedStores>) -> Result<(), String> {
    for (i, ttl) in [Duration::MAX, Duration::from_secs(u64::MAX / 1000), Lease::MAX_TTL * 2]
        .into_iter()
        .enumerate()
    {
        let key = format!("huge{i}");
        let a = store("acquire", s.leases.acquire(&key, "a", ttl).await)?
            .ok_or_else(|| format!("a free key could not be taken for {ttl:?}"))?;
        let b = store("acquire", s.leases.acquire(&key, "b", LEASE_TTL_UNDER_TEST).await)?;
        check!(b.is_none(), "a lease for {ttl:?} was taken by another holder: {b:?}");
        store("renew", s.leases.renew(&a).await)?;
        let msgs = [Message::user("under a long lease")];
        store(
            "append_fenced",
            s.conversations.append_fenced(&key, &msgs, &a.fence()).await,
        )?;
        store("release", s.leases.release(&a).await)?;
        let c = take(&s, &key, "c").await?;
        check!(c.token > a.token, "tokens must grow after a long lease");
    }
    Ok(())
}
