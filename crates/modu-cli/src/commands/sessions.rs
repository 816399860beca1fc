//! `modu sessions list|show ID|delete ID`: the conversations in the configured store.

use std::path::Path;

use clap::Subcommand;
use modu::Message;
use modu::sinks::SecretMasker;

use super::{CommandResult, Failure, load_config};
use crate::build;
use crate::ui::rfc3339;

/// `modu sessions …`.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List the stored sessions, one per line: the id and when it was last used (RFC 3339, UTC).
    List {
        /// Print the sessions as a JSON array.
        #[arg(long)]
        json: bool,
    },
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
    if let SessionsCommand::Show { id, .. } | SessionsCommand::Delete { id } = &cmd {
        super::check_id("the session id", id)?;
    }
    let loaded = load_config(config)?;
    let stores = build::existing_stores(&loaded.config.store)
        .await
        .map_err(Failure::Invalid)?;
    let store = &stores.conversations;
    let failed = |e: modu::StoreError| Failure::Invalid(format!("{}: {e}", stores.description));
    match cmd {
        SessionsCommand::List { json } => {
            let sessions = store.list_sessions().await.map_err(failed)?;
            if json {
                let items: Vec<serde_json::Value> = sessions
                    .iter()
                    .map(|s| serde_json::json!({"session_id": s.session_id, "last_used": rfc3339(s.last_used)}))
                    .collect();
                let text = serde_json::to_string_pretty(&items).map_err(|e| Failure::Invalid(e.to_string()))?;
                outln!("{text}")?;
                return Ok(());
            }
            if sessions.is_empty() {
                eprintln!("no sessions in {}", stores.description);
            }
            for s in sessions {
                outln!("{}\t{}", s.session_id, rfc3339(s.last_used))?;
            }
            Ok(())
        }
        SessionsCommand::Show { id, json } => {
            let messages = store.load(&id).await.map_err(failed)?;
            if messages.is_empty() {
                return Err(Failure::Invalid(format!("no session `{id}` in {}", stores.description)));
            }
            // Tool arguments and results can hold secrets: masked, as `runs show` masks them.
            let masker = SecretMasker::default();
            if json {
                let value = serde_json::to_value(&messages).map_err(|e| Failure::Invalid(e.to_string()))?;
                let text = serde_json::to_string_pretty(&masker.mask_value(&value))
                    .map_err(|e| Failure::Invalid(e.to_string()))?;
                outln!("{text}")?;
            } else {
                for m in &messages {
                    outln!("{}", masker.mask_text(&render(m)))?;
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
    let role = m.role.as_str();
    let mut line = format!("{role}: {}", m.text());
    for call in &m.tool_calls {
        line.push_str(&format!("→ {}({})", call.name, call.arguments));
    }
    if let Some(name) = &m.name {
        line = format!("{role} {name}: {}", m.text());
    }
    line
}
