//! [`OllamaClient`]: configuration and the [`ChatModel`] impl over `/api/chat`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use modu_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, ChatStream, ModelError, ReasoningReplay,
};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, Decoder};

use crate::error::{OllamaConfigError, status_error, stream_error, transport_error};
use crate::wire::{self, LineState, WireLine};
use modu_core::redact::{MASK, MaskedHeaders, Redactor, display_url};

/// Ollama's default address.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434";

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

/// Builds an [`OllamaClient`]. Start with [`OllamaClient::builder`].
#[derive(Clone)]
#[must_use]
pub struct OllamaClientBuilder {
    base_url: String,
    model: Option<String>,
    api_key: Option<String>,
    headers: Vec<(String, String)>,
    options: Map<String, Value>,
    keep_alive: Option<Value>,
    connect_timeout: Duration,
    read_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    http: Option<reqwest::Client>,
    always_stream: bool,
    reasoning_replay: ReasoningReplay,
    input_modalities: modu_core::InputModalities,
    max_inline_media_bytes: usize,
}

impl std::fmt::Debug for OllamaClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = self.headers.iter().map(|(n, _)| n.clone()).collect();
        f.debug_struct("OllamaClientBuilder")
            .field("base_url", &display_url(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| MASK))
            .field("headers", &MaskedHeaders(names))
            .field("options", &self.options)
            .field("keep_alive", &self.keep_alive)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("always_stream", &self.always_stream)
            .finish_non_exhaustive()
    }
}

impl OllamaClientBuilder {
    /// The server's URL (default `http://127.0.0.1:11434`; no `/api` suffix).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// The model, as Ollama names it (`llama3.2`, `qwen3:8b`).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// A bearer key, for Ollama behind an authenticating proxy or Ollama's cloud. Sent as a
    /// sensitive header; masked as `***` in `Debug` and in every error the client returns.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.api_key = (!key.is_empty()).then_some(key);
        self
    }

    /// An extra header sent with every request. Its value is treated as a secret: masked as
    /// `***` in `Debug` and in every error the client returns (also the `xyz` of a `Bearer xyz`
    /// value).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The context window (`options.num_ctx`). Ollama's default is small (2048–4096 tokens
    /// depending on the version) and it truncates silently, so set it.
    pub fn num_ctx(self, tokens: u32) -> Self {
        self.option("num_ctx", Value::from(tokens))
    }

    /// A default model option sent with every request (`top_k`, `repeat_penalty`, …). A
    /// request's own sampling fields and `extras["options"]` win over it.
    pub fn option(mut self, name: impl Into<String>, value: Value) -> Self {
        self.options.insert(name.into(), value);
        self
    }

    /// How long Ollama keeps the model loaded after a request: a duration string (`"10m"`),
    /// seconds, `0` to unload at once or `-1` to keep it forever.
    pub fn keep_alive(mut self, keep_alive: impl Into<Value>) -> Self {
        self.keep_alive = Some(keep_alive.into());
        self
    }

    /// The kinds of input the model takes (default [`InputModalities::all`](modu_core::InputModalities::all):
    /// all, or unknown). A request with an image the model does not take fails with
    /// [`ModelError::UnsupportedContent`] before anything is sent. Ollama itself takes only
    /// inline images: audio, files and images by URL always fail before the request.
    pub fn input_modalities(mut self, modalities: modu_core::InputModalities) -> Self {
        self.input_modalities = modalities;
        self
    }

    /// The model takes text only (no vision): shorthand for
    /// `.input_modalities(InputModalities::text_only())`.
    pub fn text_only(self) -> Self {
        self.input_modalities(modu_core::InputModalities::text_only())
    }

    /// The most base64 text one inline image of a request may hold (default
    /// [`DEFAULT_MAX_INLINE_MEDIA_BYTES`](modu_core::media::DEFAULT_MAX_INLINE_MEDIA_BYTES));
    /// a larger image fails with [`ModelError::UnsupportedContent`] before anything is sent.
    pub fn max_inline_media_bytes(mut self, bytes: usize) -> Self {
        self.max_inline_media_bytes = bytes;
        self
    }

    /// Which assistant messages send their reasoning back as `thinking` (default
    /// [`ReasoningReplay::Never`]; Ollama's templates drop earlier thinking anyway).
    pub fn reasoning_replay(mut self, replay: ReasoningReplay) -> Self {
        self.reasoning_replay = replay;
        self
    }

    /// The time allowed to open a connection (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The longest silence while reading an answer (default 300 s: loading a model can take
    /// a while; `None` for none).
    pub fn read_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// A limit on a whole request (default none).
    pub fn request_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Uses this HTTP client instead of the shared one (its timeouts apply then).
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http = Some(client);
        self
    }

    /// Streams every request, [`ChatModel::complete`] included: `complete` then sends
    /// `stream: true` and folds the deltas into its answer (default `false`: `complete` sends
    /// `stream: false` and reads one JSON answer, which costs the client less).
    ///
    /// For deployments that want every request streamed, such as a proxy that cuts a
    /// connection silent for longer than its idle timeout while a long answer is generated:
    /// the streamed lines keep it busy, and the read timeout bounds the silence between two
    /// lines instead of the wait for the whole answer.
    pub fn always_stream(mut self, always: bool) -> Self {
        self.always_stream = always;
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<OllamaClient, OllamaConfigError> {
        let raw = self.base_url.trim().trim_end_matches('/').to_owned();
        let invalid = |reason: &str| OllamaConfigError::InvalidBaseUrl {
            url: display_url(&self.base_url).into_owned(),
            reason: reason.to_owned(),
        };
        if !(raw.starts_with("http://") || raw.starts_with("https://")) {
            return Err(invalid("must start with http:// or https://"));
        }
        reqwest::Url::parse(&raw).map_err(|e| invalid(&e.to_string()))?;
        let model = self.model.ok_or(OllamaConfigError::Missing("model"))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let bad = || OllamaConfigError::InvalidHeader { name: name.clone() };
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let v = HeaderValue::from_str(value).map_err(|_| bad())?;
            headers.append(n, v);
        }
        if let Some(key) = &self.api_key {
            let mut v =
                HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| OllamaConfigError::InvalidHeader {
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
            &raw,
        );
        Ok(OllamaClient {
            inner: Arc::new(Inner {
                http,
                chat_url: format!("{raw}/api/chat"),
                tags_url: format!("{raw}/api/tags"),
                base_url: raw,
                model,
                headers,
                options: self.options,
                keep_alive: self.keep_alive,
                request_timeout: self.request_timeout,
                read_timeout: self.read_timeout,
                always_stream: self.always_stream,
                reasoning_replay: self.reasoning_replay,
                input_modalities: self.input_modalities,
                max_inline_media_bytes: self.max_inline_media_bytes,
                redactor: Arc::new(redactor),
                tool_json: modu_core::tool_json::ToolJsonCache::new(),
            }),
        })
    }
}

fn shared_client(connect: Duration, read: Option<Duration>) -> Result<reqwest::Client, OllamaConfigError> {
    static DEFAULT: OnceLock<reqwest::Client> = OnceLock::new();
    let build = || {
        let mut b = reqwest::Client::builder()
            .connect_timeout(connect)
            .tcp_nodelay(true)
            .user_agent(concat!("modu-ollama/", env!("CARGO_PKG_VERSION")));
        if let Some(read) = read {
            b = b.read_timeout(read);
        }
        b.build().map_err(OllamaConfigError::Http)
    };
    if connect == crate::DEFAULT_CONNECT_TIMEOUT && read == Some(crate::DEFAULT_READ_TIMEOUT) {
        if let Some(c) = DEFAULT.get() {
            return Ok(c.clone());
        }
        let c = build()?;
        return Ok(DEFAULT.get_or_init(|| c).clone());
    }
    build()
}

/// A model Ollama has pulled (`GET /api/tags`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct OllamaModel {
    /// The name requests use (`llama3.2:latest`).
    pub name: String,
    /// Size on disk, in bytes.
    #[serde(default)]
    pub size: u64,
    /// The content digest.
    #[serde(default)]
    pub digest: String,
    /// Format, family, parameter size and quantisation.
    #[serde(default)]
    pub details: OllamaModelDetails,
}

/// Details of a pulled model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct OllamaModelDetails {
    /// `gguf`.
    #[serde(default)]
    pub format: String,
    /// `llama`, `qwen2`, …
    #[serde(default)]
    pub family: String,
    /// `3.2B`.
    #[serde(default)]
    pub parameter_size: String,
    /// `Q4_K_M`.
    #[serde(default)]
    pub quantization_level: String,
}

#[derive(Deserialize)]
struct Tags {
    #[serde(default)]
    models: Vec<OllamaModel>,
}

impl OllamaClient {
    /// A builder (base URL `http://127.0.0.1:11434`).
    pub fn builder() -> OllamaClientBuilder {
        OllamaClientBuilder {
            base_url: DEFAULT_BASE_URL.to_owned(),
            model: None,
            api_key: None,
            headers: Vec::new(),
            options: Map::new(),
            keep_alive: None,
            connect_timeout: crate::DEFAULT_CONNECT_TIMEOUT,
            read_timeout: Some(crate::DEFAULT_READ_TIMEOUT),
            request_timeout: None,
            http: None,
            always_stream: false,
            reasoning_replay: ReasoningReplay::default(),
            input_modalities: modu_core::InputModalities::all(),
            max_inline_media_bytes: modu_core::media::DEFAULT_MAX_INLINE_MEDIA_BYTES,
        }
    }

    /// A client for this server and model.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Result<Self, OllamaConfigError> {
        Self::builder().base_url(base_url).model(model).build()
    }

    /// A builder reading `OLLAMA_HOST` (a URL, or `host:port` as the Ollama CLI accepts; default
    /// `http://127.0.0.1:11434`).
    pub fn builder_from_env() -> OllamaClientBuilder {
        let mut b = Self::builder();
        if let Some(host) = std::env::var("OLLAMA_HOST").ok().filter(|h| !h.trim().is_empty()) {
            let host = host.trim();
            b = b.base_url(if host.contains("://") {
                host.to_owned()
            } else {
                format!("http://{host}")
            });
        }
        b
    }

    /// The base URL, as configured: with its user info, if it has one (`Debug` and errors never
    /// show it).
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// The models Ollama has pulled (`GET /api/tags`).
    pub async fn list_models(&self) -> Result<Vec<OllamaModel>, ModelError> {
        self.list_models_raw().await.map_err(|e| self.inner.redactor.error(e))
    }

    async fn list_models_raw(&self) -> Result<Vec<OllamaModel>, ModelError> {
        let i = &self.inner;
        let mut rb = i.http.get(&i.tags_url).headers(i.headers.clone());
        if let Some(t) = i.request_timeout {
            rb = rb.timeout(t);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| transport_error(e, self.timeout_hint(), &i.tags_url))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp
            .text()
            .await
            .map_err(|e| transport_error(e, self.timeout_hint(), &i.tags_url))?;
        if !status.is_success() {
            return Err(status_error(status, &headers, &text, &i.model, &i.redactor));
        }
        let tags: Tags =
            serde_json::from_str(&text).map_err(|e| ModelError::invalid_response(format!("invalid /api/tags: {e}")))?;
        Ok(tags.models)
    }

    fn timeout_hint(&self) -> Option<Duration> {
        self.inner.request_timeout.or(self.inner.read_timeout)
    }

    async fn post_chat(&self, request: &ChatRequest, stream: bool) -> Result<reqwest::Response, ModelError> {
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
impl ChatModel for OllamaClient {
    fn model_name(&self) -> &str {
        &self.inner.model
    }

    fn input_modalities(&self) -> modu_core::InputModalities {
        self.inner.input_modalities
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let redactor = Arc::clone(&self.inner.redactor);
        let resp = self.post_chat(&request, true).await.map_err(|e| redactor.error(e))?;
        let bytes = Box::pin(resp.bytes_stream());
        let stream = ndjson_stream(
            bytes,
            self.inner.model.clone(),
            self.timeout_hint(),
            Arc::clone(&redactor),
        )
        .map(move |item| item.map_err(|e| redactor.error(e)));
        Ok(Box::pin(stream))
    }

    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        if self.inner.always_stream {
            // The stream's errors are masked already.
            let mut stream = self.stream(request).await?;
            let mut builder = ChatResponseBuilder::default();
            while let Some(event) = stream.next().await {
                builder.push(event?);
            }
            return builder.finish();
        }
        self.complete_raw(request)
            .await
            .map_err(|e| self.inner.redactor.error(e))
    }
}

impl OllamaClient {
    async fn complete_raw(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let i = &self.inner;
        let resp = self.post_chat(&request, false).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| transport_error(e, self.timeout_hint(), &i.chat_url))?;
        let line: WireLine = serde_json::from_slice(&bytes)
            .map_err(|e| ModelError::invalid_response(format!("invalid /api/chat answer: {e}")))?;
        if let Some(error) = &line.error {
            return Err(stream_error(error, &i.model, &i.redactor));
        }
        let mut st = LineState::default();
        let mut events = Vec::new();
        wire::line_events(line, &mut st, &mut events);
        let mut builder = ChatResponseBuilder::default();
        for ev in events {
            builder.push(ev);
        }
        builder.finish()
    }
}

/// The longest NDJSON line read (16 MiB; a line is one token, or a whole tool call): a server
/// that sends more without a newline fails the answer instead of filling the memory.
const MAX_LINE_BYTES: usize = 16 << 20;

struct NdjsonState<S> {
    bytes: Pin<Box<S>>,
    buffer: BytesMut,
    /// Splits the buffer at newlines (it remembers how far it searched, and the length cap).
    framing: AnyDelimiterCodec,
    pending: VecDeque<ChatEvent>,
    lines: LineState,
    finished: bool,
    model: String,
    timeout: Option<Duration>,
    redactor: Arc<Redactor>,
}

enum Step {
    Event(ChatEvent),
    Fail(ModelError),
    End,
}

impl<S> NdjsonState<S> {
    /// Parses every complete line in the buffer, up to the `done: true` line (what follows it is
    /// ignored, as when it arrives in a later chunk).
    fn drain_lines(&mut self) -> Option<ModelError> {
        while !self.lines.done {
            let line = match self.framing.decode(&mut self.buffer) {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                    return Some(ModelError::invalid_response(format!(
                        "an NDJSON line is longer than {MAX_LINE_BYTES} bytes"
                    )));
                }
                Err(AnyDelimiterCodecError::Io(e)) => return Some(ModelError::invalid_response(e.to_string())),
            };
            if let Some(e) = self.parse_line(&line) {
                return Some(e);
            }
        }
        None
    }

    fn parse_line(&mut self, raw: &[u8]) -> Option<ModelError> {
        let text = String::from_utf8_lossy(raw);
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        let line: WireLine = match serde_json::from_str(text) {
            Ok(l) => l,
            Err(e) => {
                // Masked before the cut: a cut secret would leak its first part.
                let shown: String = self.redactor.text(text).chars().take(200).collect();
                return Some(ModelError::invalid_response(format!(
                    "invalid JSON in an NDJSON line ({e}): {shown}"
                )));
            }
        };
        if let Some(error) = &line.error {
            return Some(stream_error(error, &self.model, &self.redactor));
        }
        let mut out = Vec::new();
        wire::line_events(line, &mut self.lines, &mut out);
        self.pending.extend(out);
        None
    }
}

/// Reads NDJSON lines until the `done: true` line. A body that ends before it is a
/// [`ModelError::Transport`]; a line that is not JSON, or longer than [`MAX_LINE_BYTES`], an
/// [`ModelError::InvalidResponse`]. Lines are decoded lossily (invalid UTF-8 becomes U+FFFD).
pub(crate) fn ndjson_stream<S>(
    bytes: Pin<Box<S>>,
    model: String,
    timeout: Option<Duration>,
    redactor: Arc<Redactor>,
) -> impl Stream<Item = Result<ChatEvent, ModelError>> + Send
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    let state = NdjsonState {
        bytes,
        buffer: BytesMut::new(),
        framing: AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), b"\n".to_vec(), MAX_LINE_BYTES),
        pending: VecDeque::new(),
        lines: LineState::default(),
        finished: false,
        model,
        timeout,
        redactor,
    };
    futures::stream::unfold(state, |mut st| async move {
        let step = loop {
            if let Some(ev) = st.pending.pop_front() {
                break Step::Event(ev);
            }
            if st.finished || st.lines.done {
                break Step::End;
            }
            match st.bytes.next().await {
                Some(Ok(chunk)) => {
                    st.buffer.extend_from_slice(&chunk);
                    if let Some(e) = st.drain_lines() {
                        break Step::Fail(e);
                    }
                }
                Some(Err(e)) => break Step::Fail(transport_error(e, st.timeout, "reading the NDJSON stream")),
                None => {
                    // A last line without a trailing newline.
                    let rest = std::mem::take(&mut st.buffer);
                    if let Some(e) = st.parse_line(&rest) {
                        break Step::Fail(e);
                    }
                    if st.lines.done {
                        continue;
                    }
                    break Step::Fail(ModelError::Transport {
                        message: "the stream ended before the answer finished (no `done: true` line)".into(),
                        source: None,
                    });
                }
            }
        };
        match step {
            Step::Event(ev) => Some((Ok(ev), st)),
            Step::Fail(e) => {
                st.finished = true;
                st.pending.clear();
                Some((Err(e), st))
            }
            Step::End => None,
        }
    })
}
