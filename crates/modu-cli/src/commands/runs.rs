//! `modu runs list|show RUN_ID|delete RUN_ID|purge`: the checkpoints of unfinished runs in the
//! configured store.

use std::path::Path;

use clap::Subcommand;
use modu::sinks::SecretMasker;
use modu::{AgentError, ApprovalRequest, CheckpointQuery, CheckpointStore, CheckpointSummary, StoreError};
use serde_json::{Value, json};

use super::{CommandResult, Failure, load_config};
use crate::build;
use crate::ui::rfc3339;

/// `modu runs …`.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List the runs with a checkpoint, one per line: RUN_ID, status, agent, session, updated at.
    List {
        /// Print the runs as a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Show a run: status, agent, session, progress and the calls waiting for approval.
    Show {
        /// The run id.
        run_id: String,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a run's checkpoint (it can no longer be resumed).
    Delete {
        /// The run id.
        run_id: String,
    },
    /// Remove the expired checkpoints the store still holds.
    Purge,
}

/// The most pages `runs list` reads, and `purge` batches it asks for (a guard against a store
/// that never ends a listing).
const MAX_ROUNDS: usize = 100_000;

/// Runs a `runs` subcommand. `show` builds the agent (to decode the checkpoint); the others
/// need only the store.
pub async fn run(cmd: RunsCommand, config: Option<&Path>) -> CommandResult {
    if let RunsCommand::Show { run_id, .. } | RunsCommand::Delete { run_id } = &cmd {
        super::check_id("the run id", run_id)?;
    }
    let mut loaded = load_config(config)?;
    let stores = build::existing_stores(&loaded.config.store)
        .await
        .map_err(Failure::Invalid)?;
    let store = stores.checkpoints.as_ref();
    let failed = |e: StoreError| Failure::Invalid(format!("{}: {e}", stores.description));
    let missing = |run_id: &str| {
        Failure::Invalid(format!(
            "no checkpoint for run {run_id} in {} (it finished, expired, or never ran here)",
            stores.description
        ))
    };
    match cmd {
        RunsCommand::List { json } => {
            let runs = list_all(store).await.map_err(failed)?;
            if json {
                let items: Vec<Value> = runs.iter().map(summary_json).collect();
                print_json(&Value::Array(items))?;
            } else {
                if runs.is_empty() {
                    eprintln!("no runs in {}", stores.description);
                }
                for run in &runs {
                    outln!(
                        "{}\t{}\t{}\t{}\t{}",
                        run.run_id,
                        run.meta.status,
                        run.meta.agent,
                        run.meta.session_id.as_deref().unwrap_or("-"),
                        rfc3339(run.updated_at)
                    )?;
                }
            }
            Ok(())
        }
        RunsCommand::Show { run_id, json } => {
            let summary = find(store, &run_id)
                .await
                .map_err(failed)?
                .ok_or_else(|| missing(&run_id))?;
            // Reading a stored run calls no model: the API key the config names need not be
            // set (the agent is built only to read the checkpoint it wrote).
            loaded.config.model.api_key_env = None;
            let built = build::agent(&loaded.config, None).await?;
            let details = details(&built.agent, &run_id).await;
            if json {
                let mut value = summary_json(&summary);
                if let Value::Object(map) = &mut value {
                    match &details {
                        Ok(d) => {
                            map.insert("turns".into(), d.turns.into());
                            map.insert("tool_calls".into(), d.tool_calls.into());
                            map.insert("messages".into(), d.messages.into());
                            map.insert(
                                "pending_approvals".into(),
                                d.pending.iter().map(approval_json).collect::<Vec<_>>().into(),
                            );
                        }
                        Err(e) => {
                            map.insert("details_error".into(), e.clone().into());
                        }
                    }
                }
                print_json(&value)?;
            } else {
                outln!("run:      {}", summary.run_id)?;
                outln!("status:   {}", summary.meta.status)?;
                outln!("agent:    {}", summary.meta.agent)?;
                outln!("session:  {}", summary.meta.session_id.as_deref().unwrap_or("-"))?;
                outln!("updated:  {}", rfc3339(summary.updated_at))?;
                match &details {
                    Ok(d) => {
                        outln!(
                            "progress: turns {}, tool calls {}, messages {}",
                            d.turns,
                            d.tool_calls,
                            d.messages
                        )?;
                        if d.pending.is_empty() {
                            outln!("pending approvals: none")?;
                        } else {
                            outln!("pending approvals:")?;
                            for request in &d.pending {
                                outln!(
                                    "  {}  {}({})",
                                    request.call_id,
                                    request.tool_name,
                                    masked_arguments(request)
                                )?;
                            }
                        }
                    }
                    Err(e) => outln!("details:  unavailable ({})", crate::ui::one_line(e))?,
                }
            }
            Ok(())
        }
        RunsCommand::Delete { run_id } => {
            if store.load(&run_id).await.map_err(failed)?.is_none() {
                return Err(missing(&run_id));
            }
            store.delete(&run_id).await.map_err(failed)?;
            eprintln!("deleted run {run_id}");
            Ok(())
        }
        RunsCommand::Purge => {
            let mut total = 0u64;
            for _ in 0..MAX_ROUNDS {
                let removed = store.purge_expired().await.map_err(failed)?;
                if removed == 0 {
                    break;
                }
                total += removed;
            }
            eprintln!("purged {total} expired checkpoint(s) from {}", stores.description);
            Ok(())
        }
    }
}

/// Every checkpoint, page by page.
async fn list_all(store: &dyn CheckpointStore) -> Result<Vec<CheckpointSummary>, StoreError> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_ROUNDS {
        let page = store
            .list(&CheckpointQuery::first(CheckpointQuery::DEFAULT_LIMIT).after(after.clone()))
            .await?;
        out.extend(page.items);
        match page.next {
            // A store must move forward; one that does not would loop forever.
            Some(next) if after.as_ref().is_none_or(|a| next > *a) => after = Some(next),
            Some(next) => {
                return Err(StoreError::Corrupted {
                    message: format!("the checkpoint listing does not advance (next page after {next:?} again)"),
                });
            }
            None => break,
        }
    }
    Ok(out)
}

/// The summary of one run: the listing is ascending by run id, so stop at the first id past it.
async fn find(store: &dyn CheckpointStore, run_id: &str) -> Result<Option<CheckpointSummary>, StoreError> {
    let mut after: Option<String> = None;
    for _ in 0..MAX_ROUNDS {
        let page = store
            .list(&CheckpointQuery::first(CheckpointQuery::DEFAULT_LIMIT).after(after.clone()))
            .await?;
        for item in page.items {
            match item.run_id.as_str().cmp(run_id) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Ok(Some(item)),
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
        match page.next {
            Some(next) if after.as_ref().is_none_or(|a| next > *a) => after = Some(next),
            _ => break,
        }
    }
    Ok(None)
}

/// What the decoded checkpoint adds to the listing.
struct Details {
    turns: u64,
    tool_calls: u64,
    messages: usize,
    pending: Vec<ApprovalRequest>,
}

async fn details(agent: &modu::Agent<()>, run_id: &str) -> Result<Details, String> {
    let describe = |e: AgentError| e.to_string();
    let pending = agent.pending_approvals(run_id).await.map_err(describe)?;
    let state = agent.export_state(run_id).await.map_err(describe)?;
    let number = |key: &str| {
        state
            .pointer(&format!("/state/{key}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(Details {
        turns: number("turns"),
        tool_calls: number("tool_calls"),
        messages: state
            .pointer("/state/messages")
            .and_then(Value::as_array)
            .map_or(0, Vec::len),
        pending,
    })
}

/// The arguments a person approves (for MCP calls the external tool's), secrets masked.
fn masked_arguments(request: &ApprovalRequest) -> Value {
    let args = request.metadata.get("mcp_arguments").unwrap_or(&request.arguments);
    SecretMasker::default().mask_value(args)
}

fn approval_json(request: &ApprovalRequest) -> Value {
    json!({
        "call_id": request.call_id,
        "tool_name": request.tool_name,
        "arguments": masked_arguments(request),
    })
}

fn summary_json(s: &CheckpointSummary) -> Value {
    json!({
        "run_id": s.run_id,
        "status": s.meta.status.as_str(),
        "agent": s.meta.agent,
        "session_id": s.meta.session_id,
        "updated_at": rfc3339(s.updated_at),
    })
}

fn print_json(value: &Value) -> CommandResult {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure::Invalid(e.to_string()))?;
    outln!("{text}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn request(arguments: Value, metadata: Value) -> ApprovalRequest {
        ApprovalRequest::new("c1", "deploy", arguments).with_metadata(metadata.as_object().cloned().unwrap_or_default())
    }

    #[test]
    fn pending_approvals_show_arguments_with_secrets_masked() {
        let r = request(
            json!({"service": "api", "api_key": "sk-live-123", "nested": {"password": "hunter2"}}),
            json!({}),
        );
        let shown = approval_json(&r);
        assert_eq!(
            shown,
            json!({"call_id": "c1", "tool_name": "deploy",
                   "arguments": {"service": "api", "api_key": "***", "nested": {"password": "***"}}})
        );
        assert!(!shown.to_string().contains("sk-live-123") && !shown.to_string().contains("hunter2"));
        // For MCP calls, the external tool's arguments (what the person approves), masked too.
        let r = request(
            json!({"tool_name": "weather__forecast", "arguments": {"city": "Oslo", "token": "t0k"}}),
            json!({"mcp_arguments": {"city": "Oslo", "token": "t0k"}}),
        );
        assert_eq!(masked_arguments(&r), json!({"city": "Oslo", "token": "***"}));
    }
}
