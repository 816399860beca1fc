//! End-to-end tests of the `modu` binary's agent commands: the built binary runs in a temp
//! folder against `MockOpenAiServer` (started in this process) and the real server-everything
//! MCP server (`MODU_MCP_EVERYTHING`, see `cargo xtask services`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Output, Stdio};

use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The binary in `dir`, pointed at `base_url`, with nothing leaking in from the machine.
fn modu(dir: &Path, base_url: &str) -> tokio::process::Command {
    command(env!("CARGO_BIN_EXE_modu"), dir, base_url)
}

/// `program` with the environment `modu` gets.
fn command(program: &str, dir: &Path, base_url: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.current_dir(dir);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("MODU_") || k.starts_with("OPENAI_") || k.starts_with("OLLAMA_") || k == "REDIS_URL" {
            cmd.env_remove(&key);
        }
    }
    cmd.env("OPENAI_BASE_URL", base_url)
        .env("OPENAI_MODEL", "mock-model")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn output(cmd: &mut tokio::process::Command) -> Output {
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("modu did not finish within 60 s")
        .unwrap()
}

async fn with_stdin(cmd: &mut tokio::process::Command, input: &str) -> Output {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("modu did not finish within 60 s")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn session_of(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no session line in {stderr:?}"))
}

/// Seconds since 1970 of an RFC 3339 UTC time as `modu` prints it (`2026-05-01T12:34:56Z`).
fn parse_rfc3339(text: &str) -> u64 {
    let b = text.as_bytes();
    assert!(
        text.len() == 20
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
            && b[13] == b':'
            && b[16] == b':'
            && b[19] == b'Z',
        "not RFC 3339 UTC: {text:?}"
    );
    let n = |range: std::ops::Range<usize>| text[range].parse::<u64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // H. Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)
}

/// Asserts that an RFC 3339 time printed by `modu` is within a few minutes of now.
fn assert_recent(text: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let at = parse_rfc3339(text);
    assert!(at <= now + 1 && now - at < 300, "{text} is not now ({now})");
}

/// The run id in `error: run RUN_ID is waiting for approval …`.
fn paused_run_of(stderr: &str) -> String {
    let line = stderr.lines().find(|l| l.starts_with("error: run ")).unwrap();
    line.strip_prefix("error: run ")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// A run that fails on a model error (503) in session `session`, leaving a `failed`
/// checkpoint; returns its run id.
async fn failed_run(dir: &Path, mock: &MockOpenAiServer, session: &str, envs: &[(&str, &str)]) -> String {
    mock.push(MockReply::Error {
        status: 503,
        body: json!({"error": {"message": "the model is loading"}}),
        headers: Vec::new(),
    });
    let mut cmd = modu(dir, &mock.base_url());
    cmd.env("MODU_LIMITS__RETRY_ATTEMPTS", "1");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let failed = output(cmd.args(["run", "--json", "--session", session, "Count to 3"])).await;
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    let result: Value = serde_json::from_slice(&failed.stdout).unwrap();
    result["run_id"].as_str().unwrap().to_owned()
}

/// The messages of a recorded chat request as `role: content` strings.
fn transcript(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            format!("{}: {content}", m["role"].as_str().unwrap())
        })
        .collect()
}

fn everything_config(script: &str, extra: &str) -> String {
    format!(
        "[agent]\ninstructions = \"You are terse.\"\n\n[mcp]\n{extra}\n\n[[mcp.servers]]\nname = \"everything\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [{script:?}, \"stdio\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_streams_the_answer_and_names_a_new_session() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "Say hello"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "You said: Say hello\n");
    let session = session_of(&stderr);
    assert_eq!(session.len(), 32, "{stderr}");
    // The default store: SQLite under .modu/.
    assert!(dir.path().join(".modu/modu.db").is_file());
    // The request streamed (the text arrived as deltas).
    assert_eq!(mock.requests()[0]["stream"], json!(true));
}

/// A reasoning model's stream as vLLM sends it: `reasoning_content` deltas, then the answer.
fn reasoning_reply() -> MockReply {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    MockReply::RawSse {
        events: vec![
            chunk(json!({"role": "assistant", "reasoning_content": "Weighing "}), None),
            chunk(json!({"reasoning_content": "the greeting."}), None),
            chunk(json!({"content": "Hello."}), None),
            chunk(json!({}), Some("stop")),
            "[DONE]".into(),
        ],
        drop_after: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_shows_reasoning_on_stderr_unless_hidden() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    mock.push(reasoning_reply());
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "hi"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Hello.\n", "the answer alone on stdout");
    assert!(stderr.contains("Weighing the greeting.\n"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "no escape codes when stderr is not a terminal: {stderr:?}"
    );

    mock.push(reasoning_reply());
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "--hide-reasoning", "hi"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(stdout, "Hello.\n");
    assert!(!stderr.contains("Weighing"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_prints_the_agent_result() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .args(["run", "--json", "--session", "s1", "What is 2 + 3?"]),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["output"], json!("You said: What is 2 + 3?"));
    assert_eq!(result["agent"], json!("modu"));
    assert!(result["error"].is_null());
    assert_eq!(result["messages"].as_array().unwrap().len(), 2, "{result}");
    assert!(!result["run_id"].as_str().unwrap().is_empty());
    // MODU_STORE__KIND=memory: nothing written to disk.
    assert!(!dir.path().join(".modu").exists());

    // [output] mode = "json" by variable, and the prompt from stdin with `-`.
    let piped = with_stdin(
        modu(dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .env("MODU_OUTPUT__MODE", "json")
            .args(["run", "--session", "s2", "-"]),
        "a prompt from a pipe",
    )
    .await;
    assert!(piped.status.success(), "{}", text(&piped.stderr));
    let result: Value = serde_json::from_slice(&piped.stdout).unwrap();
    assert_eq!(result["output"], json!("You said: a prompt from a pipe"));
}

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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_through_stdin_answers_an_mcp_approval() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    // Turn 1: a plain answer. Turn 2: the model calls everything__echo, which needs approval.
    mock.push(MockReply::Text("Hello!".into()));
    mock.push(MockReply::ToolCalls(vec![(
        "mcp_call_tool".into(),
        json!({"tool_name": "everything__echo", "arguments": {"message": "hi from chat"}}).to_string(),
    )]));
    mock.push(MockReply::Text("The server echoed it.".into()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        everything_config(&script, "require_approval = [\"everything__echo\"]"),
    )
    .unwrap();
    let out = with_stdin(
        modu(dir.path(), &mock.base_url()).arg("chat"),
        "hi\n\nplease echo\ny\n/exit\nnever sent\n",
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Hello!\nThe server echoed it.\n", "{stderr}");
    assert!(
        stderr.contains("→ everything__echo({\"message\":\"hi from chat\"})"),
        "the tool call is shown: {stderr}"
    );
    assert!(
        stderr.contains("approve everything__echo({\"message\":\"hi from chat\"})? [y/N] "),
        "{stderr}"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "/exit ends the chat");
    // The approved call ran on the real server; the model saw its answer.
    let last = transcript(&requests[2]);
    assert!(
        last.iter()
            .any(|m| m.starts_with("tool: ") && m.contains("hi from chat")),
        "{last:?}"
    );
    // Both turns are in one session, and the system prompt came from modu.toml.
    assert_eq!(last[0], "system: You are terse.");
    assert!(last.contains(&"user: hi".to_owned()) && last.contains(&"assistant: Hello!".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_rejection_is_sent_to_the_model() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::ToolCalls(vec![(
        "mcp_call_tool".into(),
        json!({"tool_name": "everything__echo", "arguments": {"message": "no"}}).to_string(),
    )]));
    mock.push(MockReply::Text("Understood.".into()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        everything_config(&script, "require_approval = [\"*\"]"),
    )
    .unwrap();
    let out = with_stdin(modu(dir.path(), &mock.base_url()).arg("chat"), "echo no\nn\n").await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Understood.\n");
    assert!(
        stderr.contains("approve everything__echo({\"message\":\"no\"})? [y/N] n\n✗ everything__echo rejected\n"),
        "the piped answer is echoed, the rejection shown: {stderr}"
    );
    assert!(!stderr.contains("failed"), "{stderr}");
    let last = transcript(&mock.requests()[1]);
    assert!(
        last.iter()
            .any(|m| m.starts_with("tool: ") && m.contains("the user said no")),
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_lists_server_everything() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), everything_config(&script, "")).unwrap();
    let out = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(["mcp", "tools"])).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("everything__echo\tEchoes back the input string\n"),
        "{stdout}"
    );
    assert!(stdout.contains("everything__get-sum\t"), "{stdout}");

    let json_out =
        output(modu(dir.path(), "http://127.0.0.1:9/v1").args(["mcp", "tools", "--server", "everything", "--json"]))
            .await;
    let tools: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    let echo = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "everything__echo")
        .unwrap();
    assert_eq!(echo["input_schema"]["properties"]["message"]["type"], json!("string"));

    let unknown = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(["mcp", "tools", "--server", "nope"])).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(
        text(&unknown.stderr),
        "error: no MCP server named `nope` (configured: everything)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_each_check_and_a_broken_server() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}\n[[mcp.servers]]\nname = \"broken\"\ntransport = \"stdio\"\ncommand = \"/nonexistent/modu-mcp-server\"\n",
        everything_config(&script, "")
    );
    std::fs::write(dir.path().join("modu.toml"), config).unwrap();
    let out = output(modu(dir.path(), &mock.base_url()).arg("doctor")).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "✓ config: modu.toml");
    assert_eq!(
        lines[1],
        format!("✓ model: {} answers, model `mock-model`", mock.base_url())
    );
    assert_eq!(lines[2], "✓ store: sqlite .modu/modu.db (0 sessions)");
    assert_eq!(lines[3], "✓ agent: builds (policy standard)");
    // 14: server-everything registers trigger-elicitation-request for a client that declares elicitation.
    assert_eq!(lines[4], "✓ mcp everything: 14 tools");
    assert_eq!(
        lines[5],
        "✗ mcp broken: MCP transport error (server broken): could not start \"/nonexistent/modu-mcp-server\": No such file or directory (os error 2)"
    );
    assert_eq!(text(&out.stderr), "error: 1 check(s) failed\n");

    // Everything healthy: exit 0.
    std::fs::write(dir.path().join("modu.toml"), everything_config(&script, "")).unwrap();
    let healthy = output(modu(dir.path(), &mock.base_url()).arg("doctor")).await;
    assert!(healthy.status.success(), "{}", text(&healthy.stdout));

    // Limits the policy cannot work with: what `run` would reject, doctor reports.
    let unusable = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_AGENT__POLICY", "plan_and_execute")
            .env("MODU_LIMITS__MAX_STEPS", "0")
            .arg("doctor"),
    )
    .await;
    assert_eq!(unusable.status.code(), Some(1));
    assert!(
        text(&unusable.stdout)
            .contains("✗ agent: invalid configuration: a strict Plan-and-Execute policy needs max_steps of at least 1"),
        "{}",
        text(&unusable.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_and_run_name_a_model_server_that_is_down() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let dir = tempfile::tempdir().unwrap();
    let out = output(
        modu(dir.path(), &url)
            .env("MODU_LIMITS__RETRY_ATTEMPTS", "1")
            .args(["run", "hello"]),
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
    assert_eq!(
        error,
        format!(
            "error: cannot reach the model server at {url}: cannot connect to the model server ({url}/chat/completions)"
        )
    );
    assert!(out.stdout.is_empty());

    let doctor = output(modu(dir.path(), &url).arg("doctor")).await;
    assert_eq!(doctor.status.code(), Some(1));
    assert!(
        text(&doctor.stdout).contains(&format!(
            "✗ model: cannot reach the model server at {url}: cannot connect to the model server ({url}/models)\n"
        )),
        "{}",
        text(&doctor.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configs_fail_with_one_exact_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = "http://127.0.0.1:9/v1";
    let cases: [(&str, Option<&str>, &[&str], &str); 6] = [
        (
            "modu.toml",
            Some("[model]\nmodel = \"m\"\nfoo = 1\n"),
            &["run", "hi"],
            "error: modu.toml: unknown key `foo` in [model]\n",
        ),
        (
            "modu.toml",
            Some("[agent]\ninstructions = \"unterminated\n"),
            &["run", "hi"],
            "error: modu.toml: invalid TOML at line 2, column 29: invalid basic string, expected `\"`\n",
        ),
        (
            "other.toml",
            None,
            &["--config", "missing.toml", "run", "hi"],
            "error: missing.toml: cannot read the config file: No such file or directory (os error 2)\n",
        ),
        (
            "modu.toml",
            Some("[stores]\nkind = \"memory\"\n"),
            &["sessions", "list"],
            "error: modu.toml: unknown table `stores` (expected one of agent, model, store, memory, limits, mcp, skills, output)\n",
        ),
        (
            "modu.toml",
            Some("[[mcp.servers]]\nname = \"a\"\ntransport = \"stdio\"\ncomand = \"x\"\n"),
            &["mcp", "tools"],
            "error: modu.toml: unknown key `comand` in [mcp.servers[0]]\n",
        ),
        (
            "modu.toml",
            Some("[store]\nkind = \"disk\"\n"),
            &["sessions", "list"],
            "error: modu.toml: `store.kind`: unknown variant `disk`, expected one of `memory`, `sqlite`, `redis`, `postgres`\n",
        ),
    ];
    for (file, contents, args, expected) in cases {
        let _ = std::fs::remove_file(dir.path().join("modu.toml"));
        if let Some(contents) = contents {
            std::fs::write(dir.path().join(file), contents).unwrap();
        }
        let out = output(modu(dir.path(), url).args(args)).await;
        assert_eq!(text(&out.stderr), expected, "{args:?}");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
    }

    // An override variable is named instead of the file.
    let _ = std::fs::remove_file(dir.path().join("modu.toml"));
    let out = output(
        modu(dir.path(), url)
            .env("MODU_MODEL__TEMPERATUR", "0.1")
            .args(["run", "hi"]),
    )
    .await;
    assert_eq!(
        text(&out.stderr),
        "error: MODU_MODEL__TEMPERATUR: unknown key `temperatur` in [model]\n"
    );
    assert_eq!(out.status.code(), Some(2));

    // No model anywhere.
    let out = output(modu(dir.path(), url).env_remove("OPENAI_MODEL").args(["run", "hi"])).await;
    assert_eq!(
        text(&out.stderr),
        "error: no model configured: set `model` in [model] of modu.toml, MODU_MODEL__MODEL or OPENAI_MODEL\n"
    );
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_documents_overrides_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["chat", "--help"],
        &["doctor", "--help"],
    ] {
        let out = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(args)).await;
        assert!(out.status.success());
        let help = text(&out.stdout);
        assert!(help.contains("MODU_<TABLE>__<KEY>"), "{args:?}: {help}");
        assert!(help.contains("Exit codes: 0 ok, 1"), "{args:?}: {help}");
    }
    for args in [
        &["sessions", "--help"][..],
        &["mcp", "tools", "--help"],
        &["resume", "--help"],
        &["runs", "--help"],
        &["runs", "show", "--help"],
    ] {
        let out = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(args)).await;
        assert!(out.status.success(), "{args:?}");
    }
    let usage = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(["run"])).await;
    assert_eq!(usage.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_continues_a_failed_run_from_its_checkpoint() {
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::Error {
        status: 503,
        body: json!({"error": {"message": "the model is loading"}}),
        headers: Vec::new(),
    });
    let dir = tempfile::tempdir().unwrap();
    let failed = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_LIMITS__RETRY_ATTEMPTS", "1")
            .args(["run", "--json", "--session", "s", "Count to 3"]),
    )
    .await;
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    let result: Value = serde_json::from_slice(&failed.stdout).unwrap();
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    assert_eq!(result["error"]["type"], json!("model"), "{result}");
    let stderr = text(&failed.stderr);
    assert!(
        stderr.contains(&format!("hint: continue this run with `modu resume {run_id}`\n")),
        "{stderr}"
    );

    // Another process picks the run up from .modu/modu.db; the server answers now.
    let resumed = output(modu(dir.path(), &mock.base_url()).args(["resume", &run_id])).await;
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert_eq!(text(&resumed.stdout), "You said: Count to 3\n");

    let again = output(modu(dir.path(), &mock.base_url()).args(["resume", &run_id])).await;
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        text(&again.stderr),
        format!("error: no checkpoint for run {run_id} in sqlite .modu/modu.db (it finished, or never ran here)\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_for_approval_is_answered_by_resume() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::ToolCalls(vec![(
        "mcp_call_tool".into(),
        json!({"tool_name": "everything__get-sum", "arguments": {"a": 2, "b": 3}}).to_string(),
    )]));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        everything_config(&script, "require_approval = [\"everything__get-sum\"]"),
    )
    .unwrap();
    // No answer on stdin: the run stays paused.
    let paused = output(modu(dir.path(), &mock.base_url()).args(["run", "--session", "p", "What is 2 + 3?"])).await;
    assert_eq!(paused.status.code(), Some(1));
    let stderr = text(&paused.stderr);
    let run_id = paused_run_of(&stderr);
    assert!(
        stderr.contains(&format!(
            "error: run {run_id} is waiting for approval of everything__get-sum; answer with `modu resume {run_id}`\n"
        )),
        "{stderr}"
    );

    // `runs list` shows the paused run; `runs show` names the call that waits.
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert!(list.status.success(), "{}", text(&list.stderr));
    let listed = text(&list.stdout);
    let columns: Vec<&str> = listed.trim_end().split('\t').collect();
    assert_eq!(columns[..4], [run_id.as_str(), "paused", "modu", "p"], "{listed:?}");
    assert_recent(columns[4]);
    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", &run_id])).await;
    let shown = text(&show.stdout);
    assert!(show.status.success(), "{}", text(&show.stderr));
    assert!(shown.contains("status:   paused\n"), "{shown}");
    assert!(
        shown.contains("progress: turns 1, tool calls 1, messages 2\n"),
        "{shown}"
    );
    assert!(shown.contains("pending approvals:\n  "), "{shown}");
    assert!(shown.contains(" everything__get-sum({\"a\":2,\"b\":3})\n"), "{shown}");
    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", "--json", &run_id])).await;
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["status"], "paused");
    assert_eq!(shown["pending_approvals"][0]["tool_name"], "everything__get-sum");
    assert_eq!(shown["pending_approvals"][0]["arguments"], json!({"a": 2, "b": 3}));
    assert!(!shown["pending_approvals"][0]["call_id"].as_str().unwrap().is_empty());

    let resumed = with_stdin(modu(dir.path(), &mock.base_url()).args(["resume", &run_id]), "yes\n").await;
    assert_eq!(mock.requests().len(), 2, "the resumed run asked the model once more");
    let stderr = text(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(
        stderr.contains("approve everything__get-sum({\"a\":2,\"b\":3})? [y/N] yes\n"),
        "{stderr}"
    );
    assert!(stderr.contains("→ everything__get-sum({\"a\":2,\"b\":3})"), "{stderr}");
    let stdout = text(&resumed.stdout);
    assert!(
        stdout.starts_with("The tool answered: ") && stdout.contains('5'),
        "{stdout}"
    );
    // The finished run left no checkpoint.
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout), "", "{}", text(&list.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_show_and_delete_the_checkpoints_in_sqlite() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let empty = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert!(empty.status.success(), "{}", text(&empty.stderr));
    assert_eq!(text(&empty.stdout), "");
    assert_eq!(text(&empty.stderr), "no runs in sqlite .modu/modu.db\n");

    let first = failed_run(dir.path(), &mock, "s1", &[]).await;
    let second = failed_run(dir.path(), &mock, "s2", &[]).await;
    let mut ids = [first.clone(), second.clone()];
    ids.sort();

    // One line per run, ascending by run id: id, status, agent, session, updated at.
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert!(list.status.success(), "{}", text(&list.stderr));
    let listed = text(&list.stdout);
    let rows: Vec<Vec<&str>> = listed.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 2, "{listed:?}");
    for (row, id) in rows.iter().zip(&ids) {
        let session = if *id == first { "s1" } else { "s2" };
        assert_eq!(row[..4], [id.as_str(), "failed", "modu", session], "{listed:?}");
        assert_recent(row[4]);
    }
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list", "--json"])).await;
    let runs: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    assert_eq!(runs[0]["run_id"], json!(ids[0]));
    assert_eq!(runs[0]["status"], "failed");
    assert_eq!(runs[0]["agent"], "modu");
    assert_eq!(runs[0]["updated_at"], json!(rows[0][4]));

    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", &first])).await;
    assert!(show.status.success(), "{}", text(&show.stderr));
    let shown = text(&show.stdout);
    assert!(
        shown.starts_with(&format!(
            "run:      {first}\nstatus:   failed\nagent:    modu\nsession:  s1\nupdated:  "
        )),
        "{shown}"
    );
    assert!(shown.contains("pending approvals: none\n"), "{shown}");
    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", "--json", &first])).await;
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["session_id"], "s1");
    assert_eq!(shown["pending_approvals"], json!([]));
    assert_eq!(shown["messages"], json!(1), "the user message: {shown}");

    let delete = output(modu(dir.path(), &mock.base_url()).args(["runs", "delete", &first])).await;
    assert!(delete.status.success(), "{}", text(&delete.stderr));
    assert_eq!(text(&delete.stderr), format!("deleted run {first}\n"));
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout).lines().count(), 1);
    assert!(text(&list.stdout).starts_with(&format!("{second}\t")));
    // The deleted run is gone: show, delete and resume all say so.
    let missing = format!(
        "error: no checkpoint for run {first} in sqlite .modu/modu.db (it finished, expired, or never ran here)\n"
    );
    for args in [["runs", "show", first.as_str()], ["runs", "delete", first.as_str()]] {
        let out = output(modu(dir.path(), &mock.base_url()).args(args)).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&out.stderr), missing, "{args:?}");
    }
    let resume = output(modu(dir.path(), &mock.base_url()).args(["resume", &first])).await;
    assert_eq!(resume.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_purge_removes_expired_checkpoints() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ttl = [("MODU_STORE__TTL_SECONDS", "1")];
    failed_run(dir.path(), &mock, "s", &ttl).await;
    let list = output(modu(dir.path(), &mock.base_url()).envs(ttl).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout).lines().count(), 1, "{}", text(&list.stderr));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // Expired: not listed, and purge removes it.
    let list = output(modu(dir.path(), &mock.base_url()).envs(ttl).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout), "");
    let purge = output(modu(dir.path(), &mock.base_url()).envs(ttl).args(["runs", "purge"])).await;
    assert!(purge.status.success(), "{}", text(&purge.stderr));
    assert_eq!(
        text(&purge.stderr),
        "purged 1 expired checkpoint(s) from sqlite .modu/modu.db\n"
    );
    let again = output(modu(dir.path(), &mock.base_url()).envs(ttl).args(["runs", "purge"])).await;
    assert_eq!(
        text(&again.stderr),
        "purged 0 expired checkpoint(s) from sqlite .modu/modu.db\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_from_ollama_host_when_no_openai_variables_are_set() {
    let mock = modu_testing::MockOllamaServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = output(
        modu(dir.path(), "unused")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env("OLLAMA_HOST", mock.base_url())
            .env("MODU_MODEL__MODEL", "llama3.2")
            .args(["run", "Hi there"]),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "You said: Hi there\n");
    assert_eq!(mock.requests()[0]["model"], json!("llama3.2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_memory_and_limits_come_from_the_config() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("skills/haiku");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: haiku\ndescription: Answers in haiku.\n---\nAnswer in a 5-7-5 haiku.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        "[skills]\npath = \"skills\"\nactive = [\"haiku\"]\n\n[memory]\npolicy = \"recent_turns\"\nmax_turns = 1\n\n[model]\ntemperature = 0.25\nmax_tokens = 99\n",
    )
    .unwrap();
    for prompt in ["first", "second", "third"] {
        let out = output(modu(dir.path(), &mock.base_url()).args(["run", "--session", "s", prompt])).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let requests = mock.requests();
    let last = transcript(&requests[2]);
    assert!(last[0].starts_with("system: ") && last[0].contains("5-7-5"), "{last:?}");
    // recent_turns = 1: the first turn is gone, the second is kept.
    assert_eq!(
        last[1..],
        ["user: second", "assistant: You said: second", "user: third"]
    );
    assert_eq!(requests[2]["temperature"], json!(0.25));
    assert_eq!(requests[2]["max_tokens"], json!(99));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progress_indicator_shows_on_a_terminal_only() {
    let slow = || {
        MockReply::Delayed(
            std::time::Duration::from_millis(700),
            Box::new(MockReply::Text("done".into())),
        )
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(slow());
    mock.push(slow());
    let dir = tempfile::tempdir().unwrap();
    // Piped: no spinner.
    let piped = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .args(["run", "--session", "s", "hi"]),
    )
    .await;
    assert!(piped.status.success());
    assert_eq!(text(&piped.stderr), "");
    assert_eq!(text(&piped.stdout), "done\n");
    // Under a pseudo-terminal (util-linux `script`, in every Debian base image): a spinner on
    // stderr until the first token, then erased.
    let line = format!("{} run --session s hi", env!("CARGO_BIN_EXE_modu"));
    let tty = output(
        command("script", dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .args(["-qec", &line, "/dev/null"]),
    )
    .await;
    let screen = text(&tty.stdout);
    assert!(tty.status.success(), "{screen}");
    assert!(screen.contains("thinking…"), "{screen:?}");
    assert!(
        screen.contains("\r\x1b[2Kdone"),
        "the spinner is erased before the answer: {screen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_can_live_in_redis() {
    let Some(url) = modu_testing::service_env("REDIS_URL") else {
        return;
    };
    let prefix = modu_testing::unique_prefix("modu-cli");
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let redis = |cmd: &mut tokio::process::Command| {
        cmd.env("MODU_STORE__KIND", "redis")
            .env("MODU_STORE__URL", &url)
            .env("MODU_STORE__PREFIX", &prefix);
    };
    for prompt in ["one", "two"] {
        let mut cmd = modu(dir.path(), &mock.base_url());
        redis(&mut cmd);
        let out = output(cmd.args(["run", "--session", "r1", prompt])).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(
        transcript(&mock.requests()[1]),
        ["user: one", "assistant: You said: one", "user: two"]
    );
    let mut cmd = modu(dir.path(), &mock.base_url());
    redis(&mut cmd);
    let list = output(cmd.args(["sessions", "list"])).await;
    let listed = text(&list.stdout);
    let (id, last_used) = listed.trim_end().split_once('\t').unwrap();
    assert_eq!(id, "r1", "{listed:?}");
    assert_recent(last_used);
    assert!(!dir.path().join(".modu").exists(), "nothing in SQLite");
    let mut cmd = modu(dir.path(), &mock.base_url());
    redis(&mut cmd);
    let delete = output(cmd.args(["sessions", "delete", "r1"])).await;
    assert!(delete.status.success(), "{}", text(&delete.stderr));

    // Checkpoints live there too: a failed run is listed, then deleted.
    let envs = [
        ("MODU_STORE__KIND", "redis"),
        ("MODU_STORE__URL", url.as_str()),
        ("MODU_STORE__PREFIX", prefix.as_str()),
    ];
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
async fn sessions_can_live_in_postgres() {
    let Some(url) = modu_testing::service_env("MODU_POSTGRES_URL") else {
        return;
    };
    let schema = modu_testing::unique_prefix("modu-cli");
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let postgres = |cmd: &mut tokio::process::Command| {
        cmd.env("MODU_STORE__KIND", "postgres")
            .env("MODU_STORE__URL", &url)
            .env("MODU_STORE__SCHEMA", &schema);
    };
    for prompt in ["one", "two"] {
        let mut cmd = modu(dir.path(), &mock.base_url());
        postgres(&mut cmd);
        let out = output(cmd.args(["run", "--session", "r1", prompt])).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(
        transcript(&mock.requests()[1]),
        ["user: one", "assistant: You said: one", "user: two"]
    );
    let mut cmd = modu(dir.path(), &mock.base_url());
    postgres(&mut cmd);
    let list = output(cmd.args(["sessions", "list"])).await;
    let listed = text(&list.stdout);
    let (id, last_used) = listed.trim_end().split_once('\t').unwrap();
    assert_eq!(id, "r1", "{listed:?}");
    assert_recent(last_used);
    assert!(!dir.path().join(".modu").exists(), "nothing in SQLite");
    let mut cmd = modu(dir.path(), &mock.base_url());
    postgres(&mut cmd);
    let delete = output(cmd.args(["sessions", "delete", "r1"])).await;
    assert!(delete.status.success(), "{}", text(&delete.stderr));

    // Checkpoints live there too: a failed run is listed, then deleted.
    let envs = [
        ("MODU_STORE__KIND", "postgres"),
        ("MODU_STORE__URL", url.as_str()),
        ("MODU_STORE__SCHEMA", schema.as_str()),
    ];
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
async fn plan_and_execute_from_the_config_streams_only_the_final_answer() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        "[agent]\npolicy = \"plan_and_execute\"\n\n[limits]\nmax_steps = 2\n",
    )
    .unwrap();
    for _ in 0..2 {
        mock.push(MockReply::Text(
            json!({"steps": [{"description": "Greet", "allowed_tools": []}]}).to_string(),
        ));
        mock.push(MockReply::Text(
            json!({"status": "completed", "result": "greeted"}).to_string(),
        ));
        mock.push(MockReply::Text("Hello!".into()));
    }
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "Say hello"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The plan and the step result are internal: only FINALIZE's tokens reach stdout.
    assert_eq!(text(&out.stdout), "Hello!\n");
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0]["response_format"]["json_schema"]["name"], "PlanDraft");
    assert_eq!(
        requests[0]["response_format"]["json_schema"]["schema"]["properties"]["steps"]["maxItems"],
        2
    );
    assert_eq!(requests[1]["response_format"]["json_schema"]["name"], "StepResult");
    assert!(requests[2].get("response_format").is_none());

    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "--json", "Say hello"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "completed");
    assert_eq!(result["output"], "Hello!");
    // A strict run's JSON carries its plan report.
    assert_eq!(result["plan"]["plan"]["steps"][0]["status"], "completed");

    // Resuming the finished run (its DONE state stays in .modu/modu.db) prints the stored answer
    // without asking the model again.
    let asked = mock.requests().len();
    let run_id = result["run_id"].as_str().unwrap();
    let out = output(modu(dir.path(), &mock.base_url()).args(["resume", run_id])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Hello!\n");
    assert_eq!(mock.requests().len(), asked, "no second FINALIZE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_host_does_not_override_a_configured_base_url() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        format!("[model]\nbase_url = {:?}\nmodel = \"mock-model\"\n", mock.base_url()),
    )
    .unwrap();
    let out = output(
        modu(dir.path(), &mock.base_url())
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env("OLLAMA_HOST", "http://127.0.0.1:9")
            .args(["run", "Say hello"]),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "You said: Say hello\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_and_execute_plans_with_the_mcp_tools_themselves() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = everything_config(&script, "").replace("[agent]\n", "[agent]\npolicy = \"plan_and_execute\"\n");
    std::fs::write(dir.path().join("modu.toml"), config).unwrap();
    mock.push(MockReply::Text(
        json!({"steps": [{"description": "Echo hello", "allowed_tools": ["everything__echo"]}]}).to_string(),
    ));
    mock.push(MockReply::ToolCalls(vec![(
        "everything__echo".into(),
        json!({"message": "hello"}).to_string(),
    )]));
    mock.push(MockReply::Text(
        json!({"status": "completed", "result": "echoed hello"}).to_string(),
    ));
    mock.push(MockReply::Text("Echoed: hello".into()));
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "Echo hello"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Echoed: hello\n");
    assert!(
        stderr.contains("→ everything__echo({\"message\":\"hello\"})"),
        "{stderr}"
    );
    let requests = mock.requests();
    // The planner's schema lists server-everything's tools by name; the step offers only echo.
    let allowed = &requests[0]["response_format"]["json_schema"]["schema"]["properties"]["steps"]["items"]["properties"]
        ["allowed_tools"]["items"]["enum"];
    assert!(
        allowed.as_array().unwrap().iter().any(|t| t == "everything__echo"),
        "{allowed}"
    );
    let act: Vec<&str> = requests[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(act, ["everything__echo"]);
    // The step-result request saw the echo's result.
    assert!(
        transcript(&requests[2])
            .iter()
            .any(|m| m.starts_with("tool: ") && m.contains("hello"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_cut_mid_answer_is_retried_on_a_new_line() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let chunk = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": null}]
    });
    mock.push(MockReply::RawSse {
        events: vec![chunk.to_string(), chunk.to_string()],
        drop_after: Some(1),
    });
    mock.push(MockReply::Text("Hello world".into()));
    let out = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .args(["run", "Say hello"]),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Hel\nHello world\n");
    assert!(
        stderr.contains("(the model server failed mid-answer; retrying)"),
        "{stderr}"
    );
    assert_eq!(mock.requests().len(), 2);
}
