//! The model boundary: [`ChatModel`], what goes in ([`ChatRequest`]) and what comes out
//! ([`ChatEvent`] deltas, folded into a [`ChatResponse`]).
//!
//! A provider implements [`ChatModel::stream`], and may implement [`ChatModel::complete`] with a
//! non-streamed request (the default folds the stream with [`ChatResponseBuilder`]). A run asks
//! for a stream only when someone consumes its text deltas.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::message::{Message, Role};
pub use crate::model_error::{ModelError, http};
pub use crate::response::{ChatEvent, ChatResponse, ChatResponseBuilder, ChatStream, FinishReason};

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

    /// The schema and `strict` flag as an OpenAI-compatible server takes them (what
    /// modu-openai sends, and what modu-server publishes for a structured agent).
    ///
    /// OpenAI refuses `strict: true` (400 "Invalid schema for response_format") unless every
    /// object sets `additionalProperties: false` and lists all its properties in `required`,
    /// and takes only a subset of JSON Schema; a schema derived from a Rust type has neither
    /// rule by default. With [`strict`](Self::strict) set, this is the schema in that subset
    /// (borrowed when it already is; otherwise rewritten: objects closed, every property
    /// required, an `Option` field staying nullable, `oneOf` as `anyOf`, a `$ref` with keywords
    /// beside it inlined, keywords strict mode refuses dropped) and `true`. A schema with no
    /// such form (a map, a field taking any value, `allOf`, `not`, a root that is not an
    /// object) and a format without `strict` give the schema as it is and `false`.
    ///
    /// Every answer the strict form allows parses into the type the schema was derived from,
    /// except that a `#[serde(default)]` field must then be given.
    ///
    /// ```
    /// use modu_core::model::ResponseFormat;
    /// use serde_json::json;
    ///
    /// let format = ResponseFormat::new("answer", json!({
    ///     "type": "object",
    ///     "properties": {"text": {"type": "string"}, "note": {"type": ["string", "null"]}},
    ///     "required": ["text"],
    /// }));
    /// let (schema, strict) = format.wire_schema();
    /// assert!(strict);
    /// let required = schema["required"].as_array().unwrap();
    /// assert!(required.contains(&json!("text")) && required.contains(&json!("note")));
    /// assert_eq!(schema["additionalProperties"], json!(false));
    ///
    /// // A map has no strict form: sent as it is, without `strict`.
    /// let map = ResponseFormat::new("tags", json!({"type": "object", "additionalProperties": {"type": "string"}}));
    /// assert!(!map.wire_schema().1);
    /// ```
    pub fn wire_schema(&self) -> (std::borrow::Cow<'_, serde_json::Value>, bool) {
        match self
            .strict
            .then(|| crate::strict_schema::strict_schema(&self.schema))
            .flatten()
        {
            Some(schema) => (schema, true),
            None => (std::borrow::Cow::Borrowed(&self.schema), false),
        }
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
    /// retry layer's copy of the request copies no message. An agent's run shares it while the
    /// call lasts (the messages are the run's own, lent), so a layer that edits it with
    /// `Arc::make_mut` edits its own copy, and the run's messages stay as they were.
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
    /// Nucleus sampling: only the tokens of this much probability mass are considered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Penalises tokens by how often they already appear (OpenAI's −2.0 to 2.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// Penalises tokens that already appear at all (OpenAI's −2.0 to 2.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
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
            top_p: None,
            frequency_penalty: None,
            presence_penalty: None,
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

    /// Sets nucleus sampling's probability mass.
    pub fn with_top_p(mut self, p: f32) -> Self {
        self.top_p = Some(p);
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
    // Forwarded as they are: an `async fn` here would box the inner call's boxed future
    // again, one more allocation per request.
    fn stream<'life0, 'async_trait>(
        &'life0 self,
        request: ChatRequest,
    ) -> BoxFuture<'async_trait, Result<ChatStream, ModelError>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        (**self).stream(request)
    }
    fn input_modalities(&self) -> crate::modality::InputModalities {
        (**self).input_modalities()
    }
    fn complete<'life0, 'async_trait>(
        &'life0 self,
        request: ChatRequest,
    ) -> BoxFuture<'async_trait, Result<ChatResponse, ModelError>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        (**self).complete(request)
    }
}
