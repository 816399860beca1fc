//! The `chaos-worker` processes: spawning one, and the lines it prints.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;

use modu_chaos::Backend;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use super::Chaos;

/// A worker process.
pub(super) struct Proc {
    pub(super) child: Child,
    pub(super) stdin: ChildStdin,
    pub(super) generation: usize,
    pub(super) pid: u32,
}

/// What a worker printed.
pub(super) struct Said {
    pub(super) generation: usize,
    pub(super) line: String,
}

pub(super) struct Fleet {
    pub(super) backend: Backend,
    pub(super) url: String,
    pub(super) prefix: String,
    pub(super) dir: PathBuf,
    pub(super) config: Chaos,
    pub(super) procs: Vec<Proc>,
    pub(super) next_generation: usize,
    pub(super) pid_of: HashMap<usize, u32>,
    pub(super) tx: mpsc::UnboundedSender<Said>,
}

impl Fleet {
    pub(super) fn ledger(&self) -> PathBuf {
        self.dir.join("ledger")
    }
    pub(super) fn events(&self) -> PathBuf {
        self.dir.join("events")
    }

    pub(super) fn spawn(&mut self) -> Proc {
        let generation = self.next_generation;
        self.next_generation += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("workers.log"))
            .unwrap();
        let c = &self.config;
        let mut child = Command::new(env!("CARGO_BIN_EXE_chaos-worker"))
            .args([
                "--store",
                self.backend.as_str(),
                "--url",
                &self.url,
                "--prefix",
                &self.prefix,
            ])
            .arg("--ledger")
            .arg(self.ledger())
            .arg("--events")
            .arg(self.events())
            .args(["--holder", &format!("worker-g{generation}")])
            .args(["--ttl-ms", &c.ttl_ms.to_string(), "--wait-ms", &c.wait_ms.to_string()])
            .args([
                "--model-ms",
                &c.model_ms.to_string(),
                "--record-ms",
                &c.record_ms.to_string(),
            ])
            .args(["--recover-ms", &c.recover_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start chaos-worker");
        let pid = child.id().unwrap();
        self.pid_of.insert(generation, pid);
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(Said { generation, line });
            }
        });
        Proc {
            child,
            stdin,
            generation,
            pid,
        }
    }
}
