//! Helpers shared by the CLI tests: running the built binary with a clean environment and
//! reading what it prints.

use std::path::Path;
use std::process::{Output, Stdio};

use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The binary in `dir`, pointed at `base_url`, with nothing leaking in from the machine.
pub(crate) fn modu(dir: &Path, base_url: &str) -> tokio::process::Command {
    command(env!("CARGO_BIN_EXE_modu"), dir, base_url)
}

/// `program` with the environment `modu` gets.
pub(crate) fn command(program: &str, dir: &Path, base_url: &str) -> tokio::process::Command {
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

pub(crate) async fn output(cmd: &mut tokio::process::Command) -> Output {
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("modu did not finish within 60 s")
        .unwrap()
}

pub(crate) async fn with_stdin(cmd: &mut tokio::process::Command, input: &str) -> Output {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    fed(cmd.spawn().unwrap(), input).await
}

/// Writes `input` to a spawned `modu`'s stdin (when it is piped), closes it, and waits up to
/// 60 s for the command to end.
pub(crate) async fn fed(mut child: tokio::process::Child, input: &str) -> Output {
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).await.unwrap();
    }
    tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("modu did not finish within 60 s")
        .unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn session_of(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no session line in {stderr:?}"))
}

/// Seconds since 1970 of an RFC 3339 UTC time as `modu` prints it (`2026-05-01T12:34:56Z`).
pub(crate) fn parse_rfc3339(text: &str) -> u64 {
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
pub(crate) fn assert_recent(text: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let at = parse_rfc3339(text);
    assert!(at <= now + 1 && now - at < 300, "{text} is not now ({now})");
}

/// A run that fails on a model error (503) in session `session`, leaving a `failed`
/// checkpoint; returns its run id.
pub(crate) async fn failed_run(dir: &Path, mock: &MockOpenAiServer, session: &str, envs: &[(&str, &str)]) -> String {
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
pub(crate) fn transcript(request: &Value) -> Vec<String> {
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

pub(crate) fn everything_config(script: &str, extra: &str) -> String {
    format!(
        "[agent]\ninstructions = \"You are terse.\"\n\n[mcp]\n{extra}\n\n[[mcp.servers]]\nname = \"everything\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [{script:?}, \"stdio\"]\n"
    )
}
