//! An agent process killed with SIGKILL between two tool calls; a new process resumes the run
//! to completion. On SQLite (a temporary file) and on Redis (`REDIS_URL`).
//!
//! The child (`src/main.rs`) runs a scripted model that calls `first`, then `second`; `second`
//! writes a marker and sleeps. The parent waits for the marker, so `first` has finished and
//! its result is checkpointed, SIGKILLs the child (`Child::kill`), then starts a second child
//! that resumes the run with a fresh model script. Tool calls are counted in files, because
//! the processes share nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use modu_core::{CheckpointStore, ConversationStore, Role};

const BIN: &str = env!("CARGO_BIN_EXE_modu-crash-tests");
const SESSION: &str = "crash-session";

fn count(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

/// Runs the crash scenario and returns the resume child's JSON line.
fn crash_and_resume(backend: &str, location: &str, workdir: &Path, run_id: &str) -> serde_json::Value {
    let mut child = Command::new(BIN)
        .args(["run", backend, location])
        .arg(workdir)
        .arg(run_id)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let marker = workdir.join("second.started");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the child exited ({status}) before reaching the second tool: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "the child never reached the second tool");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL: no destructor, no flush, no checkpoint of the tool in flight.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child must die by the signal, got {status}");
    assert_eq!(count(&workdir.join("first.count")), 1);
    assert_eq!(count(&workdir.join("second.count")), 1);

    let out = Command::new(BIN)
        .args(["resume", backend, location])
        .arg(workdir)
        .arg(run_id)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "resume child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("bad child output {stdout:?}: {e}"))
}

async fn check_outcome(
    result: &serde_json::Value,
    workdir: &Path,
    run_id: &str,
    conv: Arc<dyn ConversationStore>,
    ckpt: Arc<dyn CheckpointStore>,
) {
    assert_eq!(result["error"], serde_json::Value::Null, "{result}");
    assert_eq!(result["output"], "both tools done", "{result}");
    assert_eq!(result["run_id"], run_id);
    assert_eq!(result["resumed"], true);
    assert_eq!(
        count(&workdir.join("first.count")),
        1,
        "the first tool must not run again"
    );
    // The second tool was in flight when the process died: its result was never
    // checkpointed, so the resume runs it again (at-least-once, documented).
    assert_eq!(count(&workdir.join("second.count")), 2);

    let stored = conv.load(SESSION).await.unwrap();
    let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ],
        "{stored:#?}"
    );
    assert_eq!(stored[0].text(), "call first, then second");
    assert_eq!(stored[2].name.as_deref(), Some("first"));
    assert_eq!(stored[4].name.as_deref(), Some("second"));
    assert_eq!(stored[5].text(), "both tools done");
    assert_eq!(
        ckpt.load(run_id).await.unwrap(),
        None,
        "the completed run deleted its checkpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_agent_killed_between_tool_calls_is_resumed_by_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db/agent.db");
    let run_id = "crash-run-sqlite";
    let result = crash_and_resume("sqlite", db.to_str().unwrap(), dir.path(), run_id);

    let pool = modu_sqlite::open(&db).await.unwrap();
    let conv = Arc::new(
        modu_sqlite::SqliteConversationStore::from_pool(pool.clone())
            .await
            .unwrap(),
    );
    let ckpt = Arc::new(modu_sqlite::SqliteCheckpointStore::from_pool(pool).await.unwrap());
    check_outcome(&result, dir.path(), run_id, conv, ckpt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_agent_killed_between_tool_calls_is_resumed_by_a_new_process() {
    let Some(url) = modu_testing::service_env("REDIS_URL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = modu_testing::unique_prefix("crash");
    let run_id = "crash-run-redis";
    let result = crash_and_resume("redis", &format!("{url}|{prefix}"), dir.path(), run_id);

    let conn = modu_redis::connect(&url).await.unwrap();
    let conv = Arc::new(modu_redis::RedisConversationStore::new(conn.clone()).with_prefix(&prefix));
    let ckpt = Arc::new(modu_redis::RedisCheckpointStore::new(conn).with_prefix(&prefix));
    check_outcome(&result, dir.path(), run_id, conv, ckpt).await;
}
