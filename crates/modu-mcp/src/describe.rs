//! rmcp's errors as sentences a user can act on, with no rmcp type names or `Debug` dumps in
//! them, and with the failures that are about credentials told apart from the rest.
//!
//! rmcp's `Display` output names its own types (`Transport [rmcp::transport::...] error`,
//! `Send message error ..., when send initialize request`, `expect initialized response, but
//! received: Some(Error(JsonRpcError { .. }))`) and reports an HTTP 401 without a
//! `WWW-Authenticate` challenge as an unexpected response. The functions here look at the
//! error values instead.

use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

use crate::error::McpAuthError;

/// Whether a failure is about credentials or about reaching the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The server refused the credentials (or there were none): an [`McpAuthError`].
    Auth,
    /// Anything else: the server could not be reached, or answered something unusable.
    Other,
}

/// A failure described: its cause and a sentence (not yet redacted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Described {
    pub(crate) cause: Cause,
    pub(crate) message: String,
}

impl Described {
    fn other(message: impl Into<String>) -> Self {
        Described {
            cause: Cause::Other,
            message: message.into(),
        }
    }

    fn auth(message: impl Into<String>) -> Self {
        Described {
            cause: Cause::Auth,
            message: message.into(),
        }
    }
}

/// At most `max` characters of `text`, with `…` when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The HTTP status of an answer rmcp's reqwest client reports as `HTTP <status>: <body>`.
fn plain_status(message: &str) -> Option<(u16, &str)> {
    let rest = message.strip_prefix("HTTP ")?;
    let code: u16 = rest.get(..3)?.parse().ok()?;
    let body = rest.split_once(": ").map_or("", |(_, b)| b);
    Some((code, body))
}

/// Whether an HTTP failure is a 401 without a `WWW-Authenticate` challenge (rmcp reports
/// those as unexpected responses).
pub(crate) fn is_plain_unauthorized(error: &StreamableHttpError<reqwest::Error>) -> bool {
    matches!(error, StreamableHttpError::UnexpectedServerResponse(m) if plain_status(m).is_some_and(|(code, _)| code == 401))
}

fn http(error: &StreamableHttpError<reqwest::Error>) -> Described {
    match error {
        StreamableHttpError::AuthRequired(_) => Described::auth("the server refused the credentials (HTTP 401)"),
        StreamableHttpError::InsufficientScope(e) => Described::auth(match &e.required_scope {
            Some(scope) => format!("the credentials lack the scope {scope:?} the server requires (HTTP 403)"),
            None => "the credentials lack a scope the server requires (HTTP 403)".to_owned(),
        }),
        StreamableHttpError::UnexpectedServerResponse(message) => match plain_status(message) {
            Some((401, _)) => Described::auth("the server refused the credentials (HTTP 401)"),
            Some((403, _)) => Described::auth("the server refused access with these credentials (HTTP 403)"),
            Some((code, body)) => {
                let body = shorten(body, 200);
                if body.is_empty() || body == "<empty>" {
                    Described::other(format!("the server answered HTTP {code}"))
                } else {
                    Described::other(format!("the server answered HTTP {code}: {body}"))
                }
            }
            None => Described::other(format!(
                "the server's answer could not be understood ({})",
                shorten(message, 200)
            )),
        },
        StreamableHttpError::HttpStatus(status) => Described::other(match (status.status, &status.retry_after) {
            (429, Some(after)) => format!("the server is rate limiting requests (HTTP 429, retry after {after})"),
            (429, None) => "the server is rate limiting requests (HTTP 429)".to_owned(),
            (code, _) => format!("the server failed (HTTP {code})"),
        }),
        StreamableHttpError::Client(e) => Described::other(reqwest_failure(e)),
        StreamableHttpError::Io(e) => match e.get_ref().and_then(|inner| inner.downcast_ref::<McpAuthError>()) {
            Some(auth) => Described::auth(auth.message.clone()),
            None => Described::other(format!("the connection failed: {e}")),
        },
        StreamableHttpError::Sse(e) => Described::other(format!("the server's event stream broke: {e}")),
        StreamableHttpError::UnexpectedEndOfStream => {
            Described::other("the server's event stream ended before the answer")
        }
        StreamableHttpError::ResponseBodyTooLarge { max_size } => Described::other(format!(
            "the server's answer is larger than the {} MiB message limit",
            max_size / (1024 * 1024)
        )),
        StreamableHttpError::UnexpectedContentType(content_type) => Described::other(match content_type {
            Some(ct) => format!(
                "the server answered with content type {:?}, not JSON or an event stream (is the URL an MCP endpoint?)",
                shorten(ct, 80)
            ),
            None => "the server answered without a content type (is the URL an MCP endpoint?)".to_owned(),
        }),
        StreamableHttpError::SessionExpired => Described::other("the server ended the session (HTTP 404)"),
        StreamableHttpError::TransportChannelClosed => Described::other("the connection is closed"),
        StreamableHttpError::MissingSessionIdInResponse => {
            Described::other("the server's answer carries no session id")
        }
        StreamableHttpError::TokioJoinError(_) => Described::other("the connection's task failed"),
        // The other variants' own messages are plain sentences without type names.
        other => Described::other(lowercase_first(&other.to_string())),
    }
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A reqwest failure without its URL (it may carry a token in its query) or type names.
fn reqwest_failure(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "the request to the server timed out"
    } else if e.is_connect() {
        "the server could not be reached"
    } else if e.is_body() || e.is_decode() {
        "the server's answer could not be read"
    } else {
        "the request to the server failed"
    };
    // The innermost cause is the useful part ("Connection refused (os error 111)").
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    let mut last = None;
    while let Some(c) = cause {
        last = Some(c);
        cause = c.source();
    }
    match last {
        Some(c) => format!("{what}: {}", lowercase_first(&c.to_string())),
        None => what.to_owned(),
    }
}

/// A failure of the transport itself.
pub(crate) fn transport(error: &DynamicTransportError) -> Described {
    let inner = error.error.as_ref();
    if let Some(e) = inner.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return http(e);
    }
    if let Some(e) = inner.downcast_ref::<std::io::Error>() {
        return match e.kind() {
            std::io::ErrorKind::BrokenPipe => Described::other("the server closed its input (it may have exited)"),
            std::io::ErrorKind::NotConnected => Described::other("the server's input is closed"),
            _ => Described::other(format!("writing to the server failed: {e}")),
        };
    }
    Described::other(lowercase_first(&inner.to_string()))
}

/// A failed request of an open session.
pub(crate) fn service(error: &ServiceError) -> Described {
    match error {
        ServiceError::TransportSend(e) => transport(e),
        ServiceError::TransportClosed => Described::other("the connection is closed"),
        ServiceError::McpError(data) => Described::other(format!(
            "the server answered with error {}: {}",
            data.code.0,
            shorten(&data.message, 500)
        )),
        ServiceError::UnexpectedResponse => Described::other("the server's answer is not the one asked for"),
        ServiceError::Cancelled { reason } => Described::other(match reason {
            Some(reason) => format!("the request was cancelled ({})", shorten(reason, 200)),
            None => "the request was cancelled".to_owned(),
        }),
        ServiceError::Timeout { timeout } => {
            Described::other(format!("no answer within {:.1}s", timeout.as_secs_f64()))
        }
        // The other variants' own messages are plain sentences without type names.
        other => Described::other(lowercase_first(&other.to_string())),
    }
}

/// A failed `initialize`.
pub(crate) fn initialize(error: &ClientInitializeError) -> Described {
    match error {
        ClientInitializeError::TransportError { error, .. } => transport(error),
        ClientInitializeError::JsonRpcError(data) => Described::other(format!(
            "the server answered initialize with error {}: {}",
            data.code.0,
            shorten(&data.message, 500)
        )),
        ClientInitializeError::ConnectionClosed(_) => {
            Described::other("the connection closed before the server answered initialize")
        }
        ClientInitializeError::ExpectedInitResponse(None) | ClientInitializeError::ExpectedInitResult(None) => {
            Described::other("the connection closed before the server answered initialize")
        }
        ClientInitializeError::ExpectedInitResponse(Some(_)) => {
            Described::other("the server sent something other than an answer to initialize")
        }
        ClientInitializeError::ExpectedInitResult(Some(_)) => {
            Described::other("the server's answer to initialize is not an initialize result")
        }
        ClientInitializeError::ConflictInitResponseId(..) | ClientInitializeError::UncorrelatedErrorResponse { .. } => {
            Described::other("the server answered initialize under another request id")
        }
        ClientInitializeError::NoCompatibleProtocolVersion { server_supported, .. } => {
            let versions: Vec<String> = server_supported.iter().map(ToString::to_string).collect();
            Described::other(format!(
                "the server supports no MCP protocol version this client speaks (it offers {})",
                if versions.is_empty() {
                    "none".to_owned()
                } else {
                    versions.join(", ")
                }
            ))
        }
        ClientInitializeError::Cancelled => Described::other("initialize was cancelled"),
        // Both attempts failed: the legacy one is what a server without `discover` saw.
        ClientInitializeError::LegacyFallbackFailed { discover, fallback } => {
            let fallback = initialize(fallback);
            if fallback.cause == Cause::Auth {
                return fallback;
            }
            let discover = initialize(discover);
            if discover.cause == Cause::Auth {
                discover
            } else {
                fallback
            }
        }
        other => Described::other(lowercase_first(&other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ErrorData;

    fn http_error(e: StreamableHttpError<reqwest::Error>) -> DynamicTransportError {
        DynamicTransportError::from_parts(
            "rmcp::transport::Worker<Dummy>",
            std::any::TypeId::of::<()>(),
            Box::new(e),
        )
    }

    #[test]
    fn a_plain_401_is_about_credentials() {
        let e = http_error(StreamableHttpError::UnexpectedServerResponse(
            "HTTP 401 Unauthorized: nope".into(),
        ));
        assert_eq!(
            transport(&e),
            Described::auth("the server refused the credentials (HTTP 401)")
        );
        let e = http_error(StreamableHttpError::UnexpectedServerResponse(
            "HTTP 404 Not Found: <empty>".into(),
        ));
        assert_eq!(transport(&e), Described::other("the server answered HTTP 404"));
        let e = ServiceError::TransportSend(http_error(StreamableHttpError::UnexpectedServerResponse(
            "HTTP 403 Forbidden: no".into(),
        )));
        assert_eq!(service(&e).cause, Cause::Auth);
    }

    #[test]
    fn messages_carry_no_rmcp_type_names() {
        let cases = [
            service(&ServiceError::TransportClosed),
            service(&ServiceError::McpError(ErrorData::internal_error("boom", None))),
            service(&ServiceError::TransportSend(http_error(
                StreamableHttpError::TransportChannelClosed,
            ))),
            initialize(&ClientInitializeError::ExpectedInitResponse(None)),
            initialize(&ClientInitializeError::ConnectionClosed("initialized response".into())),
            initialize(&ClientInitializeError::TransportError {
                error: http_error(StreamableHttpError::UnexpectedContentType(Some("text/html".into()))),
                context: "send initialize request".into(),
            }),
        ];
        for d in cases {
            for banned in [
                "Transport",
                "rmcp",
                "Error(",
                "Some(",
                "when send",
                "Worker",
                "Mcp error",
            ] {
                assert!(!d.message.contains(banned), "{:?} contains {banned}", d.message);
            }
        }
    }

    #[test]
    fn status_lines_are_parsed() {
        assert_eq!(plain_status("HTTP 401 Unauthorized: x"), Some((401, "x")));
        assert_eq!(plain_status("HTTP 502 Bad Gateway"), Some((502, "")));
        assert_eq!(plain_status("could not parse"), None);
        assert_eq!(shorten("  abcdef ", 3), "abc…");
    }
}
