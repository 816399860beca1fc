//! One module per subcommand.

pub mod skills;

/// Why a command failed; decides the exit code.
#[derive(Debug)]
pub enum Failure {
    /// The command ran and found a problem (exit 1).
    Invalid(String),
    /// The command was called wrongly (exit 2).
    Usage(String),
}

/// What a command returns.
pub type CommandResult = Result<(), Failure>;
