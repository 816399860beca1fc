//! # modu
//!
//! A Rust framework for building production AI agents: the contract ([`modu_core`]: messages,
//! the model, tool, provider and store traits, events, errors, outcomes), the runtime
//! ([`modu_agent`]: the agent, its run loop, middleware, memory policies, sinks), both
//! re-exported here, and one crate per backend, switched on with Cargo features.
//!
//! | feature | brings | crate |
//! |---|---|---|
//! | `macros` (default) | `#[tool]` | `modu-macros` |
//! | `openai` | OpenAI-compatible client (vLLM, llama.cpp, OpenAI) | `modu-openai` |
//! | `ollama` | Ollama native client | `modu-ollama` |
//! | `redis` | Redis stores | `modu-redis` |
//! | `sqlite` | SQLite stores (sqlx) | `modu-sqlite` |
//! | `postgres` | PostgreSQL stores (sqlx) | `modu-postgres` |
//! | `mcp` | MCP connector (rmcp); with `redis`, `sqlite` or `postgres` also that backend's MCP OAuth token store | `modu-mcp` |
//! | `skills` | Agent Skills | `modu-skills` |
//! | `otel` | OpenTelemetry GenAI traces and metrics | `modu-otel` |
//! | `server` | serving agents over HTTP: AG-UI, A2A, OpenAI-compatible, dev UI (axum) | `modu-server` |
//!
//! The in-memory stores, the scripted test model and the run loop are always there.
//!
//! ```
//! use modu::{Agent, tool};
//! use modu_testing::ScriptedModel;
//!
//! /// Add two integers.
//! #[tool(idempotent)]
//! async fn add(a: i64, b: i64) -> i64 {
//!     a + b
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ScriptedModel::new()
//!     .tool_call("add", serde_json::json!({"a": 2, "b": 3}))
//!     .text("5");
//! let agent = Agent::builder(model).tool(Add).build()?;
//! let answer = agent.run("2 + 3?").await.into_result()?;
//! assert_eq!(answer, "5");
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The strict Plan-and-Execute policy (the runtime's) with the plan data it reports (the
/// contract's).
pub use modu_agent::plan;
pub use modu_agent::*;
pub use modu_core::*;
#[doc(no_inline)]
pub use {modu_agent, modu_core};

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use modu_macros::tool;

#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use modu_openai as openai;

#[cfg(feature = "ollama")]
#[cfg_attr(docsrs, doc(cfg(feature = "ollama")))]
pub use modu_ollama as ollama;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use modu_redis as redis;

#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use modu_sqlite as sqlite;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use modu_postgres as postgres;

#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub use modu_mcp as mcp;

#[cfg(feature = "skills")]
#[cfg_attr(docsrs, doc(cfg(feature = "skills")))]
pub use modu_skills as skills;

#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub use modu_otel as otel;

#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub use modu_server as server;
