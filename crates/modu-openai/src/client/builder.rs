//! [`OpenAiClientBuilder`]: the client's settings and their defaults, and the process-wide
//! pool of shared HTTP clients.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use modu_core::InputModalities;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::{Inner, OpenAiClient};
use crate::error::{OpenAiConfigError, Timeouts};
use crate::wire::{EmptyToolCallContent, MessageOptions};
use modu_core::ReasoningReplay;
use modu_core::redact::{MaskedHeaders, Redactor, display_url};
use modu_core::tool_json::ToolJsonCache;

/// The default time allowed to open a TCP connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default longest silence while reading an answer (between two chunks of a stream).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(300);

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
    /// `http://127.0.0.1:8080/v1` for llama.cpp, `https://api.openai.com/v1`. A URL with a
    /// query or fragment is refused by [`build`](Self::build) (the paths are appended to it).
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
    ///
    /// [`ModelError::UnsupportedContent`]: modu_core::ModelError::UnsupportedContent
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
    ///
    /// [`ModelError::UnsupportedContent`]: modu_core::ModelError::UnsupportedContent
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
    ///
    /// [`ChatModel::complete`]: modu_core::ChatModel::complete
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
        let own_client = self.http.is_none();
        let http = match self.http {
            Some(c) => c,
            None => shared_client(self.connect_timeout, self.read_timeout)?,
        };
        // A client of the caller's has its own connect and read timeouts, unknown here.
        let timeouts = Timeouts {
            connect: own_client.then_some(self.connect_timeout),
            read: self.read_timeout.filter(|_| own_client),
            request: self.request_timeout,
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
                timeouts,
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
    let trimmed = raw.trim();
    let invalid = |shown: &str, reason: &str| OpenAiConfigError::InvalidBaseUrl {
        url: display_url(shown).into_owned(),
        reason: reason.to_owned(),
    };
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .ok_or_else(|| invalid(raw, "must start with http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(invalid(raw, "has no host"));
    }
    let url = trimmed.trim_end_matches('/');
    let mut parsed = reqwest::Url::parse(url).map_err(|e| invalid(raw, &e.to_string()))?;
    if parsed.query().is_some() || parsed.fragment().is_some() {
        // The paths are appended to the base URL: a query or fragment would end up before
        // them. It is not shown: a query may hold a key.
        parsed.set_query(None);
        parsed.set_fragment(None);
        return Err(invalid(
            &format!("{parsed}?***"),
            "has a query or fragment (the client appends /chat/completions and /models to the \
             base URL; send a key with api_key or header)",
        ));
    }
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
