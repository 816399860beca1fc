//! Asking a person for typed input in the middle of a run.
//!
//! Approvals are one kind of pause; this is the general one. A tool asks with
//! [`RunContext::ask_user`](crate::RunContext::ask_user) (or the typed
//! [`RunContext::ask_user_as`](crate::RunContext::ask_user_as)): a prompt and a JSON schema for
//! the answer. The first time, the ask returns an error the tool propagates with `?`; the run
//! finishes the other calls of the batch, checkpoints, and pauses with
//! [`AgentError::Interrupted`](crate::AgentError::Interrupted), listing the
//! [`InputRequest`] in [`PausedRun::inputs`](crate::PausedRun::inputs). A
//! person answers with `Agent::answer` (validated against the schema)
//! or declines with `Agent::decline`, and
//! `Agent::resume` continues — in this process or another one sharing
//! the checkpoint store, as for approvals.
//!
//! On resume the waiting tool is **called again with the same arguments**, and its asks return
//! the recorded answers in order: the first ask gets the first answer, and an ask past the
//! answers pauses the run again. A tool therefore asks before it does anything it must not do
//! twice (as with LangGraph's `interrupt`). An ask outside a tool call, or from a nested
//! agent's tool (agent-as-tool), is refused with a tool error the model sees.
//!
//! ```
//! use modu_core::{RunContext, ToolError};
//! # fn transfer(ctx: &RunContext<()>) -> Result<String, ToolError> {
//! let confirmed: bool = ctx.ask_user_as("Send 100 EUR to Alice?")?;
//! Ok(if confirmed { "sent".into() } else { "not sent".into() })
//! # }
//! ```

use serde::{Deserialize, Serialize};

/// A tool call waiting for a person's input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InputRequest {
    /// The waiting call's id (what `Agent::answer` takes).
    pub call_id: String,
    /// The tool that asked.
    pub tool_name: String,
    /// Which ask of the call this is (0 for the first): a call may ask several times.
    #[serde(default)]
    pub index: u32,
    /// What to ask the person.
    pub prompt: String,
    /// The JSON schema the answer must fit.
    pub schema: serde_json::Value,
    /// Extra details for the prompt (for an MCP elicitation: `mcp_server`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl InputRequest {
    /// Whether this ask has its answer when its call has `given` answers recorded (a call's
    /// asks are answered in order: the `index`-th needs more than `index`).
    pub fn is_answered(&self, given: usize) -> bool {
        given > self.index as usize
    }

    /// The `index`-th ask of the call `call_id` of `tool_name`, as `spec` words it.
    pub fn new(call_id: impl Into<String>, tool_name: impl Into<String>, index: u32, spec: InputSpec) -> Self {
        InputRequest {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            index,
            prompt: spec.prompt,
            schema: spec.schema,
            metadata: spec.metadata,
        }
    }
}

/// What a person gave for one [`InputRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputAnswer {
    /// The answer (it fits the request's schema).
    Given {
        /// The value.
        value: serde_json::Value,
    },
    /// The person declined to answer; the ask fails with a tool error the model sees.
    Declined {
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
}

/// What a tool asks for: a prompt, a schema, and details for whoever shows it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct InputSpec {
    /// What to ask the person.
    pub prompt: String,
    /// The JSON schema the answer must fit.
    pub schema: serde_json::Value,
    /// Extra details for the prompt.
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl InputSpec {
    /// Asks `prompt`, expecting an answer that fits `schema`.
    pub fn new(prompt: impl Into<String>, schema: serde_json::Value) -> Self {
        InputSpec {
            prompt: prompt.into(),
            schema,
            metadata: serde_json::Map::new(),
        }
    }

    /// The same spec with one more detail for the prompt.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// What a call's context knows about its asks: the answers recorded for the call, how many
/// the tool consumed in this execution, and the ask that is waiting.
#[derive(Debug, Default)]
#[doc(hidden)]
pub struct CallInputs {
    #[doc(hidden)]
    pub answers: Vec<InputAnswer>,
    #[doc(hidden)]
    pub asked: u32,
    #[doc(hidden)]
    pub waiting: Option<(u32, InputSpec)>,
}

impl CallInputs {
    /// The next ask of the call: its recorded answer, or `None` after recording the ask as the
    /// one waiting (the first unanswered ask of an execution wins).
    #[doc(hidden)]
    pub fn next(&mut self, spec: InputSpec) -> Option<InputAnswer> {
        let index = self.asked;
        self.asked += 1;
        match self.answers.get(index as usize) {
            Some(answer) => Some(answer.clone()),
            None => {
                if self.waiting.is_none() {
                    self.waiting = Some((index, spec));
                }
                None
            }
        }
    }
}
