//! `modu run "PROMPT"`: one run, streamed to stdout (or `--json`).

use std::io::Read;
use std::path::Path;

use std::sync::Arc;

use clap::Args;

use super::{CommandResult, Failure, load_config};
use crate::build::{self, Built};
use crate::config::OutputMode;
use crate::ui::{self, Input, Show};

/// Arguments of `modu run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The prompt; `-` reads it from stdin. It may not be empty.
    pub prompt: String,
    /// Print the whole RunOutcome as JSON instead of streaming the answer.
    #[arg(long)]
    pub json: bool,
    /// Continue this session (default: a new one, whose id is printed on stderr). An id under
    /// which nothing is stored starts a new session, and stderr says so.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Do not print a reasoning model's reasoning (shown dimmed on stderr by default).
    #[arg(long)]
    pub hide_reasoning: bool,
}

/// Runs the agent once.
pub async fn run(args: RunArgs, config: Option<&Path>) -> CommandResult {
    if let Some(id) = &args.session {
        super::check_session(id)?;
    }
    let loaded = load_config(config)?;
    let json = args.json || loaded.config.output.mode == OutputMode::Json;
    let from_stdin = args.prompt == "-";
    let prompt = if from_stdin {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::Usage(format!("cannot read the prompt from stdin: {e}")))?;
        text
    } else {
        args.prompt
    };
    // `modu run "$UNSET"` or an empty file: a model request about nothing costs tokens and
    // answers nothing the user asked.
    if prompt.trim().is_empty() {
        return Err(Failure::Usage(if from_stdin {
            "the prompt read from stdin is empty (stdin held no text)".to_owned()
        } else {
            "the prompt is empty: give the prompt, or `-` to read it from stdin".to_owned()
        }));
    }
    let built = build::agent(&loaded.config, Some(Arc::new(ui::ToolCallPrinter::default()))).await?;
    let session = match args.session {
        // A given id that holds nothing is said to start a new session (a mistyped id would
        // otherwise lose the conversation without a word); a continued one is not announced.
        Some(id) => {
            if ui::stored_messages(&built.stores, &id).await == Some(0) {
                eprintln!("session: {id} (new: nothing is stored under this id)");
            }
            id
        }
        None => {
            let id = ui::new_session_id();
            eprintln!("session: {id}");
            id
        }
    };
    let show = Show {
        text: !json,
        progress: ui::progress_enabled(),
        reasoning: !args.hide_reasoning,
    };
    let first = ui::stream(&built.agent, built.request(&prompt, &session), show).await?;
    let result = if first.is_paused() {
        let mut input = Input::stdin();
        ui::settle(&built.agent, first, &mut input, show).await?
    } else {
        first
    };
    if json {
        let text = serde_json::to_string_pretty(&result).map_err(|e| Failure::Invalid(e.to_string()))?;
        outln!("{text}")?;
    }
    finish(&built, &result).await
}

/// The exit status of a finished (or paused) run, with a hint to resume it.
pub async fn finish(built: &Built, result: &modu::RunOutcome<String>) -> CommandResult {
    let run_id = result.run_id();
    if let Some(paused) = result.pause() {
        let names: Vec<&str> = paused.approvals.iter().map(|r| r.tool_name.as_str()).collect();
        return Err(Failure::Invalid(format!(
            "run {run_id} is waiting for approval of {}; {}",
            names.join(", "),
            resume_hint(built, run_id),
        )));
    }
    match result.error() {
        None => Ok(()),
        Some(error) => {
            // The memory store's checkpoint ends with this command: `modu resume` cannot find it.
            if built.stores.kept && !run_id.is_empty() && built.agent.has_checkpoint(run_id).await.unwrap_or(false) {
                eprintln!("hint: continue this run with `modu resume {run_id}`");
            }
            Err(Failure::Invalid(ui::run_error(error, &built.model.base_url())))
        }
    }
}

/// How to go on with a paused run: `modu resume` when the store keeps it, else that it ends
/// with this command.
pub fn resume_hint(built: &Built, run_id: &str) -> String {
    if built.stores.kept {
        format!("answer with `modu resume {run_id}`")
    } else {
        "the memory store forgets it when this command ends (a persistent [store] kind keeps it for `modu resume`)"
            .into()
    }
}
