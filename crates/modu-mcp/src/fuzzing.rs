//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`). Not a stable API.

use rmcp::model::{CallToolResult, ServerResult};
use serde_json::Value;

use crate::client::{MAX_ERROR_TEXT, normalise_content};
use crate::error::redact;

/// Decodes `result` (the `result` member of a JSON-RPC answer to `tools/call`) as rmcp does and
/// turns it into the tool's output or error message as [`McpSession::call_tool`] does
/// (`structuredContent` as is, else the normalised contents; `isError` results become the
/// truncated, redacted message). `Err(None)` is an answer that is not a tool result.
///
/// This mirrors the result handling at the end of `McpSession::call_tool`, which has no seam
/// of its own; keep the two in step.
///
/// [`McpSession::call_tool`]: crate::McpSession::call_tool
pub fn normalise_tool_result(result: &[u8], secrets: &[String]) -> Result<Value, Option<String>> {
    let decoded: ServerResult = serde_json::from_slice(result).map_err(|_| None)?;
    let result = match decoded {
        ServerResult::CallToolResult(result) => result,
        ServerResult::EmptyResult(_) => CallToolResult::success(Vec::new()),
        _ => return Err(None),
    };
    if result.is_error == Some(true) {
        let text = normalise_content(&result.content);
        let mut message = match text {
            Value::String(s) => s,
            Value::Null => "the tool reported an error".to_owned(),
            other => other.to_string(),
        };
        if message.len() > MAX_ERROR_TEXT {
            let mut cut = MAX_ERROR_TEXT;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        return Err(Some(redact(&message, secrets)));
    }
    Ok(match result.structured_content {
        Some(structured) => structured,
        None => normalise_content(&result.content),
    })
}
