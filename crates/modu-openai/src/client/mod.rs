//! [`OpenAiClient`]: the client, its shared configuration and the HTTP requests it sends.
//!
//! The builder and the shared connection pools are in `builder`, the `ChatModel` impl in
//! `chat`, the decoding of a streamed answer in `stream`, and `GET /models` in `models`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use modu_core::ModelError;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};

use crate::error::{OpenAiConfigError, Timeouts, status_error, transport_error};
use crate::wire::MessageOptions;
use modu_core::redact::{MaskedHeaders, Redactor, display_url};
use modu_core::tool_json::ToolJsonCache;

mod builder;
mod chat;
mod models;
mod stream;

pub use builder::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, OpenAiClientBuilder};
pub use models::ModelInfo;
pub(crate) use stream::sse_stream;

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint (vLLM, llama.cpp's
/// server, OpenAI, and the many servers that copy the format).
///
/// Cheap to clone: clones share one configuration and one connection pool. Clients built with
/// the same timeouts share one process-wide pool too, unless given their own
/// [`reqwest::Client`] with [`OpenAiClientBuilder::http_client`].
///
/// [`ChatModel::stream`] sends `stream: true` and reads the server-sent events;
/// [`ChatModel::complete`] sends `stream: false` and reads one JSON answer (or, with
/// [`OpenAiClientBuilder::always_stream`], streams too and folds the deltas). Dropping the
/// stream closes the connection, which makes vLLM and llama.cpp abort the generation.
///
/// The client never shows its credentials: `Debug` prints header names with `***` values and
/// the base URL without its user info, and every [`ModelError`] it returns has the API key,
/// each configured header value (and the token of a `Bearer xyz` value) and the base URL's user
/// name and password replaced by `***`, in the server's quoted error bodies too. Values shorter
/// than 4 bytes are hidden in `Debug` but not searched for in texts (they would match ordinary
/// words and numbers, and are no credentials).
///
/// [`ChatModel::stream`]: modu_core::ChatModel::stream
/// [`ChatModel::complete`]: modu_core::ChatModel::complete
#[derive(Clone)]
pub struct OpenAiClient {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) base_url: String,
    pub(crate) chat_url: String,
    /// `chat_url` parsed once, without its user info (cloning a URL is cheaper than parsing
    /// it for every request).
    chat_url_parsed: reqwest::Url,
    models_url: String,
    pub(crate) model: String,
    pub(crate) headers: HeaderMap,
    /// The headers of a non-streamed chat request (`builder::chat_template`).
    json_headers: HeaderMap,
    /// The headers of a streamed one (`Accept: text/event-stream` too).
    sse_headers: HeaderMap,
    request_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
    /// The timeouts as the requests run them (for naming the one that fired).
    pub(crate) timeouts: Timeouts,
    pub(crate) message_options: MessageOptions,
    always_stream: bool,
    redactor: Arc<Redactor>,
    /// The JSON of the shared tool lists sent lately (an agent's list, serialised once).
    tool_json: ToolJsonCache,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are secrets (the API key among them): names only.
        let i = &self.inner;
        let names = i.headers.keys().map(|n| n.as_str().to_owned()).collect();
        f.debug_struct("OpenAiClient")
            .field("base_url", &display_url(&i.base_url))
            .field("model", &i.model)
            .field("headers", &MaskedHeaders(names))
            .field("request_timeout", &i.request_timeout)
            .field("read_timeout", &i.read_timeout)
            .field("always_stream", &i.always_stream)
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// A builder.
    pub fn builder() -> OpenAiClientBuilder {
        OpenAiClientBuilder::default()
    }

    /// A client for this base URL and model, with no key and the default timeouts.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Result<Self, OpenAiConfigError> {
        Self::builder().base_url(base_url).model(model).build()
    }

    /// A client configured from the environment: `OPENAI_BASE_URL` (default
    /// `https://api.openai.com/v1`), `OPENAI_MODEL` (required) and `OPENAI_API_KEY` (optional).
    pub fn from_env() -> Result<Self, OpenAiConfigError> {
        Self::builder_from_env()?.build()
    }

    /// [`OpenAiClient::from_env`] as a builder, to add headers or timeouts.
    pub fn builder_from_env() -> Result<OpenAiClientBuilder, OpenAiConfigError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut builder = Self::builder()
            .base_url(var("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into()))
            .model(var("OPENAI_MODEL").ok_or(OpenAiConfigError::MissingEnv("OPENAI_MODEL"))?);
        if let Some(key) = var("OPENAI_API_KEY") {
            builder = builder.api_key(key);
        }
        Ok(builder)
    }

    /// The base URL (without a trailing `/`), as configured: with its user info, if it has one
    /// (`Debug` and errors never show it).
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// The model name sent in requests.
    pub fn model(&self) -> &str {
        &self.inner.model
    }

    /// Whether [`ChatModel::complete`] streams too ([`OpenAiClientBuilder::always_stream`]).
    ///
    /// [`ChatModel::complete`]: modu_core::ChatModel::complete
    pub fn always_streams(&self) -> bool {
        self.inner.always_stream
    }

    /// The same server and settings with another model name (sharing the pool).
    pub fn with_model(&self, model: impl Into<String>) -> Self {
        let i = &self.inner;
        OpenAiClient {
            inner: Arc::new(Inner {
                http: i.http.clone(),
                base_url: i.base_url.clone(),
                chat_url: i.chat_url.clone(),
                chat_url_parsed: i.chat_url_parsed.clone(),
                models_url: i.models_url.clone(),
                model: model.into(),
                headers: i.headers.clone(),
                json_headers: i.json_headers.clone(),
                sse_headers: i.sse_headers.clone(),
                request_timeout: i.request_timeout,
                read_timeout: i.read_timeout,
                timeouts: i.timeouts,
                message_options: i.message_options,
                always_stream: i.always_stream,
                redactor: Arc::clone(&i.redactor),
                tool_json: ToolJsonCache::default(),
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The error with the client's secrets masked.
    pub(crate) fn redact(&self, err: ModelError) -> ModelError {
        self.inner.redactor.error(err)
    }

    /// The error of a request sent at `started` that failed in reqwest (masked by callers).
    pub(crate) fn transport_error(&self, err: reqwest::Error, started: Instant, what: &str) -> ModelError {
        transport_error(err, &self.inner.timeouts, started, what)
    }

    /// POSTs a JSON body and returns the response when its status is a success. Its errors
    /// are not masked yet: callers pass them through [`OpenAiClient::redact`].
    pub(crate) async fn post_json(
        &self,
        url: &str,
        body: Vec<u8>,
        sse: bool,
        started: Instant,
    ) -> Result<reqwest::Response, ModelError> {
        let i = &self.inner;
        let mut rb = i
            .http
            .post(url)
            .headers(i.headers.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body);
        if sse {
            rb = rb.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        if let Some(t) = i.request_timeout {
            rb = rb.timeout(t);
        }
        let resp = rb.send().await.map_err(|e| self.transport_error(e, started, url))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        Err(status_error(status, &headers, &text, &i.model, &i.redactor, url))
    }

    /// [`OpenAiClient::post_json`] to `/chat/completions`, with the URL and headers made once
    /// at build time instead of a request builder's parsing and merging.
    async fn post_chat(&self, body: Vec<u8>, sse: bool, started: Instant) -> Result<reqwest::Response, ModelError> {
        let i = &self.inner;
        let mut request = reqwest::Request::new(reqwest::Method::POST, i.chat_url_parsed.clone());
        *request.headers_mut() = if sse {
            i.sse_headers.clone()
        } else {
            i.json_headers.clone()
        };
        *request.body_mut() = Some(body.into());
        *request.timeout_mut() = i.request_timeout;
        let resp = i
            .http
            .execute(request)
            .await
            .map_err(|e| self.transport_error(e, started, &i.chat_url))?;
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
