//! From a [`Config`] to a running [`Agent`]: this is how the modu crates compose.
//!
//! ```text
//! model    modu-openai OpenAiClient | modu-ollama OllamaClient      (ChatModel)
//! store    modu-sqlite | modu-redis | modu-postgres | modu-core in-memory            (ConversationStore + CheckpointStore)
//! memory   modu-core KeepAll | RecentTurns | TokenBudgetPolicy       (ConversationMemoryPolicy)
//! tools    modu-mcp McpToolProvider over an McpConnector             (ToolProvider, approvals)
//! skills   modu-skills SkillsProvider over a SkillRegistry           (ContextProvider + ToolProvider)
//! policy   modu-core standard loop | PlanAndExecutePolicy             (DecisionPolicy)
//! ```
//!
//! Each piece is a trait object the [`modu::AgentBuilder`] takes; nothing here is
//! specific to the command line.

use std::sync::Arc;
use std::time::Duration;

use modu::mcp::oauth::{InMemoryTokenStore, McpTokenStore};
use modu::mcp::{McpConfig, McpConnector, McpToolProvider};
use modu::ollama::OllamaClient;
use modu::openai::OpenAiClient;
use modu::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
use modu::skills::{SkillRegistry, SkillsProvider};
use modu::{
    Agent, AgentRequest, ConversationMemoryPolicy, KeepAll, ModelSettings, RecentTurns, RetryConfig, RunLimits,
    TokenBudget, TokenBudgetPolicy,
};
use modu::{
    ApproximateTokenCounter, ChatModel, CheckpointStore, ConversationStore, EventSink, InMemoryCheckpointStore,
    InMemoryConversationStore, ModelError,
};

use crate::commands::Failure;
use crate::config::{
    Config, LimitsSection, McpSection, McpToolsMode, MemoryPolicyKind, MemorySection, ModelSection, PolicyKind,
    Provider, SkillsSection, StoreKind, StoreSection,
};

/// The configured model client.
#[derive(Clone, Debug)]
pub enum Model {
    /// An OpenAI-compatible server.
    Openai(OpenAiClient),
    /// An Ollama server.
    Ollama(OllamaClient),
}

impl Model {
    /// The server's base URL, for messages: its user info (a password) shown as `***`.
    pub fn base_url(&self) -> std::borrow::Cow<'_, str> {
        modu::redact::display_url(match self {
            Model::Openai(c) => c.base_url(),
            Model::Ollama(c) => c.base_url(),
        })
    }

    /// The client as the agent holds it.
    pub fn chat_model(&self) -> Arc<dyn ChatModel> {
        match self {
            Model::Openai(c) => Arc::new(c.clone()),
            Model::Ollama(c) => Arc::new(c.clone()),
        }
    }

    /// Lists the server's models (`GET /v1/models`, or `/api/tags` for Ollama).
    pub async fn list_models(&self) -> Result<Vec<String>, ModelError> {
        match self {
            Model::Openai(c) => Ok(c.list_models().await?.into_iter().map(|m| m.id).collect()),
            Model::Ollama(c) => Ok(c.list_models().await?.into_iter().map(|m| m.name).collect()),
        }
    }

    /// Whether `names` (from [`Model::list_models`]) holds the configured model. Ollama lists
    /// its models with their tag (`llama3.2:latest`); a name without one means `:latest`.
    pub fn is_listed(&self, names: &[String]) -> bool {
        let name = self.name();
        match self {
            Model::Openai(_) => names.contains(&name),
            Model::Ollama(_) => {
                let tagged = |n: &str| {
                    let last = n.rsplit('/').next().unwrap_or(n);
                    if last.contains(':') {
                        n.to_owned()
                    } else {
                        format!("{n}:latest")
                    }
                };
                let name = tagged(&name);
                names.iter().any(|n| tagged(n) == name)
            }
        }
    }

    /// The model name requests carry.
    pub fn name(&self) -> String {
        match self {
            Model::Openai(c) => c.model().to_owned(),
            Model::Ollama(c) => c.model_name().to_owned(),
        }
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn seconds(value: f64, key: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("model.{key} must be a positive number of seconds"))
}

/// The model client: `[model]`, with `OPENAI_BASE_URL` / `OPENAI_MODEL` / `OPENAI_API_KEY` or
/// `OLLAMA_HOST` / `OLLAMA_MODEL` filling what the file leaves out.
pub fn model(section: &ModelSection) -> Result<Model, String> {
    let provider = section.provider.unwrap_or_else(|| {
        // Ollama only when nothing points at an OpenAI-compatible server: not the file's
        // base_url, not the OPENAI_* variables.
        if section.base_url.is_none()
            && var("OPENAI_BASE_URL").is_none()
            && var("OPENAI_MODEL").is_none()
            && var("OLLAMA_HOST").is_some()
        {
            Provider::Ollama
        } else {
            Provider::Openai
        }
    });
    // A variable the file names must hold the key: a mistyped or unexported one would
    // otherwise send no key, and the server's 401 would not say why. Left out, OPENAI_API_KEY
    // is optional (local servers take no key).
    let api_key = match &section.api_key_env {
        Some(name) => Some(var(name).ok_or_else(|| {
            format!(
                "[model] api_key_env names {name:?}, which is not set (or empty): set it to the API key, or remove api_key_env to send no key"
            )
        })?),
        None if provider == Provider::Openai => var("OPENAI_API_KEY"),
        None => None,
    };
    let connect = section
        .connect_timeout_seconds
        .map(|s| seconds(s, "connect_timeout_seconds"))
        .transpose()?;
    let read = section
        .read_timeout_seconds
        .map(|s| seconds(s, "read_timeout_seconds"))
        .transpose()?;
    let request = section
        .request_timeout_seconds
        .map(|s| seconds(s, "request_timeout_seconds"))
        .transpose()?;
    match provider {
        Provider::Openai => {
            let base_url = section
                .base_url
                .clone()
                .or_else(|| var("OPENAI_BASE_URL"))
                .unwrap_or_else(|| "https://api.openai.com/v1".into());
            let name =
                section.model.clone().or_else(|| var("OPENAI_MODEL")).ok_or(
                    "no model configured: set `model` in [model] of modu.toml, MODU_MODEL__MODEL or OPENAI_MODEL",
                )?;
            let mut b = OpenAiClient::builder().base_url(base_url).model(name);
            if let Some(key) = api_key {
                b = b.api_key(key);
            }
            if let Some(d) = connect {
                b = b.connect_timeout(d);
            }
            if read.is_some() {
                b = b.read_timeout(read);
            }
            if request.is_some() {
                b = b.request_timeout(request);
            }
            b.build().map(Model::Openai).map_err(|e| format!("[model]: {e}"))
        }
        Provider::Ollama => {
            let mut b = OllamaClient::builder_from_env();
            if let Some(url) = &section.base_url {
                b = b.base_url(url.clone());
            }
            let name =
                section.model.clone().or_else(|| var("OLLAMA_MODEL")).ok_or(
                    "no model configured: set `model` in [model] of modu.toml, MODU_MODEL__MODEL or OLLAMA_MODEL",
                )?;
            b = b.model(name);
            if let Some(key) = api_key {
                b = b.api_key(key);
            }
            if let Some(d) = connect {
                b = b.connect_timeout(d);
            }
            if read.is_some() {
                b = b.read_timeout(read);
            }
            if request.is_some() {
                b = b.request_timeout(request);
            }
            b.build().map(Model::Ollama).map_err(|e| format!("[model]: {e}"))
        }
    }
}

/// Where conversations and checkpoints are kept.
#[derive(Clone)]
pub struct Stores {
    /// Sessions.
    pub conversations: Arc<dyn ConversationStore>,
    /// Unfinished runs.
    pub checkpoints: Arc<dyn CheckpointStore>,
    /// "sqlite .modu/modu.db", for messages.
    pub description: String,
    /// Whether what is stored outlives this command (not the memory store): only then can
    /// `modu resume` continue a run later.
    pub kept: bool,
}

/// Opens the configured store to read or delete what it holds: as [`stores`], but a SQLite
/// file that does not exist yet is not created (`modu sessions list` in the wrong folder, or
/// with a mistyped `path`, would leave a new `.modu/` behind); it reads as an empty store.
pub async fn existing_stores(section: &StoreSection) -> Result<Stores, String> {
    if section.kind == StoreKind::Sqlite {
        let path = section.sqlite_path();
        // An error (a folder it may not read) falls through to `stores`, which names it.
        if matches!(tokio::fs::try_exists(&path).await, Ok(false)) {
            return Ok(Stores {
                conversations: Arc::new(InMemoryConversationStore::new()),
                checkpoints: Arc::new(InMemoryCheckpointStore::new()),
                description: format!("sqlite {}", path.display()),
                kept: true,
            });
        }
    }
    stores(section).await
}

/// Opens the configured store (creating the SQLite file and its folder when needed).
pub async fn stores(section: &StoreSection) -> Result<Stores, String> {
    let ttl = section.ttl_seconds.map(Duration::from_secs);
    match section.kind {
        StoreKind::Memory => {
            let (c, k) = match ttl {
                Some(t) => (
                    InMemoryConversationStore::with_ttl(t),
                    InMemoryCheckpointStore::with_ttl(t),
                ),
                None => (InMemoryConversationStore::new(), InMemoryCheckpointStore::new()),
            };
            Ok(Stores {
                conversations: Arc::new(c),
                checkpoints: Arc::new(k),
                description: "memory".into(),
                kept: false,
            })
        }
        StoreKind::Sqlite => {
            let path = section.sqlite_path();
            let pool = modu::sqlite::open(&path).await.map_err(|e| e.to_string())?;
            let mut c = modu::sqlite::SqliteConversationStore::from_pool(pool.clone())
                .await
                .map_err(|e| e.to_string())?;
            let mut k = modu::sqlite::SqliteCheckpointStore::from_pool(pool)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(t) = ttl {
                c = c.with_ttl(t);
                k = k.with_ttl(t);
            }
            Ok(Stores {
                conversations: Arc::new(c),
                checkpoints: Arc::new(k),
                description: format!("sqlite {}", path.display()),
                kept: true,
            })
        }
        StoreKind::Redis => {
            let url = section.url.clone().unwrap_or_default();
            let conn = modu::redis::connect(&url).await.map_err(|e| e.to_string())?;
            let mut c = modu::redis::RedisConversationStore::new(conn.clone());
            let mut k = modu::redis::RedisCheckpointStore::new(conn);
            if let Some(p) = &section.prefix {
                c = c.with_prefix(p.clone());
                k = k.with_prefix(p.clone());
            }
            if let Some(t) = ttl {
                c = c.with_ttl(t);
                k = k.with_ttl(t);
            }
            Ok(Stores {
                conversations: Arc::new(c),
                checkpoints: Arc::new(k),
                description: format!("redis {}", modu::redis::redact_credentials(&url)),
                kept: true,
            })
        }
        StoreKind::Postgres => {
            let url = section.url.clone().unwrap_or_default();
            let stores = match &section.schema {
                Some(schema) => modu::postgres::PostgresStores::connect_in_schema(&url, schema).await,
                None => modu::postgres::PostgresStores::connect(&url).await,
            }
            .map_err(|e| e.to_string())?;
            let (mut c, mut k) = (stores.conversations, stores.checkpoints);
            if let Some(t) = ttl {
                c = c.with_ttl(t);
                k = k.with_ttl(t);
            }
            Ok(Stores {
                conversations: Arc::new(c),
                checkpoints: Arc::new(k),
                description: format!("postgres {}", modu::postgres::redact_credentials(&url)),
                kept: true,
            })
        }
    }
}

/// The memory policy.
pub fn memory_policy(section: &MemorySection) -> Arc<dyn ConversationMemoryPolicy> {
    match section.policy {
        MemoryPolicyKind::KeepAll => Arc::new(KeepAll),
        MemoryPolicyKind::RecentTurns => Arc::new(RecentTurns::new(section.max_turns)),
        MemoryPolicyKind::TokenBudget => Arc::new(TokenBudgetPolicy::new(
            TokenBudget::new(
                section.context_window_tokens,
                section.reserved_output_tokens,
                section.safety_margin_tokens,
            ),
            Arc::new(ApproximateTokenCounter::default()),
        )),
    }
}

/// Run limits and model-call retries.
pub fn limits(section: &LimitsSection) -> Result<(RunLimits, RetryConfig), String> {
    let mut limits = RunLimits::default();
    if let Some(n) = section.max_turns {
        limits = limits.max_turns(n);
    }
    if let Some(n) = section.max_tool_calls {
        limits = limits.max_tool_calls(n);
    }
    if let Some(n) = section.max_steps {
        limits = limits.max_steps(n);
    }
    if let Some(n) = section.max_step_attempts {
        limits = limits.max_step_attempts(n);
    }
    if let Some(n) = section.max_replans {
        limits = limits.max_replans(n);
    }
    if let Some(n) = section.max_tool_repair_attempts {
        limits = limits.max_tool_repair_attempts(n);
    }
    if let Some(s) = section.timeout_seconds {
        let timeout = if s == 0.0 {
            None
        } else {
            Some(
                Duration::try_from_secs_f64(s)
                    .map_err(|_| "limits.timeout_seconds must be a positive number (0 for none)".to_owned())?,
            )
        };
        limits = limits.timeout(timeout);
    }
    let retry = section
        .retry_attempts
        .map_or_else(RetryConfig::default, RetryConfig::new);
    Ok((limits, retry))
}

/// The MCP connector, when servers are configured. Servers with `auth.oauth` get the
/// authorization-code flow with a loopback redirect ([`crate::oauth`]) and their tokens in the
/// configured store's MCP token store.
pub async fn mcp_connector(section: &McpSection, store: &StoreSection) -> Result<Option<Arc<McpConnector>>, String> {
    if section.servers.is_empty() {
        return Ok(None);
    }
    let mut config = McpConfig::new(section.servers.clone()).map_err(|e| format!("mcp.servers: {e}"))?;
    if let Some(s) = section.connect_timeout_seconds {
        let d = Duration::try_from_secs_f64(s)
            .map_err(|_| "mcp.connect_timeout_seconds must be a positive number".to_owned())?;
        config = config.with_connect_timeout(d);
    }
    let mut connector = McpConnector::new(config).map_err(|e| format!("mcp: {e}"))?;
    let wants_oauth = section
        .servers
        .iter()
        .any(|s| s.auth.as_ref().is_some_and(|a| a.oauth.is_some()));
    if wants_oauth {
        let (consent, redirect) = crate::oauth::loopback(section.oauth_redirect_port)?;
        let tokens = mcp_token_store(store).await?;
        connector = connector
            .with_configured_oauth(&redirect, consent, tokens)
            .map_err(|e| format!("mcp: {e}"))?;
    }
    Ok(Some(Arc::new(connector)))
}

/// Where MCP OAuth tokens are kept: the configured store's token store.
async fn mcp_token_store(section: &StoreSection) -> Result<Arc<dyn McpTokenStore>, String> {
    let failed = |e: modu::StoreError| format!("the MCP token store: {e}");
    Ok(match section.kind {
        StoreKind::Memory => Arc::new(InMemoryTokenStore::new()),
        StoreKind::Sqlite => {
            let path = section.sqlite_path();
            Arc::new(modu::sqlite::SqliteMcpTokenStore::open(&path).await.map_err(failed)?)
        }
        StoreKind::Redis => {
            let mut tokens = modu::redis::RedisMcpTokenStore::connect(section.url.as_deref().unwrap_or_default())
                .await
                .map_err(failed)?;
            // Beside the conversations and checkpoints, under the same prefix.
            if let Some(prefix) = &section.prefix {
                tokens = tokens.with_prefix(prefix.clone());
            }
            Arc::new(tokens)
        }
        StoreKind::Postgres => {
            let url = section.url.as_deref().unwrap_or_default();
            // In the configured schema, with the conversations and checkpoints.
            let tokens = match &section.schema {
                Some(schema) => {
                    let pool = modu::postgres::connect_in_schema(url, schema).await.map_err(failed)?;
                    modu::postgres::PostgresMcpTokenStore::from_pool(pool).await
                }
                None => modu::postgres::PostgresMcpTokenStore::connect(url).await,
            };
            Arc::new(tokens.map_err(failed)?)
        }
    })
}

/// The MCP tool provider: the two meta tools, with approvals for `require_approval`.
pub fn mcp_provider(connector: Arc<McpConnector>, section: &McpSection, policy: PolicyKind) -> McpToolProvider<()> {
    let mut provider = McpToolProvider::new(connector);
    // A strict plan names tools per step: it needs the external tools themselves.
    let default_mode = match policy {
        PolicyKind::PlanAndExecute => McpToolsMode::Direct,
        _ => McpToolsMode::Search,
    };
    if section.tools.unwrap_or(default_mode) == McpToolsMode::Direct {
        provider = provider.with_direct_tools();
    }
    if section.require_approval.is_empty() {
        return provider;
    }
    let names = section.require_approval.clone();
    provider.with_approval(move |_ctx, call| names.iter().any(|n| n == "*" || *n == call.tool_name))
}

/// The skills provider, when a catalog is configured.
pub fn skills(section: &SkillsSection) -> Result<Option<SkillsProvider>, String> {
    let Some(path) = &section.path else {
        return Ok(None);
    };
    let registry = match &section.lockfile {
        Some(lock) => SkillRegistry::from_paths_with_lockfile([path], lock),
        None => SkillRegistry::from_paths([path]),
    }
    .map_err(|e| format!("skills: {e}"))?;
    Ok(Some(SkillsProvider::new(registry)))
}

/// Everything a command needs to run the agent.
pub struct Built {
    /// The agent.
    pub agent: Agent<()>,
    /// The model client (for messages and `doctor`).
    pub model: Model,
    /// The stores the agent uses.
    pub stores: Stores,
    /// Skills active in every run.
    pub active_skills: Vec<String>,
}

/// Builds the agent the configuration describes. A configuration that cannot work is a
/// [`Failure::Usage`] (exit 2); a store or skill catalog that cannot be opened is a
/// [`Failure::Invalid`] (exit 1).
/// `sink` receives every event (the command line passes one that prints tool calls).
pub async fn agent(config: &Config, sink: Option<Arc<dyn EventSink>>) -> Result<Built, Failure> {
    let model = model(&config.model).map_err(Failure::Usage)?;
    let (limits, retry) = limits(&config.limits).map_err(Failure::Usage)?;
    let connector = mcp_connector(&config.mcp, &config.store)
        .await
        .map_err(Failure::Usage)?;
    let skills = skills(&config.skills).map_err(Failure::Invalid)?;
    let stores = stores(&config.store).await.map_err(Failure::Invalid)?;
    let mut settings = ModelSettings::default();
    settings.temperature = config.model.temperature;
    settings.top_p = config.model.top_p;
    settings.max_tokens = config.model.max_tokens;

    let mut builder = Agent::builder(model.chat_model())
        .fix_types()
        .name(config.agent.name.clone())
        .conversation_store(Arc::clone(&stores.conversations))
        .checkpoint_store(Arc::clone(&stores.checkpoints))
        .memory_policy(memory_policy(&config.memory))
        .limits(limits)
        .retry(retry)
        .model_settings(settings);
    if let Some(sink) = sink {
        builder = builder.event_sink(sink);
    }
    if let Some(text) = &config.agent.instructions {
        builder = builder.instructions(text.clone());
    }
    if config.agent.policy == PolicyKind::PlanAndExecute {
        // The planner is the agent's own model; [limits] max_steps bounds the plan.
        builder = builder.decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()));
    }
    if let Some(connector) = connector {
        builder = builder.tool_provider(mcp_provider(connector, &config.mcp, config.agent.policy));
    }
    if let Some(skills) = skills {
        builder = skills.install(builder);
    }
    let agent = builder
        .build()
        .map_err(|e| Failure::Usage(modu::AgentError::from(e).to_string()))?;
    Ok(Built {
        agent,
        model,
        stores,
        active_skills: config.skills.active.clone(),
    })
}

impl Built {
    /// A request for one user message in a session, with the configured skills.
    pub fn request(&self, input: &str, session: &str) -> AgentRequest<()> {
        let mut request = AgentRequest::new((), input).session(session);
        if !self.active_skills.is_empty() {
            request = request.metadata("skills", serde_json::json!(self.active_skills));
        }
        request
    }
}
