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
        let trimmed = strip_code_fence(text.trim());
        serde_json::from_str(trimmed).map_err(|e| OutputError { message: e.to_string() })
    }
    fn to_json(&self, output: &T) -> serde_json::Value {
        serde_json::to_value(output).unwrap_or(serde_json::Value::Null)
    }
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
