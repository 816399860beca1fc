//! Tool results and errors as the model sees them.

use modu_core::ContentPart;
use modu_core::media::ToolContent;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use crate::client::MAX_ERROR_TEXT;
use crate::error::{InvocationFailure, McpError, McpToolInvocationError, redact, redact_value};

/// A tool result as the model gets it: `structuredContent` as is (a wrapped plain value
/// unwrapped, see [`unwrap_plain`]), else the normalised contents, with `result_secrets`
/// masked and capped at `max` bytes; an `isError` result is its message (capped at
/// [`MAX_ERROR_TEXT`], `error_secrets` masked) as the `Err`.
pub(crate) fn tool_output(
    result: CallToolResult,
    output_schema: Option<&Value>,
    error_secrets: &[String],
    result_secrets: &[String],
    max: usize,
) -> Result<Value, String> {
    if result.is_error == Some(true) {
        let text = normalise_content(result.content);
        let message = match text {
            Value::String(s) => s,
            Value::Null => "the tool reported an error".to_owned(),
            other => other.to_string(),
        };
        return Err(redact(&cap_error(message), error_secrets));
    }
    let mut value = match result.structured_content {
        Some(structured) => unwrap_plain(structured, output_schema),
        None => content_value(result.content),
    };
    redact_value(&mut value, result_secrets);
    Ok(cap_result(value, max))
}

/// An error message cut to [`MAX_ERROR_TEXT`] bytes (with `…` when cut).
pub(crate) fn cap_error(mut message: String) -> String {
    if message.len() > MAX_ERROR_TEXT {
        let mut cut = MAX_ERROR_TEXT;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// The key FastMCP and the official Python SDK wrap a plain (non-object) return value under.
const WRAPPED_RESULT: &str = "result";

/// `structuredContent` of the form `{"result": v}` as `v`, when the tool declares no output
/// schema or the schema the SDKs generate for a wrapped value (an object whose only property
/// is `result`): the wrapper is the SDK's, not the tool's, and the model reads the value
/// better without it. Anything else is returned unchanged.
fn unwrap_plain(structured: Value, output_schema: Option<&Value>) -> Value {
    let wrapper_schema = match output_schema {
        None => true,
        Some(schema) => schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|properties| properties.len() == 1 && properties.contains_key(WRAPPED_RESULT)),
    };
    match structured {
        Value::Object(mut map) if wrapper_schema && map.len() == 1 && map.contains_key(WRAPPED_RESULT) => {
            map.remove(WRAPPED_RESULT).unwrap_or(Value::Null)
        }
        other => other,
    }
}

pub(crate) fn unknown_tool(external_name: &str) -> McpError {
    McpError::ToolInvocation(McpToolInvocationError {
        server: None,
        tool: external_name.to_owned(),
        failure: InvocationFailure::UnknownTool,
        message: format!("no MCP tool named {external_name:?} is available; call mcp_search_tools to find one"),
    })
}

/// The error for a call to `external_name`, which `server` removed during the run.
pub(crate) fn removed_tool(external_name: &str, server: &str) -> McpError {
    McpError::ToolInvocation(McpToolInvocationError {
        server: Some(server.to_owned()),
        tool: external_name.to_owned(),
        failure: InvocationFailure::ToolRemoved,
        message: format!(
            "the MCP server {server} removed the tool {external_name:?} during this run; call mcp_search_tools to find its current tools"
        ),
    })
}

/// A successful result's contents: with an image, audio or an embedded resource among them, a
/// [`ToolContent`] envelope of parts (so the model gets the media, see
/// [`modu_core::media`]); text only, as [`normalise_content`].
///
/// - text → a text part;
/// - image → an inline image (`data`, `mimeType`), audio → inline audio;
/// - an embedded resource with `blob` → an inline file (its name the URI's last segment), with
///   `text` → a text part headed by its URI;
/// - anything else (a resource link, …) → a text part of its JSON.
pub(crate) fn content_value(content: Vec<ContentBlock>) -> Value {
    let has_media = content.iter().any(|c| {
        matches!(
            serde_json::to_value(c)
                .ok()
                .as_ref()
                .and_then(|v| v.get("type"))
                .and_then(Value::as_str),
            Some("image" | "audio" | "resource")
        )
    });
    if !has_media {
        return normalise_content(content);
    }
    let parts = content.into_iter().map(content_part).collect();
    ToolContent::new(parts).into_value()
}

fn content_part(block: ContentBlock) -> ContentPart {
    if let ContentBlock::Text(t) = &block {
        return ContentPart::text(t.text.clone());
    }
    let json = serde_json::to_value(&block).unwrap_or(Value::Null);
    let field = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    match json.get("type").and_then(Value::as_str) {
        Some("image") => {
            if let (Some(data), Some(mime)) = (field(&json, "data"), field(&json, "mimeType")) {
                return ContentPart::image_base64(mime, data);
            }
        }
        Some("audio") => {
            if let (Some(data), Some(mime)) = (field(&json, "data"), field(&json, "mimeType")) {
                return ContentPart::audio_base64(mime, data);
            }
        }
        Some("resource") => {
            let resource = json.get("resource").cloned().unwrap_or(Value::Null);
            let uri = field(&resource, "uri").unwrap_or_default();
            if let Some(blob) = field(&resource, "blob") {
                let mime = field(&resource, "mimeType").unwrap_or_else(|| "application/octet-stream".to_owned());
                let name = uri.rsplit('/').next().filter(|n| !n.is_empty()).map(str::to_owned);
                return ContentPart::file_base64(mime, blob, name);
            }
            if let Some(text) = field(&resource, "text") {
                return ContentPart::text(format!("[resource {uri}]\n{text}"));
            }
        }
        _ => {}
    }
    ContentPart::text(json.to_string())
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
    // An envelope: its text parts are capped, its media kept (the run loop caps inline media).
    if let Some(Ok(mut content)) = ToolContent::from_value(&value) {
        for part in &mut content.parts {
            if let Some(text) = part.as_text() {
                *part = ContentPart::text(modu_core::tool::truncate_result(text.to_owned(), Some(max)));
            }
        }
        return content.into_value();
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn structured(value: Value) -> CallToolResult {
        let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
        result.structured_content = Some(value);
        result
    }

    fn output(value: Value, schema: Option<Value>) -> Value {
        tool_output(structured(value), schema.as_ref(), &[], &[], 1 << 20).unwrap()
    }

    #[test]
    fn a_wrapped_plain_value_is_unwrapped_without_an_output_schema() {
        assert_eq!(output(json!({"result": "HI"}), None), json!("HI"));
        assert_eq!(output(json!({"result": 42}), None), json!(42));
        assert_eq!(output(json!({"result": ["a", "b"]}), None), json!(["a", "b"]));
    }

    #[test]
    fn a_wrapped_plain_value_is_unwrapped_under_the_generated_wrapper_schema() {
        let schema = json!({"type": "object", "title": "shoutOutput",
            "properties": {"result": {"type": "string"}}, "required": ["result"]});
        assert_eq!(output(json!({"result": "HI"}), Some(schema)), json!("HI"));
    }

    #[test]
    fn a_declared_object_schema_keeps_the_structured_content() {
        let schema = json!({"type": "object",
            "properties": {"result": {"type": "string"}, "count": {"type": "integer"}}});
        assert_eq!(output(json!({"result": "HI"}), Some(schema)), json!({"result": "HI"}));
        // More keys than the wrapper: the tool's own object.
        assert_eq!(
            output(json!({"result": "HI", "count": 1}), None),
            json!({"result": "HI", "count": 1})
        );
        assert_eq!(output(json!({"answer": "HI"}), None), json!({"answer": "HI"}));
    }

    fn blocks(value: Value) -> Vec<ContentBlock> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn images_audio_and_embedded_resources_become_the_media_envelope() {
        let content = blocks(json!([
            {"type": "text", "text": "Here it is:"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///tmp/a.pdf", "mimeType": "application/pdf", "blob": "JVBERi0="}},
            {"type": "resource", "resource": {"uri": "test://notes", "mimeType": "text/plain", "text": "hello"}},
        ]));
        let out = tool_output(CallToolResult::success(content), None, &[], &[], 1 << 20).unwrap();
        let parts = ToolContent::from_value(&out).unwrap().unwrap().parts;
        assert_eq!(
            parts,
            vec![
                ContentPart::text("Here it is:"),
                ContentPart::image_base64("image/png", "iVBORw0KGgo="),
                ContentPart::audio_base64("audio/wav", "UklGRg=="),
                ContentPart::file_base64("application/pdf", "JVBERi0=", Some("a.pdf".into())),
                ContentPart::text("[resource test://notes]\nhello"),
            ]
        );
    }

    #[test]
    fn text_only_results_stay_as_before_and_envelope_text_is_capped() {
        let out = tool_output(
            CallToolResult::success(blocks(json!([{"type": "text", "text": "hi"}]))),
            None,
            &[],
            &[],
            100,
        );
        assert_eq!(out.unwrap(), json!("hi"));
        let content = blocks(json!([
            {"type": "text", "text": "abcdefgh"},
            {"type": "image", "data": "AAAAAAAAAAAA", "mimeType": "image/png"},
        ]));
        let out = tool_output(CallToolResult::success(content), None, &[], &[], 4).unwrap();
        let parts = ToolContent::from_value(&out).unwrap().unwrap().parts;
        assert_eq!(
            parts[0],
            ContentPart::text(modu_core::tool::truncate_result("abcdefgh".into(), Some(4)))
        );
        assert_eq!(parts[1], ContentPart::image_base64("image/png", "AAAAAAAAAAAA"));
    }

    #[test]
    fn an_unwrapped_value_is_still_redacted_and_capped() {
        let out = tool_output(
            structured(json!({"result": "token s3cret here"})),
            None,
            &[],
            &["s3cret".to_owned()],
            1 << 20,
        )
        .unwrap();
        assert_eq!(out, json!("token [redacted] here"));
    }
}
