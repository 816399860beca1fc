//! `modu`: the modu command line.
//!
//! Exit codes: 0 success, 1 the command ran and found a problem (validation failure, lock
//! mismatch, a file that could not be written), 2 usage error (bad arguments, a missing folder).
//!
//! Subcommands live in `commands/`, one module each; add a variant to [`Command`] and a module
//! to add one (`run`, `chat`, `sessions`, `mcp`, `doctor` are planned).
// A command line prints its results.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;

use commands::Failure;

/// The modu command line.
#[derive(Debug, Parser)]
#[command(
    name = "modu",
    version,
    about = "modu: production AI agents in Rust",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Author and check Agent Skills (SKILL.md folders).
    #[command(subcommand)]
    Skills(commands::skills::SkillsCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Skills(cmd) => commands::skills::run(cmd),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Invalid(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
