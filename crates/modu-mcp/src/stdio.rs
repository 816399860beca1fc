//! The stdio transport: a child process in its own process group speaking newline-delimited
//! JSON-RPC over stdin/stdout.
//!
//! rmcp's own child-process transport drops a line it cannot decode (invalid UTF-8, JSON
//! nested deeper than serde_json's recursion limit, a line over its 16 MiB cap, a shape that
//! is not a JSON-RPC message) after logging it, so the request that line answered waits for
//! its timeout. This transport reads the lines itself and, when one cannot be decoded, finds
//! the request it answers with [`IdScanner`] (a byte scanner that needs neither valid UTF-8
//! nor bounded nesting, and works on a line too large to keep) and fails that request at once
//! with an error response it makes up; [`DecodeFailures`] tells the session which errors are
//! such made-up ones. An answer that names no request it can find, or the end of the server's
//! output, fails every request in flight and ends the session. A line that is not a JSON-RPC
//! message at all (a banner, a stray print, a structured logger's JSON object with none of
//! `jsonrpc`, `method`, `result` and `error`) is skipped with a warning.

mod failures;
mod process;
mod scanner;
mod transport;

pub(crate) use failures::{DecodeFailure, DecodeFailures};
pub(crate) use process::{ExitStatusSlot, StderrTail};
pub(crate) use scanner::IdScanner;
pub(crate) use transport::StdioTransport;

/// The largest message (one line) read from a stdio server: 16 MiB, rmcp's own limit for
/// stdio lines and for streamable-HTTP messages. A longer answer fails its request.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
