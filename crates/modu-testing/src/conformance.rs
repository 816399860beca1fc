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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use modu_core::{
    CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore, MemoryStateStore, Message,
    StoreError, ToolCall,
};

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

mod lease;
pub use lease::{FencedStores, LEASE_TTL_UNDER_TEST, lease_store_suite};

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

// ---------------------------------------------------------------------------------------------
// conversations
// ---------------------------------------------------------------------------------------------

/// Runs the conversation cases; `make` builds a fresh, empty store for every case.
pub async fn conversation_store_suite<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn ConversationStore>>,
{
    run_cases("conversation_store", make, CONVERSATION_CASES).await;
}

/// Runs the conversation TTL cases; `make_with_ttl` builds a fresh store whose sessions expire
/// the given duration after their last access (append or load).
pub async fn conversation_store_ttl_suite<F, Fut>(make_with_ttl: F)
where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = Arc<dyn ConversationStore>>,
{
    run_cases(
        "conversation_store_ttl",
        || make_with_ttl(TTL_UNDER_TEST),
        CONVERSATION_TTL_CASES,
    )
    .await;
}

const CONVERSATION_CASES: &[Case<dyn ConversationStore>] = &[
    ("missing_session_is_empty", |s| Box::pin(conv_missing(s))),
    ("append_load_order_across_appends", |s| Box::pin(conv_order(s))),
    ("message_fields_round_trip", |s| Box::pin(conv_fields(s))),
    ("empty_append_is_harmless", |s| Box::pin(conv_empty_append(s))),
    ("sessions_are_isolated", |s| Box::pin(conv_isolated(s))),
    ("unicode_text_and_session_ids", |s| Box::pin(conv_unicode(s))),
    ("large_message_over_1_mib", |s| Box::pin(conv_large(s))),
    ("many_messages_in_one_batch", |s| Box::pin(conv_many(s))),
    ("concurrent_appends_lose_nothing", |s| Box::pin(conv_concurrent(s))),
    ("delete_session", |s| Box::pin(conv_delete(s))),
    ("list_sessions_sorted", |s| Box::pin(conv_list(s))),
    ("list_sessions_shows_last_append", |s| Box::pin(conv_last_used(s))),
];

const CONVERSATION_TTL_CASES: &[Case<dyn ConversationStore>] = &[
    ("expires_after_ttl_without_access", |s| Box::pin(conv_ttl_expiry(s))),
    ("load_refreshes_ttl", |s| Box::pin(conv_ttl_load_refresh(s))),
    ("append_refreshes_ttl", |s| Box::pin(conv_ttl_append_refresh(s))),
];

fn texts(messages: &[Message]) -> Vec<String> {
    messages.iter().map(Message::text).collect()
}

fn users(prefix: &str, n: usize) -> Vec<Message> {
    (0..n).map(|i| Message::user(format!("{prefix}{i}"))).collect()
}

/// A complete turn: user message, a tool call, its result, the answer.
fn turn(n: usize) -> Vec<Message> {
    vec![
        Message::user(format!("question {n}")),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(format!("call_{n}"), "lookup", format!("{{\"n\":{n}}}"))],
        ),
        Message::tool_result(format!("call_{n}"), "lookup", format!("result {n}"), false),
        Message::assistant(format!("answer {n}")),
    ]
}

async fn conv_missing(s: Arc<dyn ConversationStore>) -> CaseResult {
    let loaded = store("load", s.load("no-such-session").await)?;
    check!(
        loaded.is_empty(),
        "load of a missing session returned {} messages",
        loaded.len()
    );
    let listed = session_ids(store("list_sessions", s.list_sessions().await)?);
    check!(listed.is_empty(), "a fresh store lists sessions: {listed:?}");
    // Loading does not create the session.
    let listed = session_ids(store("list_sessions", s.list_sessions().await)?);
    check!(listed.is_empty(), "load created a session: {listed:?}");
    Ok(())
}

async fn conv_order(s: Arc<dyn ConversationStore>) -> CaseResult {
    let mut expected = Vec::new();
    for n in 0..4 {
        let batch = turn(n);
        store("append", s.append("order", &batch).await)?;
        expected.extend(batch);
        let loaded = store("load", s.load("order").await)?;
        check_eq!(loaded, expected, format!("messages after append {n}"));
    }
    let one = vec![Message::user("single")];
    store("append", s.append("order", &one).await)?;
    expected.extend(one);
    let loaded = store("load", s.load("order").await)?;
    check_eq!(texts(&loaded), texts(&expected), "texts in order");
    check_eq!(loaded, expected, "messages in order");
    Ok(())
}

async fn conv_fields(s: Arc<dyn ConversationStore>) -> CaseResult {
    let mut error_result = Message::tool_result("call_x", "fails", "{\"error\":\"boom\"}", true);
    error_result.is_error = true;
    let batch = vec![
        Message::system("be brief"),
        Message::user("run two tools"),
        Message::assistant_tool_calls(
            "thinking out loud",
            vec![
                ToolCall::new("call_a", "add", r#"{"a":1,"b":2}"#),
                ToolCall::new("call_x", "fails", "not json {"),
            ],
        ),
        Message::tool_result("call_a", "add", "3", false),
        error_result,
        Message::assistant(""),
    ];
    store("append", s.append("fields", &batch).await)?;
    let loaded = store("load", s.load("fields").await)?;
    check_eq!(loaded, batch, "every field round-trips");
    Ok(())
}

async fn conv_empty_append(s: Arc<dyn ConversationStore>) -> CaseResult {
    store("append empty to new session", s.append("empty", &[]).await)?;
    let loaded = store("load", s.load("empty").await)?;
    check!(loaded.is_empty(), "empty append produced messages: {loaded:?}");
    let batch = turn(1);
    store("append", s.append("empty", &batch).await)?;
    store("append empty to existing session", s.append("empty", &[]).await)?;
    let loaded = store("load", s.load("empty").await)?;
    check_eq!(loaded, batch, "messages after an empty append");
    Ok(())
}

async fn conv_isolated(s: Arc<dyn ConversationStore>) -> CaseResult {
    // Ids that share a prefix, or that look like key patterns, must not see each other.
    let ids = ["a", "ab", "a:b", "a*", "A"];
    for (i, id) in ids.iter().enumerate() {
        store("append", s.append(id, &users(&format!("{id}#"), i + 1)).await)?;
    }
    for (i, id) in ids.iter().enumerate() {
        let loaded = store("load", s.load(id).await)?;
        check_eq!(
            texts(&loaded),
            texts(&users(&format!("{id}#"), i + 1)),
            format!("session {id:?}")
        );
    }
    store("delete", s.delete("a*").await)?;
    let loaded = store("load", s.load("a").await)?;
    check_eq!(loaded.len(), 1, "session \"a\" after deleting \"a*\"");
    let loaded = store("load", s.load("ab").await)?;
    check_eq!(loaded.len(), 2, "session \"ab\" after deleting \"a*\"");
    Ok(())
}

async fn conv_unicode(s: Arc<dyn ConversationStore>) -> CaseResult {
    let samples = [
        "안녕하세요, 세계! 대화 저장소 테스트입니다.",
        "emoji: 👩‍👩‍👧‍👦 🏳️‍🌈 🦀 ✅ — zero-width joiners and flags",
        "control chars: tab\tnewline\ncarriage\rbell\u{7}esc\u{1b}[0mdel\u{7f}unit-sep\u{1f}",
        "separators: \u{2028}line\u{2029}para \u{feff}bom \u{200b}zwsp",
        "combining: e\u{301} a\u{308} 한\u{302}; rtl: שלום مرحبا",
        "quotes \" ' ` and backslashes \\ \\n \\u0000 {\"json\":[1,2]}",
        "astral: 𝕳𝖊𝖑𝖑𝖔 𐍈 𠜎",
    ];
    let batch: Vec<Message> = samples.iter().map(|t| Message::user(*t)).collect();
    let ids = ["세션-1", "user:42/ü 🦀", "tab\tand space", "*?[]{}\\"];
    for id in ids {
        store("append", s.append(id, &batch).await)?;
    }
    for id in ids {
        let loaded = store("load", s.load(id).await)?;
        check_eq!(loaded, batch, format!("unicode messages of session {id:?}"));
    }
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    let listed = session_ids(store("list_sessions", s.list_sessions().await)?);
    check_eq!(listed, want, "unicode session ids listed");
    Ok(())
}

async fn conv_large(s: Arc<dyn ConversationStore>) -> CaseResult {
    let mut big = String::with_capacity(1_200_000);
    let mut i = 0u64;
    while big.len() < 1_100_000 {
        big.push_str(&format!("{i:08} 큰 메시지 ✓ "));
        i += 1;
    }
    let batch = vec![
        Message::user("before"),
        Message::tool_result("call_big", "dump", big.clone(), false),
        Message::assistant("after"),
    ];
    store("append", s.append("large", &batch).await)?;
    let loaded = store("load", s.load("large").await)?;
    check_eq!(loaded.len(), 3, "message count");
    check!(
        loaded[1].text() == big,
        "the large message changed ({} bytes back)",
        loaded[1].text().len()
    );
    check_eq!(loaded, batch, "large batch");
    Ok(())
}

async fn conv_many(s: Arc<dyn ConversationStore>) -> CaseResult {
    let batch = users("m", 1000);
    store("append", s.append("many", &batch).await)?;
    store("append", s.append("many", &users("n", 3)).await)?;
    let loaded = store("load", s.load("many").await)?;
    check_eq!(loaded.len(), 1003, "message count");
    check_eq!(texts(&loaded[..1000]), texts(&batch), "first batch");
    check_eq!(loaded[1000].text(), "n0", "second batch start");
    Ok(())
}

async fn conv_concurrent(s: Arc<dyn ConversationStore>) -> CaseResult {
    const TASKS: usize = 20;
    const PER: usize = 5;
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let s = Arc::clone(&s);
        handles.push(tokio::spawn(async move {
            let batch: Vec<Message> = (0..PER).map(|i| Message::user(format!("t{t}:m{i}"))).collect();
            s.append("shared", &batch).await
        }));
    }
    for h in handles {
        let r = h.await.map_err(|e| format!("append task panicked: {e}"))?;
        store("concurrent append", r)?;
    }
    let loaded = texts(&store("load", s.load("shared").await)?);
    check_eq!(loaded.len(), TASKS * PER, "messages after concurrent appends");
    for t in 0..TASKS {
        let first = format!("t{t}:m0");
        let start = loaded
            .iter()
            .position(|m| *m == first)
            .ok_or_else(|| format!("batch of task {t} is missing"))?;
        let want: Vec<String> = (0..PER).map(|i| format!("t{t}:m{i}")).collect();
        let got = loaded
            .get(start..start + PER)
            .map(<[String]>::to_vec)
            .unwrap_or_default();
        check_eq!(got, want, format!("batch of task {t} is contiguous and ordered"));
    }
    Ok(())
}

async fn conv_delete(s: Arc<dyn ConversationStore>) -> CaseResult {
    store("delete missing", s.delete("never-existed").await)?;
    store("append", s.append("doomed", &turn(0)).await)?;
    store("append", s.append("kept", &turn(1)).await)?;
    store("delete", s.delete("doomed").await)?;
    let loaded = store("load", s.load("doomed").await)?;
    check!(loaded.is_empty(), "deleted session still has {} messages", loaded.len());
    let kept = store("load", s.load("kept").await)?;
    check_eq!(kept, turn(1), "the other session");
    check_eq!(
        session_ids(store("list_sessions", s.list_sessions().await)?),
        vec!["kept".to_owned()],
        "sessions after delete"
    );
    store("delete twice", s.delete("doomed").await)?;
    // A deleted session starts over.
    store("append", s.append("doomed", &turn(2)).await)?;
    check_eq!(store("load", s.load("doomed").await)?, turn(2), "recreated session");
    Ok(())
}

async fn conv_list(s: Arc<dyn ConversationStore>) -> CaseResult {
    let ids = ["zeta", "alpha", "mid", "Alpha", "alpha-2", "0"];
    for id in ids {
        store("append", s.append(id, &[Message::user("x")]).await)?;
    }
    // Appending again does not list a session twice.
    store("append", s.append("mid", &[Message::user("y")]).await)?;
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    check_eq!(
        session_ids(store("list_sessions", s.list_sessions().await)?),
        want,
        "sessions"
    );
    Ok(())
}

async fn conv_ttl_expiry(s: Arc<dyn ConversationStore>) -> CaseResult {
    store("append", s.append("short", &turn(0)).await)?;
    check_eq!(store("load", s.load("short").await)?, turn(0), "fresh session");
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(1.6)).await;
    let loaded = store("load", s.load("short").await)?;
    check!(
        loaded.is_empty(),
        "session still has {} messages after its TTL",
        loaded.len()
    );
    let listed = session_ids(store("list_sessions", s.list_sessions().await)?);
    check!(listed.is_empty(), "expired session still listed: {listed:?}");
    // An expired session starts over on append.
    store("append", s.append("short", &turn(1)).await)?;
    check_eq!(store("load", s.load("short").await)?, turn(1), "session after expiry");
    Ok(())
}

async fn conv_ttl_load_refresh(s: Arc<dyn ConversationStore>) -> CaseResult {
    store("append", s.append("touched", &turn(0)).await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    check_eq!(store("load", s.load("touched").await)?, turn(0), "session at 0.6 TTL");
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    // 1.2 TTL after the append but 0.6 after the load: still there.
    check_eq!(
        store("load", s.load("touched").await)?,
        turn(0),
        "session 0.6 TTL after a load (load must refresh the TTL)"
    );
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(1.6)).await;
    check!(
        store("load", s.load("touched").await)?.is_empty(),
        "session survived 1.6 TTL without access"
    );
    Ok(())
}

async fn conv_ttl_append_refresh(s: Arc<dyn ConversationStore>) -> CaseResult {
    store("append", s.append("appended", &turn(0)).await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    store("append", s.append("appended", &turn(1)).await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    let mut want = turn(0);
    want.extend(turn(1));
    check_eq!(
        store("load", s.load("appended").await)?,
        want,
        "both batches 0.6 TTL after the second append (append must refresh the TTL)"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// checkpoints
// ---------------------------------------------------------------------------------------------

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
];

const CHECKPOINT_TTL_CASES: &[Case<dyn CheckpointStore>] = &[
    ("expires_after_ttl_without_access", |s| Box::pin(ckpt_ttl_expiry(s))),
    ("load_refreshes_ttl", |s| Box::pin(ckpt_ttl_refresh(s))),
    ("expired_are_not_listed_and_purge_removes_them", |s| {
        Box::pin(ckpt_ttl_list_purge(s))
    }),
];

fn session_ids(sessions: Vec<modu_core::SessionSummary>) -> Vec<String> {
    sessions.into_iter().map(|s| s.session_id).collect()
}

async fn conv_last_used(s: Arc<dyn ConversationStore>) -> CaseResult {
    let before = std::time::SystemTime::now() - Duration::from_secs(2);
    store("append", s.append("first", &turn(0)).await)?;
    store("append", s.append("second", &turn(0)).await)?;
    let listed = store("list_sessions", s.list_sessions().await)?;
    let first_at = listed.first().map(|s| s.last_used).ok_or("no sessions listed")?;
    check!(
        first_at >= before && first_at <= std::time::SystemTime::now() + Duration::from_secs(2),
        "last_used {first_at:?} is not about now"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    store("append", s.append("first", &turn(1)).await)?;
    let listed = store("list_sessions", s.list_sessions().await)?;
    check_eq!(
        session_ids(listed.clone()),
        vec!["first".to_owned(), "second".to_owned()],
        "sessions"
    );
    check!(
        listed[0].last_used > first_at,
        "an append did not move last_used ({:?} then {:?})",
        first_at,
        listed[0].last_used
    );
    check!(
        listed[0].last_used > listed[1].last_used,
        "the session appended last is not the most recently used"
    );
    Ok(())
}

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

// ---------------------------------------------------------------------------------------------
// memory state
// ---------------------------------------------------------------------------------------------

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
