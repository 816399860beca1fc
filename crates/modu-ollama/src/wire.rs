//! Ollama's `/api/chat` wire format.

use std::collections::BTreeMap;

use modu_core::tool_json::ToolJsonCache;
use modu_core::{
    ChatEvent, ChatRequest, ContentPart, FinishReason, InputModalities, Message, ModelError, ReasoningEffort,
    ReasoningReplay, Role, ToolChoice, ToolDefinition, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

#[derive(Serialize)]
pub(crate) struct WireRequest<'a> {
    pub model: &'a str,
    pub messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "WireTools::is_empty")]
    pub tools: WireTools<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<&'a Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub options: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<&'a Value>,
    /// Thinking off, or its level (`ChatRequest::reasoning_effort`; absent: the model's
    /// default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub think: Option<Think>,
    pub stream: bool,
}

/// Ollama's `think`: on or off, or a level. Only gpt-oss models take a level (`"low"`,
/// `"medium"`, `"high"`): many Ollama releases answer 400 "think value … is not supported for
/// this model" to a level for any other model, so those get `true`. A gpt-oss model given
/// `true` thinks at `"medium"` whatever effort was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum Think {
    /// `true` or `false`.
    On(bool),
    /// `"low"`, `"medium"` or `"high"`.
    Level(&'static str),
}

impl Think {
    /// `think` for `effort` on `model` (its Ollama name, such as `gpt-oss:20b`).
    fn new(effort: ReasoningEffort, model: &str) -> Think {
        if effort == ReasoningEffort::None {
            return Think::On(false);
        }
        // Ollama picks its gpt-oss (harmony) handling by the model's family; the name is what
        // a client knows. `gpt-oss:20b`, `gpt-oss:120b-cloud`, `hf.co/…/gpt-oss-20b-GGUF`.
        let name = model.to_ascii_lowercase();
        if !(name.contains("gpt-oss") || name.contains("gptoss")) {
            return Think::On(true);
        }
        match effort {
            // Ollama has no level below "low".
            ReasoningEffort::Minimal | ReasoningEffort::Low => Think::Level("low"),
            ReasoningEffort::Medium => Think::Level("medium"),
            // High, and any level added above it.
            _ => Think::Level("high"),
        }
    }
}

#[derive(Serialize)]
pub(crate) struct WireMessage<'a> {
    pub role: &'static str,
    pub content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCallOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<&'a str>,
    /// For a tool result: the id of the call it answers (Ollama's `tool_call_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// Inline images, base64 (Ollama's `images`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<&'a str>,
}

#[derive(Serialize)]
pub(crate) struct WireToolCallOut<'a> {
    /// The call's id, which the tool result's `tool_call_id` names (none when empty).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub id: &'a str,
    pub function: WireFunctionOut<'a>,
}

#[derive(Serialize)]
pub(crate) struct WireFunctionOut<'a> {
    pub name: &'a str,
    /// An object, as Ollama wants it; raw text when the model wrote invalid JSON.
    pub arguments: Value,
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

pub(crate) fn wire_messages(messages: &[Message], replay: ReasoningReplay) -> Vec<WireMessage<'_>> {
    let replayed = replay.replayed(messages);
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| WireMessage {
            thinking: if replayed(i) { m.reasoning() } else { None },
            role: m.role.as_str(),
            content: m.text(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| WireToolCallOut {
                    id: &c.id,
                    function: WireFunctionOut {
                        name: &c.name,
                        arguments: serde_json::from_str(&c.arguments)
                            .unwrap_or_else(|_| Value::String(c.arguments.clone())),
                    },
                })
                .collect(),
            tool_name: if m.role == Role::Tool { m.name.as_deref() } else { None },
            tool_call_id: if m.role == Role::Tool {
                m.tool_call_id.as_deref().filter(|id| !id.is_empty())
            } else {
                None
            },
            images: m.content.iter().filter_map(inline_image).collect(),
        })
        .collect()
}

/// The base64 of an image Ollama can take: inline, or a `data:…;base64,` URL.
fn inline_image(part: &ContentPart) -> Option<&str> {
    match part {
        ContentPart::Image { source } => source.inline_data(),
        _ => None,
    }
}

/// What a request must pass before it is sent: the model's modalities and the inline size
/// limit, then what Ollama can carry (images inline, as base64: Ollama fetches no URL and takes
/// no audio or files).
pub(crate) fn check_request(
    model: &str,
    messages: &[Message],
    accepts: InputModalities,
    max_inline_bytes: usize,
) -> Result<(), ModelError> {
    modu_core::media::check_messages(model, messages, accepts, max_inline_bytes)?;
    for part in messages.iter().flat_map(|m| &m.content) {
        let what = match part {
            ContentPart::Image { .. } if inline_image(part).is_none() => {
                "Ollama takes images inline (base64), not by URL"
            }
            ContentPart::Audio { .. } => "Ollama's chat API takes no audio",
            ContentPart::File { .. } => "Ollama's chat API takes no files",
            _ => continue,
        };
        return Err(ModelError::UnsupportedContent {
            model: model.to_owned(),
            modality: Some(part.modality()),
            message: what.to_owned(),
        });
    }
    Ok(())
}

/// The request's `tools`: built from the definitions, or the shared list's JSON encoded before
/// ([`ToolJsonCache`]).
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum WireTools<'a> {
    Definitions(Vec<WireTool<'a>>),
    Encoded(&'a RawValue),
}

impl WireTools<'_> {
    fn is_empty(&self) -> bool {
        matches!(self, WireTools::Definitions(d) if d.is_empty())
    }
}

/// The JSON of a whole tool list as Ollama takes it (what [`ToolJsonCache`] keeps).
fn encode_tools(tools: &[ToolDefinition]) -> Result<Box<RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(&wire_tools(tools))
}

pub(crate) fn wire_tools(tools: &[ToolDefinition]) -> Vec<WireTool<'_>> {
    tools
        .iter()
        .map(|t| WireTool {
            kind: "function",
            function: WireFunctionDef {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        })
        .collect()
}

/// The tools the request offers, as far as Ollama can express `tool_choice` (it has no such
/// field): `none` offers no tool, a named tool is offered alone, `auto` and `required` offer
/// them all (Ollama cannot be made to call one).
pub(crate) fn offered_tools(request: &ChatRequest) -> &[ToolDefinition] {
    match &request.tool_choice {
        Some(ToolChoice::None) => &[],
        Some(ToolChoice::Named(name)) => request
            .tools
            .iter()
            .position(|t| &t.name == name)
            .map_or(&request.tools[..], |i| std::slice::from_ref(&request.tools[i])),
        _ => &request.tools,
    }
}

/// The request body. Options are built from the client's defaults, then the request's
/// sampling fields, then `extras["options"]`; the other extras are merged at the top level.
pub(crate) fn encode_request(
    model: &str,
    request: &ChatRequest,
    stream: bool,
    default_options: &Map<String, Value>,
    keep_alive: Option<&Value>,
    replay: ReasoningReplay,
    tool_json: &ToolJsonCache,
) -> Result<Vec<u8>, ModelError> {
    let mut options = default_options.clone();
    if let Some(t) = request.temperature {
        options.insert("temperature".into(), Value::from(t));
    }
    if let Some(seed) = request.seed {
        options.insert("seed".into(), Value::from(seed));
    }
    for (name, value) in [
        ("top_p", request.top_p),
        ("frequency_penalty", request.frequency_penalty),
        ("presence_penalty", request.presence_penalty),
    ] {
        if let Some(value) = value {
            options.insert(name.into(), Value::from(value));
        }
    }
    if let Some(n) = request.max_tokens {
        options.insert("num_predict".into(), Value::from(n));
    }
    if !request.stop.is_empty() {
        options.insert("stop".into(), Value::from(request.stop.clone()));
    }
    if let Some(Value::Object(extra)) = request.extras.get("options") {
        for (k, v) in extra {
            options.insert(k.clone(), v.clone());
        }
    }
    let invalid = |e: serde_json::Error| ModelError::InvalidRequest {
        message: format!("cannot serialise the request: {e}"),
    };
    let offered = offered_tools(request);
    // The whole shared list (the usual case: an agent's tools) is encoded once per client.
    let cached = if std::ptr::eq(offered, request.tools.as_slice()) {
        tool_json.get_or_encode(&request.tools, encode_tools).map_err(invalid)?
    } else {
        None
    };
    let body = WireRequest {
        model,
        messages: wire_messages(&request.messages, replay),
        tools: match &cached {
            Some(json) => WireTools::Encoded(json),
            None => WireTools::Definitions(wire_tools(offered)),
        },
        format: request.response_format.as_ref().map(|f| &f.schema),
        options,
        keep_alive,
        think: request.reasoning_effort.map(|effort| Think::new(effort, model)),
        stream,
    };
    let extras: BTreeMap<&String, &Value> = request.extras.iter().filter(|(k, _)| k.as_str() != "options").collect();
    if extras.is_empty() {
        return serde_json::to_vec(&body).map_err(invalid);
    }
    let mut value = serde_json::to_value(&body).map_err(invalid)?;
    if let Value::Object(map) = &mut value {
        for (k, v) in extras {
            map.insert(k.clone(), v.clone());
        }
    }
    serde_json::to_vec(&value).map_err(invalid)
}

/// A tool call's function, as Ollama sends it. Its `index` is not read: every call arrives
/// whole, and Ollama 0.12.0 to 0.20.5 sent `index: 0` for every parallel call of several
/// models (ollama#15467), so the client numbers the calls itself.
#[derive(Deserialize)]
pub(crate) struct WireFunctionIn {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<Value>,
}

#[derive(Deserialize)]
pub(crate) struct WireToolCallIn {
    #[serde(default)]
    pub id: Option<String>,
    pub function: WireFunctionIn,
}

#[derive(Deserialize, Default)]
pub(crate) struct WireMessageIn {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub thinking: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCallIn>>,
}

/// One NDJSON line (or the whole non-streaming answer).
#[derive(Deserialize)]
pub(crate) struct WireLine {
    #[serde(default)]
    pub message: Option<WireMessageIn>,
    #[serde(default)]
    pub done: bool,
    #[serde(default)]
    pub done_reason: Option<String>,
    #[serde(default)]
    pub prompt_eval_count: Option<u64>,
    #[serde(default)]
    pub eval_count: Option<u64>,
    #[serde(default)]
    pub error: Option<Value>,
}

/// State carried across the lines of one answer.
#[derive(Default)]
pub(crate) struct LineState {
    pub next_index: usize,
    pub done: bool,
}

/// Turns one line into events. Tool calls arrive whole: each gets the next index of the answer
/// (never one an earlier call has, whatever `function.index` says) and its object arguments as
/// JSON text.
pub(crate) fn line_events(line: WireLine, st: &mut LineState, out: &mut Vec<ChatEvent>) {
    if let Some(message) = line.message {
        if let Some(text) = message.thinking.filter(|t| !t.is_empty()) {
            out.push(ChatEvent::ReasoningDelta { text });
        }
        if let Some(text) = message.content.filter(|t| !t.is_empty()) {
            out.push(ChatEvent::TextDelta { text });
        }
        for call in message.tool_calls.into_iter().flatten() {
            let index = st.next_index;
            st.next_index = st.next_index.saturating_add(1);
            let arguments = match call.function.arguments {
                None | Some(Value::Null) => "{}".to_owned(),
                Some(Value::String(s)) => s,
                Some(v) => v.to_string(),
            };
            out.push(ChatEvent::ToolCallDelta {
                index,
                id: call.id.filter(|s| !s.is_empty()),
                name: call.function.name.filter(|s| !s.is_empty()),
                arguments,
            });
        }
    }
    if line.done {
        st.done = true;
        if line.prompt_eval_count.is_some() || line.eval_count.is_some() {
            out.push(ChatEvent::Usage {
                usage: Usage::new(line.prompt_eval_count.unwrap_or(0), line.eval_count.unwrap_or(0)),
            });
        }
        let reason = match line.done_reason.as_deref() {
            // Ollama says "stop" after tool calls too; say what happened.
            Some("stop") | None if st.next_index > 0 => FinishReason::ToolCalls,
            Some("stop") | None => FinishReason::Stop,
            Some("length") => FinishReason::Length,
            Some(other) => FinishReason::Other(other.to_owned()),
        };
        out.push(ChatEvent::Finish { reason });
    }
}
