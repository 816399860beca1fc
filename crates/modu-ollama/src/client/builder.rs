//! [`OllamaClientBuilder`]: the client's settings and their defaults, and the process-wide
//! shared HTTP client.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use modu_core::ReasoningReplay;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::{Inner, OllamaClient};
use crate::error::OllamaConfigError;
use modu_core::redact::{MASK, MaskedHeaders, Redactor, display_url};

/// Ollama's default address.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434";

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
}

impl OllamaClientBuilder {
    /// The server's URL (default `http://127.0.0.1:11434`; no `/api` suffix). A URL with a query
    /// or fragment is refused by [`build`](Self::build) (the paths are appended to it).
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
    ///
    /// [`ModelError::UnsupportedContent`]: modu_core::ModelError::UnsupportedContent
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
    ///
    /// [`ModelError::UnsupportedContent`]: modu_core::ModelError::UnsupportedContent
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
    ///
    /// [`ChatModel::complete`]: modu_core::ChatModel::complete
    pub fn always_stream(mut self, always: bool) -> Self {
        self.always_stream = always;
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<OllamaClient, OllamaConfigError> {
        let trimmed = self.base_url.trim();
        let invalid = |shown: &str, reason: &str| OllamaConfigError::InvalidBaseUrl {
            url: display_url(shown).into_owned(),
            reason: reason.to_owned(),
        };
        let rest = trimmed
            .strip_prefix("http://")
            .or_else(|| trimmed.strip_prefix("https://"))
            .ok_or_else(|| invalid(&self.base_url, "must start with http:// or https://"))?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(invalid(&self.base_url, "has no host"));
        }
        let raw = trimmed.trim_end_matches('/').to_owned();
        let mut parsed = reqwest::Url::parse(&raw).map_err(|e| invalid(&self.base_url, &e.to_string()))?;
        if parsed.query().is_some() || parsed.fragment().is_some() {
            // The paths are appended to the base URL: a query or fragment would end up before
            // them. It is not shown: a query may hold a key.
            parsed.set_query(None);
            parsed.set_fragment(None);
            return Err(invalid(
                &format!("{parsed}?***"),
                "has a query or fragment (the client appends /api/chat and /api/tags to the base \
                 URL; send a key with api_key or header)",
            ));
        }
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
        let own_client = self.http.is_none();
        let http = match self.http {
            Some(c) => c,
            None => shared_client(self.connect_timeout, self.read_timeout)?,
        };
        // A client of the caller's has its own connect and read timeouts, unknown here.
        let timeouts = crate::error::Timeouts {
            connect: own_client.then_some(self.connect_timeout),
            read: self.read_timeout.filter(|_| own_client),
            request: self.request_timeout,
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
                timeouts,
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
