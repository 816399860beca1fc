//! Responses: a non-streamed `chat.completion` into a [`ChatResponse`], and a stream's
//! `chat.completion.chunk`s into [`ChatEvent`]s.

use modu_core::{ChatEvent, ChatResponse, ContentPart, FinishReason, Message, ModelError, ToolCall, Usage};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize, Default)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default)]
    pub prompt_tokens_details: Option<WirePromptDetails>,
    #[serde(default)]
    pub completion_tokens_details: Option<WireCompletionDetails>,
}

/// `usage.prompt_tokens_details` (OpenAI, vLLM with prefix caching).
#[derive(Deserialize, Default)]
pub(crate) struct WirePromptDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// `usage.completion_tokens_details` (OpenAI reasoning models, some vLLM builds).
#[derive(Deserialize, Default)]
pub(crate) struct WireCompletionDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl WireUsage {
    pub fn to_usage(&self) -> Usage {
        let mut u = Usage::new(self.prompt_tokens, self.completion_tokens);
        if self.total_tokens > 0 {
            u.total_tokens = self.total_tokens;
        }
        u.cached_input_tokens = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        u.reasoning_tokens = self
            .completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0);
        u
    }
}

/// A function's arguments: a JSON string per the spec, but tolerate an object.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum WireArguments {
    Text(String),
    Json(Value),
}

impl WireArguments {
    pub fn into_string(self) -> String {
        match self {
            WireArguments::Text(s) => s,
            WireArguments::Json(Value::Null) => String::new(),
            WireArguments::Json(v) => v.to_string(),
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct WireFunctionIn {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<WireArguments>,
}

#[derive(Deserialize)]
pub(crate) struct WireToolCallIn {
    #[serde(default)]
    pub index: Option<usize>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<WireFunctionIn>,
}

#[derive(Deserialize)]
pub(crate) struct WireDelta {
    #[serde(default)]
    pub content: Option<String>,
    /// vLLM (before 0.10), llama.cpp `--reasoning-format deepseek`, DeepSeek.
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// vLLM 0.10 and later, OpenRouter.
    #[serde(default)]
    pub reasoning: Option<String>,
    /// OpenAI: a refusal's text, in place of `content` (read as text).
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCallIn>>,
}

#[derive(Deserialize)]
pub(crate) struct WireChunkChoice {
    #[serde(default)]
    pub index: usize,
    #[serde(default)]
    pub delta: Option<WireDelta>,
    #[serde(default, deserialize_with = "finish_reason_in")]
    pub finish_reason: Option<FinishReason>,
}

/// A chunk's choices with index 0, the only ones modu reads (kept without a vector in the
/// usual case of one choice).
#[derive(Default)]
pub(crate) struct ChoicesZero {
    first: Option<WireChunkChoice>,
    more: Vec<WireChunkChoice>,
}

impl<'de> Deserialize<'de> for ChoicesZero {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = ChoicesZero;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ChoicesZero, A::Error> {
                let mut out = ChoicesZero::default();
                while let Some(choice) = seq.next_element::<WireChunkChoice>()? {
                    if choice.index != 0 {
                        continue;
                    }
                    if out.first.is_none() {
                        out.first = Some(choice);
                    } else {
                        out.more.push(choice);
                    }
                }
                Ok(out)
            }
        }
        deserializer.deserialize_seq(Visit)
    }
}

impl IntoIterator for ChoicesZero {
    type Item = WireChunkChoice;
    type IntoIter = std::iter::Chain<std::option::IntoIter<WireChunkChoice>, std::vec::IntoIter<WireChunkChoice>>;
    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.more)
    }
}

/// `finish_reason` (a string or null) read straight into a [`FinishReason`] (no string kept
/// for the known reasons; `""` is `Other("")`, as [`finish_reason`] maps it).
fn finish_reason_in<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<FinishReason>, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Option<FinishReason>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(finish_reason(v)))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(Visit)
        }
    }
    deserializer.deserialize_option(Visit)
}

#[derive(Deserialize)]
pub(crate) struct WireChunk {
    /// Only the choices with index 0 (`n > 1` is not used by modu).
    #[serde(default)]
    pub choices: ChoicesZero,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    #[serde(default)]
    pub error: Option<Value>,
    /// `object` is `"error"`: vLLM reports a failure mid-stream as a top-level error object.
    /// (Read without keeping the string: every chunk has an `object`.)
    #[serde(default, rename = "object", deserialize_with = "object_is_error")]
    pub is_error_object: bool,
}

/// Whether `object` (a string or null) is `"error"`.
fn object_is_error<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    struct IsError;
    impl<'de> serde::de::Visitor<'de> for IsError {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<bool, E> {
            Ok(v == "error")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_str(IsError)
        }
    }
    deserializer.deserialize_option(IsError)
}

#[derive(Deserialize)]
pub(crate) struct WireMessageIn {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
    /// OpenAI: a refusal's text, in place of `content` (read as text).
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCallIn>>,
}

#[derive(Deserialize)]
pub(crate) struct WireChoice {
    #[serde(default)]
    pub index: usize,
    pub message: WireMessageIn,
    #[serde(default, deserialize_with = "finish_reason_in")]
    pub finish_reason: Option<FinishReason>,
}

#[derive(Deserialize)]
pub(crate) struct WireCompletion {
    #[serde(default)]
    pub choices: Vec<WireChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// A failure after the server answered 200 (OpenRouter, once the model has started).
    #[serde(default)]
    pub error: Option<Value>,
}

pub(crate) fn finish_reason(s: &str) -> FinishReason {
    match s {
        "stop" | "eos" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Turns one stream chunk into events (only choice 0 is read; `n > 1` is not used by modu).
pub(crate) fn chunk_events(chunk: WireChunk, out: &mut impl Extend<ChatEvent>, saw_finish: &mut bool) {
    for choice in chunk.choices {
        if let Some(delta) = choice.delta {
            if let Some(text) = delta.reasoning_content.or(delta.reasoning).filter(|t| !t.is_empty()) {
                out.extend(Some(ChatEvent::ReasoningDelta { text }));
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                out.extend(Some(ChatEvent::TextDelta { text }));
            }
            if let Some(text) = delta.refusal.filter(|t| !t.is_empty()) {
                out.extend(Some(ChatEvent::TextDelta { text }));
            }
            for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                let (name, arguments) = match call.function {
                    Some(f) => (f.name, f.arguments.map(WireArguments::into_string).unwrap_or_default()),
                    None => (None, String::new()),
                };
                out.extend(Some(ChatEvent::ToolCallDelta {
                    index: call.index.unwrap_or(position),
                    id: call.id.filter(|s| !s.is_empty()),
                    name: name.filter(|s| !s.is_empty()),
                    arguments,
                }));
            }
        }
        if let Some(reason) = choice
            .finish_reason
            .filter(|r| !matches!(r, FinishReason::Other(o) if o.is_empty()))
        {
            *saw_finish = true;
            out.extend(Some(ChatEvent::Finish { reason }));
        }
    }
    if let Some(usage) = chunk.usage {
        out.extend(Some(ChatEvent::Usage {
            usage: usage.to_usage(),
        }));
    }
}

/// Turns a non-streaming `chat.completion` into a response.
pub(crate) fn completion_response(completion: WireCompletion) -> Result<ChatResponse, ModelError> {
    let choice = completion
        .choices
        .into_iter()
        .find(|c| c.index == 0)
        .ok_or_else(|| ModelError::invalid_response("the completion has no choices"))?;
    // A refusal (OpenAI) comes with `content` null: its text is the answer.
    let text = match (choice.message.content, choice.message.refusal) {
        (Some(content), _) if !content.is_empty() => content,
        (_, Some(refusal)) => refusal,
        (content, None) => content.unwrap_or_default(),
    };
    let reasoning = choice
        .message
        .reasoning_content
        .or(choice.message.reasoning)
        .filter(|r| !r.is_empty());
    let calls: Vec<ToolCall> = choice
        .message
        .tool_calls
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| {
            let (name, arguments) = match c.function {
                Some(f) => (f.name, f.arguments.map(WireArguments::into_string).unwrap_or_default()),
                None => (None, String::new()),
            };
            let name = name
                .filter(|n| !n.is_empty())
                .ok_or_else(|| ModelError::invalid_response(format!("tool call #{i} has no name")))?;
            let arguments = if arguments.trim().is_empty() {
                "{}".to_owned()
            } else {
                arguments
            };
            // Unique when the server sends none: call ids identify calls across a run.
            let id =
                c.id.filter(|s| !s.is_empty())
                    .unwrap_or_else(|| format!("call_{}_{i}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
            Ok(ToolCall::new(id, name, arguments))
        })
        .collect::<Result<_, ModelError>>()?;
    let mut message = if calls.is_empty() {
        Message::assistant(text)
    } else {
        Message::assistant_tool_calls(text, calls)
    };
    if let Some(text) = reasoning {
        message.content.insert(0, ContentPart::Reasoning { text });
    }
    let mut usage = completion.usage.map(|u| u.to_usage()).unwrap_or_default();
    usage.requests = 1;
    Ok(ChatResponse::new(message, usage, choice.finish_reason))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn object_arguments_are_serialised() {
        let c: WireChunk = serde_json::from_str(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":{"x":1}}}]}}]}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        let mut fin = false;
        chunk_events(c, &mut out, &mut fin);
        assert_eq!(
            out,
            vec![ChatEvent::ToolCallDelta {
                index: 0,
                id: Some("a".into()),
                name: Some("f".into()),
                arguments: "{\"x\":1}".into()
            }]
        );
    }
}
