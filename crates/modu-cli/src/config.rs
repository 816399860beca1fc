//! `modu.toml`: the [`Config`] every agent command reads, and its `MODU_…` overrides.
//!
//! Loading has three layers, later ones winning:
//! 1. built-in defaults (each section's `Default`, plus the model read from `OPENAI_*` /
//!    `OLLAMA_HOST` when the file does not set it — see [`crate::build`]);
//! 2. the TOML file: `--config FILE`, else `./modu.toml` when it exists;
//! 3. environment variables `MODU_<TABLE>__<KEY>` (two underscores between table and key, as
//!    `modu-mcp`'s `MODU_MCP__SERVERS`): `MODU_MODEL__BASE_URL=http://…`, `MODU_STORE__KIND=memory`.
//!    A value is read as a TOML value (`8`, `true`, `["a"]`, `{ … }`), else as JSON (so
//!    `MODU_MCP__SERVERS` takes the same JSON array as `modu-mcp`), else as a plain string.
//!
//! Every table rejects unknown keys; errors are one line naming the file (or the variable) and
//! the key.
//!
//! Hand-written rather than figment or the `config` crate: the layering is a table merge of a few
//! lines, and the rest (a TOML error's line and column, the variable named in an error, TOML or
//! JSON values in variables) neither crate does, so the code would not shrink. figment would also
//! bring a second `toml` (0.8) and a parser generator, and reads only the process environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use modu::mcp::McpServerConfig;
use serde::Deserialize;

/// The default config file, looked up in the working directory.
pub const DEFAULT_FILE: &str = "modu.toml";
/// The default SQLite database.
pub const DEFAULT_SQLITE_PATH: &str = ".modu/modu.db";
/// The prefix of override variables.
pub const ENV_PREFIX: &str = "MODU_";

/// The whole configuration.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[agent]`: name and instructions.
    pub agent: AgentSection,
    /// `[model]`: which model server and model.
    pub model: ModelSection,
    /// `[store]`: where sessions and checkpoints live.
    pub store: StoreSection,
    /// `[memory]`: how much history the model sees.
    pub memory: MemorySection,
    /// `[limits]`: run limits and retries.
    pub limits: LimitsSection,
    /// `[mcp]`: MCP servers (the `modu-mcp` server schema) and approvals.
    pub mcp: McpSection,
    /// `[skills]`: an Agent Skills catalog.
    pub skills: SkillsSection,
    /// `[output]`: how `run` prints.
    pub output: OutputSection,
}

/// `[agent]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// The agent's name (in results and events).
    pub name: String,
    /// The system instructions.
    pub instructions: Option<String>,
    /// How the agent decides what to do next.
    pub policy: PolicyKind,
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            name: "modu".into(),
            instructions: None,
            policy: PolicyKind::Standard,
        }
    }
}

/// `agent.policy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// Ask the model, run the tools it calls, repeat (the default).
    #[default]
    Standard,
    /// Strict Plan-and-Execute: a plan, steps with their own tools, validated step results.
    PlanAndExecute,
}

impl PolicyKind {
    /// The name the configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Standard => "standard",
            PolicyKind::PlanAndExecute => "plan_and_execute",
        }
    }
}

/// The model server's API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI-compatible `/v1/chat/completions` (vLLM, llama.cpp, OpenAI).
    Openai,
    /// Ollama's native `/api/chat`.
    Ollama,
}

/// `[model]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSection {
    /// `openai` or `ollama`; default: `openai`, or `ollama` when only `OLLAMA_HOST` is set.
    pub provider: Option<Provider>,
    /// The server's base URL (`http://127.0.0.1:8000/v1`); default `OPENAI_BASE_URL` or
    /// `OLLAMA_HOST`.
    pub base_url: Option<String>,
    /// The model name; default `OPENAI_MODEL` (or `OLLAMA_MODEL`).
    pub model: Option<String>,
    /// The environment variable holding the API key; when named here it must be set. Default:
    /// `OPENAI_API_KEY` for openai, sent when set.
    pub api_key_env: Option<String>,
    /// Seconds to open a connection.
    pub connect_timeout_seconds: Option<f64>,
    /// Longest silence while reading an answer, in seconds.
    pub read_timeout_seconds: Option<f64>,
    /// Longest time for one whole request, in seconds.
    pub request_timeout_seconds: Option<f64>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling's probability mass.
    pub top_p: Option<f32>,
    /// Most tokens per answer.
    pub max_tokens: Option<u32>,
}

/// Where sessions and checkpoints live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// In process memory (lost when the command ends).
    Memory,
    /// A SQLite file (the default).
    #[default]
    Sqlite,
    /// A Redis server.
    Redis,
    /// A PostgreSQL server.
    Postgres,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// `memory`, `sqlite` (default), `redis` or `postgres`.
    pub kind: StoreKind,
    /// The SQLite file (default `.modu/modu.db`).
    pub path: Option<PathBuf>,
    /// The server URL, required for `redis` (`redis://127.0.0.1:6379/`) and `postgres`
    /// (`postgres://user@127.0.0.1:5432/db`).
    pub url: Option<String>,
    /// The Redis key prefix.
    pub prefix: Option<String>,
    /// The PostgreSQL schema of the tables (created if missing; default: the `search_path`).
    pub schema: Option<String>,
    /// Sessions and checkpoints expire this long after their last use, in seconds.
    pub ttl_seconds: Option<u64>,
}

impl StoreSection {
    /// The SQLite file: `path`, or [`DEFAULT_SQLITE_PATH`].
    pub fn sqlite_path(&self) -> PathBuf {
        self.path.clone().unwrap_or_else(|| DEFAULT_SQLITE_PATH.into())
    }
}

/// The memory policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryPolicyKind {
    /// The whole history (the default).
    #[default]
    KeepAll,
    /// The last `max_turns` turns.
    RecentTurns,
    /// As many recent turns as fit a token budget.
    TokenBudget,
}

/// `[memory]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySection {
    /// `keep_all` (default), `recent_turns` or `token_budget`.
    pub policy: MemoryPolicyKind,
    /// Turns kept by `recent_turns` (default 20).
    pub max_turns: usize,
    /// The model's context window, for `token_budget` (default 8192).
    pub context_window_tokens: u64,
    /// Tokens kept free for the answer (default 1024).
    pub reserved_output_tokens: u64,
    /// A margin for counting errors (default 256).
    pub safety_margin_tokens: u64,
}

impl Default for MemorySection {
    fn default() -> Self {
        MemorySection {
            policy: MemoryPolicyKind::KeepAll,
            max_turns: 20,
            context_window_tokens: 8192,
            reserved_output_tokens: 1024,
            safety_margin_tokens: 256,
        }
    }
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Model turns that call tools, at most (default 16).
    pub max_turns: Option<u32>,
    /// Tool calls per run, at most (default 64).
    pub max_tool_calls: Option<u32>,
    /// The run's timeout in seconds (default 300; 0 for none).
    pub timeout_seconds: Option<f64>,
    /// Attempts per model call, the first included (default 3).
    pub retry_attempts: Option<u32>,
    /// Plan-and-Execute: steps in a plan, at most (default 8).
    pub max_steps: Option<u32>,
    /// Plan-and-Execute: step-result attempts per step (default 2).
    pub max_step_attempts: Option<u32>,
    /// Plan-and-Execute: plan revisions after tool failures (default 1).
    pub max_replans: Option<u32>,
    /// Plan-and-Execute: corrected-argument repair calls per step (default 1).
    pub max_tool_repair_attempts: Option<u32>,
}

/// `[mcp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSection {
    /// The servers, in `modu-mcp`'s schema (`[[mcp.servers]]` tables).
    pub servers: Vec<McpServerConfig>,
    /// Seconds to open a server (default 30).
    pub connect_timeout_seconds: Option<f64>,
    /// External tool names (`server__tool`) that need a person's approval; `"*"` for all.
    pub require_approval: Vec<String>,
    /// How the model sees the servers' tools (default: `search`, or `direct` with
    /// `policy = "plan_and_execute"`).
    pub tools: Option<McpToolsMode>,
    /// The loopback port the OAuth redirect comes back to, for servers with `auth.oauth`
    /// (default: a free port, which suits dynamic registration; a pre-registered client needs
    /// the port it was registered with).
    pub oauth_redirect_port: Option<u16>,
}

/// `mcp.tools`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpToolsMode {
    /// Two meta tools, `mcp_search_tools` and `mcp_call_tool` (lazy discovery; any catalog size).
    Search,
    /// Every tool under its external name (`server__tool`) with its own schema.
    Direct,
}

/// `[skills]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillsSection {
    /// A catalog folder (skills are loaded when set).
    pub path: Option<PathBuf>,
    /// A lockfile the catalog must match (`modu skills lock`).
    pub lockfile: Option<PathBuf>,
    /// Skills active in every run.
    pub active: Vec<String>,
}

/// How `run` prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// The answer's text, streamed (the default).
    #[default]
    Text,
    /// The `RunOutcome` as JSON.
    Json,
}

/// `[output]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSection {
    /// `text` (default) or `json`.
    pub mode: OutputMode,
}

/// A configuration and where it came from.
#[derive(Debug)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

impl Loaded {
    /// "modu.toml" or "built-in defaults", for messages.
    pub fn source(&self) -> String {
        match &self.file {
            Some(f) => f.display().to_string(),
            None => "built-in defaults".into(),
        }
    }
}

/// Loads the configuration: `explicit` (must exist), else `./modu.toml` if present, else
/// defaults; then the `MODU_` variables of `env`. The error is one line without `error: `.
pub fn load(explicit: Option<&Path>, env: &[(String, String)]) -> Result<Loaded, String> {
    let file = match explicit {
        Some(path) => Some(path.to_path_buf()),
        None => Some(PathBuf::from(DEFAULT_FILE)).filter(|p| p.is_file()),
    };
    let mut table = match &file {
        Some(path) => read_table(path)?,
        None => toml::Table::new(),
    };
    let origin = file
        .as_ref()
        .map_or_else(|| "built-in defaults".to_owned(), |p| p.display().to_string());
    let overrides = apply_env(&mut table, env)?;
    let config: Config = serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let path = e.path().to_string();
        let who = overrides
            .iter()
            .find(|(key, _)| {
                path == **key || path.starts_with(&format!("{key}.")) || path.starts_with(&format!("{key}["))
            })
            .map_or(origin.clone(), |(_, var)| var.clone());
        format!("{who}: {}", describe(&path, e.inner().message()))
    })?;
    check(&config).map_err(|m| format!("{origin}: {m}"))?;
    Ok(Loaded { config, file })
}

fn read_table(path: &Path) -> Result<toml::Table, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read the config file: {e}"))?;
    text.parse::<toml::Table>().map_err(|e| {
        let message = e.message().trim_end().replace('\n', "; ");
        match e.span() {
            Some(span) => {
                let (line, column) = line_column(&text, span.start);
                format!("{name}: invalid TOML at line {line}, column {column}: {message}")
            }
            None => format!("{name}: invalid TOML: {message}"),
        }
    })
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Writes every `MODU_<TABLE>__<KEY>` variable into the table; returns `dotted key → variable`.
fn apply_env(table: &mut toml::Table, env: &[(String, String)]) -> Result<BTreeMap<String, String>, String> {
    let mut applied = BTreeMap::new();
    for (var, raw) in env {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if !rest.contains("__") {
            continue; // MODU_MCP_EVERYTHING and friends are not config
        }
        let segments: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        if segments.len() != 2 || segments.iter().any(String::is_empty) {
            return Err(format!(
                "{var}: expected MODU_<TABLE>__<KEY>, e.g. MODU_MODEL__BASE_URL"
            ));
        }
        let (section, key) = (&segments[0], &segments[1]);
        let entry = table
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(inner) = entry else {
            return Err(format!("{var}: `{section}` is not a table"));
        };
        inner.insert(key.clone(), env_value(raw));
        applied.insert(format!("{section}.{key}"), var.clone());
    }
    Ok(applied)
}

/// A variable's value: TOML, else JSON, else the string itself.
fn env_value(raw: &str) -> toml::Value {
    if let Ok(mut t) = format!("v = {raw}").parse::<toml::Table>()
        && let Some(v) = t.remove("v")
    {
        return v;
    }
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(raw)
        && let Ok(v) = toml::Value::try_from(json)
    {
        return v;
    }
    toml::Value::String(raw.to_owned())
}

/// One line for a deserialisation error at `path`.
fn describe(path: &str, message: &str) -> String {
    let message = message.trim_end().replace('\n', "; ");
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((key, _)) = rest.split_once('`')
    {
        // The path ends with the unknown key itself.
        let parent = path.strip_suffix(key).map(|p| p.trim_end_matches('.')).unwrap_or(path);
        return if parent.is_empty() || parent == "." {
            format!("unknown table `{key}` (expected one of {})", TABLES.join(", "))
        } else {
            format!("unknown key `{key}` in [{parent}]")
        };
    }
    if path.is_empty() || path == "." {
        message
    } else {
        format!("`{path}`: {message}")
    }
}

const TABLES: [&str; 8] = ["agent", "model", "store", "memory", "limits", "mcp", "skills", "output"];

/// Checks that need more than types.
fn check(config: &Config) -> Result<(), String> {
    for (kind, name) in [(StoreKind::Redis, "redis"), (StoreKind::Postgres, "postgres")] {
        if config.store.kind == kind && config.store.url.is_none() {
            return Err(format!("store.kind is `{name}` but store.url is not set"));
        }
    }
    modu::mcp::McpConfig::new(config.mcp.servers.clone()).map_err(|e| format!("mcp.servers: {e}"))?;
    for name in &config.mcp.require_approval {
        if name != "*" && !name.contains("__") {
            return Err(format!(
                "mcp.require_approval: `{name}` is not an external tool name (`server__tool`, or \"*\")"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn load_text(text: &str, vars: &[(&str, &str)]) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("modu.toml");
        std::fs::write(&path, text).unwrap();
        load(Some(&path), &env(vars))
            .map(|l| l.config)
            .map_err(|e| e.replace(&path.display().to_string(), "modu.toml"))
    }

    #[test]
    fn unknown_keys_name_their_table() {
        assert_eq!(
            load_text("[model]\nfoo = 1\n", &[]).unwrap_err(),
            "modu.toml: unknown key `foo` in [model]"
        );
        assert!(
            load_text("[modle]\n", &[])
                .unwrap_err()
                .starts_with("modu.toml: unknown table `modle` (expected one of agent, model")
        );
        assert_eq!(
            load_text(
                "[[mcp.servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\nbogus = 1\n",
                &[]
            )
            .unwrap_err(),
            "modu.toml: unknown key `bogus` in [mcp.servers[0]]"
        );
    }

    #[test]
    fn env_overrides_win_and_are_named_in_errors() {
        let c = load_text(
            "[model]\nmodel = \"a\"\n",
            &[
                ("MODU_MODEL__MODEL", "b"),
                ("MODU_LIMITS__MAX_TURNS", "3"),
                ("MODU_MCP_EVERYTHING", "/ignored"),
                (
                    "MODU_MCP__SERVERS",
                    r#"[{"name":"e","transport":"stdio","command":"node"}]"#,
                ),
            ],
        )
        .unwrap();
        assert_eq!(c.model.model.as_deref(), Some("b"));
        assert_eq!(c.limits.max_turns, Some(3));
        assert_eq!(c.mcp.servers[0].name, "e");
        assert_eq!(
            load_text("", &[("MODU_MODEL__FOO", "1")]).unwrap_err(),
            "MODU_MODEL__FOO: unknown key `foo` in [model]"
        );
        assert_eq!(
            load_text("", &[("MODU_STORE__KIND", "disk")]).unwrap_err(),
            "MODU_STORE__KIND: `store.kind`: unknown variant `disk`, expected one of `memory`, `sqlite`, `redis`, `postgres`"
        );
    }

    #[test]
    fn bad_toml_has_a_position() {
        assert_eq!(
            load_text("[model]\nmodel = \n", &[]).unwrap_err(),
            "modu.toml: invalid TOML at line 2, column 9: string values must be quoted, expected literal string"
        );
    }
}
