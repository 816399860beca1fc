//! A worker process: serves a durable agent as the Restate Virtual Object `ModuSession` on
//! `127.0.0.1:$PORT`. The tests start (and SIGKILL) several of these.
//!
//! Environment:
//! - `PORT`: where to listen (HTTP/2, as Restate calls deployments).
//! - `OPENAI_BASE_URL`: the OpenAI-compatible server the agent's model talks to.
//! - `LEDGER`: a file every tool call appends `<run id> <call id> <tool> <phase> <exec>
//!   <unix µs>` to, where `<exec>` (`<pid>.<n>`) names this execution of the call.
//! - `SLOW_MS`: how long the `slow` tool works (default 2000).
//! - `RECORD_MS`: how long `record` works after its effect (default 0).
//! - `BIND`: `plain` binds the session with `Endpoint::builder().bind(session)` instead of
//!   `DurableSession::definition`.
//! - `CHECKPOINT_LOG`: if set, a file the checkpoint store (in memory) appends `save <run id>`
//!   and `delete <run id>` to, so that a test sees which checkpoints the worker keeps.
//!
//! Tools: `record` appends one `done` line (its effect), works `RECORD_MS`, and returns
//! `{"recorded": true, "exec": <exec>}`; `slow` appends `start`, works `SLOW_MS`, then appends
//! `done`. `approve_me` needs approval and appends `done`. `ask_me` appends `asked`, asks a person
//! for a note (`RunContext::ask_user`), then appends `done`. `panic_me` appends `done`, then
//! panics with `the tool broke`.
//!
//! ```text
//! PORT=9080 OPENAI_BASE_URL=http://127.0.0.1:8000/v1 LEDGER=/tmp/ledger \
//!   cargo run -p modu-restate --example durable_worker
//! curl -X POST http://127.0.0.1:19070/deployments -H 'content-type: application/json' \
//!   -d '{"uri":"http://127.0.0.1:9080"}'
//! curl -X POST http://127.0.0.1:19081/ModuSession/alice/run -H 'content-type: application/json' \
//!   -d '{"message":"hello"}'
//! ```
#![allow(clippy::print_stdout)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use modu_agent::{Agent, RetryConfig};
use modu_core::{
    CheckpointMeta, CheckpointPage, CheckpointQuery, CheckpointStore, FunctionTool, InMemoryCheckpointStore,
    RunContext, StoreError, ToolError, ToolSpec,
};
use modu_openai::OpenAiClient;
use modu_restate::restate_sdk::endpoint::Endpoint;
use modu_restate::{DurableSession, Retries, durable};

/// What every tool call gets: where the ledger is.
struct Worker {
    ledger: PathBuf,
    slow: Duration,
    record: Duration,
}

/// Tool executions in this process (the `<n>` of an execution's `<pid>.<n>`).
static EXECUTIONS: AtomicU64 = AtomicU64::new(0);

/// Appends a ledger line (O_APPEND, synced); returns the execution's name.
fn append(ledger: &PathBuf, ctx: &RunContext<Worker>, tool: &str, phase: &str) -> Result<String, ToolError> {
    let exec = format!("{}.{}", std::process::id(), EXECUTIONS.fetch_add(1, Ordering::SeqCst));
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let line = format!(
        "{} {} {tool} {phase} {exec} {micros}\n",
        ctx.run_id(),
        ctx.call_id().unwrap_or("-")
    );
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .map_err(|_| ToolError::execution("ledger_unwritable"))?;
    file.write_all(line.as_bytes())
        .and_then(|()| file.sync_data())
        .map_err(|_| ToolError::execution("ledger_unwritable"))?;
    Ok(exec)
}

/// The worker's checkpoint store: in memory, each save and delete logged to `CHECKPOINT_LOG`.
struct LoggedCheckpoints {
    inner: InMemoryCheckpointStore,
    log: Option<PathBuf>,
}

impl LoggedCheckpoints {
    fn note(&self, what: &str, run_id: &str) -> Result<(), StoreError> {
        let Some(log) = &self.log else { return Ok(()) };
        let unwritable = |e: std::io::Error| StoreError::backend("checkpoint log unwritable", e);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(unwritable)?;
        file.write_all(format!("{what} {run_id}\n").as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(unwritable)
    }
}

#[async_trait]
impl CheckpointStore for LoggedCheckpoints {
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
        self.inner.save(run_id, meta, state).await?;
        self.note("save", run_id)
    }
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        self.inner.delete(run_id).await?;
        self.note("delete", run_id)
    }
    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        self.inner.list(query).await
    }
    async fn purge_expired(&self) -> Result<u64, StoreError> {
        self.inner.purge_expired().await
    }
}

fn millis(var: &str, default: u64) -> Duration {
    Duration::from_millis(std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default))
}

fn schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {"note": {"type": "string"}}})
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::var("PORT")?.parse()?;
    let base_url = std::env::var("OPENAI_BASE_URL")?;
    let ledger = PathBuf::from(std::env::var("LEDGER")?);
    let slow = millis("SLOW_MS", 2000);
    let record_work = millis("RECORD_MS", 0);

    let model = OpenAiClient::new(base_url, "mock-model")?;
    let record = FunctionTool::new(
        ToolSpec::new("record", "Records a note.", schema()),
        |ctx: RunContext<Worker>, _args| async move {
            let ledger = ctx.context().ledger.clone();
            let exec = append(&ledger, &ctx, "record", "done")?;
            tokio::time::sleep(ctx.context().record).await;
            Ok(serde_json::json!({"recorded": true, "exec": exec}))
        },
    );
    let slow_tool = FunctionTool::new(
        ToolSpec::new("slow", "Works a while.", schema()),
        |ctx: RunContext<Worker>, _args| async move {
            let ledger = ctx.context().ledger.clone();
            append(&ledger, &ctx, "slow", "start")?;
            tokio::time::sleep(ctx.context().slow).await;
            append(&ledger, &ctx, "slow", "done")?;
            Ok(serde_json::json!({"worked": true}))
        },
    );
    let mut spec = ToolSpec::new("approve_me", "Needs a person's approval.", schema());
    spec.needs_approval = true;
    let approve_me = FunctionTool::new(spec, |ctx: RunContext<Worker>, _args| async move {
        let ledger = ctx.context().ledger.clone();
        append(&ledger, &ctx, "approve_me", "done")?;
        Ok(serde_json::json!({"approved_call_ran": true}))
    });

    let ask_me = FunctionTool::new(
        ToolSpec::new("ask_me", "Asks a person for a note.", schema()),
        |ctx: RunContext<Worker>, _args| async move {
            let ledger = ctx.context().ledger.clone();
            append(&ledger, &ctx, "ask_me", "asked")?;
            let note = ctx.ask_user("A note, please.", schema())?;
            append(&ledger, &ctx, "ask_me", "done")?;
            Ok(serde_json::json!({"note": note}))
        },
    );

    let panic_me = FunctionTool::new(
        ToolSpec::new("panic_me", "Panics.", schema()),
        |ctx: RunContext<Worker>, _args| async move {
            let ledger = ctx.context().ledger.clone();
            let exec = append(&ledger, &ctx, "panic_me", "done")?;
            if !exec.is_empty() {
                panic!("the tool broke");
            }
            Ok(serde_json::json!({"exec": exec}))
        },
    );

    let builder = Agent::builder(model)
        .context::<Worker>()
        .name("durable-worker")
        .instructions("You are a test agent.")
        .retry(RetryConfig::new(2).with_backoff(Duration::from_millis(50), Duration::from_millis(200)))
        .checkpoint_store(Arc::new(LoggedCheckpoints {
            inner: InMemoryCheckpointStore::new(),
            log: std::env::var_os("CHECKPOINT_LOG").map(PathBuf::from),
        }));
    let agent = durable(builder, Retries::Agent)
        .tool(record)
        .tool(slow_tool)
        .tool(approve_me)
        .tool(ask_me)
        .tool(panic_me)
        .build()?;

    let session = DurableSession::new(
        agent,
        Arc::new(Worker {
            ledger,
            slow,
            record: record_work,
        }),
    );
    let endpoint = if std::env::var("BIND").is_ok_and(|b| b == "plain") {
        // The object as the SDK binds any object (its default retry policy).
        Endpoint::builder().bind(session).build()
    } else {
        Endpoint::builder()
            .bind(session.definition(Duration::from_millis(50), Duration::from_millis(250)))
            .build()
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    println!("worker {} listening on {addr}", std::process::id());
    modu_restate::serve(endpoint, addr).await?;
    Ok(())
}
