//! `modu mcp resources` and `modu mcp prompts`, run as a process against server-everything
//! (`MODU_MCP_EVERYTHING`, see `cargo xtask services`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::Value;

/// The built `modu` in `dir`, with nothing leaking in from the machine's environment.
fn command(dir: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_modu"));
    cmd.current_dir(dir);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("MODU_") || k.starts_with("OPENAI_") || k.starts_with("OLLAMA_") || k == "REDIS_URL" {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// `modu <args>` in `dir`, with nothing leaking in from the machine.
async fn modu(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = command(dir);
    cmd.args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("modu did not finish within 60 s")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A folder whose modu.toml configures server-everything (and `second`, another copy, when
/// asked), or `None` when the server is not installed.
fn configured(second: bool) -> Option<tempfile::TempDir> {
    let script = modu_testing::service_env("MODU_MCP_EVERYTHING")?;
    let dir = tempfile::tempdir().unwrap();
    let server = |name: &str| {
        format!(
            "[[mcp.servers]]\nname = \"{name}\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [{script:?}, \"stdio\"]\n\n"
        )
    };
    let mut config = server("everything");
    if second {
        config.push_str(&server("second"));
    }
    std::fs::write(dir.path().join("modu.toml"), config).unwrap();
    Some(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_lists_resources_and_templates_and_reads_one() {
    let Some(dir) = configured(false) else { return };
    let out = modu(dir.path(), &["mcp", "resources"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("resource\teverything\tdemo://resource/static/document/architecture.md\tarchitecture.md\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("template\teverything\tdemo://resource/dynamic/text/{resourceId}\tDynamic Text Resource\n"),
        "{stdout}"
    );

    // `list` is the default; --json gives the servers' descriptions, tagged with the server.
    let out = modu(dir.path(), &["mcp", "resources", "list", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &listed["resources"][0];
    assert_eq!(first["server"], "everything");
    assert!(first["uri"].as_str().unwrap().starts_with("demo://"), "{first}");
    assert!(!listed["resource_templates"].as_array().unwrap().is_empty());

    // A listed resource: its text as is.
    let out = modu(
        dir.path(),
        &[
            "mcp",
            "resources",
            "read",
            "demo://resource/static/document/architecture.md",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("# Everything Server"),
        "{}",
        text(&out.stdout)
    );

    // A template filled in; --json after the subcommand works too.
    let out = modu(
        dir.path(),
        &["mcp", "resources", "read", "demo://resource/dynamic/text/7", "--json"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let read: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(read["contents"][0]["uri"], "demo://resource/dynamic/text/7");
    assert!(read["contents"][0]["text"].as_str().unwrap().contains('7'), "{read}");

    // A binary resource is named, not dumped.
    let out = modu(
        dir.path(),
        &["mcp", "resources", "read", "demo://resource/dynamic/blob/3"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("contents, about") && stdout.contains("base64"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_lists_prompts_and_gets_one_with_arguments() {
    let Some(dir) = configured(false) else { return };
    let out = modu(dir.path(), &["mcp", "prompts"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("everything\targs-prompt\tcity,state?\tA prompt with two arguments"),
        "{stdout}"
    );
    assert!(stdout.contains("everything\tsimple-prompt\t\t"), "{stdout}");

    let out = modu(
        dir.path(),
        &[
            "mcp",
            "prompts",
            "get",
            "args-prompt",
            "--arg",
            "city=Paris",
            "--arg",
            "state=Texas",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "What's weather in Paris, Texas?\n");

    let out = modu(dir.path(), &["mcp", "prompts", "get", "simple-prompt", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let prompt: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(prompt["server"], "everything");
    assert_eq!(prompt["messages"][0]["role"], "user");
    assert_eq!(
        prompt["messages"][0]["text"],
        "This is a simple prompt without arguments."
    );

    // A missing required argument: the server's refusal, exit 1.
    let out = modu(dir.path(), &["mcp", "prompts", "get", "args-prompt"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("prompts/get") && stderr.contains("city"), "{stderr}");

    // A malformed --arg is a usage error, before any server starts.
    let out = modu(dir.path(), &["mcp", "prompts", "get", "args-prompt", "--arg", "city"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "error: --arg \"city\" is not KEY=VALUE\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_get_need_a_server_when_several_are_configured() {
    let Some(dir) = configured(true) else { return };
    let out = modu(
        dir.path(),
        &["mcp", "resources", "read", "demo://resource/dynamic/text/1"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: `modu mcp resources read` needs --server NAME when more than one MCP server is configured\n"
    );
    let out = modu(
        dir.path(),
        &["mcp", "prompts", "get", "simple-prompt", "--server", "second"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "This is a simple prompt without arguments.\n");
    // Listing covers every server.
    let out = modu(dir.path(), &["mcp", "prompts"]).await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("everything\tsimple-prompt") && stdout.contains("second\tsimple-prompt"),
        "{stdout}"
    );
    let out = modu(dir.path(), &["mcp", "prompts", "--server", "nope"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: no MCP server named `nope` (configured: everything, second)\n"
    );
}

/// A minimal stdio MCP server (two tools) that exits when its stdin closes.
const STUB_SERVER: &str = r"
const rl = require('readline').createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === undefined) return;
  const tools = [1, 2].map((n) => ({ name: `tool${n}`, description: 'd', inputSchema: { type: 'object' } }));
  const reply = m.method === 'initialize'
    ? { result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'stub', version: '1.0.0' } } }
    : m.method === 'tools/list' ? { result: { tools } } : { error: { code: -32601, message: 'unknown' } };
  process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, ...reply }) + '\n');
});
rl.on('close', () => process.exit(0));
";

/// Whether process `pid` runs (a zombie does not).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stdout_ends_the_command_and_stops_its_mcp_servers() {
    // The server's process group holds a helper that outlives the server's stdin: only the
    // group kill when the MCP session is dropped stops it (`std::process::exit` skipped that).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("server.js"), STUB_SERVER).unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        "[[mcp.servers]]\nname = \"stub\"\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 300 & echo $! > helper.pid; exec node server.js\"]\n",
    )
    .unwrap();
    let mut cmd = command(dir.path());
    cmd.args(["mcp", "tools"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("modu did not finish within 60 s")
        .unwrap();
    let pid = std::fs::read_to_string(dir.path().join("helper.pid")).unwrap();
    let pid = pid.trim();
    let mut helper_stopped = false;
    for _ in 0..20 {
        if !alive(pid) {
            helper_stopped = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = std::process::Command::new("kill").arg(pid).status();
    assert_eq!(
        text(&out.stderr),
        "error: cannot write to stdout: No space left on device (os error 28)\n"
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(helper_stopped, "the MCP server's process group was left running");
}
