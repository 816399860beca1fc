//! One module per subcommand.

use std::path::Path;

use crate::config::{self, Loaded};

pub mod chat;
pub mod doctor;
pub mod mcp;
pub mod resume;
pub mod run;
pub mod runs;
pub mod serve;
pub mod sessions;
pub mod skills;

/// Why a command failed; decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// The command ran and found a problem, or the run failed (exit 1).
    Invalid(String),
    /// The command was called wrongly, or the configuration is wrong (exit 2).
    Usage(String),
    /// Stdout cannot be written (exit 1; a reader that has gone is not reported).
    Output(std::io::Error),
}

/// What a command returns.
pub type CommandResult = Result<(), Failure>;

/// A session or run id given on the command line must be one every store takes (at most
/// `MAX_ID_BYTES` bytes, no NUL): otherwise a usage error naming the argument, before the
/// configuration, the store or the model is touched.
pub fn check_id(argument: &str, id: &str) -> CommandResult {
    modu::StoreError::check_id(id).map_err(|e| Failure::Usage(format!("{argument}: {e}")))
}

/// `--session ID` of `run` and `chat`: [`check_id`], and not empty (an empty `--session "$UNSET"`
/// would otherwise keep a conversation under an id no one means).
pub fn check_session(id: &str) -> CommandResult {
    if id.trim().is_empty() {
        return Err(Failure::Usage(
            "--session is empty: give a session id, or leave --session out to start a new session".into(),
        ));
    }
    check_id("--session", id)
}

/// The configuration for an agent command: `--config FILE`, else `./modu.toml`, else
/// defaults, then the `MODU_<TABLE>__<KEY>` variables. A bad configuration is a usage error.
pub fn load_config(file: Option<&Path>) -> Result<Loaded, Failure> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    config::load(file, &env).map_err(Failure::Usage)
}
