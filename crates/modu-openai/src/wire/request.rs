//! Request bodies: a [`ChatRequest`] and its messages and tools, serialised as Chat
//! Completions JSON.

use std::borrow::Cow;
use std::collections::BTreeMap;

use modu_core::InputModalities;
use modu_core::{
    ChatRequest, ContentPart, Message, ModelError, ReasoningEffort, ReasoningReplay, ResponseFormat, Role, ToolCall,
    ToolChoice, ToolDefinition,
};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::media::{MEDIA_ONLY_TOOL_TEXT, WireParts, check_request};
use modu_core::tool_json::ToolJsonCache;

/// How an assistant turn that only calls tools carries its (empty) content on the wire.
///
/// Servers differ in what they send back (vLLM and OpenAI `null`, llama.cpp `""`); modu reads
/// both. What they accept also differs with chat templates: a template that concatenates
/// `message.content` fails on `null`, so the default is `""`, which vLLM, llama.cpp and
/// OpenAI all accept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmptyToolCallContent {
    /// `"content": ""` (the default).
    #[default]
    EmptyString,
    /// `"content": null`.
    Null,
}

/// How messages go on the wire.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MessageOptions {
    pub empty_content: EmptyToolCallContent,
    pub reasoning: ReasoningReplay,
    /// What the model takes (checked before a request).
    pub modalities: InputModalities,
    /// The most base64 text of one inline medium.
    pub max_inline_media_bytes: usize,
}

impl Default for MessageOptions {
    fn default() -> Self {
        MessageOptions {
            empty_content: EmptyToolCallContent::default(),
            reasoning: ReasoningReplay::default(),
            modalities: InputModalities::all(),
            max_inline_media_bytes: modu_core::media::DEFAULT_MAX_INLINE_MEDIA_BYTES,
        }
    }
}

#[derive(Serialize)]
pub(crate) struct WireRequest<'a> {
    pub model: &'a str,
    pub messages: WireMessages<'a>,
    #[serde(skip_serializing_if = "WireTools::is_empty")]
    pub tools: WireTools<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<WireResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<&'static str>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
pub(crate) struct StreamOptions {
    pub include_usage: bool,
}

/// A request's messages, serialised straight from modu's [`Message`]s (no intermediate
/// vectors, and the text of a one-part message borrowed).
#[derive(Clone, Copy)]
pub(crate) struct WireMessages<'a> {
    messages: &'a [Message],
    options: MessageOptions,
}

impl Serialize for WireMessages<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let replay = self.options.reasoning.replayed(self.messages);
        let mut seq = serializer.serialize_seq(None)?;
        // Tool messages with media of the current run of tool messages: their media follow
        // in one user message after the run (Chat Completions tool messages take only text).
        let mut with_media: Vec<&Message> = Vec::new();
        for (i, m) in self.messages.iter().enumerate() {
            if m.role != Role::Tool && !with_media.is_empty() {
                seq.serialize_element(&media_message(&std::mem::take(&mut with_media)))?;
            }
            if m.role == Role::Tool && m.has_media() {
                with_media.push(m);
            }
            seq.serialize_element(&wire_message(m, self.options.empty_content, replay(i)))?;
        }
        if !with_media.is_empty() {
            seq.serialize_element(&media_message(&with_media))?;
        }
        seq.end()
    }
}

/// The user message carrying the media of tool results.
fn media_message(tools: &[&Message]) -> WireMessage<'static> {
    WireMessage {
        role: "user",
        content: Some(WireContent::Owned(crate::media::tool_media_parts(tools))),
        tool_calls: WireToolCallsOut(&[]),
        tool_call_id: None,
        reasoning_content: None,
    }
}

/// A message's `content`: a string (text-only messages, exactly as before media), or an array
/// of parts (a user message with media).
pub(crate) enum WireContent<'a> {
    Text(Cow<'a, str>),
    Parts(&'a [ContentPart]),
    Owned(Vec<ContentPart>),
}

impl Serialize for WireContent<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            WireContent::Text(text) => serializer.serialize_str(text),
            WireContent::Parts(parts) => WireParts(parts).serialize(serializer),
            WireContent::Owned(parts) => WireParts(parts).serialize(serializer),
        }
    }
}

#[derive(Serialize)]
pub(crate) struct WireMessage<'a> {
    pub role: &'static str,
    /// `None` serialises as `null` (only used for tool-call turns in `Null` mode).
    pub content: Option<WireContent<'a>>,
    #[serde(skip_serializing_if = "WireToolCallsOut::is_empty")]
    pub tool_calls: WireToolCallsOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// An assistant message's tool calls, serialised from modu's [`ToolCall`]s.
pub(crate) struct WireToolCallsOut<'a>(&'a [ToolCall]);

impl WireToolCallsOut<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for WireToolCallsOut<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|c| WireToolCallOut {
            id: &c.id,
            kind: "function",
            function: WireFunctionOut {
                name: &c.name,
                arguments: &c.arguments,
            },
        }))
    }
}

#[derive(Serialize)]
pub(crate) struct WireToolCallOut<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: WireFunctionOut<'a>,
}

#[derive(Serialize)]
pub(crate) struct WireFunctionOut<'a> {
    pub name: &'a str,
    pub arguments: &'a str,
}

/// A request's tools, serialised from modu's [`ToolDefinition`]s, or their JSON already
/// serialised ([`ToolJsonCache`]).
#[derive(Clone, Copy)]
pub(crate) enum WireTools<'a> {
    Definitions(&'a [ToolDefinition]),
    Encoded(&'a RawValue),
}

impl<'a> WireTools<'a> {
    pub(crate) fn new(tools: &'a [ToolDefinition]) -> Self {
        WireTools::Definitions(tools)
    }

    pub(crate) fn is_empty(&self) -> bool {
        match self {
            WireTools::Definitions(tools) => tools.is_empty(),
            WireTools::Encoded(_) => false,
        }
    }
}

impl Serialize for WireTools<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tools = match self {
            WireTools::Definitions(tools) => tools,
            WireTools::Encoded(json) => return json.serialize(serializer),
        };
        serializer.collect_seq(tools.iter().map(|t| WireTool {
            kind: "function",
            function: WireFunctionDef {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        }))
    }
}

#[derive(Serialize)]
pub(crate) struct WireTool<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: WireFunctionDef<'a>,
}

#[derive(Serialize)]
pub(crate) struct WireFunctionDef<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub parameters: &'a Value,
}

#[derive(Serialize)]
pub(crate) struct WireResponseFormat<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub json_schema: WireJsonSchema<'a>,
}

#[derive(Serialize)]
pub(crate) struct WireJsonSchema<'a> {
    pub name: &'a str,
    pub schema: Cow<'a, Value>,
    pub strict: bool,
}

/// The text of a message: borrowed when it has one part (the usual case).
fn message_text(m: &Message) -> Cow<'_, str> {
    match m.content.as_slice() {
        [] => Cow::Borrowed(""),
        [one] => Cow::Borrowed(one.as_text().unwrap_or_default()),
        _ => Cow::Owned(m.text()),
    }
}

fn wire_message(m: &Message, empty_content: EmptyToolCallContent, replay: bool) -> WireMessage<'_> {
    let text = message_text(m);
    let content = if m.role == Role::User && m.has_media() {
        Some(WireContent::Parts(&m.content))
    } else if text.is_empty() && !m.tool_calls.is_empty() && empty_content == EmptyToolCallContent::Null {
        None
    } else if text.is_empty() && m.role == Role::Tool && m.has_media() {
        Some(WireContent::Text(Cow::Borrowed(MEDIA_ONLY_TOOL_TEXT)))
    } else {
        Some(WireContent::Text(text))
    };
    WireMessage {
        role: m.role.as_str(),
        content,
        tool_calls: WireToolCallsOut(&m.tool_calls),
        tool_call_id: if m.role == Role::Tool {
            m.tool_call_id.as_deref()
        } else {
            None
        },
        reasoning_content: if replay && m.role == Role::Assistant {
            m.reasoning()
        } else {
            None
        },
    }
}

pub(crate) fn wire_messages(messages: &[Message], options: MessageOptions) -> WireMessages<'_> {
    WireMessages { messages, options }
}

pub(crate) fn wire_tools(tools: &[ToolDefinition]) -> WireTools<'_> {
    WireTools::new(tools)
}

/// `tool_choice`: a string, or the object that names a function.
pub(crate) enum WireToolChoice<'a> {
    Mode(&'static str),
    Named(&'a str),
}

impl Serialize for WireToolChoice<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Name<'a> {
            name: &'a str,
        }
        #[derive(Serialize)]
        struct Named<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            function: Name<'a>,
        }
        match self {
            WireToolChoice::Mode(mode) => serializer.serialize_str(mode),
            WireToolChoice::Named(name) => Named {
                kind: "function",
                function: Name { name },
            }
            .serialize(serializer),
        }
    }
}

pub(crate) fn wire_tool_choice(choice: &ToolChoice) -> WireToolChoice<'_> {
    match choice {
        ToolChoice::Auto => WireToolChoice::Mode("auto"),
        ToolChoice::Required => WireToolChoice::Mode("required"),
        ToolChoice::None => WireToolChoice::Mode("none"),
        ToolChoice::Named(name) => WireToolChoice::Named(name),
    }
}

/// The response format as OpenAI takes it: a strict schema in strict mode's subset of JSON
/// Schema ([`ResponseFormat::wire_schema`]), or, when the schema cannot be put in it, the
/// schema as it is without `strict` (OpenAI refuses the request otherwise).
pub(crate) fn wire_response_format(format: &ResponseFormat) -> WireResponseFormat<'_> {
    let (schema, strict) = format.wire_schema();
    if format.strict && !strict {
        tracing::debug!(
            name = %format.name,
            "the output schema has no form OpenAI's strict mode takes (a map, any value, allOf, not, or a root that is not an object): sent without strict"
        );
    }
    WireResponseFormat {
        kind: "json_schema",
        json_schema: WireJsonSchema {
            name: &format.name,
            strict,
            schema,
        },
    }
}

/// Serialises a request body. `extras` are merged last, at the top level, and win over the
/// fields modu sets (so `max_completion_tokens` or vLLM's `guided_json` can be added, and a
/// field can be overridden on purpose).
pub(crate) fn encode_request(
    model: &str,
    request: &ChatRequest,
    stream: bool,
    options: MessageOptions,
    tool_json: &ToolJsonCache,
) -> Result<Vec<u8>, ModelError> {
    check_request(
        model,
        &request.messages,
        options.modalities,
        options.max_inline_media_bytes,
    )?;
    let encoded = tool_json
        .get_or_encode(&request.tools, |tools| {
            serde_json::value::to_raw_value(&WireTools::new(tools))
        })
        .map_err(|e| ModelError::InvalidRequest {
            message: format!("cannot serialise the request's tools: {e}"),
        })?;
    let body = WireRequest {
        model,
        messages: wire_messages(&request.messages, options),
        tools: encoded
            .as_deref()
            .map_or_else(|| wire_tools(&request.tools), WireTools::Encoded),
        tool_choice: request.tool_choice.as_ref().map(wire_tool_choice),
        parallel_tool_calls: request.parallel_tool_calls,
        response_format: request.response_format.as_ref().map(wire_response_format),
        temperature: request.temperature,
        top_p: request.top_p,
        frequency_penalty: request.frequency_penalty,
        presence_penalty: request.presence_penalty,
        max_tokens: request.max_tokens,
        stop: &request.stop,
        seed: request.seed,
        reasoning_effort: request.reasoning_effort.map(ReasoningEffort::as_str),
        stream,
        stream_options: stream.then_some(StreamOptions { include_usage: true }),
    };
    encode_with_extras(&body, &request.extras, body_size_hint(request))
}

/// A guess at a request body's size, so that its buffer is allocated once: the texts it
/// carries plus room for the JSON around them (tool schemas, about 256 bytes a tool).
fn body_size_hint(request: &ChatRequest) -> usize {
    let texts: usize = request
        .messages
        .iter()
        .map(|m| {
            let content: usize = m
                .content
                .iter()
                .map(|p| p.as_text().or(p.inline_data()).map_or(0, str::len))
                .sum();
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 64)
                .sum();
            content + calls + 96
        })
        .sum();
    let tools: usize = request.tools.iter().map(|t| t.description.len() + 256).sum();
    (256 + texts + tools).next_power_of_two()
}

pub(crate) fn encode_with_extras<T: Serialize>(
    body: &T,
    extras: &BTreeMap<String, Value>,
    size_hint: usize,
) -> Result<Vec<u8>, ModelError> {
    let invalid = |e: serde_json::Error| ModelError::InvalidRequest {
        message: format!("cannot serialise the request: {e}"),
    };
    if extras.is_empty() {
        let mut out = Vec::with_capacity(size_hint);
        serde_json::to_writer(&mut out, body).map_err(invalid)?;
        return Ok(out);
    }
    let mut value = serde_json::to_value(body).map_err(invalid)?;
    if let Value::Object(map) = &mut value {
        for (k, v) in extras {
            map.insert(k.clone(), v.clone());
        }
    }
    serde_json::to_vec(&value).map_err(invalid)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tool_call_turn_content_modes() {
        let msgs = vec![Message::assistant_tool_calls(
            "",
            vec![ToolCall::new("c1", "add", "{}")],
        )];
        let empty = serde_json::to_value(wire_messages(&msgs, MessageOptions::default())).unwrap();
        assert_eq!(empty[0]["content"], Value::from(""));
        let null = serde_json::to_value(wire_messages(
            &msgs,
            MessageOptions {
                empty_content: EmptyToolCallContent::Null,
                ..MessageOptions::default()
            },
        ))
        .unwrap();
        assert_eq!(null[0]["content"], Value::Null);
        assert_eq!(null[0]["tool_calls"][0]["type"], "function");
    }
}
