//! `modu chat`: a line-based conversation over stdin (a terminal or a pipe).

use std::io::{IsTerminal, Write};
use std::path::Path;

use std::sync::Arc;

use clap::Args;

use super::{CommandResult, Failure, load_config};
use crate::build;
use crate::ui::{self, Input, Show};

/// Arguments of `modu chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Continue this session (default: a new one, whose id is printed on stderr).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Do not print a reasoning model's reasoning (shown dimmed on stderr by default).
    #[arg(long)]
    pub hide_reasoning: bool,
}

/// Reads one message per line until end of input or `/exit`; answers stream to stdout, tool
/// calls and approval prompts (`approve <tool>(<args>)? [y/N]`) go to stderr and read their
/// answer from the same stdin. A failed run prints its error and the chat goes on; end of
/// input during an approval prompt ends the chat with exit code 1, the run left paused.
pub async fn run(args: ChatArgs, config: Option<&Path>) -> CommandResult {
    let loaded = load_config(config)?;
    let built = build::agent(&loaded.config, Some(Arc::new(ui::ToolCallPrinter::default()))).await?;
    let session = args.session.unwrap_or_else(ui::new_session_id);
    eprintln!("session: {session} (type /exit or end the input to leave)");
    let interactive = std::io::stdin().is_terminal();
    let show = Show {
        text: true,
        progress: ui::progress_enabled(),
        reasoning: !args.hide_reasoning,
    };
    let mut input = Input::stdin();
    loop {
        if interactive {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let Some(line) = input.line().await else {
            break;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/exit" || line == "/quit" {
            break;
        }
        let mut result = ui::stream(&built.agent, built.request(line, &session), show).await;
        if result.is_paused() {
            match ui::settle(&built.agent, result, &mut input, show).await {
                Ok(settled) => result = settled,
                Err(message) => {
                    eprintln!("error: {message}");
                    continue;
                }
            }
        }
        if result.is_paused() {
            // End of input during an approval prompt: leave the run paused, say how to go on.
            return Err(Failure::Invalid(format!(
                "run {} is waiting for approval; answer with `modu resume {}`",
                result.run_id(),
                result.run_id()
            )));
        }
        if let Some(error) = &result.error() {
            eprintln!("error: {}", ui::run_error(error, built.model.base_url()));
        }
    }
    Ok(())
}
