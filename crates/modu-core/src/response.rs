//! What comes out of a model: [`ChatEvent`] deltas, folded by [`ChatResponseBuilder`] into a
//! [`ChatResponse`]. Also re-exported from [`crate::model`], with the rest of the boundary.

use std::collections::BTreeMap;
use std::pin::Pin;

use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::message::{Message, Role, ToolCall, Usage};
use crate::model_error::ModelError;

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
