//! [`OllamaClient`]: the client, its shared configuration and the HTTP requests it sends.
//!
//! The builder, its defaults and the shared connection pool are in `builder`, the `ChatModel`
//! impl in `chat`, the decoding of a streamed (NDJSON) answer in `stream`, and `GET /api/tags`
//! in `models`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use modu_core::{ChatRequest, ModelError, ReasoningReplay};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Map, Value};

use crate::error::{OllamaConfigError, Timeouts, status_error, transport_error};
use crate::wire;
use modu_core::redact::{MaskedHeaders, Redactor, display_url};

mod builder;
mod chat;
mod models;
mod stream;

pub use builder::{DEFAULT_BASE_URL, OllamaClientBuilder};
pub use models::{OllamaModel, OllamaModelDetails};
pub(crate) use stream::ndjson_stream;

/// A chat model served by Ollama's native API (`POST /api/chat`).
///
/// Streaming reads Ollama's NDJSON lines; [`ChatModel::complete`] sends `stream: false`
/// (or, with [`OllamaClientBuilder::always_stream`], streams too and folds the deltas).
/// Tool calls arrive whole (one line each) with object arguments, which become
/// [`ToolCall::arguments`](modu_core::ToolCall) JSON text. `response_format` becomes
/// `format` (the JSON schema); `max_tokens` becomes `options.num_predict`. Ollama has no
/// `tool_choice`: `none` sends no tools, a named tool is sent alone, and `auto` and
/// `required` send them all (Ollama cannot be made to call one). It has no
/// `parallel_tool_calls` either: that is not sent.
///
/// Cheap to clone: clones share the configuration and the connection pool.
///
/// The client never shows its credentials: `Debug` prints header names with `***` values and
/// the base URL without its user info, and every [`ModelError`] it returns has the API key,
/// each configured header value (and the token of a `Bearer xyz` value) and the base URL's user
/// name and password replaced by `***`, in the server's quoted error bodies too. Values shorter
/// than 4 bytes are hidden in `Debug` but not searched for in texts (they would match ordinary
/// words and numbers, and are no credentials).
///
/// [`ChatModel::complete`]: modu_core::ChatModel::complete
#[derive(Clone)]
pub struct OllamaClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    base_url: String,
    chat_url: String,
    tags_url: String,
    model: String,
    headers: HeaderMap,
    options: Map<String, Value>,
    keep_alive: Option<Value>,
    request_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
    /// The timeouts as the requests run them (for naming the one that fired).
    timeouts: Timeouts,
    always_stream: bool,
    reasoning_replay: ReasoningReplay,
    input_modalities: modu_core::InputModalities,
    max_inline_media_bytes: usize,
    redactor: Arc<Redactor>,
    /// The JSON of the shared tool lists sent lately: an agent's list is encoded once.
    tool_json: modu_core::tool_json::ToolJsonCache,
}

impl std::fmt::Debug for OllamaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are secrets (the API key among them): names only.
        let i = &self.inner;
        let names = i.headers.keys().map(|n| n.as_str().to_owned()).collect();
        f.debug_struct("OllamaClient")
            .field("base_url", &display_url(&i.base_url))
            .field("model", &i.model)
            .field("headers", &MaskedHeaders(names))
            .field("options", &i.options)
            .field("keep_alive", &i.keep_alive)
            .field("request_timeout", &i.request_timeout)
            .field("read_timeout", &i.read_timeout)
            .field("always_stream", &i.always_stream)
            .finish_non_exhaustive()
    }
}

/// The base URL of an `OLLAMA_HOST` value, as Ollama's `envconfig.Host` reads it: a URL is
/// taken as it is; otherwise it is `host[:port][/path]` over http, port 11434 by default, the
/// host 127.0.0.1 when only a port is given, and an IPv6 address put in brackets.
fn host_url(host: &str) -> String {
    const PORT: &str = "11434";
    if host.contains("://") {
        return host.to_owned();
    }
    if host == "ollama.com" {
        return "https://ollama.com:443".to_owned();
    }
    let (hostport, path) = host.split_once('/').map_or((host, ""), |(h, p)| (h, p));
    let hostport = if let Some(bracketed) = hostport.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        if bracketed.contains("]:") {
            hostport.to_owned()
        } else {
            format!("{hostport}:{PORT}")
        }
    } else if hostport.matches(':').count() > 1 {
        // A bare IPv6 address.
        format!("[{hostport}]:{PORT}")
    } else {
        match hostport.split_once(':') {
            // An empty or invalid port is the default one, as Ollama reads it.
            Some((host, port)) if port.parse::<u16>().is_err() => {
                format!("{}:{PORT}", if host.is_empty() { "127.0.0.1" } else { host })
            }
            Some(("", port)) => format!("127.0.0.1:{port}"),
            Some(_) => hostport.to_owned(),
            None if hostport.is_empty() => format!("127.0.0.1:{PORT}"),
            None => format!("{hostport}:{PORT}"),
        }
    };
    if path.is_empty() {
        format!("http://{hostport}")
    } else {
        format!("http://{hostport}/{path}")
    }
}

impl OllamaClient {
    /// A client for this server and model.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Result<Self, OllamaConfigError> {
        Self::builder().base_url(base_url).model(model).build()
    }

    /// A builder reading `OLLAMA_HOST` as the Ollama CLI does: a URL as given, or
    /// `host[:port][/path]` over `http`, on port 11434 when none is given (`0.0.0.0` is
    /// `http://0.0.0.0:11434`, `ollama.com` alone is `https://ollama.com:443`). Unset or empty:
    /// `http://127.0.0.1:11434`.
    pub fn builder_from_env() -> OllamaClientBuilder {
        let b = Self::builder();
        match std::env::var("OLLAMA_HOST") {
            Ok(host) if !host.trim().is_empty() => b.base_url(host_url(host.trim())),
            _ => b,
        }
    }

    /// The base URL, as configured: with its user info, if it has one (`Debug` and errors never
    /// show it).
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    async fn post_chat(
        &self,
        request: &ChatRequest,
        stream: bool,
        started: Instant,
    ) -> Result<reqwest::Response, ModelError> {
        let i = &self.inner;
        wire::check_request(
            &i.model,
            &request.messages,
            i.input_modalities,
            i.max_inline_media_bytes,
        )?;
        let body = wire::encode_request(
            &i.model,
            request,
            stream,
            &i.options,
            i.keep_alive.as_ref(),
            i.reasoning_replay,
            &i.tool_json,
        )?;
        let mut rb = i
            .http
            .post(&i.chat_url)
            .headers(i.headers.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body);
        if let Some(t) = i.request_timeout {
            rb = rb.timeout(t);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| transport_error(e, &i.timeouts, started, &i.chat_url))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        Err(status_error(
            status,
            &headers,
            &text,
            &i.model,
            &i.redactor,
            &i.chat_url,
        ))
    }
}
