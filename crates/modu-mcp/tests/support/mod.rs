//! Helpers shared by modu-mcp's integration tests: real servers, ports, /proc checks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use modu_mcp::McpServerConfig;

/// The node script of server-everything, or `None` (test skipped) when not installed.
pub fn everything() -> Option<String> {
    modu_testing::service_env("MODU_MCP_EVERYTHING")
}

/// The Python with PyPI `mcp` installed, or `None` (test skipped).
pub fn python() -> Option<String> {
    modu_testing::service_env("MODU_MCP_PYTHON")
}

/// A file under tests/.
pub fn test_file(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// A unique marker to put on a server's command line.
pub fn marker(test: &str) -> String {
    format!("modu-mcp-test-{test}-{}", uuid_like())
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{}{}x{}", std::process::id(), nanos, N.fetch_add(1, Ordering::Relaxed))
}

/// server-everything over stdio, with a marker argument (ignored by the server).
pub fn everything_stdio(name: &str, script: &str, marker: &str) -> McpServerConfig {
    McpServerConfig::stdio(name, "node").with_args([script, "stdio", marker])
}

/// The FastMCP test server over stdio.
pub fn fastmcp_stdio(name: &str, python: &str, marker: &str) -> McpServerConfig {
    McpServerConfig::stdio(name, python).with_args([
        test_file("servers/fastmcp_server.py"),
        "stdio".into(),
        marker.into(),
    ])
}

/// The 100-tool server over stdio; its answers carry `prefix`.
pub fn many_stdio(name: &str, python: &str, prefix: &str) -> McpServerConfig {
    McpServerConfig::stdio(name, python).with_args([
        test_file("servers/many_tools_server.py"),
        "stdio".into(),
        prefix.into(),
    ])
}

/// The misbehaving test server (tests/peers/misbehaving_server.py) over stdio, with these
/// extra arguments.
pub fn misbehaving_stdio(name: &str, python: &str, extra: &[&str]) -> McpServerConfig {
    let mut args = vec![test_file("peers/misbehaving_server.py"), "stdio".to_owned()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    McpServerConfig::stdio(name, python).with_args(args)
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server process the test started; killed (SIGTERM, then SIGKILL) on drop.
pub struct ServerProcess {
    pub child: std::process::Child,
    pub port: u16,
}

impl ServerProcess {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = std::process::Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a command that serves HTTP on `port` and waits until the port accepts connections.
pub fn start_http_server(mut cmd: std::process::Command, port: u16) -> ServerProcess {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let child = cmd.spawn().expect("spawn server");
    let mut server = ServerProcess { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return server;
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("server exited early: {status}");
        }
        assert!(Instant::now() < deadline, "server on port {port} did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// server-everything over streamable HTTP on 127.0.0.1 (endpoint `/mcp`).
pub fn start_everything_http(script: &str) -> ServerProcess {
    let port = free_port();
    let mut cmd = std::process::Command::new("node");
    cmd.args(["-r", &test_file("node_localhost.js"), script, "streamableHttp"])
        .env("PORT", port.to_string());
    start_http_server(cmd, port)
}

/// A Python test server over streamable HTTP on 127.0.0.1 (endpoint `/mcp`).
pub fn start_python_http(python: &str, script: &str, extra: &[&str]) -> ServerProcess {
    start_python_http_mode(python, script, "http", extra)
}

/// A Python test server started as `script MODE PORT EXTRA..`, serving HTTP on 127.0.0.1.
pub fn start_python_http_mode(python: &str, script: &str, mode: &str, extra: &[&str]) -> ServerProcess {
    let port = free_port();
    let mut cmd = std::process::Command::new(python);
    cmd.arg(test_file(script)).arg(mode).arg(port.to_string()).args(extra);
    start_http_server(cmd, port)
}

fn proc_children_of(parent: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.len() < 2 || fields[0] == "Z" {
            continue;
        }
        if fields[1].parse::<u32>().ok() != Some(parent) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.push((pid, cmdline));
    }
    out
}

/// Live (non-zombie) children of this test process whose command line contains `needle`.
pub fn children_matching(needle: &str) -> Vec<(u32, String)> {
    proc_children_of(std::process::id())
        .into_iter()
        .filter(|(_, cmd)| cmd.contains(needle))
        .collect()
}

/// Waits up to `within` for no child matching `needle` to remain; panics listing them.
pub async fn assert_no_children(needle: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = children_matching(needle);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "orphaned server processes remain: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a process is alive (and not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].split_whitespace().next().unwrap_or("").to_owned())
        })
        .is_some_and(|state| state != "Z")
}

/// Every event at `DEBUG` and above (level, target, fields), for a subscriber set on the
/// test's thread only.
pub struct CaptureLogs(pub std::sync::Arc<std::sync::Mutex<String>>);

impl tracing::Subscriber for CaptureLogs {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::DEBUG
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields<'a>(&'a mut String);
        impl tracing::field::Visit for Fields<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {field}={value:?}"));
            }
        }
        let mut line = format!("{} {}:", event.metadata().level(), event.metadata().target());
        event.record(&mut Fields(&mut line));
        let mut logs = self.0.lock().unwrap();
        logs.push_str(&line);
        logs.push('\n');
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Captures every log event at `DEBUG` and above on this thread until the guard drops: the
/// lines (`LEVEL target: fields`) and the guard. On a current-thread runtime it sees every task.
pub fn capture_logs() -> (
    std::sync::Arc<std::sync::Mutex<String>>,
    tracing::subscriber::DefaultGuard,
) {
    let logs = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let guard = tracing::subscriber::set_default(CaptureLogs(std::sync::Arc::clone(&logs)));
    (logs, guard)
}
