//! [`OpenAiClient`]: configuration, the shared HTTP client and the [`ChatModel`] impl.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use modu_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, ChatStream, InputModalities, ModelError,
};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

use crate::error::{OpenAiConfigError, status_error, stream_error, transport_error};
use crate::sse::{Flow, SseDecoder};
use crate::tool_json::ToolJsonCache;
use crate::wire::{self, EmptyToolCallContent, MessageOptions, WireChunk, WireCompletion};
use modu_core::ReasoningReplay;
use modu_core::redact::{MaskedHeaders, Redactor, display_url};

/// The default time allowed to open a TCP connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default longest silence while reading an answer (between two chunks of a stream).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(300);

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
#[derive(Clone)]
pub struct OpenAiClient {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) base_url: String,
    chat_url: String,
    /// `chat_url` parsed once, without its user info (cloning a URL is cheaper than parsing
    /// it for every request).
    chat_url_parsed: reqwest::Url,
    models_url: String,
    pub(crate) model: String,
    pub(crate) headers: HeaderMap,
    /// The headers of a non-streamed chat request ([`chat_template`]).
    json_headers: HeaderMap,
    /// The headers of a streamed one (`Accept: text/event-stream` too).
    sse_headers: HeaderMap,
    request_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
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

/// Builds an [`OpenAiClient`]. Start with [`OpenAiClient::builder`].
#[derive(Clone)]
#[must_use]
pub struct OpenAiClientBuilder {
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
    headers: Vec<(String, String)>,
    connect_timeout: Duration,
    read_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    http: Option<reqwest::Client>,
    empty_content: EmptyToolCallContent,
    reasoning_replay: ReasoningReplay,
    always_stream: bool,
    input_modalities: InputModalities,
    max_inline_media_bytes: usize,
}

impl std::fmt::Debug for OpenAiClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = self.headers.iter().map(|(n, _)| n.clone()).collect();
        f.debug_struct("OpenAiClientBuilder")
            .field("base_url", &self.base_url.as_deref().map(display_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| modu_core::redact::MASK))
            .field("headers", &MaskedHeaders(names))
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("always_stream", &self.always_stream)
            .finish_non_exhaustive()
    }
}

impl Default for OpenAiClientBuilder {
    fn default() -> Self {
        OpenAiClientBuilder {
            base_url: None,
            model: None,
            api_key: None,
            headers: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            read_timeout: Some(DEFAULT_READ_TIMEOUT),
            request_timeout: None,
            http: None,
            empty_content: EmptyToolCallContent::default(),
            reasoning_replay: ReasoningReplay::default(),
            always_stream: false,
            input_modalities: InputModalities::all(),
            max_inline_media_bytes: modu_core::media::DEFAULT_MAX_INLINE_MEDIA_BYTES,
        }
    }
}

impl OpenAiClientBuilder {
    /// The API's base URL, up to and including `/v1`: `http://127.0.0.1:8000/v1` for vLLM,
    /// `http://127.0.0.1:8080/v1` for llama.cpp, `https://api.openai.com/v1`.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// The model name sent in every request (vLLM's `--served-model-name`; llama.cpp ignores it).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// A bearer API key (`Authorization: Bearer KEY`), marked sensitive so it is never logged,
    /// and masked as `***` in `Debug` and in every error the client returns.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.api_key = (!key.is_empty()).then_some(key);
        self
    }

    /// An extra header sent with every request (for example `OpenAI-Organization`, or a
    /// gateway's routing header). Its value is treated as a secret: masked as `***` in `Debug`
    /// and in every error the client returns (also the `xyz` of a `Bearer xyz` value).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The time allowed to open a connection (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The longest silence while reading an answer, between two chunks of a stream (default
    /// 300 s; `None` for none).
    pub fn read_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// A limit on a whole request, from sending it to the last byte of the answer (default
    /// none: the agent's run timeout bounds runs).
    pub fn request_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Uses this HTTP client (and its pool, TLS and proxy settings) instead of the shared one.
    /// The connect and read timeouts set here are then ignored.
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http = Some(client);
        self
    }

    /// How an assistant turn that only calls tools sends its empty content (default `""`).
    pub fn empty_tool_call_content(mut self, mode: EmptyToolCallContent) -> Self {
        self.empty_content = mode;
        self
    }

    /// Which assistant messages send their reasoning back as `reasoning_content` (default
    /// [`ReasoningReplay::Never`]: DeepSeek-style servers answer HTTP 400 to it).
    pub fn reasoning_replay(mut self, replay: ReasoningReplay) -> Self {
        self.reasoning_replay = replay;
        self
    }

    /// The kinds of input the model takes (default [`InputModalities::all`]: all, or
    /// unknown). A request with an image, audio or file part the model does not take fails
    /// with [`ModelError::UnsupportedContent`] before anything is sent.
    ///
    /// ```
    /// use modu_core::{ChatModel, InputModalities, Modality};
    /// use modu_openai::OpenAiClient;
    ///
    /// let client = OpenAiClient::builder()
    ///     .base_url("http://127.0.0.1:8000/v1")
    ///     .model("qwen2.5-vl")
    ///     .input_modalities(InputModalities::text_only().with(Modality::Image))
    ///     .build()?;
    /// assert!(client.input_modalities().accepts(Modality::Image));
    /// assert!(!client.input_modalities().accepts(Modality::Audio));
    /// # Ok::<(), modu_openai::OpenAiConfigError>(())
    /// ```
    pub fn input_modalities(mut self, modalities: InputModalities) -> Self {
        self.input_modalities = modalities;
        self
    }

    /// The model takes text only: shorthand for
    /// `.input_modalities(InputModalities::text_only())`.
    pub fn text_only(self) -> Self {
        self.input_modalities(InputModalities::text_only())
    }

    /// The most base64 text one inline medium of a request may hold (default
    /// [`DEFAULT_MAX_INLINE_MEDIA_BYTES`](modu_core::media::DEFAULT_MAX_INLINE_MEDIA_BYTES));
    /// a larger part fails with [`ModelError::UnsupportedContent`] before anything is sent.
    pub fn max_inline_media_bytes(mut self, bytes: usize) -> Self {
        self.max_inline_media_bytes = bytes;
        self
    }

    /// Streams every request, [`ChatModel::complete`] included: `complete` then sends
    /// `stream: true` and folds the deltas into its answer (default `false`: `complete` sends
    /// `stream: false` and reads one JSON answer, which costs the client less).
    ///
    /// For deployments that want every request streamed: a proxy or gateway that cuts a
    /// connection silent for longer than its idle timeout while a long answer is generated
    /// (the chunks keep it busy), or a server whose non-streamed path differs from its streamed
    /// one. The read timeout then bounds the silence between two chunks instead of the wait for
    /// the whole answer.
    ///
    /// ```
    /// use modu_openai::OpenAiClient;
    ///
    /// let client = OpenAiClient::builder()
    ///     .base_url("http://127.0.0.1:8000/v1")
    ///     .model("qwen3")
    ///     .always_stream(true)
    ///     .build()?;
    /// assert!(client.always_streams());
    /// # Ok::<(), modu_openai::OpenAiConfigError>(())
    /// ```
    pub fn always_stream(mut self, always: bool) -> Self {
        self.always_stream = always;
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<OpenAiClient, OpenAiConfigError> {
        let raw = self.base_url.ok_or(OpenAiConfigError::Missing("base_url"))?;
        let base_url = normalize_base_url(&raw)?;
        let model = self.model.ok_or(OpenAiConfigError::Missing("model"))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let invalid = || OpenAiConfigError::InvalidHeader { name: name.clone() };
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
            let v = HeaderValue::from_str(value).map_err(|_| invalid())?;
            headers.append(n, v);
        }
        if let Some(key) = &self.api_key {
            let mut v =
                HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| OpenAiConfigError::InvalidHeader {
                    name: "authorization".into(),
                })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        let http = match self.http {
            Some(c) => c,
            None => shared_client(self.connect_timeout, self.read_timeout)?,
        };
        let redactor = Redactor::new(
            self.api_key.as_deref(),
            self.headers.iter().map(|(_, v)| v.as_str()),
            &base_url,
        );
        let chat_url = format!("{base_url}/chat/completions");
        let (chat_url_parsed, json_headers) = chat_template(&http, &chat_url, &headers, false)?;
        let (_, sse_headers) = chat_template(&http, &chat_url, &headers, true)?;
        Ok(OpenAiClient {
            inner: Arc::new(Inner {
                http,
                chat_url,
                chat_url_parsed,
                models_url: format!("{base_url}/models"),
                base_url,
                model,
                headers,
                json_headers,
                sse_headers,
                request_timeout: self.request_timeout,
                read_timeout: self.read_timeout,
                message_options: MessageOptions {
                    empty_content: self.empty_content,
                    reasoning: self.reasoning_replay,
                    modalities: self.input_modalities,
                    max_inline_media_bytes: self.max_inline_media_bytes,
                },
                always_stream: self.always_stream,
                redactor: Arc::new(redactor),
                tool_json: ToolJsonCache::default(),
            }),
        })
    }
}

/// The URL and headers of a chat request, made once with a request builder: the configured
/// headers, the content type (and, streamed, the accepted type), and the `Basic` credentials
/// of a base URL's user info, moved out of the URL (as the builder does for every request).
fn chat_template(
    http: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    sse: bool,
) -> Result<(reqwest::Url, HeaderMap), OpenAiConfigError> {
    let mut rb = http
        .post(url)
        .headers(headers.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if sse {
        rb = rb.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
    }
    let request = rb.build().map_err(OpenAiConfigError::Http)?;
    Ok((request.url().clone(), request.headers().clone()))
}

fn normalize_base_url(raw: &str) -> Result<String, OpenAiConfigError> {
    let url = raw.trim().trim_end_matches('/');
    let invalid = |reason: &str| OpenAiConfigError::InvalidBaseUrl {
        url: display_url(raw).into_owned(),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| invalid("must start with http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(invalid("has no host"));
    }
    reqwest::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
    Ok(url.to_owned())
}

type PoolKey = (Duration, Option<Duration>);

/// One pooled client per (connect, read) timeout pair, for the whole process.
fn shared_client(connect: Duration, read: Option<Duration>) -> Result<reqwest::Client, OpenAiConfigError> {
    static POOLS: OnceLock<Mutex<HashMap<PoolKey, reqwest::Client>>> = OnceLock::new();
    let pools = POOLS.get_or_init(Default::default);
    let mut pools = pools.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(c) = pools.get(&(connect, read)) {
        return Ok(c.clone());
    }
    let mut builder = reqwest::Client::builder()
        .connect_timeout(connect)
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(90))
        .user_agent(concat!("modu-openai/", env!("CARGO_PKG_VERSION")));
    if let Some(read) = read {
        builder = builder.read_timeout(read);
    }
    let client = builder.build().map_err(OpenAiConfigError::Http)?;
    pools.insert((connect, read), client.clone());
    Ok(client)
}

/// A model the server offers (`GET /v1/models`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct ModelInfo {
    /// The model's name, as requests must send it.
    pub id: String,
    /// Who owns it, when the server says.
    #[serde(default)]
    pub owned_by: Option<String>,
    /// The model's maximum context length, when the server says (vLLM: `max_model_len`).
    #[serde(default)]
    pub max_model_len: Option<u64>,
}

#[derive(Deserialize)]
struct ModelList {
    #[serde(default)]
    data: Vec<ModelInfo>,
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

    /// The models the server offers (`GET {base_url}/models`), for health checks and a
    /// `doctor` command. A 401 here means the key is wrong, a connection error that the
    /// server is down.
    pub async fn list_models(&self) -> Result<Vec<ModelInfo>, ModelError> {
        self.list_models_raw().await.map_err(|e| self.redact(e))
    }

    async fn list_models_raw(&self) -> Result<Vec<ModelInfo>, ModelError> {
        let i = &self.inner;
        let mut rb = i.http.get(&i.models_url).headers(i.headers.clone());
        if let Some(t) = i.request_timeout {
            rb = rb.timeout(t);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| transport_error(e, self.timeout_hint(), &i.models_url))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp
            .text()
            .await
            .map_err(|e| transport_error(e, self.timeout_hint(), &i.models_url))?;
        if !status.is_success() {
            return Err(status_error(status, &headers, &text, &i.model, &i.redactor));
        }
        let list: ModelList = serde_json::from_str(&text)
            .map_err(|e| ModelError::invalid_response(format!("invalid model list: {e}")))?;
        Ok(list.data)
    }

    pub(crate) fn timeout_hint(&self) -> Option<Duration> {
        self.inner.request_timeout.or(self.inner.read_timeout)
    }

    /// POSTs a JSON body and returns the response when its status is a success. Its errors
    /// are not masked yet: callers pass them through [`OpenAiClient::redact`].
    pub(crate) async fn post_json(&self, url: &str, body: Vec<u8>, sse: bool) -> Result<reqwest::Response, ModelError> {
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
        let resp = rb
            .send()
            .await
            .map_err(|e| transport_error(e, self.timeout_hint(), url))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        Err(status_error(status, &headers, &text, &i.model, &i.redactor))
    }

    /// [`OpenAiClient::post_json`] to `/chat/completions`, with the URL and headers made once
    /// at build time instead of a request builder's parsing and merging.
    async fn post_chat(&self, body: Vec<u8>, sse: bool) -> Result<reqwest::Response, ModelError> {
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
            .map_err(|e| transport_error(e, self.timeout_hint(), &i.chat_url))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        Err(status_error(status, &headers, &text, &i.model, &i.redactor))
    }
}

#[async_trait]
impl ChatModel for OpenAiClient {
    fn model_name(&self) -> &str {
        &self.inner.model
    }

    fn input_modalities(&self) -> InputModalities {
        self.inner.message_options.modalities
    }

    // `stream` and `complete` encode the request before their future begins (the signatures
    // are `async_trait`'s, written out): the future then keeps the body, not the request, while
    // it waits for the server, and is that much smaller for every request in flight.
    fn stream<'life0, 'async_trait>(
        &'life0 self,
        request: ChatRequest,
    ) -> BoxFuture<'async_trait, Result<ChatStream, ModelError>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let body = self.encode(&request, true);
        drop(request);
        Box::pin(async move {
            let resp = self.post_chat(body?, true).await.map_err(|e| self.redact(e))?;
            Ok(Box::pin(sse_stream(Box::pin(resp.bytes_stream()), self.clone())) as ChatStream)
        })
    }

    fn complete<'life0, 'async_trait>(
        &'life0 self,
        request: ChatRequest,
    ) -> BoxFuture<'async_trait, Result<ChatResponse, ModelError>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        if self.inner.always_stream {
            let stream = self.stream(request);
            return Box::pin(async move {
                // The stream's errors are masked already.
                let mut stream = stream.await?;
                let mut builder = ChatResponseBuilder::default();
                while let Some(event) = stream.next().await {
                    builder.push(event?);
                }
                builder.finish()
            });
        }
        let body = self.encode(&request, false);
        drop(request);
        Box::pin(async move { self.complete_raw(body?).await.map_err(|e| self.redact(e)) })
    }
}

impl OpenAiClient {
    /// The body of a chat request (errors masked).
    fn encode(&self, request: &ChatRequest, stream: bool) -> Result<Vec<u8>, ModelError> {
        let i = &self.inner;
        wire::encode_request(&i.model, request, stream, i.message_options, &i.tool_json).map_err(|e| self.redact(e))
    }

    async fn complete_raw(&self, body: Vec<u8>) -> Result<ChatResponse, ModelError> {
        let i = &self.inner;
        let resp = self.post_chat(body, false).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| transport_error(e, self.timeout_hint(), &i.chat_url))?;
        let completion: WireCompletion = serde_json::from_slice(&bytes)
            .map_err(|e| ModelError::invalid_response(format!("invalid chat.completion JSON: {e}")))?;
        wire::completion_response(completion)
    }
}

/// How long a stream waits, after `[DONE]`, for the end of its body (normally already on its
/// way: the end of the chunked encoding), and how much more it reads while waiting.
const DRAIN_WAIT: Duration = Duration::from_millis(200);
const DRAIN_BYTES: usize = 64 * 1024;

enum Phase {
    Reading,
    /// `[DONE]` was read: drain the rest of the body, then end.
    Draining,
    Over,
}

/// Why the decoding of a chunk stopped.
enum Stop {
    Done,
    Failed(ModelError),
}

struct SseState<S> {
    bytes: Pin<Box<S>>,
    decoder: SseDecoder,
    pending: VecDeque<ChatEvent>,
    /// An error to return once the events decoded before it are out.
    failed: Option<ModelError>,
    saw_finish: bool,
    phase: Phase,
    client: OpenAiClient,
}

/// Reads `chat.completion.chunk` events until `[DONE]`, then reads what is left of the body
/// (a bounded drain: [`DRAIN_BYTES`], [`DRAIN_WAIT`]) so the connection returns to the pool.
///
/// - An event that is not valid JSON ends the stream with [`ModelError::InvalidResponse`].
/// - An `{"error": …}` event ends it with the mapped error.
/// - A broken connection ends it with [`ModelError::Transport`].
/// - A body that ends without `[DONE]` is accepted when a `finish_reason` was seen (the answer
///   is complete; only the terminator is missing) and is a [`ModelError::Transport`] otherwise
///   (the answer was cut).
///
/// Its errors have the client's secrets masked.
pub(crate) fn sse_stream<S, B>(
    bytes: Pin<Box<S>>,
    client: OpenAiClient,
) -> impl Stream<Item = Result<ChatEvent, ModelError>> + Send
where
    S: Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
    B: AsRef<[u8]>,
{
    let state = SseState {
        bytes,
        decoder: SseDecoder::default(),
        pending: VecDeque::new(),
        failed: None,
        saw_finish: false,
        phase: Phase::Reading,
        client,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(ev) = st.pending.pop_front() {
                return Some((Ok(ev), st));
            }
            if let Some(err) = st.failed.take() {
                st.phase = Phase::Over;
                let err = st.client.redact(err);
                return Some((Err(err), st));
            }
            match st.phase {
                Phase::Reading => {}
                Phase::Draining => {
                    st.phase = Phase::Over;
                    drain(st.bytes.as_mut()).await;
                    return None;
                }
                Phase::Over => return None,
            }
            let err = match st.bytes.next().await {
                None => {
                    st.phase = Phase::Over;
                    if st.saw_finish {
                        tracing::debug!("SSE stream ended without [DONE] after a finish_reason; accepted");
                        return None;
                    }
                    ModelError::Transport {
                        message: "the stream ended before the answer finished (no finish_reason, no [DONE])".into(),
                        source: None,
                    }
                }
                Some(Err(e)) => {
                    st.phase = Phase::Over;
                    transport_error(e, st.client.timeout_hint(), "reading the event stream")
                }
                Some(Ok(chunk)) => {
                    let SseState {
                        decoder,
                        pending,
                        saw_finish,
                        client,
                        ..
                    } = &mut st;
                    match decoder.feed(chunk.as_ref(), |data| on_event(data, pending, saw_finish, client)) {
                        None => continue,
                        Some(Stop::Done) => {
                            st.phase = Phase::Draining;
                            continue;
                        }
                        Some(Stop::Failed(err)) => {
                            st.failed = Some(err);
                            continue;
                        }
                    }
                }
            };
            let err = st.client.redact(err);
            return Some((Err(err), st));
        }
    })
}

/// One event's data: a chunk's events into `pending`, or why the stream stops.
fn on_event(
    data: &[u8],
    pending: &mut VecDeque<ChatEvent>,
    saw_finish: &mut bool,
    client: &OpenAiClient,
) -> Flow<Stop> {
    let data = data.trim_ascii();
    if data.is_empty() {
        return Flow::Continue;
    }
    if data == b"[DONE]" {
        return Flow::Stop(Stop::Done);
    }
    let i = client.inner();
    let chunk: WireChunk = match serde_json::from_slice(data) {
        Ok(c) => c,
        Err(e) => {
            // Masked before the cut: a cut secret would leak its first part.
            let shown: String = i
                .redactor
                .text(&String::from_utf8_lossy(data))
                .chars()
                .take(200)
                .collect();
            return Flow::Stop(Stop::Failed(ModelError::invalid_response(format!(
                "invalid JSON in a stream chunk ({e}): {shown}"
            ))));
        }
    };
    if let Some(error) = &chunk.error {
        return Flow::Stop(Stop::Failed(stream_error(error, &i.model, &i.redactor)));
    }
    if chunk.is_error_object {
        // vLLM: {"object": "error", "message": …, "type": …, "code": 400}
        let value: serde_json::Value = serde_json::from_slice(data).unwrap_or_default();
        return Flow::Stop(Stop::Failed(stream_error(&value, &i.model, &i.redactor)));
    }
    wire::chunk_events(chunk, pending, saw_finish);
    Flow::Continue
}

/// Reads what is left of a body after `[DONE]`: hyper returns a connection to the pool only
/// once its response body has ended, and a body dropped before its end closes the connection
/// (a new TCP connection for every streamed request). The end is normally already there; the
/// wait is bounded ([`DRAIN_WAIT`], [`DRAIN_BYTES`]) for servers that keep the body open.
async fn drain<S, B>(mut bytes: Pin<&mut S>)
where
    S: Stream<Item = Result<B, reqwest::Error>>,
    B: AsRef<[u8]>,
{
    let mut read = 0usize;
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        loop {
            match bytes.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(b))) => {
                    read += b.as_ref().len();
                    if read > DRAIN_BYTES {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(()),
                Poll::Pending => {
                    if timer.is_none() && tokio::runtime::Handle::try_current().is_err() {
                        return Poll::Ready(()); // no runtime to time the wait
                    }
                    let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(DRAIN_WAIT)));
                    return t.as_mut().poll(cx);
                }
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use modu_core::FinishReason;

    /// Polls a future that never waits (the bytes are in memory): no runtime needed, as the
    /// fuzz targets run it.
    fn block_on<F: std::future::Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    fn decode(pieces: Vec<Vec<u8>>) -> Result<ChatResponse, ModelError> {
        let client = OpenAiClient::new("http://127.0.0.1:9/v1", "m").unwrap();
        let bytes = futures::stream::iter(pieces.into_iter().map(Ok::<Vec<u8>, reqwest::Error>));
        block_on(async move {
            let mut stream = Box::pin(sse_stream(Box::pin(bytes), client));
            let mut builder = ChatResponseBuilder::default();
            while let Some(event) = stream.next().await {
                builder.push(event?);
            }
            builder.finish()
        })
    }

    #[test]
    fn a_stream_decodes_the_same_wherever_the_network_cuts_it() {
        let chunk = |delta: &str, finish: &str| {
            format!(
                r#"{{"id":"c","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
            )
        };
        let body = format!(
            "\u{feff}data: {}\n\ndata: {}\r\n\r\n: keep-alive\n\ndata: {}\r\rdata: {}\n\ndata: [DONE]\n\ndata: ignored\n\n",
            chunk(r#"{"role":"assistant","content":""}"#, "null"),
            chunk(r#"{"content":"héllo"}"#, "null"),
            chunk(r#"{"content":" wörld"}"#, r#""stop""#),
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
        )
        .into_bytes();
        let whole = decode(vec![body.clone()]).unwrap();
        assert_eq!(whole.message.text(), "héllo wörld");
        assert_eq!(whole.finish_reason, Some(FinishReason::Stop));
        assert_eq!(whole.usage.total_tokens, 5);
        for cut in 0..=body.len() {
            let split = decode(vec![body[..cut].to_vec(), body[cut..].to_vec()]).unwrap();
            assert_eq!(split, whole, "cut at {cut}");
        }
    }

    #[test]
    fn events_before_a_bad_chunk_come_first_then_the_error() {
        let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {not json\n\n".to_vec();
        let client = OpenAiClient::new("http://127.0.0.1:9/v1", "m").unwrap();
        let bytes = futures::stream::iter([Ok::<Vec<u8>, reqwest::Error>(body)]);
        let items: Vec<_> = block_on(sse_stream(Box::pin(bytes), client).collect());
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].as_ref().unwrap(), &ChatEvent::TextDelta { text: "a".into() });
        assert!(
            matches!(items[1], Err(ModelError::InvalidResponse { .. })),
            "{:?}",
            items[1]
        );
    }
}
