//! A real restate-server on loopback ports, and worker processes (the `durable_worker` example).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// The restate-server binary, from `MODU_RESTATE_SERVER` (None: skip; panics under CI).
pub fn server_bin() -> Option<String> {
    modu_testing::service_env("MODU_RESTATE_SERVER")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A restate-server bound to 127.0.0.1 only, stopped when dropped.
pub struct Restate {
    child: Child,
    pub ingress: u16,
    pub admin: u16,
    pub dir: tempfile::TempDir,
    pub http: reqwest::Client,
}

impl Restate {
    pub async fn start(bin: &str) -> Restate {
        let dir = tempfile::tempdir().unwrap();
        let (node, admin, ingress) = (free_port(), free_port(), free_port());
        let config = dir.path().join("restate.toml");
        // Every listener on loopback (by default they listen on all interfaces).
        std::fs::write(
            &config,
            format!(
                "bind-address = \"127.0.0.1:{node}\"\nadvertised-address = \"http://127.0.0.1:{node}/\"\n\
                 [admin]\nbind-address = \"127.0.0.1:{admin}\"\n[ingress]\nbind-address = \"127.0.0.1:{ingress}\"\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("restate.log")).unwrap();
        let child = Command::new(bin)
            .arg("--config-file")
            .arg(&config)
            .args(["--node-name", "n1", "--base-dir"])
            .arg(dir.path().join("base"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start restate-server");
        let restate = Restate {
            child,
            ingress,
            admin,
            dir,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
        };
        let started = Instant::now();
        loop {
            let admin_ok = restate.get_ok(&format!("{}/health", restate.admin_url())).await;
            let ingress_ok = restate
                .get_ok(&format!("{}/restate/health", restate.ingress_url()))
                .await;
            if admin_ok && ingress_ok {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "restate-server did not come up; log:\n{}",
                restate.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        restate
    }

    async fn get_ok(&self, url: &str) -> bool {
        self.http.get(url).send().await.is_ok_and(|r| r.status().is_success())
    }

    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin)
    }

    pub fn ingress_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ingress)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("restate.log")).unwrap_or_default()
    }

    /// Registers the deployment at `uri` (Restate runs discovery against it).
    pub async fn register(&self, uri: &str) {
        let r = self
            .http
            .post(format!("{}/deployments", self.admin_url()))
            .json(&serde_json::json!({"uri": uri, "force": true}))
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert!(
            status.is_success(),
            "register {uri}: {status} {}",
            r.text().await.unwrap_or_default()
        );
    }

    /// The object state Restate holds for `ModuSession`: `(object key, state key)`, sorted
    /// (admin SQL API).
    pub async fn state(&self) -> Vec<(String, String)> {
        let r = self
            .http
            .post(format!("{}/query", self.admin_url()))
            .header("accept", "application/json")
            .json(&serde_json::json!({
                "query": "SELECT service_key, key FROM state WHERE service_name = 'ModuSession' ORDER BY service_key, key"
            }))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(status.is_success(), "query: {status} {body}");
        body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                let text = |k: &str| row[k].as_str().unwrap_or_default().to_owned();
                (text("service_key"), text("key"))
            })
            .collect()
    }

    /// Calls `<object>/<key>/<handler>` on the ingress and waits for its JSON answer.
    pub async fn call(&self, key: &str, handler: &str, body: serde_json::Value) -> serde_json::Value {
        let request = self
            .http
            .post(format!("{}/ModuSession/{key}/{handler}", self.ingress_url()));
        // A handler without input takes no body at all.
        let request = if body.is_null() { request } else { request.json(&body) };
        let r = request.send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert!(status.is_success(), "{handler} on {key}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }
}

impl Drop for Restate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `durable_worker` example binary (cargo builds examples for `cargo test`).
pub fn worker_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().and_then(Path::parent).unwrap();
    let bin = target.join("examples").join("durable_worker");
    assert!(
        bin.exists(),
        "{} is missing: build the examples (cargo test builds them)",
        bin.display()
    );
    bin
}

/// A worker process, SIGKILLed when dropped.
pub struct Worker {
    pub child: Child,
    pub port: u16,
}

impl Worker {
    pub async fn start(port: u16, openai: &str, ledger: &Path, slow_ms: u64, log: &Path) -> Worker {
        Self::start_with(port, openai, ledger, slow_ms, log, &[]).await
    }

    /// [`Worker::start`] with more environment variables (`RECORD_MS`).
    pub async fn start_with(
        port: u16,
        openai: &str,
        ledger: &Path,
        slow_ms: u64,
        log: &Path,
        env: &[(&str, String)],
    ) -> Worker {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let child = Command::new(worker_bin())
            .env("PORT", port.to_string())
            .env("OPENAI_BASE_URL", openai)
            .env("LEDGER", ledger)
            .env("SLOW_MS", slow_ms.to_string())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a worker");
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "worker did not listen on {port}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Worker { child, port }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL (std's `Child::kill` sends SIGKILL on Unix), and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The ledger's lines: `(run id, call id, tool, phase)`.
pub fn ledger(path: &Path) -> Vec<(String, String, String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.split(' ');
            Some((
                parts.next()?.to_owned(),
                parts.next()?.to_owned(),
                parts.next()?.to_owned(),
                parts.next()?.to_owned(),
            ))
        })
        .collect()
}

/// Polls `approvals` until the session lists a call; the list.
pub async fn wait_for_approvals(restate: &Restate, session: &str) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let pending = restate.call(session, "approvals", json!(null)).await;
        if pending.as_array().is_some_and(|a| !a.is_empty()) {
            return pending;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no approval was requested");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends a run (`/run/send`) and returns its invocation id.
pub async fn send_run(restate: &Restate, session: &str, message: &str) -> String {
    let r = restate
        .http
        .post(format!("{}/ModuSession/{session}/run/send", restate.ingress_url()))
        .json(&json!({"message": message}))
        .send()
        .await
        .unwrap();
    let sent: serde_json::Value = r.json().await.unwrap();
    sent["invocationId"].as_str().unwrap().to_owned()
}

/// Cancels the invocation `id` (admin API) and waits for it to end: its status and body.
pub async fn cancel_and_attach(restate: &Restate, id: &str) -> (reqwest::StatusCode, String) {
    let r = restate
        .http
        .patch(format!("{}/invocations/{id}/cancel", restate.admin_url()))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "cancel: {}", r.status());
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        restate
            .http
            .get(format!("{}/restate/invocation/{id}/attach", restate.ingress_url()))
            .send(),
    )
    .await
    .expect("the cancelled invocation did not end")
    .unwrap();
    let status = r.status();
    (status, r.text().await.unwrap())
}
