//! Helpers shared by the Redis tests.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

impl RedisServer {
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
