//! `modu sessions list|show ID|delete ID`: the conversations in the configured store.

use std::path::Path;

use clap::Subcommand;
use modu_core::{Message, Role};

use super::{CommandResult, Failure, load_config};
use crate::build;

/// `modu sessions …`.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List the stored sessions, one id per line.
    List,
    /// Print a session's messages.
    Show {
        /// The session id.
        id: String,
        /// Print the messages as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a session.
    Delete {
        /// The session id.
        id: String,
    },
}

/// Runs a `sessions` subcommand (needs only the store, not the model).
pub async fn run(cmd: SessionsCommand, config: Option<&Path>) -> CommandResult {
    let loaded = load_config(config)?;
    let stores = build::stores(&loaded.config.store).await.map_err(Failure::Invalid)?;
    let store = &stores.conversations;
    let failed = |e: modu_core::StoreError| Failure::Invalid(format!("{}: {e}", stores.description));
    match cmd {
        SessionsCommand::List => {
            let ids = store.list_sessions().await.map_err(failed)?;
            if ids.is_empty() {
                eprintln!("no sessions in {}", stores.description);
            }
            for id in ids {
                println!("{id}");
            }
            Ok(())
        }
        SessionsCommand::Show { id, json } => {
            let messages = store.load(&id).await.map_err(failed)?;
            if messages.is_empty() {
                return Err(Failure::Invalid(format!("no session `{id}` in {}", stores.description)));
            }
            if json {
                let text = serde_json::to_string_pretty(&messages).map_err(|e| Failure::Invalid(e.to_string()))?;
                println!("{text}");
            } else {
                for m in &messages {
                    println!("{}", render(m));
                }
            }
            Ok(())
        }
        SessionsCommand::Delete { id } => {
            if store.load(&id).await.map_err(failed)?.is_empty() {
                return Err(Failure::Invalid(format!("no session `{id}` in {}", stores.description)));
            }
            store.delete(&id).await.map_err(failed)?;
            eprintln!("deleted session {id}");
            Ok(())
        }
    }
}

/// `role: text`, with tool calls as `name(args)`.
fn render(m: &Message) -> String {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut line = format!("{role}: {}", m.text());
    for call in &m.tool_calls {
        line.push_str(&format!("→ {}({})", call.name, call.arguments));
    }
    if let Some(name) = &m.name {
        line = format!("{role} {name}: {}", m.text());
    }
    line
}
