//! Media in messages and tool results: the size cap on inline media, the check a provider
//! runs before it sends a request, and the envelope a tool returns media in.
//!
//! # Tool results with media
//!
//! Tools return a [`serde_json::Value`]. A tool that returns an image (or audio, or a file)
//! returns a [`ToolContent`] as that value: an object whose only key is
//! [`TOOL_CONTENT_KEY`], holding content parts.
//!
//! ```json
//! {"$modu_tool_content":[{"type":"text","text":"a red dot"},{"type":"image","source":{"type":"base64","mime_type":"image/png","data":"iVBORw0KGgo="}}]}
//! ```
//!
//! The run loop turns such a value into a tool message whose content holds those parts (text
//! parts cut at the tool's `max_result_bytes`, media kept whole), instead of the value's JSON
//! text. Any other value becomes text exactly as before. An inline part over
//! [`DEFAULT_MAX_INLINE_MEDIA_BYTES`], or a malformed envelope, makes the call fail with a tool
//! error the model sees (`media_too_large`, `invalid_tool_content`).
//!
//! ```
//! use modu_core::ContentPart;
//! use modu_core::media::ToolContent;
//!
//! let value = ToolContent::new(vec![
//!     ContentPart::text("a red dot"),
//!     ContentPart::image_base64("image/png", "iVBORw0KGgo="),
//! ])
//! .into_value();
//! assert_eq!(ToolContent::from_value(&value).and_then(Result::ok).map(|c| c.parts.len()), Some(2));
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{ContentPart, Message};
use crate::modality::{InputModalities, Modality};
use crate::model::ModelError;
use crate::tool::{ToolError, ToolErrorKind, truncate_result};

/// The most base64 text one inline medium may hold (20 MiB, the Chat Completions API's image
/// limit): a user part over it fails the request before it is sent
/// ([`ModelError::UnsupportedContent`]), a tool result's part fails the call with the tool
/// error `media_too_large`. URL media are references and never count. Stores and checkpoints
/// keep inline media whole, so this also bounds what one part adds to them.
pub const DEFAULT_MAX_INLINE_MEDIA_BYTES: usize = 20 * 1024 * 1024;

/// The one key of a [`ToolContent`] envelope.
pub const TOOL_CONTENT_KEY: &str = "$modu_tool_content";

/// A tool result of content parts (text and media): what a tool returns, as its value, to
/// give the model an image, audio or a file. See the [module docs](self).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolContent {
    /// The parts, in order.
    #[serde(rename = "$modu_tool_content")]
    pub parts: Vec<ContentPart>,
}

impl ToolContent {
    /// A result of these parts.
    pub fn new(parts: Vec<ContentPart>) -> Self {
        ToolContent { parts }
    }

    /// The envelope as a tool's result value.
    pub fn into_value(self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert(
            TOOL_CONTENT_KEY.to_owned(),
            serde_json::to_value(self.parts).unwrap_or(Value::Array(Vec::new())),
        );
        Value::Object(map)
    }

    /// Whether `value` is an envelope: an object whose only key is [`TOOL_CONTENT_KEY`].
    pub fn is_envelope(value: &Value) -> bool {
        value
            .as_object()
            .is_some_and(|map| map.len() == 1 && map.contains_key(TOOL_CONTENT_KEY))
    }

    /// The envelope in `value` (`None`: not an envelope; `Some(Err)`: one whose parts do not
    /// read).
    pub fn from_value(value: &Value) -> Option<Result<ToolContent, serde_json::Error>> {
        Self::is_envelope(value).then(|| ToolContent::deserialize(value))
    }
}

impl From<ToolContent> for Value {
    fn from(content: ToolContent) -> Value {
        content.into_value()
    }
}

/// Why content cannot go to a model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContentError {
    /// The model is declared not to take this modality, or its provider cannot send it.
    #[error("{what}")]
    Unsupported {
        /// The modality.
        modality: Modality,
        /// What cannot be sent, and why.
        what: String,
    },
    /// An inline part is over the size limit.
    #[error("an inline {modality} part of {bytes} bytes (base64) is over the limit of {limit} bytes")]
    TooLarge {
        /// The part's modality.
        modality: Modality,
        /// Its base64 text's length.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

impl ContentError {
    /// The modality of the offending part.
    pub fn modality(&self) -> Modality {
        match self {
            ContentError::Unsupported { modality, .. } | ContentError::TooLarge { modality, .. } => *modality,
        }
    }

    /// As the [`ModelError`] of model `model`.
    pub fn into_model_error(self, model: &str) -> ModelError {
        ModelError::UnsupportedContent {
            model: model.to_owned(),
            modality: Some(self.modality()),
            message: self.to_string(),
        }
    }
}

/// Checks parts against a model's modalities and the inline size limit.
pub fn check_parts(
    parts: &[ContentPart],
    accepts: InputModalities,
    max_inline_bytes: usize,
) -> Result<(), ContentError> {
    for part in parts {
        let modality = part.modality();
        if !accepts.accepts(modality) {
            return Err(ContentError::Unsupported {
                modality,
                what: format!("the model takes no {modality} input (it is declared text-only or without {modality})"),
            });
        }
        if let Some(data) = part.inline_data()
            && data.len() > max_inline_bytes
        {
            return Err(ContentError::TooLarge {
                modality,
                bytes: data.len(),
                limit: max_inline_bytes,
            });
        }
    }
    Ok(())
}

/// What a provider runs before it sends a request: every message's parts against the model's
/// modalities and the inline size limit, as [`ModelError::UnsupportedContent`] of `model`.
pub fn check_messages(
    model: &str,
    messages: &[Message],
    accepts: InputModalities,
    max_inline_bytes: usize,
) -> Result<(), ModelError> {
    messages
        .iter()
        .try_for_each(|m| check_parts(&m.content, accepts, max_inline_bytes))
        .map_err(|e| e.into_model_error(model))
}

/// A tool's result as the run loop accepts it: an envelope whose parts do not read, hold an
/// inline part over the limit, or a medium the model does not take (`accepts`: the answering
/// model's [`ChatModel::input_modalities`](crate::ChatModel::input_modalities)) becomes a tool
/// error the model sees, instead of a request the provider refuses (which would end the run).
#[doc(hidden)]
pub fn check_tool_value(value: Value, accepts: InputModalities) -> Result<Value, ToolError> {
    match ToolContent::from_value(&value) {
        None => Ok(value),
        Some(Err(e)) => Err(ToolError::new(ToolErrorKind::Execution, "invalid_tool_content")
            .with_message(format!("the tool returned media the agent cannot read: {e}"))),
        Some(Ok(content)) => match check_parts(&content.parts, accepts, DEFAULT_MAX_INLINE_MEDIA_BYTES) {
            Ok(()) => Ok(value),
            Err(e @ ContentError::Unsupported { .. }) => {
                Err(ToolError::new(ToolErrorKind::Execution, "unsupported_media").with_message(e.to_string()))
            }
            Err(e) => Err(ToolError::new(ToolErrorKind::Execution, "media_too_large").with_message(e.to_string())),
        },
    }
}

/// A tool's result value as the tool message's parts: an envelope's parts (text cut at `max`
/// bytes, media whole), anything else one text part (a string as is, other JSON as its
/// compact text), cut at `max`.
#[doc(hidden)]
pub fn result_parts(value: Value, max: Option<usize>) -> Vec<ContentPart> {
    if let Some(Ok(content)) = ToolContent::from_value(&value) {
        return content
            .parts
            .into_iter()
            .map(|part| match part {
                ContentPart::Text { text } => ContentPart::text(truncate_result(text, max)),
                other => other,
            })
            .collect();
    }
    let text = match value {
        Value::String(s) => s,
        other => other.to_string(),
    };
    vec![ContentPart::text(truncate_result(text, max))]
}
