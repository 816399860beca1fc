//! `modu`: the modu command line.
//!
//! Run an agent from a config file without writing Rust (`run`, `chat`, `sessions`, `resume`,
//! `runs`, `mcp tools`, `doctor`, `serve`), and author Agent Skills (`skills`). [`build`] shows, in one place,
//! how the modu crates compose into an agent.
//!
//! Exit codes:
//! - 0: success;
//! - 1: the command ran and something failed: the run failed or waits for an approval, a check
//!   of `doctor` or `skills validate` failed, a store or MCP server cannot be reached;
//! - 2: usage or configuration error: bad arguments, a bad or missing config file, an unknown
//!   key, no model configured.
//!
//! Subcommands live in `commands/`, one module each.
// A command line prints its results.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `println!` that does not panic when stdout is closed: see [`write_out`].
macro_rules! outln {
    () => {
        $crate::write_out(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*), true)
    };
}

/// `print!` that does not panic when stdout is closed: see [`write_out`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*), false)
    };
}

mod build;
mod commands;
mod config;
mod oauth;
mod time;
mod ui;

use commands::Failure;

const AFTER_HELP: &str = "\
Configuration: --config FILE, else ./modu.toml if present, else built-in defaults
(model from OPENAI_BASE_URL / OPENAI_MODEL / OPENAI_API_KEY, or OLLAMA_HOST / OLLAMA_MODEL;
sessions in SQLite at .modu/modu.db). Every key can be overridden by an environment variable
MODU_<TABLE>__<KEY> (two underscores), e.g. MODU_MODEL__BASE_URL, MODU_MODEL__MODEL,
MODU_STORE__KIND=memory, MODU_LIMITS__MAX_TURNS=4, MODU_MCP__SERVERS='[{...}]' (JSON).

Exit codes: 0 ok, 1 the run failed or a check found a problem, 2 usage or configuration error.";

/// The modu command line.
#[derive(Debug, Parser)]
#[command(
    name = "modu",
    version,
    about = "modu: production AI agents in Rust",
    after_help = AFTER_HELP,
    propagate_version = true
)]
struct Cli {
    /// The config file (default: ./modu.toml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent once on a prompt; the answer streams to stdout.
    #[command(after_help = AFTER_HELP)]
    Run(commands::run::RunArgs),
    /// Chat with the agent, one message per line of stdin.
    #[command(after_help = AFTER_HELP)]
    Chat(commands::chat::ChatArgs),
    /// List, show or delete stored sessions.
    #[command(subcommand)]
    Sessions(commands::sessions::SessionsCommand),
    /// Continue a failed or paused run from its checkpoint.
    Resume(commands::resume::ResumeArgs),
    /// List, show or delete the checkpoints of unfinished runs; purge expired ones.
    #[command(subcommand)]
    Runs(commands::runs::RunsCommand),
    /// MCP servers: list their tools, resources and prompts; read a resource, fetch a prompt.
    #[command(subcommand)]
    Mcp(commands::mcp::McpCommand),
    /// Check the configuration, the model server, the store and each MCP server.
    #[command(after_help = AFTER_HELP)]
    Doctor,
    /// Serve the agent over HTTP (OpenAI-compatible, AG-UI, A2A) and print the URL.
    #[command(after_help = AFTER_HELP)]
    Serve(commands::serve::ServeArgs),
    /// Author and check Agent Skills (SKILL.md folders).
    #[command(subcommand)]
    Skills(commands::skills::SkillsCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Skills(cmd) => commands::skills::run(cmd),
        command => match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(dispatch(command, cli.config)),
            Err(e) => Err(Failure::Invalid(format!("cannot start the async runtime: {e}"))),
        },
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Invalid(message)) => {
            eprintln!("error: {}", ui::one_line(&message));
            ExitCode::from(1)
        }
        Err(Failure::Usage(message)) => {
            eprintln!("error: {}", ui::one_line(&message));
            ExitCode::from(2)
        }
        Err(Failure::Output(e)) => {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                eprintln!("error: cannot write to stdout: {e}");
            }
            ExitCode::from(1)
        }
    }
}

async fn dispatch(command: Command, config: Option<PathBuf>) -> commands::CommandResult {
    let config = config.as_deref();
    match command {
        Command::Run(args) => commands::run::run(args, config).await,
        Command::Chat(args) => commands::chat::run(args, config).await,
        Command::Sessions(cmd) => commands::sessions::run(cmd, config).await,
        Command::Resume(args) => commands::resume::run(args, config).await,
        Command::Runs(cmd) => commands::runs::run(cmd, config).await,
        Command::Mcp(cmd) => commands::mcp::run(cmd, config).await,
        Command::Doctor => commands::doctor::run(config).await,
        Command::Serve(args) => commands::serve::run(args, config).await,
        Command::Skills(cmd) => commands::skills::run(cmd),
    }
}

/// Writes to stdout (and a newline when `newline`). A reader that has gone (`modu sessions list
/// | head -1`) is not an error: what it left unread is not wanted, and the command's exit code
/// stays its own. Any other write error (a full disk) is [`Failure::Output`]: the command
/// returns it (with `?`), dropping what it holds (MCP server processes, store connections), and
/// exits with code 1, as it cannot report its results.
fn write_out(args: std::fmt::Arguments<'_>, newline: bool) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| if newline { stdout.write_all(b"\n") } else { Ok(()) });
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Output(e)),
        _ => Ok(()),
    }
}
