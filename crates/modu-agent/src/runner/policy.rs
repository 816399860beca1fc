//! What a decision policy is: a sans-IO state machine. [`Policy::next`] is fed what the last
//! step's IO produced ([`Fed`]) and answers what to do next ([`Next`]: ask the model, run tools,
//! save a checkpoint, accept a final answer, fail), pushing the events of its transitions. It
//! never awaits: the driver (`Run::drive`) owns every model request, tool batch, checkpoint
//! and event, so both policies share one loop and are tested without a runtime.

use std::collections::HashSet;

use crate::context_provider::Stage;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::{Message, ToolCall};
use crate::model::{ChatResponse, ResponseFormat, ToolDefinition};
use crate::tool::{ToolError, ToolSpec};

use super::state::RunState;

/// What the driver feeds a policy: what its last [`Next`] produced.
// Moved once per step, never stored: boxing the answer would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Fed {
    /// The run starts (fresh or resumed), or the last checkpoint was saved, or the last tool
    /// batch finished (its results are in the run state): decide from the state.
    Start,
    /// The last [`Next::Save`] was saved.
    Saved,
    /// The last [`Next::RunTools`] batch finished; results wait in `state.pending_results`
    /// (strict) or were appended to the run's messages (standard).
    Tools,
    /// The model's answer to the last [`Next::Ask`].
    Answer(Answer),
    /// The final answer of the last [`Next::Finish`] parsed and is the last of the run's
    /// messages.
    Accepted,
}

/// What a policy asks the driver to do next.
pub(crate) enum Next {
    /// One model request.
    Ask(Ask),
    /// Run a batch of tool calls through the tool gate. `allowed` (strict) names the only tools
    /// that may run, and events show arguments masked; `None` (standard) admits what the last
    /// request offered, with handoffs.
    RunTools {
        calls: Vec<ToolCall>,
        allowed: Option<HashSet<String>>,
    },
    /// Save a checkpoint of the state now.
    Save,
    /// Parse `answer` as the run's output (one corrective request, with deltas on `route`,
    /// when it does not parse).
    Finish {
        answer: Message,
        /// Whether the model stopped `answer` at its output limit (`finish_reason: length`).
        cut: bool,
        format: Option<ResponseFormat>,
        route: DeltaRoute,
    },
    /// Return this stored final answer (a DONE strict run resumed): parse it, no model call.
    Replay { text: String },
    /// The accepted final answer is the run's output.
    Done,
    /// The run ends with this error.
    Fail(AgentError),
}

/// The events a step pushes; built only when someone listens.
pub(crate) struct Out {
    wanted: bool,
    events: Vec<AgentEvent>,
}

impl Out {
    pub(crate) fn new(wanted: bool) -> Self {
        Out {
            wanted,
            events: Vec::new(),
        }
    }

    /// Records an event (built only when events are wanted).
    pub(crate) fn push(&mut self, event: impl FnOnce() -> AgentEvent) {
        if self.wanted {
            self.events.push(event());
        }
    }

    pub(crate) fn take(&mut self) -> std::vec::Drain<'_, AgentEvent> {
        self.events.drain(..)
    }

    #[cfg(test)]
    pub(crate) fn events(&self) -> &[AgentEvent] {
        &self.events
    }
}

/// The run limits a policy decides with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_turns: u32,
    pub(crate) max_tool_calls: u32,
    pub(crate) max_steps: u32,
    pub(crate) max_step_attempts: u32,
    pub(crate) max_replans: u32,
    pub(crate) max_tool_repair_attempts: u32,
}

/// Read-only facts a policy decides with (implemented by the run's environment, and by plain
/// values in tests). Nothing here awaits.
pub(crate) trait View {
    /// The run's id (for events).
    fn run_id(&self) -> &str;
    fn limits(&self) -> Limits;
    /// The agent's output format (`None`: text).
    fn final_format(&self) -> Option<ResponseFormat>;
    /// The run's tools that are enabled now, in the agent's order (no handoffs).
    fn enabled_tools(&self) -> Vec<ToolDefinition>;
    /// The definition of `name` when it is a tool of the run enabled now.
    fn enabled_tool(&self, name: &str) -> Option<ToolDefinition>;
    /// The spec of the run's tool `name` (enabled or not).
    fn spec(&self, name: &str) -> Option<&ToolSpec>;
    /// Whether `args` are valid arguments of the run's tool `name`.
    fn valid_arguments(&self, name: &str, args: &serde_json::Value) -> bool;
    /// A tool's result as the model sees it: its tool message's parts (text capped at the
    /// tool's `max_result_bytes`; a [`crate::media::ToolContent`] envelope's media kept).
    fn result_content(&self, name: &str, value: serde_json::Value) -> Vec<crate::message::ContentPart>;
}

/// A decision policy (crate-private: the public configuration is [`crate::plan::DecisionPolicy`]).
pub(crate) trait Policy: Send {
    /// The next step, from what the last one produced. It never awaits.
    fn next(&mut self, state: &mut RunState, view: &dyn View, fed: Fed, out: &mut Out) -> Next;

    /// A finished call of a [`Next::RunTools`] batch, as its tool message (recorded in the
    /// state too when the policy keeps more, so a checkpoint taken mid-batch holds both).
    fn tool_result(&mut self, state: &mut RunState, view: &dyn View, call: &ToolCall, report: CallReport) -> Message;

    /// The run ends with `error` (from the policy or from IO): record what the policy keeps.
    fn failed(&mut self, _state: &mut RunState, _view: &dyn View, _error: &AgentError, _out: &mut Out) {}
}

/// Counts an answer's tool calls toward `RunLimits::max_tool_calls` (calls of exempt tools do
/// not count); over the limit the run ends.
pub(crate) fn count_tool_calls(state: &mut RunState, view: &dyn View, answer: &Message) -> Result<(), AgentError> {
    let n = answer
        .tool_calls
        .iter()
        .filter(|c| view.spec(&c.name).is_none_or(|s| !s.exempt_from_tool_limit))
        .count() as u32;
    let limit = view.limits().max_tool_calls;
    if state.tool_calls + n > limit {
        return Err(AgentError::MaxToolCallsExceeded { limit });
    }
    state.tool_calls += n;
    Ok(())
}

/// The tools a request offers.
pub(crate) enum Offer {
    /// The stage's default: every visible tool when acting, none otherwise.
    Stage,
    /// Exactly these (providers may narrow them).
    Only(Vec<ToolDefinition>),
}

/// The response format a request asks for.
pub(crate) enum Format {
    /// This one (or none).
    Fixed(Option<ResponseFormat>),
    /// This one when no tools end up on offer, none otherwise (a format and tools are never
    /// sent together).
    WhenNoTools(Option<ResponseFormat>),
}

/// Which model answers: each slot has its own chat stack, built with the agent.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModelSlot {
    /// The agent's model.
    Agent,
    /// The strict policy's planner model (the agent's model when none is set).
    Planner,
}

/// One model request.
pub(crate) struct Ask {
    pub(crate) stage: Stage,
    pub(crate) extra: Vec<Message>,
    pub(crate) offer: Offer,
    pub(crate) format: Format,
    pub(crate) route: DeltaRoute,
    pub(crate) model: ModelSlot,
}

impl Ask {
    /// A request of `stage` with nothing extra, the stage's tools, no format, deltas as
    /// `ModelDelta`, to the agent's model.
    pub(crate) fn new(stage: Stage) -> Self {
        Ask {
            stage,
            extra: Vec::new(),
            offer: Offer::Stage,
            format: Format::Fixed(None),
            route: DeltaRoute::Answer,
            model: ModelSlot::Agent,
        }
    }

    pub(crate) fn extra(mut self, extra: Vec<Message>) -> Self {
        self.extra = extra;
        self
    }

    pub(crate) fn offer(mut self, offer: Offer) -> Self {
        self.offer = offer;
        self
    }

    pub(crate) fn format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }

    pub(crate) fn route(mut self, route: DeltaRoute) -> Self {
        self.route = route;
        self
    }

    pub(crate) fn model(mut self, model: ModelSlot) -> Self {
        self.model = model;
        self
    }
}

/// A model's answer to an [`Ask`].
pub(crate) struct Answer {
    pub(crate) response: ChatResponse,
    /// Whether the request offered any tool.
    pub(crate) offered_tools: bool,
    /// The response format the request asked for.
    pub(crate) format: Option<ResponseFormat>,
}

impl Answer {
    /// Whether the model stopped at its output limit (`max_tokens`, or a server's context
    /// window): the answer is what it wrote until then.
    pub(crate) fn cut(&self) -> bool {
        self.response.finish_reason == Some(crate::model::FinishReason::Length)
    }
}

/// Which event carries the model's text deltas.
#[derive(Clone, Debug)]
pub(crate) enum DeltaRoute {
    /// `ModelDelta` (the standard policy).
    Answer,
    /// `StepModelDelta` for this step (strict PLAN, ACT, STEP_RESULT).
    Step(String),
    /// `FinalDelta` (strict FINALIZE).
    Final,
}

impl DeltaRoute {
    pub(crate) fn event(&self, run_id: &str, text: String) -> AgentEvent {
        let run_id = run_id.to_owned();
        match self {
            DeltaRoute::Answer => AgentEvent::ModelDelta { run_id, text },
            DeltaRoute::Step(step_id) => AgentEvent::StepModelDelta {
                run_id,
                step_id: step_id.clone(),
                text,
            },
            DeltaRoute::Final => AgentEvent::FinalDelta { run_id, text },
        }
    }

    pub(crate) fn reasoning(&self, run_id: &str, text: String) -> AgentEvent {
        let step_id = match self {
            DeltaRoute::Answer => None,
            DeltaRoute::Step(step_id) => Some(step_id.clone()),
            DeltaRoute::Final => Some("finalize".to_owned()),
        };
        AgentEvent::ReasoningDelta {
            run_id: run_id.to_owned(),
            text,
            step_id,
        }
    }
}

pub(crate) type ToolCallOutcome = Result<serde_json::Value, ToolError>;

/// How one call ended, in detail (the strict policy classifies it).
pub(crate) struct CallReport {
    pub(crate) outcome: ToolCallOutcome,
    /// How often it ran (0: refused before running).
    pub(crate) attempts: u32,
    /// The arguments it ran with, schema defaults filled in (`None`: refused before running).
    /// Filled for a strict run only: no other policy reads them (boxed: every tool call's
    /// future holds one, most of them `None`).
    pub(crate) validated: Option<Box<serde_json::Value>>,
    /// The tool that ran or was refused ([`crate::Tool::identity`]; the called name when the
    /// call never got past lookup and argument checks).
    pub(crate) identity: String,
    pub(crate) duration_ms: u64,
}
