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
    /// Continue this session (default: a new one, whose id is printed on stderr). Whether
    /// anything is stored under the id is printed on stderr too: a new id starts a new session.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Do not print a reasoning model's reasoning (shown dimmed on stderr by default).
    #[arg(long)]
    pub hide_reasoning: bool,
}

/// Reads one message per line until end of input (Ctrl-D or Ctrl-C on a terminal) or `/exit`; answers stream to stdout, tool
/// calls and approval prompts (`approve <tool>(<args>)? [y/N]`) go to stderr and read their
/// answer from the same stdin. A failed run prints its error and the chat goes on; end of
/// input during an approval prompt ends the chat with exit code 1, the run left paused.
pub async fn run(args: ChatArgs, config: Option<&Path>) -> CommandResult {
    if let Some(id) = &args.session {
        super::check_session(id)?;
    }
    let loaded = load_config(config)?;
    let built = build::agent(&loaded.config, Some(Arc::new(ui::ToolCallPrinter::default()))).await?;
    // A given id says whether it continues a stored conversation: a mistyped id would
    // otherwise start a new one without a word.
    let (session, stored) = match args.session {
        Some(id) => {
            let stored = match ui::stored_messages(&built.stores, &id).await {
                Some(0) => "new: nothing is stored under this id; ".to_owned(),
                Some(n) => format!("continued: {n} stored messages; "),
                // The first run reports the store's error.
                None => String::new(),
            };
            (id, stored)
        }
        None => (ui::new_session_id(), String::new()),
    };
    eprintln!("session: {session} ({stored}type /exit or end the input to leave)");
    let interactive = std::io::stdin().is_terminal();
    let show = Show {
        text: true,
        progress: ui::progress_enabled(),
        reasoning: !args.hide_reasoning,
    };
    let mut input = Input::stdin();
    let mut editor = interactive.then(LineEditor::for_terminal).flatten();
    loop {
        let line = match editor.as_mut() {
            Some(editor) => editor.read("> ").await,
            None => {
                if interactive {
                    eprint!("> ");
                    let _ = std::io::stderr().flush();
                }
                input.line().await
            }
        };
        let Some(line) = line else {
            break;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/exit" || line == "/quit" {
            break;
        }
        let mut result = ui::stream(&built.agent, built.request(line, &session), show).await?;
        if result.is_paused() {
            match ui::settle(&built.agent, result, &mut input, show).await {
                Ok(settled) => result = settled,
                Err(Failure::Invalid(message)) => {
                    eprintln!("error: {message}");
                    continue;
                }
                // Stdout cannot be written: the chat cannot go on.
                Err(e) => return Err(e),
            }
        }
        if result.is_paused() {
            // End of input during an approval prompt: leave the run paused, say how to go on.
            return Err(Failure::Invalid(format!(
                "run {} is waiting for approval; {}",
                result.run_id(),
                super::run::resume_hint(&built, result.run_id())
            )));
        }
        if let Some(error) = &result.error() {
            eprintln!("error: {}", ui::run_error(error, &built.model.base_url()));
        }
    }
    Ok(())
}

/// The message prompt's line editor on a terminal (rustyline: arrow keys, this chat's history,
/// Ctrl-A/E/K/W …). Piped input does not get one: it is read as lines, as before. Approval and
/// input answers are read as plain lines on a terminal too.
struct LineEditor(Option<rustyline::DefaultEditor>);

impl LineEditor {
    /// One when stdin is a terminal rustyline can edit on (not `TERM=dumb`, `cons25` or `emacs`,
    /// where it would print its prompt on stdout, into the answers).
    fn for_terminal() -> Option<LineEditor> {
        let unsupported = std::env::var("TERM")
            .is_ok_and(|term| ["dumb", "cons25", "emacs"].iter().any(|t| term.eq_ignore_ascii_case(t)));
        if unsupported || !std::io::stdin().is_terminal() {
            return None;
        }
        let config = rustyline::Config::builder()
            // The prompt and the edited line go to the terminal (not stdout, which has the answers).
            .behavior(rustyline::config::Behavior::PreferTerm)
            .auto_add_history(true)
            .build();
        rustyline::DefaultEditor::with_config(config)
            .ok()
            .map(|e| LineEditor(Some(e)))
    }

    /// The next line typed after `prompt`; `None` at Ctrl-D or Ctrl-C (or when the terminal
    /// fails), which leaves the chat as the end of piped input does. Reading blocks, so it runs
    /// on a blocking thread.
    async fn read(&mut self, prompt: &str) -> Option<String> {
        let mut editor = self.0.take()?;
        let prompt = prompt.to_owned();
        let (editor, line) = tokio::task::spawn_blocking(move || {
            let line = editor.readline(&prompt);
            (editor, line)
        })
        .await
        .ok()?;
        self.0 = Some(editor);
        line.ok()
    }
}
