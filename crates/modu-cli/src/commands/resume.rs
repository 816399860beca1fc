//! `modu resume RUN_ID`: continue a failed or paused run from its checkpoint.

use std::io::Write;
use std::path::Path;

use std::sync::Arc;

use clap::Args;
use modu::AgentError;

use super::{CommandResult, Failure, load_config};
use crate::build;
use crate::ui::{self, Input};

/// Arguments of `modu resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue (printed when a run fails or pauses).
    pub run_id: String,
    /// Print the whole RunOutcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// Do not print a reasoning model's reasoning (shown dimmed on stderr by default).
    #[arg(long)]
    pub hide_reasoning: bool,
}

/// Asks about the calls waiting for approval (if any), then resumes the run.
pub async fn run(args: ResumeArgs, config: Option<&Path>) -> CommandResult {
    super::check_id("the run id", &args.run_id)?;
    let loaded = load_config(config)?;
    let printer = Arc::new(ui::ToolCallPrinter::default());
    let built = build::agent(&loaded.config, Some(Arc::clone(&printer) as _)).await?;
    let agent = &built.agent;
    let pending = agent.pending_approvals(&args.run_id).await.map_err(|e| match e {
        AgentError::CheckpointNotFound { .. } => Failure::Invalid(format!(
            "no checkpoint for run {} in {} (it finished, or never ran here)",
            args.run_id, built.stores.description
        )),
        other => Failure::Invalid(other.to_string()),
    })?;
    let mut input = Input::stdin();
    for request in &pending {
        printer.remember(&request.call_id, request.tool_name.clone());
        eprint!("{}", ui::approval_prompt(request));
        let _ = std::io::stderr().flush();
        let Some(answer) = input.answer().await else {
            return Err(Failure::Invalid(format!(
                "run {} is still waiting for approval of {}",
                args.run_id, request.tool_name
            )));
        };
        let outcome = if ui::is_yes(&answer) {
            agent.approve(&args.run_id, &request.call_id).await
        } else {
            agent
                .reject(&args.run_id, &request.call_id, Some("the user said no".into()))
                .await
        };
        outcome.map_err(|e| Failure::Invalid(e.to_string()))?;
    }
    let show = ui::Show {
        text: !args.json,
        progress: ui::progress_enabled(),
        reasoning: !args.hide_reasoning,
    };
    let result = ui::resume(agent, &args.run_id, show).await?;
    let result = ui::settle(agent, result, &mut input, show).await?;
    if args.json {
        let text = serde_json::to_string_pretty(&result).map_err(|e| Failure::Invalid(e.to_string()))?;
        outln!("{text}")?;
    }
    super::run::finish(&built, &result).await
}
