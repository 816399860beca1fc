//! Tool results and errors as the model sees them.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use crate::client::MAX_ERROR_TEXT;
use crate::error::{InvocationFailure, McpError, McpToolInvocationError, redact, redact_value};
use crate::registry::split_external_name;

/// A tool result as the model gets it: `structuredContent` as is, else the normalised
/// contents, with `result_secrets` masked and capped at `max` bytes; an `isError` result is its
/// message (capped at [`MAX_ERROR_TEXT`], `error_secrets` masked) as the `Err`.
pub(crate) fn tool_output(
    result: CallToolResult,
    error_secrets: &[String],
    result_secrets: &[String],
    max: usize,
) -> Result<Value, String> {
    if result.is_error == Some(true) {
        let text = normalise_content(result.content);
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
        return Err(redact(&message, error_secrets));
    }
    let mut value = match result.structured_content {
        Some(structured) => structured,
        None => normalise_content(result.content),
    };
    redact_value(&mut value, result_secrets);
    Ok(cap_result(value, max))
}

pub(crate) fn unknown_tool(external_name: &str) -> McpError {
    McpError::ToolInvocation(McpToolInvocationError {
        server: None,
        tool: external_name.to_owned(),
        failure: InvocationFailure::UnknownTool,
        message: format!("no MCP tool named {external_name:?} is available; call mcp_search_tools to find one"),
    })
}

pub(crate) fn removed_tool(external_name: &str) -> McpError {
    let server = split_external_name(external_name).map(|(server, _)| server.to_owned());
    let by = server.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
    McpError::ToolInvocation(McpToolInvocationError {
        server,
        tool: external_name.to_owned(),
        failure: InvocationFailure::ToolRemoved,
        message: format!(
            "the MCP server{by} removed the tool {external_name:?} during this run; call mcp_search_tools to find its current tools"
        ),
    })
}

/// Text contents gathered into one JSON value: one text → a string, several → an array of
/// strings, none → null; non-text blocks appear as their JSON.
pub(crate) fn normalise_content(mut content: Vec<ContentBlock>) -> Value {
    let item = |c: ContentBlock| match c {
        ContentBlock::Text(t) => Value::String(t.text),
        other => serde_json::to_value(&other).unwrap_or(Value::Null),
    };
    match content.len() {
        0 => Value::Null,
        1 if content[0].as_text().is_some() => content.pop().map_or(Value::Null, item),
        _ => Value::Array(content.into_iter().map(item).collect()),
    }
}

/// A result as the model may see it: a string cut to `max` bytes, other JSON unchanged when
/// its text (compact JSON, as the run loop writes it) fits, else that text cut — both with
/// the marker of [`modu_core::tool::truncate_result`], so MCP and function tools read alike.
pub(crate) fn cap_result(value: Value, max: usize) -> Value {
    match value {
        Value::String(text) => Value::String(modu_core::tool::truncate_result(text, Some(max))),
        other => {
            let text = other.to_string();
            if text.len() <= max {
                other
            } else {
                Value::String(modu_core::tool::truncate_result(text, Some(max)))
            }
        }
    }
}
