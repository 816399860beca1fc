//! `modu doctor`: check the configuration, the model endpoint, the store and each MCP server.

use std::path::Path;

use super::{CommandResult, Failure, load_config};
use crate::build;

fn ok(what: &str) -> CommandResult {
    outln!("✓ {what}")
}

fn bad(what: &str) -> CommandResult {
    outln!("✗ {}", crate::ui::one_line(what))
}

/// Prints one ✓ or ✗ line per check; exit 1 when any check fails (the configuration included).
pub async fn run(config: Option<&Path>) -> CommandResult {
    let loaded = match load_config(config) {
        Ok(l) => l,
        Err(Failure::Usage(m) | Failure::Invalid(m)) => {
            bad(&format!("config: {m}"))?;
            return Err(Failure::Invalid("the configuration is broken".into()));
        }
        Err(e @ Failure::Output(_)) => return Err(e),
    };
    let config = &loaded.config;
    ok(&format!("config: {}", loaded.source()))?;
    let mut broken = 0usize;

    match build::model(&config.model) {
        Ok(model) => match model.list_models().await {
            Ok(names) => {
                let name = model.name();
                let note = if names.is_empty() || model.is_listed(&names) {
                    String::new()
                } else {
                    format!(" (the server does not list `{name}`; it offers {})", names.join(", "))
                };
                ok(&format!("model: {} answers, model `{name}`{note}", model.base_url()))?;
            }
            Err(e) => {
                broken += 1;
                let message = e.to_string();
                let message = message.strip_prefix("transport error: ").unwrap_or(&message);
                bad(&format!(
                    "model: cannot reach the model server at {}: {message}",
                    model.base_url()
                ))?;
            }
        },
        Err(m) => {
            broken += 1;
            bad(&format!("model: {m}"))?;
        }
    }

    match build::stores(&config.store).await {
        Ok(stores) => match stores.conversations.list_sessions().await {
            Ok(sessions) => ok(&format!("store: {} ({} sessions)", stores.description, sessions.len()))?,
            Err(e) => {
                broken += 1;
                bad(&format!("store: {}: {e}", stores.description))?;
            }
        },
        Err(m) => {
            broken += 1;
            bad(&format!("store: {m}"))?;
        }
    }

    // The whole agent, as `run` builds it (catches what only the builder checks, such as
    // limits a policy cannot work with). Only when the model and the store are fine.
    if broken == 0 {
        match build::agent(config, None).await {
            Ok(_) => ok(&format!("agent: builds (policy {})", config.agent.policy.name()))?,
            Err(Failure::Usage(m) | Failure::Invalid(m)) => {
                broken += 1;
                bad(&format!("agent: {m}"))?;
            }
            Err(e @ Failure::Output(_)) => return Err(e),
        }
    }

    if let Err(m) = build::skills(&config.skills) {
        broken += 1;
        bad(&m)?;
    } else if let Some(path) = &config.skills.path {
        ok(&format!("skills: {}", path.display()))?;
    }

    match build::mcp_connector(&config.mcp, &config.store).await {
        Ok(Some(connector)) => {
            for server in &config.mcp.servers {
                match connector.open_servers(vec![server.clone()]).await {
                    Ok(session) => {
                        ok(&format!("mcp {}: {} tools", server.name, session.registry().len()))?;
                        session.close().await;
                    }
                    Err(e) => {
                        broken += 1;
                        bad(&format!("mcp {}: {e}", server.name))?;
                    }
                }
            }
        }
        Ok(None) => {}
        Err(m) => {
            broken += 1;
            bad(&m)?;
        }
    }

    if broken == 0 {
        Ok(())
    } else {
        Err(Failure::Invalid(format!("{broken} check(s) failed")))
    }
}
