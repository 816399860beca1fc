//! Output codecs: what the final answer must look like and how it is parsed.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use crate::model::ResponseFormat;

/// Why a final answer could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the final answer does not fit the output schema: {message}")]
#[non_exhaustive]
pub struct OutputError {
    /// What was wrong, phrased so the model can correct it.
    pub message: String,
}

impl OutputError {
    /// An answer that does not fit, with what was wrong (phrased so the model can correct it).
    pub fn new(message: impl Into<String>) -> Self {
        OutputError {
            message: message.into(),
        }
    }
}

/// Describes the final answer's format and parses it.
///
/// [`TextCodec`] takes the text as it is; [`JsonCodec`] asks for a JSON schema derived from a
/// Rust type and parses into it.
pub trait OutputCodec: Send + Sync + 'static {
    /// The parsed output.
    type Output: Send + 'static;

    /// The response format to request, or `None` for free text.
    fn response_format(&self) -> Option<ResponseFormat>;

    /// Parses the model's final text.
    fn parse(&self, text: &str) -> Result<Self::Output, OutputError>;

    /// The output as JSON, for events, sinks and `--json` printing.
    fn to_json(&self, output: &Self::Output) -> serde_json::Value;
}

/// Free text: the output is the final answer's text.
#[derive(Clone, Copy, Debug, Default)]
pub struct TextCodec;

impl OutputCodec for TextCodec {
    type Output = String;
    fn response_format(&self) -> Option<ResponseFormat> {
        None
    }
    fn parse(&self, text: &str) -> Result<String, OutputError> {
        Ok(text.to_owned())
    }
    fn to_json(&self, output: &String) -> serde_json::Value {
        serde_json::Value::String(output.clone())
    }
}

/// Structured output: a JSON schema from `T`'s [`schemars::JsonSchema`], parsed with serde.
///
/// ```
/// use modu_core::{JsonCodec, OutputCodec};
/// #[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
/// struct Answer { city: String }
/// let codec = JsonCodec::<Answer>::new();
/// assert!(codec.response_format().is_some());
/// assert_eq!(codec.parse(r#"{"city":"Seoul"}"#).map(|a| a.city), Ok("Seoul".to_string()));
/// ```
pub struct JsonCodec<T> {
    format: ResponseFormat,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for JsonCodec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonCodec").field("format", &self.format).finish()
    }
}

impl<T: schemars::JsonSchema> JsonCodec<T> {
    /// A codec named after the type.
    pub fn new() -> Self {
        let name = crate::tool::sanitize_name(&T::schema_name());
        JsonCodec {
            format: ResponseFormat {
                name: if name.is_empty() { "output".into() } else { name },
                schema: crate::tool::schema_for::<T>(),
                strict: true,
            },
            _t: PhantomData,
        }
    }
}

impl<T: schemars::JsonSchema> Default for JsonCodec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> OutputCodec for JsonCodec<T>
where
    T: DeserializeOwned + serde::Serialize + schemars::JsonSchema + Send + 'static,
{
    type Output = T;
    fn response_format(&self) -> Option<ResponseFormat> {
        Some(self.format.clone())
    }
    fn parse(&self, text: &str) -> Result<T, OutputError> {
        parse_json_answer(text).map_err(|e| OutputError { message: e.to_string() })
    }
    fn to_json(&self, output: &T) -> serde_json::Value {
        serde_json::to_value(output).unwrap_or(serde_json::Value::Null)
    }
}

/// Parses a model's JSON answer: the text itself (a code fence around it is taken off), or,
/// when that does not parse, the JSON behind a reasoning model's thinking (`<think>…</think>`
/// left in the text) or in the one fenced block of an answer with prose around it. The error is
/// the one of the last text tried, so it names what is wrong with the JSON the model meant.
#[doc(hidden)]
pub fn parse_json_answer<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let strict = strip_code_fence(text.trim());
    let first = match serde_json::from_str(strict) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    match lenient_json_text(text).filter(|alt| *alt != strict) {
        Some(alt) => serde_json::from_str(alt),
        None => Err(first),
    }
}

/// The text of the JSON a model meant ([`parse_json_answer`]'s choice, for any JSON value): what
/// a stream shows of a structured answer that parsed, without the thinking, prose or fence
/// around it. The trimmed text when no choice parses.
#[doc(hidden)]
pub fn json_answer_text(text: &str) -> &str {
    let strict = strip_code_fence(text.trim());
    if serde_json::from_str::<serde::de::IgnoredAny>(strict).is_ok() {
        return strict;
    }
    lenient_json_text(text)
        .filter(|alt| serde_json::from_str::<serde::de::IgnoredAny>(alt).is_ok())
        .unwrap_or(strict)
}

/// The JSON a model meant, when its answer is more than JSON: after the end of its thinking
/// (`</think>`; the opening tag may be in the prompt's template), then inside a code fence
/// around it or the first fenced block among prose.
fn lenient_json_text(text: &str) -> Option<&str> {
    let answer = match text.find("</think>") {
        Some(end) => &text[end + "</think>".len()..],
        None => text,
    };
    let answer = answer.trim();
    let unfenced = strip_code_fence(answer);
    if unfenced != answer || !answer.contains("```") {
        return Some(unfenced);
    }
    let start = answer.find("```")? + 3;
    let rest = answer[start..].trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    let end = rest.find("```")?;
    Some(rest[..end].trim())
}

/// Models sometimes wrap JSON in a Markdown code fence; take what is inside.
#[doc(hidden)]
pub fn strip_code_fence(text: &str) -> &str {
    if let Some(rest) = text.strip_prefix("```") {
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        if let Some(inner) = rest.trim_end().strip_suffix("```") {
            return inner.trim();
        }
    }
    text
}
