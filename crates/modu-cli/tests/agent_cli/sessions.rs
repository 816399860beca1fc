//! `modu run --session` and `modu sessions`: conversations in SQLite, Redis and Postgres.

use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

use crate::support::{assert_recent, failed_run, modu, output, session_of, text, transcript};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_turn_session_persists_in_sqlite_and_continues_with_session() {
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::Text("Nice to meet you, Ada.".into()));
    mock.push(MockReply::Text("Your name is Ada.".into()));
    let dir = tempfile::tempdir().unwrap();
    let first = output(modu(dir.path(), &mock.base_url()).args(["run", "My name is Ada."])).await;
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "Nice to meet you, Ada.\n");
    let session = session_of(&text(&first.stderr));

    // A second process: the history comes from .modu/modu.db.
    let second =
        output(modu(dir.path(), &mock.base_url()).args(["run", "--session", &session, "What is my name?"])).await;
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "Your name is Ada.\n");
    assert!(
        !text(&second.stderr).contains("session: "),
        "no new session is announced"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        transcript(&requests[1]),
        [
            "user: My name is Ada.",
            "assistant: Nice to meet you, Ada.",
            "user: What is my name?"
        ]
    );

    // sessions list | show | delete
    // One line per session: the id, a tab, when it was last used.
    let list = output(modu(dir.path(), &mock.base_url()).args(["sessions", "list"])).await;
    assert!(list.status.success());
    let listed = text(&list.stdout);
    let (id, last_used) = listed.trim_end().split_once('\t').unwrap();
    assert_eq!(id, session, "{listed:?}");
    assert_recent(last_used);
    assert_eq!(listed.lines().count(), 1, "{listed:?}");
    let list = output(modu(dir.path(), &mock.base_url()).args(["sessions", "list", "--json"])).await;
    let sessions: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    assert_eq!(sessions[0]["session_id"], json!(session));
    assert_eq!(sessions[0]["last_used"], json!(last_used));
    let show = output(modu(dir.path(), &mock.base_url()).args(["sessions", "show", &session])).await;
    assert_eq!(
        text(&show.stdout),
        "user: My name is Ada.\nassistant: Nice to meet you, Ada.\nuser: What is my name?\nassistant: Your name is Ada.\n"
    );
    let delete = output(modu(dir.path(), &mock.base_url()).args(["sessions", "delete", &session])).await;
    assert!(delete.status.success(), "{}", text(&delete.stderr));
    let gone = output(modu(dir.path(), &mock.base_url()).args(["sessions", "show", &session])).await;
    assert_eq!(gone.status.code(), Some(1));
    assert_eq!(
        text(&gone.stderr),
        format!("error: no session `{session}` in sqlite .modu/modu.db\n")
    );
    // A mistyped id is said to start a new session, on stderr; the answer stays alone on stdout.
    mock.push(MockReply::Text("I do not know your name.".into()));
    let typo =
        output(modu(dir.path(), &mock.base_url()).args(["run", "--session", "no-such-session", "What is my name?"]))
            .await;
    assert!(typo.status.success(), "{}", text(&typo.stderr));
    assert_eq!(text(&typo.stdout), "I do not know your name.\n");
    assert!(
        text(&typo.stderr).contains("session: no-such-session (new: nothing is stored under this id)"),
        "{}",
        text(&typo.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_can_live_in_redis() {
    let Some(url) = modu_testing::service_env("REDIS_URL") else {
        return;
    };
    let prefix = modu_testing::unique_prefix("modu-cli");
    sessions_and_runs_live_in([
        ("MODU_STORE__KIND", "redis"),
        ("MODU_STORE__URL", url.as_str()),
        ("MODU_STORE__PREFIX", prefix.as_str()),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_can_live_in_postgres() {
    let Some(url) = modu_testing::service_env("MODU_POSTGRES_URL") else {
        return;
    };
    let schema = modu_testing::unique_prefix("modu-cli");
    sessions_and_runs_live_in([
        ("MODU_STORE__KIND", "postgres"),
        ("MODU_STORE__URL", url.as_str()),
        ("MODU_STORE__SCHEMA", schema.as_str()),
    ])
    .await;
}

/// A session kept over two runs, listed and deleted, and a failed run's checkpoint listed and
/// deleted, all in the store the `MODU_STORE__*` variables in `envs` name (nothing in SQLite).
async fn sessions_and_runs_live_in(envs: [(&str, &str); 3]) {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for prompt in ["one", "two"] {
        let out = output(
            modu(dir.path(), &mock.base_url())
                .envs(envs)
                .args(["run", "--session", "r1", prompt]),
        )
        .await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(
        transcript(&mock.requests()[1]),
        ["user: one", "assistant: You said: one", "user: two"]
    );
    let list = output(modu(dir.path(), &mock.base_url()).envs(envs).args(["sessions", "list"])).await;
    let listed = text(&list.stdout);
    let (id, last_used) = listed.trim_end().split_once('\t').unwrap();
    assert_eq!(id, "r1", "{listed:?}");
    assert_recent(last_used);
    assert!(!dir.path().join(".modu").exists(), "nothing in SQLite");
    let delete = output(
        modu(dir.path(), &mock.base_url())
            .envs(envs)
            .args(["sessions", "delete", "r1"]),
    )
    .await;
    assert!(delete.status.success(), "{}", text(&delete.stderr));

    // Checkpoints live there too: a failed run is listed, then deleted.
    let run_id = failed_run(dir.path(), &mock, "r2", &envs).await;
    let list = output(modu(dir.path(), &mock.base_url()).envs(envs).args(["runs", "list"])).await;
    let listed = text(&list.stdout);
    assert!(
        listed.starts_with(&format!("{run_id}\tfailed\tmodu\tr2\t")),
        "{listed:?} {}",
        text(&list.stderr)
    );
    assert_eq!(listed.lines().count(), 1, "{listed:?}");
    let delete = output(
        modu(dir.path(), &mock.base_url())
            .envs(envs)
            .args(["runs", "delete", &run_id]),
    )
    .await;
    assert!(delete.status.success(), "{}", text(&delete.stderr));
    let list = output(modu(dir.path(), &mock.base_url()).envs(envs).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_show_masks_secrets_in_tool_arguments_and_results() {
    use modu::{ConversationStore, Message, ToolCall};
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".modu")).unwrap();
    let store = modu::sqlite::SqliteConversationStore::open(dir.path().join(".modu/modu.db"))
        .await
        .unwrap();
    let call = ToolCall::new("c1", "fetch", r#"{"url":"https://example.com","token":"Arg-SECRET"}"#);
    store
        .append(
            "s1",
            &[
                Message::user("fetch it"),
                Message::assistant_tool_calls("", vec![call]),
                Message::tool_result("c1", "fetch", "ok; api_key=Result-SECRET", false),
                Message::assistant("done"),
            ],
        )
        .await
        .unwrap();
    drop(store);
    for args in [&["sessions", "show", "s1"][..], &["sessions", "show", "s1", "--json"]] {
        let show = output(modu(dir.path(), &mock.base_url()).args(args)).await;
        assert!(show.status.success(), "{}", text(&show.stderr));
        let shown = text(&show.stdout);
        assert!(!shown.contains("SECRET"), "{args:?}: {shown}");
        assert!(
            shown.contains("example.com") && shown.contains("done"),
            "{args:?}: {shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_no_store_takes_is_a_usage_error_naming_the_argument() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // One byte over MAX_ID_BYTES: every store refuses it.
    let long = "s".repeat(1025);
    let cases: [(&[&str], &str); 6] = [
        (&["run", "--session", &long, "hi"], "--session: "),
        (&["chat", "--session", &long], "--session: "),
        (&["resume", &long], "the run id: "),
        (&["runs", "show", &long], "the run id: "),
        (&["sessions", "show", &long], "the session id: "),
        (&["sessions", "delete", &long], "the session id: "),
    ];
    for (args, named) in cases {
        // chat reads its messages from stdin: two turns that would each fail.
        let out = crate::support::with_stdin(modu(dir.path(), &mock.base_url()).args(args), "hi\nagain\n").await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: {named}")) && stderr.contains("MAX_ID_BYTES"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.len() < 400, "the id is not printed whole: {stderr}");
    }
    assert!(mock.requests().is_empty(), "no model request was made");
}

#[tokio::test]
async fn an_empty_session_id_is_a_usage_error() {
    // `--session "$UNSET"`: the conversation would be kept under the empty id, which `sessions
    // list` shows as nothing.
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for args in [&["run", "--session", "", "hi"][..], &["chat", "--session", " "][..]] {
        let out = crate::support::with_stdin(modu(dir.path(), &mock.base_url()).args(args), "hi\n").await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: --session is empty"), "{args:?}: {stderr}");
    }
    assert!(mock.requests().is_empty(), "no model request was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_sqlite_store_that_does_not_exist_creates_nothing() {
    // `modu sessions list` in the wrong folder (or with a mistyped `[store] path`) reads an
    // empty store; it leaves no new `.modu/modu.db` behind for a later run to write to.
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (args, code, said) in [
        (&["sessions", "list"][..], 0, "no sessions in sqlite .modu/modu.db\n"),
        (
            &["sessions", "show", "s1"][..],
            1,
            "error: no session `s1` in sqlite .modu/modu.db\n",
        ),
        (
            &["sessions", "delete", "s1"][..],
            1,
            "error: no session `s1` in sqlite .modu/modu.db\n",
        ),
        (&["runs", "list"][..], 0, "no runs in sqlite .modu/modu.db\n"),
        (&["runs", "show", "r1"][..], 1, ""),
        (&["runs", "delete", "r1"][..], 1, ""),
    ] {
        let out = output(modu(dir.path(), &mock.base_url()).args(args)).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        if !said.is_empty() {
            assert_eq!(stderr, said, "{args:?}");
        }
        assert!(!dir.path().join(".modu").exists(), "{args:?} created .modu/");
    }
    assert!(mock.requests().is_empty());
}
