//! The chaos tests of session leases (issue #18), test-only.
//!
//! The `chaos-worker` binary runs an agent whose runs take their session's lease
//! ([`modu_core::lease`]) on Redis or PostgreSQL, and recovers orphaned runs in the
//! background. The tests start several of these processes, SIGKILL them at random, and check
//! what the stores hold at the end. This library is what the worker and the tests share: the
//! stores of a backend, the agent the worker runs, and the files it writes.
//!
//! The agent is deterministic: its model answers a run's first request with a call of the
//! `record` tool and the request after the tool's result with a text; the run's user message
//! is its run id, so every model call and tool call names its run. Each model reply carries a
//! fresh nonce (`<pid>.<n>`), and each tool result names its execution, so a session's history
//! says which model reply and which tool execution the stores kept.
//!
//! Files (one line per fact, appended with `O_APPEND` by every worker):
//! - the **ledger**: `<run id> <call id> <pid> <execution> <unix µs>`, one line per execution
//!   of `record`, written before the tool works and returns;
//! - the **events**: `<unix µs> <pid> <kind> <run id> [detail]`, with kinds `model` (a model
//!   request; detail `<step> <nonce>`), `started` (a run started or resumed; detail
//!   `resumed=<bool>`), and the store writes that succeeded: `save` (a checkpoint), `append`
//!   (the conversation), `delete` (a checkpoint removed).
#![deny(missing_docs)]

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use modu_agent::Agent;
use modu_core::{
    AgentError, AgentEvent, ChatEvent, ChatModel, ChatRequest, ChatStream, CheckpointMeta, CheckpointPage,
    CheckpointQuery, CheckpointStore, ConversationStore, EventSink, Fence, FinishReason, FunctionTool, LeaseOptions,
    LeaseStore, Message, ModelError, Role, RunContext, SessionSummary, SinkError, StoreError, ToolError, ToolSpec,
    Usage,
};

/// The agent's name (checkpoints are listed by it).
pub const AGENT_NAME: &str = "chaos";

/// Microseconds since the Unix epoch (the clock every file line carries).
pub fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// Where the stores live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Redis: the prefix is the key prefix.
    Redis,
    /// PostgreSQL: the prefix is the schema.
    Postgres,
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "redis" => Ok(Backend::Redis),
            "postgres" => Ok(Backend::Postgres),
            other => Err(format!("unknown store {other:?} (redis or postgres)")),
        }
    }
}

impl Backend {
    /// The name `--store` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Postgres => "postgres",
        }
    }
}

/// One backend's conversation and checkpoint stores with the leases their fenced writes check.
#[derive(Clone)]
pub struct Stores {
    /// Conversations (fenced appends check `leases`).
    pub conversations: Arc<dyn ConversationStore>,
    /// Checkpoints (fenced saves and deletes check `leases`).
    pub checkpoints: Arc<dyn CheckpointStore>,
    /// Session leases.
    pub leases: Arc<dyn LeaseStore>,
}

impl Stores {
    /// Connects to `url` and opens the three stores under `prefix`.
    pub async fn open(backend: Backend, url: &str, prefix: &str) -> Result<Stores, StoreError> {
        match backend {
            Backend::Redis => {
                let conn = modu_redis::connect(url).await?;
                Ok(Stores {
                    conversations: Arc::new(modu_redis::RedisConversationStore::new(conn.clone()).with_prefix(prefix)),
                    checkpoints: Arc::new(modu_redis::RedisCheckpointStore::new(conn.clone()).with_prefix(prefix)),
                    leases: Arc::new(modu_redis::RedisLeaseStore::new(conn).with_prefix(prefix)),
                })
            }
            Backend::Postgres => {
                let stores = modu_postgres::PostgresStores::connect_in_schema(url, prefix).await?;
                Ok(Stores {
                    conversations: Arc::new(stores.conversations),
                    checkpoints: Arc::new(stores.checkpoints),
                    leases: Arc::new(stores.leases),
                })
            }
        }
    }
}

/// An append-only file of lines (`O_APPEND`: lines from several processes never mix).
#[derive(Clone)]
pub struct LineFile {
    file: Arc<File>,
}

impl LineFile {
    /// Opens (creates) `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<LineFile> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(LineFile { file: Arc::new(file) })
    }

    /// Appends one line (one `write` call).
    pub fn line(&self, line: &str) -> std::io::Result<()> {
        let mut text = String::with_capacity(line.len() + 1);
        text.push_str(line);
        text.push('\n');
        (&*self.file).write_all(text.as_bytes())
    }

    /// Appends an event line: `<unix µs> <pid> <kind> <run> [detail]`.
    pub fn event(&self, kind: &str, run: &str, detail: &str) {
        let line = format!("{} {} {kind} {run} {detail}", now_us(), std::process::id());
        if let Err(e) = self.line(line.trim_end()) {
            eprintln!("cannot write an event: {e}");
        }
    }
}

/// The run a request belongs to: its last user message (the worker makes it the run id).
fn run_of(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(Message::text)
        .unwrap_or_default()
}

/// The deterministic model: `record` first, then `noted <nonce>`, after `delay`.
pub struct ChaosModel {
    delay: Duration,
    events: LineFile,
    replies: AtomicU64,
}

impl ChaosModel {
    /// A model that answers after `delay` and logs each request to `events`.
    pub fn new(delay: Duration, events: LineFile) -> Self {
        ChaosModel {
            delay,
            events,
            replies: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl ChatModel for ChaosModel {
    fn model_name(&self) -> &str {
        "chaos-model"
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let run = run_of(&request.messages);
        let answer = request.messages.last().is_some_and(|m| m.role == Role::Tool);
        let nonce = format!("{}.{}", std::process::id(), self.replies.fetch_add(1, Ordering::SeqCst));
        let step = if answer { "answer" } else { "call" };
        self.events.event("model", &run, &format!("{step} {nonce}"));
        tokio::time::sleep(self.delay).await;
        let mut events = Vec::new();
        if answer {
            events.push(ChatEvent::TextDelta {
                text: format!("noted {nonce}"),
            });
            events.push(ChatEvent::Finish {
                reason: FinishReason::Stop,
            });
        } else {
            events.push(ChatEvent::ToolCallDelta {
                index: 0,
                id: Some(format!("call-{run}")),
                name: Some("record".into()),
                arguments: serde_json::json!({ "note": nonce }).to_string(),
            });
            events.push(ChatEvent::Finish {
                reason: FinishReason::ToolCalls,
            });
        }
        events.push(ChatEvent::Usage {
            usage: Usage::new(1, 1),
        });
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

/// What the worker's tools see.
pub struct Worker {
    /// The ledger `record` appends to.
    pub ledger: LineFile,
    /// How long `record` works after its ledger line.
    pub record: Duration,
}

/// Tool executions in this process (the `<n>` of `<pid>.<n>`).
static EXECUTIONS: AtomicU64 = AtomicU64::new(0);

/// The `record` tool: appends `<run id> <call id> <pid> <execution> <unix µs>` to the ledger,
/// works [`Worker::record`], returns `{"recorded": true, "exec": <execution>}`.
pub fn record_tool() -> FunctionTool<Worker> {
    let schema = serde_json::json!({"type": "object", "properties": {"note": {"type": "string"}}});
    FunctionTool::new(
        ToolSpec::new("record", "Records a note.", schema),
        |ctx: RunContext<Worker>, _args| async move {
            let pid = std::process::id();
            let exec = format!("{pid}.{}", EXECUTIONS.fetch_add(1, Ordering::SeqCst));
            let line = format!(
                "{} {} {pid} {exec} {}",
                ctx.run_id(),
                ctx.call_id().unwrap_or("-"),
                now_us()
            );
            ctx.context()
                .ledger
                .line(&line)
                .map_err(|_| ToolError::execution("ledger_unwritable"))?;
            tokio::time::sleep(ctx.context().record).await;
            Ok(serde_json::json!({"recorded": true, "exec": exec}))
        },
    )
}

/// Logs `started` events.
struct StartedSink {
    events: LineFile,
}

#[async_trait]
impl EventSink for StartedSink {
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        if let AgentEvent::RunStarted { run_id, resumed, .. } = event {
            self.events.event("started", run_id, &format!("resumed={resumed}"));
        }
        Ok(())
    }

    fn wants_deltas(&self) -> bool {
        false
    }
}

/// A conversation store that logs its successful fenced appends.
struct LoggedConversations {
    inner: Arc<dyn ConversationStore>,
    events: LineFile,
}

#[async_trait]
impl ConversationStore for LoggedConversations {
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError> {
        self.inner.append(session_id, messages).await
    }
    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        self.inner.load(session_id).await
    }
    async fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.delete(session_id).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        self.inner.list_sessions().await
    }
    async fn append_fenced(&self, session_id: &str, messages: &[Message], fence: &Fence) -> Result<(), StoreError> {
        self.inner.append_fenced(session_id, messages, fence).await?;
        self.events.event("append", &run_of(messages), "");
        Ok(())
    }
    async fn delete_fenced(&self, session_id: &str, fence: &Fence) -> Result<(), StoreError> {
        self.inner.delete_fenced(session_id, fence).await
    }
}

/// A checkpoint store that logs its successful fenced saves and deletes.
struct LoggedCheckpoints {
    inner: Arc<dyn CheckpointStore>,
    events: LineFile,
}

#[async_trait]
impl CheckpointStore for LoggedCheckpoints {
    async fn save(&self, run_id: &str, meta: &CheckpointMeta, state: &[u8]) -> Result<(), StoreError> {
        self.inner.save(run_id, meta, state).await
    }
    async fn load(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> Result<(), StoreError> {
        self.inner.delete(run_id).await
    }
    async fn list(&self, query: &CheckpointQuery) -> Result<CheckpointPage, StoreError> {
        self.inner.list(query).await
    }
    async fn purge_expired(&self) -> Result<u64, StoreError> {
        self.inner.purge_expired().await
    }
    async fn save_fenced(
        &self,
        run_id: &str,
        meta: &CheckpointMeta,
        state: &[u8],
        fence: &Fence,
    ) -> Result<(), StoreError> {
        self.inner.save_fenced(run_id, meta, state, fence).await?;
        self.events.event("save", run_id, "");
        Ok(())
    }
    async fn delete_fenced(&self, run_id: &str, fence: &Fence) -> Result<(), StoreError> {
        self.inner.delete_fenced(run_id, fence).await?;
        self.events.event("delete", run_id, "");
        Ok(())
    }
}

/// How the worker's agent is set up.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// This worker's holder name in the leases.
    pub holder: String,
    /// The leases' time to live.
    pub ttl: Duration,
    /// How long a run waits for a busy session.
    pub wait: Duration,
    /// How long the model takes per reply.
    pub model: Duration,
    /// The events file.
    pub events: PathBuf,
}

/// The worker's agent on `stores`: the chaos model, `record`, session leases, and every store
/// write and run start logged to the events file.
pub fn agent(config: &AgentConfig, stores: &Stores) -> Result<Agent<Worker>, AgentError> {
    let events = LineFile::open(&config.events).map_err(|e| AgentError::Configuration {
        message: format!("cannot open the events file: {e}"),
    })?;
    Agent::builder(ChaosModel::new(config.model, events.clone()))
        .context::<Worker>()
        .name(AGENT_NAME)
        .instructions("You are a test agent.")
        .tool(record_tool())
        .conversation_store(Arc::new(LoggedConversations {
            inner: Arc::clone(&stores.conversations),
            events: events.clone(),
        }))
        .checkpoint_store(Arc::new(LoggedCheckpoints {
            inner: Arc::clone(&stores.checkpoints),
            events: events.clone(),
        }))
        .session_leases(
            Arc::clone(&stores.leases),
            LeaseOptions::new()
                .ttl(config.ttl)
                .wait(config.wait)
                .holder(config.holder.clone()),
        )
        .event_sink(Arc::new(StartedSink { events }))
        .build()
        .map_err(AgentError::from)
}

/// A short name for an agent error, for the worker's `failed` lines.
pub fn error_kind(error: &AgentError) -> &'static str {
    match error {
        AgentError::LeaseLost { .. } => "lease_lost",
        AgentError::SessionBusy { .. } => "session_busy",
        AgentError::Store { .. } => "store",
        _ => "other",
    }
}
