//! The child process of the crash tests (see `tests/crash.rs`).
//!
//! `modu-crash-tests run|resume sqlite|redis LOCATION WORKDIR RUN_ID`
//!
//! - `LOCATION` is the SQLite file, or `REDIS_URL|PREFIX` for Redis.
//! - `run`: runs an agent whose scripted model calls the tool `first`, then the tool `second`.
//!   `first` appends a line to `WORKDIR/first.count`; `second` appends a line to
//!   `WORKDIR/second.count`, writes the marker `WORKDIR/second.started` and sleeps (the
//!   parent kills the process with SIGKILL there).
//! - `resume`: a new process, same agent configuration, a fresh scripted model that only
//!   answers; resumes `RUN_ID` and prints the result as one JSON line on stdout.
#![allow(clippy::print_stdout)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use modu_agent::{Agent, AgentRequest, RetryConfig};
use modu_core::{CheckpointStore, ConversationStore, FunctionTool, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The session the crash tests use.
const SESSION: &str = "crash-session";

fn append_line(path: &Path) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(b"1\n")?;
    f.sync_all()
}

fn tool(name: &'static str, workdir: PathBuf, block: bool) -> FunctionTool<()> {
    let spec = ToolSpec::new(
        name,
        "A tool whose calls are counted in a file",
        json!({"type": "object", "properties": {}}),
    );
    FunctionTool::new(spec, move |_ctx, _args| {
        let workdir = workdir.clone();
        async move {
            append_line(&workdir.join(format!("{name}.count")))
                .map_err(|e| modu_core::ToolError::execution(e.to_string()))?;
            if block {
                std::fs::write(workdir.join(format!("{name}.started")), b"")
                    .map_err(|e| modu_core::ToolError::execution(e.to_string()))?;
                // The parent kills us here.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Ok(json!({"tool": name, "ok": true}))
        }
    })
}

async fn stores(
    backend: &str,
    location: &str,
) -> Result<(Arc<dyn ConversationStore>, Arc<dyn CheckpointStore>), BoxError> {
    match backend {
        "sqlite" => {
            let pool = modu_sqlite::open(location).await?;
            let conv = modu_sqlite::SqliteConversationStore::from_pool(pool.clone()).await?;
            let ckpt = modu_sqlite::SqliteCheckpointStore::from_pool(pool).await?;
            Ok((Arc::new(conv), Arc::new(ckpt)))
        }
        "redis" => {
            let (url, prefix) = location.split_once('|').ok_or("redis location is URL|PREFIX")?;
            let conn = modu_redis::connect(url).await?;
            let conv = modu_redis::RedisConversationStore::new(conn.clone()).with_prefix(prefix);
            let ckpt = modu_redis::RedisCheckpointStore::new(conn).with_prefix(prefix);
            Ok((Arc::new(conv), Arc::new(ckpt)))
        }
        other => Err(format!("unknown backend {other}").into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, backend, location, workdir, run_id] = args.as_slice() else {
        return Err("usage: modu-crash-tests run|resume sqlite|redis LOCATION WORKDIR RUN_ID".into());
    };
    let workdir = PathBuf::from(workdir);
    let (conv, ckpt) = stores(backend, location).await?;
    let resuming = mode == "resume";
    let model = if resuming {
        ScriptedModel::new().text("both tools done")
    } else {
        ScriptedModel::new()
            .tool_call("first", json!({}))
            .tool_call("second", json!({}))
            .text("both tools done")
    };
    let agent = Agent::builder(model)
        .name("crash-agent")
        .tool(tool("first", workdir.clone(), false))
        .tool(tool("second", workdir.clone(), !resuming))
        .retry(RetryConfig::none())
        .conversation_store(conv)
        .checkpoint_store(ckpt)
        .build()?;
    let result = if resuming {
        agent.resume(run_id, ()).await
    } else {
        agent
            .run(
                AgentRequest::new((), "call first, then second")
                    .session(SESSION)
                    .run_id(run_id),
            )
            .await
    };
    let line = json!({
        "run_id": result.run_id(),
        "output": result.output(),
        "error": result.error().map(ToString::to_string),
        "messages": result.messages().len(),
        "resumed": result.stats().resumed,
    });
    println!("{line}");
    Ok(())
}
