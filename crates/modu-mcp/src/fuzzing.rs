//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`). Not a stable API.

use rmcp::model::{CallToolResult, ServerResult};
use serde_json::Value;

use crate::output::tool_output;

/// Decodes `result` (the `result` member of a JSON-RPC answer to `tools/call`) as rmcp does and
/// turns it into the tool's output or error message through the same function
/// [`McpSession::call_tool`] uses (`secrets` masked in both, the default result cap).
/// `Err(None)` is an answer that is not a tool result.
///
/// [`McpSession::call_tool`]: crate::McpSession::call_tool
pub fn normalise_tool_result(result: &[u8], secrets: &[String]) -> Result<Value, Option<String>> {
    let decoded: ServerResult = serde_json::from_slice(result).map_err(|_| None)?;
    let result = match decoded {
        ServerResult::CallToolResult(result) => result,
        ServerResult::EmptyResult(_) => CallToolResult::success(Vec::new()),
        _ => return Err(None),
    };
    tool_output(result, None, secrets, secrets, crate::config::DEFAULT_MAX_RESULT_BYTES).map_err(Some)
}
