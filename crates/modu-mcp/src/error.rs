//! The typed errors of the MCP connector.
//!
//! [`McpError`] is the crate's one error enum; each variant wraps one of the typed errors the
//! specification names: [`McpServerConfigurationError`], [`McpTransportError`],
//! [`McpToolDiscoveryError`], [`McpToolInvocationError`] and [`McpAuthError`]. None of them
//! ever carries a secret (tokens, client secrets, header or environment values): messages that
//! come from a transport are passed through a redactor that knows the server's secrets.

use modu_core::{RecoveryAction, ToolError, ToolErrorKind};

/// Everything that can go wrong in the MCP connector.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A server configuration (or a run's server selection) is invalid.
    #[error(transparent)]
    Configuration(#[from] McpServerConfigurationError),
    /// A server could not be reached, or its connection broke.
    #[error(transparent)]
    Transport(#[from] McpTransportError),
    /// A server connected but its tools could not be listed.
    #[error(transparent)]
    ToolDiscovery(#[from] McpToolDiscoveryError),
    /// A tool call failed (unknown tool, invalid arguments, server error, timeout).
    #[error(transparent)]
    ToolInvocation(#[from] McpToolInvocationError),
    /// Credentials for a server could not be obtained.
    #[error(transparent)]
    Auth(#[from] McpAuthError),
    /// A request other than a tool call (resources, prompts) failed.
    #[error(transparent)]
    Request(#[from] McpRequestError),
}

impl McpError {
    /// The name of the server the error is about, when it is about one.
    pub fn server(&self) -> Option<&str> {
        match self {
            McpError::Configuration(e) => e.server.as_deref(),
            McpError::Transport(e) => Some(&e.server),
            McpError::ToolDiscovery(e) => Some(&e.server),
            McpError::ToolInvocation(e) => e.server.as_deref(),
            McpError::Auth(e) => Some(&e.server),
            McpError::Request(e) => Some(&e.server),
        }
    }

    /// The error as the model sees it: a [`ToolError`] with a kind, a reason and a message
    /// safe to show (names of servers and tools, never secrets).
    pub fn to_tool_error(&self) -> ToolError {
        match self {
            McpError::ToolInvocation(e) => e.to_tool_error(),
            McpError::Transport(e) => ToolError::execution("mcp_transport_error")
                .with_message(format!("the MCP server {} is unavailable: {}", e.server, e.message))
                .retryable(true),
            McpError::ToolDiscovery(e) => ToolError::execution("mcp_discovery_error")
                .with_message(format!("the tools of MCP server {} could not be listed", e.server)),
            McpError::Auth(e) => ToolError::new(ToolErrorKind::Authorization, "mcp_auth_error")
                .with_message(format!("the MCP server {} could not be authenticated", e.server)),
            McpError::Configuration(e) => {
                ToolError::execution("mcp_configuration_error").with_message(e.message.clone())
            }
            McpError::Request(e) => e.to_tool_error(),
        }
    }
}

impl From<McpError> for ToolError {
    fn from(e: McpError) -> Self {
        e.to_tool_error()
    }
}

/// An invalid server configuration or run selection (names, transports, URLs, unknown fields,
/// duplicate or shadowing names, refused inline stdio servers).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid MCP server configuration{}: {message}", server.as_ref().map(|s| format!(" ({s})")).unwrap_or_default())]
pub struct McpServerConfigurationError {
    /// The server concerned, when known.
    pub server: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl McpServerConfigurationError {
    pub(crate) fn new(server: Option<&str>, message: impl Into<String>) -> Self {
        McpServerConfigurationError {
            server: server.map(str::to_owned),
            message: message.into(),
        }
    }
}

/// A server could not be started or reached, did not answer `initialize` in time, or its
/// connection broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MCP transport error (server {server}): {message}")]
pub struct McpTransportError {
    /// The server concerned.
    pub server: String,
    /// What happened (redacted).
    pub message: String,
}

/// A server connected but `tools/list` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MCP tool discovery failed (server {server}): {message}")]
pub struct McpToolDiscoveryError {
    /// The server concerned.
    pub server: String,
    /// What happened (redacted).
    pub message: String,
}

/// Why a tool call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InvocationFailure {
    /// No tool of that external name is available to this run (or the filter hides it).
    UnknownTool,
    /// The server removed the tool during the run (it announced a changed list without it).
    ToolRemoved,
    /// The arguments do not fit the tool's input schema (checked before sending).
    InvalidArguments,
    /// The server ran the tool and reported an error result (`isError`).
    ToolError,
    /// The result's `structuredContent` does not fit the output schema the tool declares, or
    /// the result has none although the tool declares one (MCP 2025-06-18: servers must
    /// return structured results that fit it, clients should validate them).
    InvalidOutput,
    /// The server answered with a JSON-RPC error.
    ProtocolError,
    /// The call did not finish within the server's `call_timeout_seconds`.
    Timeout,
    /// The connection failed during the call.
    Transport,
    /// The server answered with something that is not a tool result.
    UnexpectedResponse,
    /// The server's answer could not be decoded: not valid UTF-8, nested deeper than 128
    /// levels, larger than the 16 MiB message limit, or not a JSON-RPC message. The call fails
    /// as soon as that answer arrives; the session stays usable.
    UndecodableResponse,
}

impl InvocationFailure {
    /// A snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            InvocationFailure::UnknownTool => "unknown_tool",
            InvocationFailure::ToolRemoved => "tool_removed",
            InvocationFailure::InvalidArguments => "invalid_arguments",
            InvocationFailure::ToolError => "tool_error",
            InvocationFailure::InvalidOutput => "invalid_output",
            InvocationFailure::ProtocolError => "protocol_error",
            InvocationFailure::Timeout => "timeout",
            InvocationFailure::Transport => "transport",
            InvocationFailure::UnexpectedResponse => "unexpected_response",
            InvocationFailure::UndecodableResponse => "undecodable_response",
        }
    }
}

/// A tool call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MCP tool call {tool} failed ({}): {message}", failure.as_str())]
pub struct McpToolInvocationError {
    /// The server, when the tool was found.
    pub server: Option<String>,
    /// The tool's external name (`<server>__<tool>`), as the model called it.
    pub tool: String,
    /// The kind of failure.
    pub failure: InvocationFailure,
    /// What happened, safe to show a model (the server's own error text for `isError`
    /// results, validation messages for invalid arguments).
    pub message: String,
}

impl McpToolInvocationError {
    /// The [`ToolError`] the model receives.
    pub fn to_tool_error(&self) -> ToolError {
        let message = self.message.clone();
        match self.failure {
            InvocationFailure::UnknownTool => ToolError::new(ToolErrorKind::NotFound, "unknown_mcp_tool")
                .with_message(message)
                .with_recovery(RecoveryAction::RepairCall),
            InvocationFailure::ToolRemoved => ToolError::new(ToolErrorKind::NotFound, "mcp_tool_removed")
                .with_message(message)
                .with_recovery(RecoveryAction::RepairCall),
            InvocationFailure::InvalidArguments => {
                ToolError::validation("invalid_arguments", message).with_recovery(RecoveryAction::RepairCall)
            }
            InvocationFailure::ToolError => ToolError::execution("mcp_tool_error").with_message(message),
            InvocationFailure::InvalidOutput => ToolError::execution("mcp_invalid_output").with_message(message),
            InvocationFailure::ProtocolError => ToolError::execution("mcp_protocol_error").with_message(message),
            InvocationFailure::Timeout => ToolError::new(ToolErrorKind::Timeout, "timeout")
                .with_message(message)
                .retryable(true),
            InvocationFailure::Transport => ToolError::execution("mcp_transport_error")
                .with_message(message)
                .retryable(true),
            InvocationFailure::UnexpectedResponse => {
                ToolError::execution("mcp_unexpected_response").with_message(message)
            }
            InvocationFailure::UndecodableResponse => {
                ToolError::execution("mcp_undecodable_response").with_message(message)
            }
        }
    }
}

/// Why a resource or prompt request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestFailure {
    /// No server of that name is open in this session.
    UnknownServer,
    /// The server does not offer resources (or prompts).
    Unsupported,
    /// The server answered with a JSON-RPC error (an unknown URI or prompt, bad arguments).
    ProtocolError,
    /// The server did not answer within its call timeout.
    Timeout,
    /// The connection failed, or the answer was not what was asked for.
    Transport,
}

impl RequestFailure {
    /// A snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestFailure::UnknownServer => "unknown_server",
            RequestFailure::Unsupported => "unsupported",
            RequestFailure::ProtocolError => "protocol_error",
            RequestFailure::Timeout => "timeout",
            RequestFailure::Transport => "transport",
        }
    }
}

/// A resource or prompt request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MCP request {request} to server {server} failed ({}): {message}", failure.as_str())]
pub struct McpRequestError {
    /// The server.
    pub server: String,
    /// The request (`resources/read`, `prompts/get`, ...).
    pub request: String,
    /// The kind of failure.
    pub failure: RequestFailure,
    /// What happened (redacted).
    pub message: String,
}

impl McpRequestError {
    /// The [`ToolError`] the model receives.
    pub fn to_tool_error(&self) -> ToolError {
        let message = format!("{} failed: {}", self.request, self.message);
        match self.failure {
            RequestFailure::UnknownServer | RequestFailure::Unsupported => {
                ToolError::new(ToolErrorKind::NotFound, "mcp_request_not_found")
                    .with_message(message)
                    .with_recovery(RecoveryAction::RepairCall)
            }
            RequestFailure::ProtocolError => ToolError::execution("mcp_protocol_error").with_message(message),
            RequestFailure::Timeout => ToolError::new(ToolErrorKind::Timeout, "timeout")
                .with_message(message)
                .retryable(true),
            RequestFailure::Transport => ToolError::execution("mcp_transport_error")
                .with_message(message)
                .retryable(true),
        }
    }
}

/// Credentials for a server could not be obtained (a missing environment variable, a failing
/// or refusing OAuth token endpoint).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MCP authentication failed (server {server}): {message}")]
pub struct McpAuthError {
    /// The server concerned.
    pub server: String,
    /// What happened (never the secret itself).
    pub message: String,
}

/// Replaces every secret in every string of `value` (object keys too) by `[redacted]`.
pub(crate) fn redact_value(value: &mut serde_json::Value, secrets: &[String]) {
    use serde_json::Value;
    if secrets.iter().all(|s| s.len() < 3) {
        return;
    }
    // Decoded values nest at most 128 levels (serde_json's limit), so recursion is bounded.
    match value {
        Value::String(s)
            if secrets
                .iter()
                .any(|secret| secret.len() >= 3 && s.contains(secret.as_str())) =>
        {
            *s = redact(s, secrets);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_value(v, secrets)),
        Value::Object(map) => {
            let leaks = map.keys().any(|k| {
                secrets
                    .iter()
                    .any(|secret| secret.len() >= 3 && k.contains(secret.as_str()))
            });
            if leaks {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    redact_value(&mut v, secrets);
                    map.insert(redact(&k, secrets), v);
                }
            } else {
                map.values_mut().for_each(|v| redact_value(v, secrets));
            }
        }
        _ => {}
    }
}

/// Replaces every secret in `text` by `[redacted]`.
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for secret in secrets {
        if secret.len() >= 3 && out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "[redacted]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_replaces_every_secret() {
        let secrets = vec!["s3cr3t-token".to_owned(), "xy".to_owned()];
        assert_eq!(
            redact("Bearer s3cr3t-token failed; s3cr3t-token again; xy stays", &secrets),
            "Bearer [redacted] failed; [redacted] again; xy stays"
        );
    }

    #[test]
    fn value_redaction_reaches_every_string_and_key() {
        let secrets = vec!["tok-123".to_owned()];
        let mut v = serde_json::json!({
            "authorization": "Bearer tok-123",
            "nested": [{"deep": ["x tok-123 y", 5, null]}],
            "tok-123": "as a key",
            "clean": "nothing here"
        });
        redact_value(&mut v, &secrets);
        assert_eq!(
            v,
            serde_json::json!({
                "authorization": "Bearer [redacted]",
                "nested": [{"deep": ["x [redacted] y", 5, null]}],
                "[redacted]": "as a key",
                "clean": "nothing here"
            })
        );
    }

    #[test]
    fn invocation_errors_map_to_tool_errors() {
        let e = McpToolInvocationError {
            server: Some("weather".into()),
            tool: "weather__forecast".into(),
            failure: InvocationFailure::Timeout,
            message: "no answer within 1s".into(),
        };
        let te = McpError::from(e).to_tool_error();
        assert_eq!(te.kind, ToolErrorKind::Timeout);
        assert!(te.retryable);
        let e = McpToolInvocationError {
            server: None,
            tool: "x__y".into(),
            failure: InvocationFailure::UnknownTool,
            message: "no such tool".into(),
        };
        assert_eq!(e.to_tool_error().kind, ToolErrorKind::NotFound);
    }
}
