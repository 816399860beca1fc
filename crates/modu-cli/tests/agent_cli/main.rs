//! End-to-end tests of the `modu` binary's agent commands: the built binary runs in a temp
//! folder against `MockOpenAiServer` (started in this process) and the real server-everything
//! MCP server (`MODU_MCP_EVERYTHING`, see `cargo xtask services`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chat;
mod config;
mod doctor;
mod run;
mod runs;
mod sessions;
mod support;
