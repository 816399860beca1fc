//! The message model: what a conversation is made of.
//!
//! Everything here is plain data with a stable, documented JSON form, because it is what
//! conversation stores and checkpoints persist. The JSON of a [`Message`] looks like this:
//!
//! ```json
//! {"role":"user","content":[{"type":"text","text":"What is 2 + 3?"}]}
//! {"role":"assistant","content":[],"tool_calls":[{"id":"call_1","name":"add","arguments":"{\"a\":2,\"b\":3}"}]}
//! {"role":"tool","tool_call_id":"call_1","name":"add","content":[{"type":"text","text":"5"}]}
//! {"role":"assistant","content":[{"type":"text","text":"2 + 3 = 5"}]}
//! ```
//!
//! Fields that are empty are omitted when serialising and default when reading, so a message
//! written by an older version still reads.

use serde::{Deserialize, Serialize};

pub use crate::modality::MediaSource;
use crate::modality::Modality;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The person or program the agent works for.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call, answering one of the assistant's tool calls.
    Tool,
}

impl Role {
    /// The lowercase name used on the wire (`"system"`, `"user"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One part of a message's content: text, a model's reasoning, or a medium (an image, audio,
/// a file). Adding a kind of part does not change the JSON of existing messages:
///
/// ```json
/// {"type":"text","text":"What is in this picture?"}
/// {"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}}
/// {"type":"image","source":{"type":"base64","mime_type":"image/png","data":"iVBORw0KGgo="}}
/// {"type":"audio","mime_type":"audio/wav","data":"UklGRg=="}
/// {"type":"file","source":{"type":"base64","mime_type":"application/pdf","data":"JVBERi0="},"filename":"a.pdf"}
/// ```
///
/// A URL medium is a reference: stores and checkpoints keep the URL, never the bytes. Inline
/// (base64) media are kept whole, so they are capped per part
/// (`modu_core::media::DEFAULT_MAX_INLINE_MEDIA_BYTES`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// What a reasoning model thought before it answered (vLLM and llama.cpp
    /// `reasoning_content`, Ollama `thinking`). Kept with the stored message; not part of
    /// [`Message::text`]. Providers send it back to the server only when configured to.
    Reasoning {
        /// The reasoning text.
        text: String,
    },
    /// An image.
    Image {
        /// Where the image is.
        source: MediaSource,
    },
    /// Audio, inline (the Chat Completions API takes audio only inline).
    Audio {
        /// The audio, base64-encoded.
        data: String,
        /// Its MIME type (`audio/wav`, `audio/mpeg`, …).
        mime_type: String,
    },
    /// A file (a PDF, …).
    File {
        /// Where the file is.
        source: MediaSource,
        /// The file's name, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text { text: text.into() }
    }

    /// An image the model server fetches from `url` (or a `data:` URL).
    pub fn image_url(url: impl Into<String>) -> Self {
        ContentPart::Image {
            source: MediaSource::Url { url: url.into() },
        }
    }

    /// An inline image: `data` is base64 (standard alphabet, padded), `mime_type` e.g. `image/png`.
    pub fn image_base64(mime_type: impl Into<String>, data: impl Into<String>) -> Self {
        ContentPart::Image {
            source: MediaSource::Base64 {
                mime_type: mime_type.into(),
                data: data.into(),
            },
        }
    }

    /// Inline audio: `data` is base64, `mime_type` e.g. `audio/wav` or `audio/mpeg`.
    pub fn audio_base64(mime_type: impl Into<String>, data: impl Into<String>) -> Self {
        ContentPart::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// A file at `url`.
    pub fn file_url(url: impl Into<String>, filename: Option<String>) -> Self {
        ContentPart::File {
            source: MediaSource::Url { url: url.into() },
            filename,
        }
    }

    /// An inline file: `data` is base64, `mime_type` e.g. `application/pdf`.
    pub fn file_base64(mime_type: impl Into<String>, data: impl Into<String>, filename: Option<String>) -> Self {
        ContentPart::File {
            source: MediaSource::Base64 {
                mime_type: mime_type.into(),
                data: data.into(),
            },
            filename,
        }
    }

    /// The text of this part, if it is text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentPart::Text { text } => Some(text),
            _ => None,
        }
    }

    /// The reasoning of this part, if it is reasoning.
    pub fn as_reasoning(&self) -> Option<&str> {
        match self {
            ContentPart::Reasoning { text } => Some(text),
            _ => None,
        }
    }

    /// What kind of content this part is (reasoning counts as text).
    pub fn modality(&self) -> Modality {
        match self {
            ContentPart::Text { .. } | ContentPart::Reasoning { .. } => Modality::Text,
            ContentPart::Image { .. } => Modality::Image,
            ContentPart::Audio { .. } => Modality::Audio,
            ContentPart::File { .. } => Modality::File,
        }
    }

    /// Whether this part is a medium (an image, audio or a file).
    pub fn is_media(&self) -> bool {
        self.modality() != Modality::Text
    }

    /// The base64 text this part holds inline (`None` for text and URL media).
    pub fn inline_data(&self) -> Option<&str> {
        match self {
            ContentPart::Image { source } | ContentPart::File { source, .. } => source.inline_data(),
            ContentPart::Audio { data, .. } => Some(data),
            _ => None,
        }
    }
}

/// A tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCall {
    /// The id the model gave the call; the tool's result answers it by this id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments exactly as the model wrote them: a JSON document in a string. It is kept
    /// raw because models do write invalid JSON, and the run loop must be able to tell them.
    pub arguments: String,
}

impl ToolCall {
    /// A tool call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The arguments as JSON (empty arguments are `{}`).
    pub fn parse_arguments(&self) -> Result<serde_json::Value, serde_json::Error> {
        parse_tool_arguments(&self.arguments)
    }
}

/// Raw tool-call arguments as JSON; empty (or blank) arguments are `{}`, as servers send them
/// for tools without parameters.
#[doc(hidden)]
pub fn parse_tool_arguments(raw: &str) -> Result<serde_json::Value, serde_json::Error> {
    if raw.trim().is_empty() {
        Ok(serde_json::Value::Object(serde_json::Map::new()))
    } else {
        serde_json::from_str(raw)
    }
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content. An assistant message that only calls tools has none.
    #[serde(default)]
    pub content: Vec<ContentPart>,
    /// The tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool message: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For a tool message: whether the content reports an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl Message {
    fn with_text(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            content: vec![ContentPart::text(text)],
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            is_error: false,
        }
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::with_text(Role::System, text)
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::with_text(Role::User, text)
    }

    /// A user message of several parts (text and media):
    ///
    /// ```
    /// use modu_core::{ContentPart, Message};
    ///
    /// let m = Message::user_parts(vec![
    ///     ContentPart::text("What is in this picture?"),
    ///     ContentPart::image_url("https://example.com/cat.png"),
    /// ]);
    /// assert_eq!(m.text(), "What is in this picture?");
    /// ```
    pub fn user_parts(parts: Vec<ContentPart>) -> Self {
        Message {
            role: Role::User,
            content: parts,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            is_error: false,
        }
    }

    /// An assistant message with text only.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::with_text(Role::Assistant, text)
    }

    /// An assistant message that calls tools (and may carry text too).
    pub fn assistant_tool_calls(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        let text = text.into();
        Message {
            role: Role::Assistant,
            content: if text.is_empty() {
                Vec::new()
            } else {
                vec![ContentPart::text(text)]
            },
            tool_calls,
            tool_call_id: None,
            name: None,
            is_error: false,
        }
    }

    /// A tool result answering the call `tool_call_id`.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        Message {
            role: Role::Tool,
            content: vec![ContentPart::text(content)],
            tool_calls: Vec::new(),
            tool_call_id: Some(tool_call_id.into()),
            name: Some(name.into()),
            is_error,
        }
    }

    /// A tool result of several parts (text and media), answering the call `tool_call_id`.
    pub fn tool_result_parts(
        tool_call_id: impl Into<String>,
        name: impl Into<String>,
        parts: Vec<ContentPart>,
        is_error: bool,
    ) -> Self {
        Message {
            role: Role::Tool,
            content: parts,
            tool_calls: Vec::new(),
            tool_call_id: Some(tool_call_id.into()),
            name: Some(name.into()),
            is_error,
        }
    }

    /// Whether any part is a medium (an image, audio or a file).
    pub fn has_media(&self) -> bool {
        self.content.iter().any(ContentPart::is_media)
    }

    /// The reasoning parts joined together (`None` when the message has none).
    pub fn reasoning(&self) -> Option<String> {
        let mut parts = self.content.iter().filter_map(ContentPart::as_reasoning).peekable();
        parts.peek()?;
        Some(parts.collect())
    }

    /// The same message with its reasoning parts removed.
    pub fn without_reasoning(&self) -> Message {
        let mut m = self.clone();
        m.content.retain(|p| p.as_reasoning().is_none());
        m
    }

    /// All text parts joined together (reasoning and media are not text).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            if let Some(t) = part.as_text() {
                out.push_str(t);
            }
        }
        out
    }

    /// Whether this is an assistant message that calls tools.
    pub fn has_tool_calls(&self) -> bool {
        !self.tool_calls.is_empty()
    }
}

/// Token and request counts. Adding two `Usage`s adds every field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Tokens sent to the model.
    #[serde(default)]
    pub input_tokens: u64,
    /// Tokens the model produced.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input plus output, as the server reported it (or computed when it did not).
    #[serde(default)]
    pub total_tokens: u64,
    /// Model requests made.
    #[serde(default)]
    pub requests: u64,
    /// Of `input_tokens`, how many the server read from its prompt cache (OpenAI
    /// `prompt_tokens_details.cached_tokens`; 0 when the server does not say).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of `output_tokens`, how many were reasoning (OpenAI
    /// `completion_tokens_details.reasoning_tokens`; 0 when the server does not say).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Usage of one request with the given token counts.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Usage {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens.saturating_add(output_tokens),
            requests: 1,
            cached_input_tokens: 0,
            reasoning_tokens: 0,
        }
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(self, rhs: Usage) -> Usage {
        Usage {
            // Counts a server reports can be anything: saturate rather than overflow.
            input_tokens: self.input_tokens.saturating_add(rhs.input_tokens),
            output_tokens: self.output_tokens.saturating_add(rhs.output_tokens),
            total_tokens: self.total_tokens.saturating_add(rhs.total_tokens),
            requests: self.requests.saturating_add(rhs.requests),
            cached_input_tokens: self.cached_input_tokens.saturating_add(rhs.cached_input_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_add(rhs.reasoning_tokens),
        }
    }
}

/// Field by field, never below zero (what a run added since an earlier reading).
impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, rhs: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(rhs.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(rhs.output_tokens),
            total_tokens: self.total_tokens.saturating_sub(rhs.total_tokens),
            requests: self.requests.saturating_sub(rhs.requests),
            cached_input_tokens: self.cached_input_tokens.saturating_sub(rhs.cached_input_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_sub(rhs.reasoning_tokens),
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        *self = *self + rhs;
    }
}
