//! The model boundary: [`ChatModel`], what goes in ([`ChatRequest`]) and what comes out
//! ([`ChatEvent`] deltas, folded into a [`ChatResponse`]).
//!
//! A provider implements [`ChatModel::stream`], and may implement [`ChatModel::complete`] with a
//! non-streamed request (the default folds the stream with [`ChatResponseBuilder`]). A run asks
//! for a stream only when someone consumes its text deltas.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::message::{Message, Role, ToolCall, Usage};

/// A tool as the model sees it: name, description and the JSON schema of its parameters.
///
/// The schema is shared (`Arc`), so offering a tool on every request of a run copies two
/// strings, never the schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON schema of the tool's arguments (an object schema).
    pub parameters: Arc<serde_json::Value>,
}

impl ToolDefinition {
    /// A definition from a name, a description and a parameter schema.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: impl Into<Arc<serde_json::Value>>,
    ) -> Self {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters: parameters.into(),
        }
    }
}

/// Whether and which tool the model must call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call a tool.
    None,
    /// The model must call this tool.
    Named(String),
}

/// A JSON schema the model's answer must follow (OpenAI's `response_format: json_schema`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResponseFormat {
    /// A name for the schema (letters, digits, `_` and `-`).
    pub name: String,
    /// The schema.
    pub schema: serde_json::Value,
    /// Ask the server to enforce the schema strictly where it can.
    pub strict: bool,
}

impl ResponseFormat {
    /// A schema to answer in, named `name`, enforced strictly where the server can.
    pub fn new(name: impl Into<String>, schema: serde_json::Value) -> Self {
        ResponseFormat {
            name: name.into(),
            schema,
            strict: true,
        }
    }

    /// Whether the server should enforce the schema strictly.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }
}

/// How much a reasoning model should think before it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReasoningEffort {
    /// No reasoning (Ollama `think: false`; OpenAI `"none"`).
    None,
    /// The least reasoning a model supports.
    Minimal,
    /// Little.
    Low,
    /// The usual.
    Medium,
    /// Much.
    High,
}

impl ReasoningEffort {
    /// The name OpenAI-compatible servers take (`"none"`, `"minimal"`, `"low"`, `"medium"`, `"high"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// Which assistant messages a provider sends back to its server with their reasoning (a
/// provider setting: `OpenAiClientBuilder::reasoning_replay`, `OllamaClientBuilder::reasoning_replay`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReasoningReplay {
    /// None (the default). Servers that reject reasoning in their input, as DeepSeek-style
    /// servers do with HTTP 400, accept every request, and vLLM and llama.cpp drop it anyway.
    #[default]
    Never,
    /// The tool-call turns of the current exchange (the assistant messages with tool calls
    /// after the last user message): what interleaved-thinking models (gpt-oss, Kimi K2
    /// Thinking, DeepSeek V3.2 with tools) need to continue their reasoning across tool calls.
    ToolCallTurns,
    /// Every assistant message that has reasoning.
    Always,
}

impl ReasoningReplay {
    /// For `messages`, whether the message at an index is sent with its reasoning.
    pub fn replayed(self, messages: &[Message]) -> impl Fn(usize) -> bool + '_ {
        let current = messages.iter().rposition(|m| m.role == Role::User).unwrap_or(0);
        move |i| {
            let Some(m) = messages.get(i) else { return false };
            m.role == Role::Assistant
                && match self {
                    ReasoningReplay::Never => false,
                    ReasoningReplay::ToolCallTurns => i > current && !m.tool_calls.is_empty(),
                    ReasoningReplay::Always => true,
                }
        }
    }
}

/// One request to a model.
///
/// Tools and a response format are never sent together by the run loop: tool-using requests
/// carry tool definitions, a finalization request carries the schema.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatRequest {
    /// The conversation as the model should see it, system instructions first. Shared, so a
    /// retry layer's copy of the request copies no message (`Arc::make_mut` edits it).
    pub messages: Arc<Vec<Message>>,
    /// Tools the model may call, shared like the messages.
    #[serde(default, skip_serializing_if = "no_tools")]
    pub tools: Arc<Vec<ToolDefinition>>,
    /// Whether and which tool the model must call. `None` leaves it to the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Let the model call several tools in one answer. `None` leaves it to the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// A JSON schema the answer must follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// The most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// A seed for reproducible sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// How hard a reasoning model should think (OpenAI `reasoning_effort`; Ollama `think`,
    /// off for [`ReasoningEffort::None`]). `None` leaves it to the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Provider-specific fields passed through as they are (for example vLLM's
    /// `guided_json`, or Ollama's `options`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extras: BTreeMap<String, serde_json::Value>,
    /// Per-request data for the services of a chat stack, the way `http` requests carry
    /// extensions: the run puts where text deltas go and the run's deadline here. Never sent
    /// to a server, never serialized, and ignored by `==`. A layer that builds a new request
    /// should carry these over (cloning the request does).
    #[serde(skip)]
    pub extensions: Extensions,
}

fn no_tools(tools: &Arc<Vec<ToolDefinition>>) -> bool {
    tools.is_empty()
}

/// The empty tool list every request without tools shares (no allocation per request).
fn no_tools_yet() -> Arc<Vec<ToolDefinition>> {
    static EMPTY: std::sync::OnceLock<Arc<Vec<ToolDefinition>>> = std::sync::OnceLock::new();
    Arc::clone(EMPTY.get_or_init(Arc::default))
}

/// A type map of per-request values ([`ChatRequest::extensions`]): `http::Extensions`, with an
/// equality that always holds, so requests compare by what is sent.
///
/// Cloning is cheap: the map is shared until one of the copies changes it (copy on write), and
/// what the run itself carries (its deadline, where deltas go, its per-attempt log) sits in a
/// slot of its own beside the map, so a retry layer's copy of a request allocates nothing for
/// its extensions.
#[derive(Clone, Debug, Default)]
pub struct Extensions {
    map: Option<Arc<::http::Extensions>>,
    /// The run's deadline (model calls and tool invocations).
    #[doc(hidden)]
    pub deadline: Option<tokio::time::Instant>,
    /// The run's side of one model request (the runner's `RunCall`), type-erased so this
    /// module does not depend on the runner.
    #[doc(hidden)]
    pub run: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl Extensions {
    /// Inserts a value, returning the one of the same type it replaces.
    pub fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        Arc::make_mut(self.map.get_or_insert_with(Default::default)).insert(value)
    }

    /// The value of type `T`, if any.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map.as_deref()?.get()
    }

    /// Removes and returns the value of type `T`.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<T> {
        let map = self.map.as_mut()?;
        map.get::<T>()?;
        Arc::make_mut(map).remove()
    }
}

impl PartialEq for Extensions {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl ChatRequest {
    /// A request with these messages and nothing else set.
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages: Arc::new(messages),
            tools: no_tools_yet(),
            tool_choice: None,
            parallel_tool_calls: None,
            response_format: None,
            temperature: None,
            max_tokens: None,
            stop: Vec::new(),
            seed: None,
            reasoning_effort: None,
            extras: BTreeMap::new(),
            extensions: Extensions::default(),
        }
    }

    /// Adds tools (an empty list offers none).
    pub fn with_tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.tools = if tools.is_empty() {
            no_tools_yet()
        } else {
            Arc::new(tools)
        };
        self
    }

    /// Sets the response format.
    pub fn with_response_format(mut self, format: ResponseFormat) -> Self {
        self.response_format = Some(format);
        self
    }

    /// Sets the tool choice.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Sets the temperature.
    pub fn with_temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }

    /// Sets how hard a reasoning model should think.
    pub fn with_reasoning_effort(mut self, effort: ReasoningEffort) -> Self {
        self.reasoning_effort = Some(effort);
        self
    }

    /// Sets the maximum number of tokens to generate.
    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sets the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Adds a provider extra.
    pub fn with_extra(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.extras.insert(key.into(), value);
        self
    }
}

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// A natural end of the answer or a stop sequence.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The model called tools.
    ToolCalls,
    /// The server filtered the content.
    ContentFilter,
    /// Something else, as the server named it.
    Other(String),
}

/// One delta of a streamed model answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChatEvent {
    /// A piece of the answer's text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of the model's reasoning (it comes before the answer).
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// A fragment of a tool call. Fragments with the same `index` belong to one call; `id`
    /// and `name` may come once or be repeated, `arguments` fragments are concatenated.
    ToolCallDelta {
        /// Which call of the answer this fragment belongs to.
        index: usize,
        /// The call's id, when this fragment carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool's name, when this fragment carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// A piece of the arguments' JSON text.
        #[serde(default)]
        arguments: String,
    },
    /// Token usage of the request (usually at the end).
    Usage {
        /// The usage.
        usage: Usage,
    },
    /// The model finished.
    Finish {
        /// Why.
        reason: FinishReason,
    },
    /// Names the model that produces this answer ([`ChatResponse::model`]); a `FallbackModel`
    /// sends it first. When several come, the last wins.
    Model {
        /// The model's name.
        name: String,
    },
}

/// A stream of deltas from a model.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatEvent, ModelError>> + Send>>;

/// A whole model answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatResponse {
    /// The assistant message (text and/or tool calls).
    pub message: Message,
    /// Token usage (`requests` is 1).
    pub usage: Usage,
    /// Why the model stopped, when the server said.
    pub finish_reason: Option<FinishReason>,
    /// The model that produced the answer, when the answer names it (a `FallbackModel`'s
    /// answers do: the model of its chain that answered). `None`: the model the request was
    /// sent to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl ChatResponse {
    /// An answer: the assistant message, its usage and, when the server said, why it stopped.
    pub fn new(message: Message, usage: Usage, finish_reason: Option<FinishReason>) -> Self {
        ChatResponse {
            message,
            usage,
            finish_reason,
            model: None,
        }
    }

    /// Names the model that produced the answer.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
}

/// Errors a model call can end with. Providers map their failures onto these so the run loop
/// can decide what to retry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The connection failed or broke (refused, reset, cut mid-stream).
    #[error("transport error: {message}")]
    Transport {
        /// What happened, without secrets.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The call did not finish in time.
    #[error("model call timed out after {0:?}")]
    Timeout(Duration),
    /// The server asked us to slow down (HTTP 429).
    #[error("rate limited by the model server{}", retry_after.map(|d| format!(" (retry after {d:?})")).unwrap_or_default())]
    RateLimited {
        /// How long the server asked us to wait.
        retry_after: Option<Duration>,
    },
    /// The server refused our credentials (HTTP 401/403).
    #[error("model server refused the credentials (HTTP {status}): {message}")]
    Authentication {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The server does not know the model (HTTP 404).
    #[error("the model server does not know model {model:?}: {message}")]
    ModelNotFound {
        /// The model asked for.
        model: String,
        /// The server's message.
        message: String,
    },
    /// The request does not fit the model's context window.
    #[error("context length exceeded: {message}")]
    ContextLengthExceeded {
        /// The server's message.
        message: String,
    },
    /// Any other error status from the server.
    #[error("model server answered HTTP {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The body (trimmed).
        body: String,
        /// How long the server asked us to wait, when it said.
        retry_after: Option<Duration>,
    },
    /// The server's answer could not be understood.
    #[error("invalid response from the model server: {message}")]
    InvalidResponse {
        /// What was wrong.
        message: String,
    },
    /// The request itself is invalid (found before sending it).
    #[error("invalid request: {message}")]
    InvalidRequest {
        /// What was wrong.
        message: String,
    },
    /// The request holds content the model cannot take: a medium the model is declared not
    /// to accept ([`ChatModel::input_modalities`]) or its provider cannot send, or an inline
    /// medium over the size limit — found before anything was sent — or the server refused
    /// the medium (llama.cpp without a vision projector). Not retryable.
    #[error("model {model:?} cannot take this content: {message}")]
    UnsupportedContent {
        /// The model.
        model: String,
        /// The modality refused, when known.
        modality: Option<crate::modality::Modality>,
        /// What was refused, and why.
        message: String,
    },
}

impl ModelError {
    /// A transport error with a cause.
    pub fn transport(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        ModelError::Transport {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An invalid-response error.
    pub fn invalid_response(message: impl Into<String>) -> Self {
        ModelError::InvalidResponse {
            message: message.into(),
        }
    }

    /// Whether trying the same request again may succeed: rate limits, timeouts, transport
    /// failures and server-side (5xx, 408) statuses.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Transport { .. } | ModelError::Timeout(_) | ModelError::RateLimited { .. } => true,
            ModelError::Status { status, .. } => *status >= 500 || *status == 408,
            _ => false,
        }
    }

    /// How long the server asked us to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::RateLimited { retry_after } | ModelError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The error's kind, a short stable code (`rate_limited`, `timeout`, …) for events and
    /// metrics.
    pub fn kind(&self) -> crate::codes::ModelErrorKind {
        use crate::codes::ModelErrorKind as K;
        match self {
            ModelError::Transport { .. } => K::Transport,
            ModelError::Timeout(_) => K::Timeout,
            ModelError::RateLimited { .. } => K::RateLimited,
            ModelError::Authentication { .. } => K::Authentication,
            ModelError::ModelNotFound { .. } => K::ModelNotFound,
            ModelError::ContextLengthExceeded { .. } => K::ContextLengthExceeded,
            ModelError::Status { .. } => K::Status,
            ModelError::InvalidResponse { .. } => K::InvalidResponse,
            ModelError::InvalidRequest { .. } => K::InvalidRequest,
            ModelError::UnsupportedContent { .. } => K::UnsupportedContent,
        }
    }
}

/// A chat model: anything that turns a [`ChatRequest`] into a stream of [`ChatEvent`]s.
///
/// Object safe: agents hold models as `Arc<dyn ChatModel>`. A model of your own implements
/// `model_name` and `stream` (the [crate documentation](crate) shows one); `complete` folds
/// the stream into one [`ChatResponse`].
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// The model's name as sent to the server (used in events and telemetry).
    fn model_name(&self) -> &str;

    /// Sends the request and returns the answer as a stream of deltas. Dropping the stream
    /// must abort the request.
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError>;

    /// The kinds of input the model takes, as configured on its provider. The default is
    /// [`InputModalities::all`](crate::modality::InputModalities::all) ("all, or unknown").
    /// A provider refuses a request with a part the model does not take with
    /// [`ModelError::UnsupportedContent`], before sending it.
    fn input_modalities(&self) -> crate::modality::InputModalities {
        crate::modality::InputModalities::all()
    }

    /// Sends the request and waits for the whole answer: the stream, folded.
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let mut stream = self.stream(request).await?;
        let mut builder = ChatResponseBuilder::default();
        while let Some(event) = stream.next().await {
            builder.push(event?);
        }
        builder.finish()
    }
}

#[async_trait]
impl<M: ChatModel + ?Sized> ChatModel for std::sync::Arc<M> {
    fn model_name(&self) -> &str {
        (**self).model_name()
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        (**self).stream(request).await
    }
    fn input_modalities(&self) -> crate::modality::InputModalities {
        (**self).input_modalities()
    }
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        (**self).complete(request).await
    }
}

#[derive(Default, Debug)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Folds [`ChatEvent`] deltas into a [`ChatResponse`].
///
/// Tool-call fragments are assembled by index: an id or name repeated in every fragment is
/// taken once, argument fragments are concatenated in order. Calls come out ordered by index.
#[derive(Default, Debug)]
pub struct ChatResponseBuilder {
    text: String,
    reasoning: String,
    calls: BTreeMap<usize, PartialCall>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    model: Option<String>,
}

impl ChatResponseBuilder {
    /// Adds one delta.
    pub fn push(&mut self, event: ChatEvent) {
        match event {
            ChatEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => self.merge_call(index, id, name, &arguments),
            ChatEvent::Finish { reason } => self.finish = Some(reason),
            ChatEvent::Model { name } => self.model = Some(name),
            other => self.push_ref(&other),
        }
    }

    /// Adds one delta without taking it (what the answer keeps is copied), for a caller that
    /// passes the delta on after folding it.
    pub fn push_ref(&mut self, event: &ChatEvent) {
        match event {
            ChatEvent::TextDelta { text } => self.text.push_str(text),
            ChatEvent::ReasoningDelta { text } => self.reasoning.push_str(text),
            ChatEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => self.merge_call(*index, id.as_ref(), name.as_ref(), arguments),
            ChatEvent::Usage { usage } => self.usage = Some(*usage),
            ChatEvent::Finish { reason } => self.finish = Some(reason.clone()),
            ChatEvent::Model { name } => self.model = Some(name.clone()),
        }
    }

    /// A tool-call fragment: an id or name repeated in every fragment is taken once (and only
    /// then copied, when borrowed); argument fragments are concatenated.
    fn merge_call<S: AsRef<str> + Into<String>>(
        &mut self,
        index: usize,
        id: Option<S>,
        name: Option<S>,
        arguments: &str,
    ) {
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id.filter(|s| !s.as_ref().is_empty())
            && call.id.is_none()
        {
            call.id = Some(id.into());
        }
        if let Some(name) = name.filter(|s| !s.as_ref().is_empty())
            && call.name.is_none()
        {
            call.name = Some(name.into());
        }
        call.arguments.push_str(arguments);
    }

    /// The text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The assembled response. Fails when a tool call never received a name.
    pub fn finish(self) -> Result<ChatResponse, ModelError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        // A server that sends no call id gets unique ones (a plain `call_0` would repeat in every
        // answer, and call ids identify calls across a run: results, approvals, repairs).
        let mut prefix: Option<String> = None;
        for (index, call) in self.calls {
            let name = call
                .name
                .ok_or_else(|| ModelError::invalid_response(format!("tool call #{index} has no name")))?;
            let id = call.id.filter(|id| !id.is_empty()).unwrap_or_else(|| {
                let p = prefix.get_or_insert_with(|| uuid::Uuid::new_v4().simple().to_string()[..12].to_owned());
                format!("call_{p}_{index}")
            });
            let arguments = if call.arguments.trim().is_empty() {
                "{}".to_owned()
            } else {
                call.arguments
            };
            tool_calls.push(ToolCall { id, name, arguments });
        }
        let mut message = if tool_calls.is_empty() {
            crate::Message::assistant(self.text)
        } else {
            crate::Message::assistant_tool_calls(self.text, tool_calls)
        };
        if !self.reasoning.is_empty() {
            message
                .content
                .insert(0, crate::message::ContentPart::Reasoning { text: self.reasoning });
        }
        debug_assert_eq!(message.role, Role::Assistant);
        let mut usage = self.usage.unwrap_or_default();
        usage.requests = 1;
        if usage.total_tokens == 0 {
            usage.total_tokens = usage.input_tokens.saturating_add(usage.output_tokens);
        }
        Ok(ChatResponse {
            message,
            usage,
            finish_reason: self.finish,
            model: self.model,
        })
    }
}

/// Helpers for providers that speak HTTP: one mapping of error answers onto [`ModelError`].
pub mod http {
    use std::time::{Duration, SystemTime};

    use super::ModelError;

    /// The most bytes of an error body kept in a [`ModelError`].
    pub const MAX_ERROR_BODY: usize = 2000;

    /// The body, trimmed and cut to [`MAX_ERROR_BODY`] bytes on a character boundary.
    pub fn trim_body(body: &str) -> String {
        let body = body.trim();
        if body.len() <= MAX_ERROR_BODY {
            return body.to_owned();
        }
        let mut end = MAX_ERROR_BODY;
        while !body.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &body[..end])
    }

    /// A `Retry-After` value: seconds (whole or decimal) or an HTTP date (a date in the past
    /// means now).
    pub fn retry_after(value: &str) -> Option<Duration> {
        let value = value.trim();
        if let Ok(secs) = value.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        if let Ok(secs) = value.parse::<f64>() {
            return Duration::try_from_secs_f64(secs).ok();
        }
        let when = httpdate::parse_http_date(value).ok()?;
        Some(when.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO))
    }

    /// Classifies an HTTP error answer: 401/403 → `Authentication`, 404 → `ModelNotFound`,
    /// 429 → `RateLimited`, `context_length` (the provider recognised its server's message) →
    /// `ContextLengthExceeded`, anything else → `Status` with the trimmed body.
    pub fn status_error(
        status: u16,
        message: String,
        body: &str,
        retry_after: Option<Duration>,
        model: &str,
        context_length: bool,
    ) -> ModelError {
        match status {
            401 | 403 => ModelError::Authentication { status, message },
            404 => ModelError::ModelNotFound {
                model: model.to_owned(),
                message,
            },
            429 => ModelError::RateLimited { retry_after },
            _ if context_length => ModelError::ContextLengthExceeded { message },
            _ => ModelError::Status {
                status,
                body: trim_body(body),
                retry_after,
            },
        }
    }
}
