//! The id cases of every store: ids of up to [`MAX_ID_BYTES`] bytes (memory keys up to
//! [`MAX_MEMORY_KEY_BYTES`]), the empty id and ids that look like key patterns work; longer ids
//! and ids with a NUL character (also a checkpoint's session id) are refused with [`StoreError::InvalidId`] before anything is
//! written; NUL characters inside message text round-trip.

use std::sync::Arc;

use modu_core::{
    CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore, MAX_ID_BYTES,
    MAX_MEMORY_KEY_BYTES, MemoryStateStore, Message, StoreError,
};

use super::lease::FencedStores;
use super::{CaseResult, short, store};

/// An id of exactly `bytes` bytes of multi-byte UTF-8 (padded with ASCII).
fn id_of(bytes: usize) -> String {
    let mut id = "세".repeat(bytes / 3);
    id.push_str(&"x".repeat(bytes - id.len()));
    id
}

/// The ids every store must refuse: one byte too long, a 9,000-byte id, a NUL character.
fn refused_ids(max: usize) -> Vec<String> {
    vec![id_of(max + 1), id_of(9000), "a\0b".to_owned(), "\0".to_owned()]
}

fn invalid<T: std::fmt::Debug>(what: &str, r: Result<T, StoreError>) -> CaseResult {
    match r {
        Err(StoreError::InvalidId { .. }) => Ok(()),
        Err(e) => Err(format!("{what}: expected StoreError::InvalidId, got {e}")),
        Ok(v) => Err(format!("{what}: expected StoreError::InvalidId, got Ok({v:?})")),
    }
}

fn short_id(id: &str) -> String {
    format!("{:?}… ({} bytes)", id.chars().take(8).collect::<String>(), id.len())
}

pub(super) async fn conversation_ids(s: Arc<dyn ConversationStore>) -> CaseResult {
    let longest = id_of(MAX_ID_BYTES);
    let nul_text = Message::user("before\0after \u{0} end");
    for id in ["", longest.as_str(), "*", "a?", "[ab]"] {
        store("append", s.append(id, std::slice::from_ref(&nul_text)).await)?;
        check_eq!(
            store("load", s.load(id).await)?,
            vec![nul_text.clone()],
            format!("session {}", short_id(id))
        );
    }
    for id in refused_ids(MAX_ID_BYTES) {
        let what = short_id(&id);
        invalid(&format!("append to {what}"), s.append(&id, &[Message::user("x")]).await)?;
        invalid(&format!("load of {what}"), s.load(&id).await)?;
        invalid(&format!("delete of {what}"), s.delete(&id).await)?;
    }
    let listed: Vec<String> = store("list_sessions", s.list_sessions().await)?
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    let mut want = vec![String::new(), longest.clone(), "*".into(), "a?".into(), "[ab]".into()];
    want.sort();
    check!(
        listed == want,
        "sessions listed: {:?}",
        listed.iter().map(|i| short_id(i)).collect::<Vec<_>>()
    );
    store("delete", s.delete(&longest).await)?;
    store("delete", s.delete("*").await)?;
    check!(
        store("load", s.load(&longest).await)?.is_empty(),
        "the longest session survived its delete"
    );
    check_eq!(
        store("load", s.load("a?").await)?.len(),
        1,
        "session \"a?\" after deleting \"*\""
    );
    Ok(())
}

pub(super) async fn checkpoint_ids(s: Arc<dyn CheckpointStore>) -> CaseResult {
    let meta = CheckpointMeta::new("agent", CheckpointStatus::Running);
    let longest = id_of(MAX_ID_BYTES);
    for id in ["", longest.as_str()] {
        store("save", s.save(id, &meta, b"state").await)?;
        check_eq!(
            store("load", s.load(id).await)?,
            Some(b"state".to_vec()),
            format!("run {}", short_id(id))
        );
    }
    for id in refused_ids(MAX_ID_BYTES) {
        let what = short_id(&id);
        invalid(&format!("save of {what}"), s.save(&id, &meta, b"x").await)?;
        invalid(&format!("load of {what}"), s.load(&id).await)?;
        invalid(&format!("delete of {what}"), s.delete(&id).await)?;
        let in_session = meta.clone().with_session(Some(id.as_str()));
        invalid(&format!("save in session {what}"), s.save("r", &in_session, b"x").await)?;
        // A cursor is not a new key: a long one (a run stored before the rule) pages on.
        let query = CheckpointQuery::first(10).after(Some(id.as_str()));
        if id.contains('\0') {
            invalid(&format!("list after {what}"), s.list(&query).await)?;
        } else {
            store(&format!("list after {what}"), s.list(&query).await)?;
        }
    }
    // An agent name is not a key: any length works; a NUL (PostgreSQL text cannot hold it)
    // is refused alike everywhere.
    invalid(
        "save with an agent name holding a NUL",
        s.save("r", &CheckpointMeta::new("a\0b", CheckpointStatus::Running), b"x")
            .await,
    )?;
    let page = store("list", s.list(&CheckpointQuery::default()).await)?;
    let ids: Vec<String> = page.items.into_iter().map(|i| i.run_id).collect();
    check!(
        ids == vec![String::new(), longest.clone()],
        "runs listed: {} ids",
        ids.len()
    );
    let page = store("list", s.list(&CheckpointQuery::first(10).after(Some(""))).await)?;
    check!(
        page.items.len() == 1 && page.items[0].run_id == longest,
        "the page after the empty id: {} items",
        page.items.len()
    );
    Ok(())
}

pub(super) async fn memory_keys(s: Arc<dyn MemoryStateStore>) -> CaseResult {
    let longest = id_of(MAX_MEMORY_KEY_BYTES);
    for key in ["", longest.as_str()] {
        store("put", s.put(key, "v").await)?;
        check_eq!(
            store("get", s.get(key).await)?,
            Some("v".to_owned()),
            format!("key {}", short_id(key))
        );
    }
    for key in refused_ids(MAX_MEMORY_KEY_BYTES) {
        let what = short_id(&key);
        invalid(&format!("put of {what}"), s.put(&key, "x").await)?;
        invalid(&format!("get of {what}"), s.get(&key).await)?;
        invalid(&format!("delete of {what}"), s.delete(&key).await)?;
    }
    Ok(())
}

pub(super) async fn lease_keys(s: Arc<FencedStores>) -> CaseResult {
    let longest = id_of(MAX_ID_BYTES);
    // Live through several round trips, however slow the machine: nothing here waits for expiry.
    let ttl = std::time::Duration::from_secs(60);
    let lease =
        store("acquire", s.leases.acquire(&longest, "a", ttl).await)?.ok_or("the longest key could not be taken")?;
    let msgs = [Message::user("under the longest key")];
    store(
        "append_fenced",
        s.conversations.append_fenced(&longest, &msgs, &lease.fence()).await,
    )?;
    check_eq!(
        store("load", s.conversations.load(&longest).await)?,
        msgs.to_vec(),
        "fenced append"
    );
    store(
        "delete_fenced",
        s.conversations.delete_fenced(&longest, &lease.fence()).await,
    )?;
    check_eq!(
        store("load", s.conversations.load(&longest).await)?,
        Vec::<Message>::new(),
        "fenced delete"
    );
    for key in refused_ids(MAX_ID_BYTES) {
        invalid(
            &format!("delete_fenced of {}", short_id(&key)),
            s.conversations.delete_fenced(&key, &lease.fence()).await,
        )?;
    }
    store("release", s.leases.release(&lease).await)?;
    for key in refused_ids(MAX_ID_BYTES) {
        invalid(
            &format!("acquire of {}", short_id(&key)),
            s.leases.acquire(&key, "a", ttl).await,
        )?;
    }
    // A holder name is not a key: any length works; a NUL is refused alike everywhere.
    invalid(
        "acquire for a holder with a NUL",
        s.leases.acquire("k", "h\0", ttl).await,
    )?;
    let long_holder = id_of(9000);
    let lease = store("acquire", s.leases.acquire("k", &long_holder, ttl).await)?
        .ok_or("a free key could not be taken by a long holder")?;
    check!(lease.holder == long_holder, "the holder came back changed");
    store("release", s.leases.release(&lease).await)?;
    Ok(())
}
