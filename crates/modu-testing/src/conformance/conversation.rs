//! The conversation cases: a [`ConversationStore`] keeps every session's messages in order,
//! isolated from other sessions, listed and deleted; the TTL cases expire idle sessions.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use modu_core::{ConversationStore, Message, ToolCall};

use super::{Case, CaseResult, TTL_UNDER_TEST, run_cases, short, store};

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
    ("ids_up_to_max_id_bytes_work_longer_or_nul_ids_are_refused", |s| {
        Box::pin(super::ids::conversation_ids(s))
    }),
];

const CONVERSATION_TTL_CASES: &[Case<dyn ConversationStore>] = &[
    ("expires_after_ttl_without_access", |s| Box::pin(conv_ttl_expiry(s))),
    ("load_refreshes_ttl", |s| Box::pin(conv_ttl_load_refresh(s))),
    ("append_refreshes_ttl", |s| Box::pin(conv_ttl_append_refresh(s))),
    ("empty_append_refreshes_ttl_and_creates_nothing", |s| {
        Box::pin(conv_ttl_empty_append(s))
    }),
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
    let listed = session_ids(store("list_sessions", s.list_sessions().await)?);
    check!(
        listed.is_empty(),
        "an empty append created a listed session: {listed:?}"
    );
    let batch = turn(1);
    store("append", s.append("empty", &batch).await)?;
    let before = store("list_sessions", s.list_sessions().await)?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    store("append empty to existing session", s.append("empty", &[]).await)?;
    let loaded = store("load", s.load("empty").await)?;
    check_eq!(loaded, batch, "messages after an empty append");
    check_eq!(
        store("list_sessions", s.list_sessions().await)?,
        before,
        "sessions (and last_used) after an empty append"
    );
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

async fn conv_ttl_empty_append(s: Arc<dyn ConversationStore>) -> CaseResult {
    store("append", s.append("kept", &turn(0)).await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    store("append empty", s.append("kept", &[]).await)?;
    store("append empty to a new session", s.append("ghost", &[]).await)?;
    tokio::time::sleep(TTL_UNDER_TEST.mul_f64(0.6)).await;
    // 1.2 TTL after the append, 0.6 after the empty one (an access); listing is not one.
    check_eq!(
        session_ids(store("list_sessions", s.list_sessions().await)?),
        vec!["kept".to_owned()],
        "sessions 0.6 TTL after an empty append"
    );
    check_eq!(store("load", s.load("kept").await)?, turn(0), "the refreshed session");
    Ok(())
}

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
