//! Helpers shared by the Redis tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use modu_core::{FunctionTool, ToolSpec};
use serde_json::json;

/// A `redis-server` child process on a free loopback port, persisting to an append-only file
/// with `appendfsync always`, so a restart on the same directory keeps every acknowledged write.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Whether `redis-server` is on PATH. Without it a test skips locally (after a loud line on
/// stderr) and fails under CI (`.ci/run` installs it), like `modu_testing::service_env`.
pub fn redis_server_available() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        assert!(
            !ci,
            "redis-server is not on PATH but CI is set: .ci/run installs it (apt-get install redis-server)"
        );
        eprintln!("SKIPPED: redis-server is not on PATH (apt-get install redis-server) to run this test");
    }
    found
}

impl RedisServer {
    /// Starts a server, or returns `None` (skip) when `redis-server` is missing locally.
    pub fn try_start() -> Option<Self> {
        redis_server_available().then(Self::start)
    }

    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut server = RedisServer {
            port: free_port(),
            child: None,
            dir,
        };
        server.spawn();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be on PATH (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(client) = redis::Client::open(self.url())
                && let Ok(mut c) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no shutdown, no final save.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (it replays its append-only file).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `INFO commandstats` and returns how many times `command` (lower case) ran.
pub fn command_calls(url: &str, command: &str) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_connection().unwrap();
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut c).unwrap();
    let tag = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&tag))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A TCP proxy in front of a Redis server that can cut a connection at the worst moment: once
/// armed, the next request whose bytes contain `marker` is forwarded to the server (which runs
/// it) and then the connection is closed before the reply reaches the client. The client sees
/// a lost connection for a command that was applied: an ambiguous failure.
pub struct CuttingProxy {
    pub port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

impl CuttingProxy {
    pub fn start(upstream_port: u16, marker: &[u8]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let marker = marker.to_vec();
        {
            let (armed, cuts) = (Arc::clone(&armed), Arc::clone(&cuts));
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    let Ok(client) = client else { return };
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                        continue;
                    };
                    Self::pump(client, server, marker.clone(), Arc::clone(&armed), Arc::clone(&cuts));
                }
            });
        }
        CuttingProxy { port, armed, cuts }
    }

    fn pump(client: TcpStream, server: TcpStream, marker: Vec<u8>, armed: Arc<AtomicBool>, cuts: Arc<AtomicUsize>) {
        let cut = Arc::new(AtomicBool::new(false));
        let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        {
            let cut = Arc::clone(&cut);
            std::thread::spawn(move || {
                let mut seen: Vec<u8> = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match c_read.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(marker.len()).any(|w| w == marker.as_slice()) && armed.swap(false, Ordering::SeqCst)
                    {
                        // Before forwarding: the reply to this request must not get through.
                        cut.store(true, Ordering::SeqCst);
                    }
                    // Keep a tail shorter than the marker, for a marker split between reads.
                    let keep = seen.len().saturating_sub(marker.len() - 1);
                    seen.drain(..keep);
                    if s_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = s_write.shutdown(Shutdown::Both);
            });
        }
        let (mut s_read, mut c_write) = (server, client);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match s_read.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if cut.load(Ordering::SeqCst) {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                if c_write.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = c_write.shutdown(Shutdown::Both);
            let _ = s_read.shutdown(Shutdown::Both);
        });
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Cuts the connection after the next request that contains the marker.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// How many replies were held back and their connection cut.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

/// A tool that counts its calls.
pub fn counting_tool(name: &str, counter: Arc<AtomicUsize>) -> FunctionTool<()> {
    let spec = ToolSpec::new(
        name,
        "Counts its calls",
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
    );
    FunctionTool::new(spec, move |_ctx, _args| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok(json!({"call": n})) }
    })
}
