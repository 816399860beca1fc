//! Events: one serialisable type for everything a run does, and the [`EventSink`] trait that
//! receives them.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::AgentError;
use crate::message::Usage;
use crate::model::FinishReason;
use crate::tool::ToolError;

mod accessors;
mod sink;

/// Something that happened in a run.
///
/// Every event names its run. The caller's stream (`Agent::stream`) and every
/// configured [`EventSink`] see the same events, in the same order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// A run started (or resumed from a checkpoint).
    RunStarted {
        /// The run.
        run_id: String,
        /// The agent's name.
        agent: String,
        /// The session, when the run belongs to one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        /// The run this one is nested in (agent-as-tool).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_run_id: Option<String>,
        /// Whether the run continues from a checkpoint.
        #[serde(default)]
        resumed: bool,
    },
    /// A model request is about to be sent.
    ModelCallStarted {
        /// The run.
        run_id: String,
        /// The model's name.
        model: String,
        /// The number of this model call in the run, from 1.
        call: u32,
        /// How many tools the request offers.
        tools: usize,
        /// Whether the request asks for structured output.
        structured: bool,
    },
    /// A piece of the model's answer text.
    ModelDelta {
        /// The run.
        run_id: String,
        /// The text.
        text: String,
    },
    /// A model request finished.
    ModelCallFinished {
        /// The run.
        run_id: String,
        /// The model's name.
        model: String,
        /// The number of this model call in the run.
        call: u32,
        /// Token usage of the request.
        usage: Usage,
        /// Why the model stopped.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<FinishReason>,
        /// How many tools it called.
        tool_calls: usize,
        /// How long it took, in milliseconds.
        duration_ms: u64,
        /// The model that produced the answer, when the answer names it
        /// ([`ChatResponse::model`](crate::model::ChatResponse::model)): the member of a
        /// `FallbackModel` chain that answered, while `model` is the slot's model (the chain's
        /// first). `None` (and absent from the JSON): `model` answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answered_by: Option<String>,
    },
    /// A model request failed.
    ModelCallFailed {
        /// The run.
        run_id: String,
        /// The model's name.
        model: String,
        /// The number of this model call in the run.
        call: u32,
        /// The error's kind (see [`crate::ModelError::kind`]).
        error_kind: crate::codes::ModelErrorKind,
        /// Whether the run loop will try again.
        will_retry: bool,
    },
    /// A fragment of a tool call while the model streams it (standard runs; for UIs that show
    /// arguments as they arrive). Only the caller's `RunStream` gets it, never an
    /// event sink: the fragments are the model's raw text, and masking secrets needs the whole
    /// JSON (a fragment can split a key from its value). `ToolCallStarted` carries the whole,
    /// masked by the sinks that mask.
    ToolCallDelta {
        /// The run.
        run_id: String,
        /// The call's position in the model's answer (fragments with one index are one call).
        index: usize,
        /// The call's id as the server sent it, on the fragment that carries it. The run keeps
        /// it unless an earlier call of the run had the same id; then [`AgentEvent::ToolCallStarted`]
        /// names it `{id}_2` (and so on).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool's name, on the fragment that carries it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// A piece of the arguments' JSON text.
        arguments: String,
    },
    /// What the run's structured output holds so far, while its JSON arrives (the final
    /// answer of a standard run with `AgentBuilder::output`; a strict Plan-and-Execute run
    /// sends its structured answer whole, as one `FinalDelta`; see `modu_agent::partial`): complete
    /// members, the string being written, open objects and arrays closed. Sent each time the
    /// snapshot grows. Like [`AgentEvent::ToolCallDelta`], only the caller's
    /// `RunStream` gets it: the snapshot is the model's raw text, and masking needs the
    /// whole answer. Read it as a type of your own with [`AgentEvent::partial_output`].
    ///
    /// Each snapshot is the whole value so far of the answer being written: show the latest,
    /// do not merge them. An answer that is not used (it did not parse and a corrective
    /// request follows, or its request is retried) leaves snapshots the final answer does not
    /// match; the next request's [`AgentEvent::ModelCallStarted`] comes before its own.
    OutputPartial {
        /// The run.
        run_id: String,
        /// The value so far.
        snapshot: serde_json::Value,
    },
    /// A tool call is about to run.
    ToolCallStarted {
        /// The run.
        run_id: String,
        /// The call's id.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// The call's arguments (after JSON parsing).
        arguments: serde_json::Value,
    },
    /// A tool call finished (or was refused before running).
    ToolCallFinished {
        /// The run.
        run_id: String,
        /// The call's id.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// Whether it succeeded.
        ok: bool,
        /// How many times it ran (0 when refused before running).
        attempts: u32,
        /// How long it took, in milliseconds.
        duration_ms: u64,
        /// The error, when it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ToolError>,
    },
    /// A finished tool call's result as the model will read it: the text of its tool
    /// message (media parts left out), right after [`AgentEvent::ToolCallFinished`], for UIs
    /// that show results as each call ends (standard runs; a strict Plan-and-Execute run's
    /// results stay inside its steps). Only the caller's `RunStream` gets it,
    /// never an event sink: a result is the tool's raw output, and sinks record what ran, not
    /// what it returned. A handoff's result is in the run's messages only.
    ToolCallResult {
        /// The run.
        run_id: String,
        /// The call's id.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// The result's text.
        content: String,
        /// Whether the result is an error the model is told about.
        is_error: bool,
    },
    /// A tool call in flight reported its progress
    /// ([`crate::RunContext::report_progress`]; an MCP server's progress notifications, say).
    ToolProgress {
        /// The run.
        run_id: String,
        /// The call's id.
        call_id: String,
        /// The progress so far (grows with every report).
        progress: f64,
        /// The total, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What is being done.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A tool call asked a model on the run's behalf (an MCP server's sampling request served
    /// by [`crate::RunContext::model`], say): [`crate::RunContext::report_model_call`].
    ToolModelCall {
        /// The run.
        run_id: String,
        /// The call's id.
        call_id: String,
        /// The model that answered.
        model: String,
        /// What it used.
        usage: Usage,
        /// Why (`mcp_sampling`, say).
        purpose: String,
    },
    /// The conversation was handed to another agent.
    Handoff {
        /// The run.
        run_id: String,
        /// The agent that handed over.
        from: String,
        /// The agent that continues.
        to: String,
    },
    /// A tool call waits for a person's approval; the run pauses after its batch.
    ApprovalRequested {
        /// The run.
        run_id: String,
        /// What to approve.
        request: crate::approval::ApprovalRequest,
    },
    /// A person decided on a call.
    ApprovalResolved {
        /// The run.
        run_id: String,
        /// The call.
        call_id: String,
        /// The tool.
        tool_name: String,
        /// Approved (`true`) or rejected.
        approved: bool,
    },
    /// A guardrail made a check (`modu_agent::guardrail`).
    GuardrailChecked {
        /// The run.
        run_id: String,
        /// The guardrail's name.
        guardrail: String,
        /// Which check.
        kind: crate::tripwire::GuardrailKind,
        /// The tool call checked (tool guardrails).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// Whether it fired its tripwire (the run ends).
        tripped: bool,
        /// Whether it replaced the call's result (tool guardrails).
        replaced: bool,
        /// The tripwire's code, when it tripped.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    /// A tool call asked a person for input; the run pauses after its batch.
    InputRequested {
        /// The run.
        run_id: String,
        /// What is asked.
        request: crate::input::InputRequest,
    },
    /// A person answered (or declined) a call's ask for input. The answer itself is not in
    /// the event.
    InputAnswered {
        /// The run.
        run_id: String,
        /// The call.
        call_id: String,
        /// The tool.
        tool_name: String,
        /// Answered (`true`) or declined.
        answered: bool,
    },
    /// A request of the run was compacted to fit its token budget (`modu_agent::compaction`).
    RunCompacted {
        /// The run.
        run_id: String,
        /// Tool results cut.
        trimmed: usize,
        /// Tool rounds replaced by the run's summary.
        summarized_rounds: usize,
        /// The request's tokens before.
        tokens_before: u64,
        /// And after.
        tokens_after: u64,
    },
    /// A memory policy shaped the history the model sees (only when it left something out).
    MemoryApplied {
        /// The run.
        run_id: String,
        /// The policy's name.
        policy: String,
        /// Turns kept verbatim.
        kept_turns: usize,
        /// Turns left out.
        dropped_turns: usize,
        /// Turns replaced by a summary.
        summarized_turns: usize,
        /// The summary came from the cache.
        summary_cached: bool,
        /// The summarizer failed and the policy fell back to the token budget.
        summary_failed: bool,
    },
    /// The run state was saved.
    CheckpointSaved {
        /// The run.
        run_id: String,
    },
    /// A store operation failed.
    StoreFailed {
        /// The run.
        run_id: String,
        /// What was being done (`"conversation.load"`, `"checkpoint.save"`, …).
        operation: String,
        /// The error, without secrets.
        message: String,
    },
    /// Plan-and-Execute: the plan was made.
    PlanCreated {
        /// The run.
        run_id: String,
        /// The plan.
        plan: crate::plan::Plan,
    },
    /// Plan-and-Execute: the unfinished part of the plan was revised after a failure.
    PlanRevised {
        /// The run.
        run_id: String,
        /// The revised plan.
        plan: crate::plan::Plan,
        /// Why (a cause such as `tool_failed`).
        cause: crate::codes::PlanFailureCause,
    },
    /// Plan-and-Execute: work on a step started (again).
    StepStarted {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// Its position in the plan, from 0.
        index: usize,
        /// The step-result attempt, from 1.
        attempt: u32,
    },
    /// A piece of the model's reasoning, before its answer. In a strict Plan-and-Execute run it
    /// names the step (`plan`, a step id, or `finalize`) and is internal: only
    /// `Agent::stream_all` and event sinks see it.
    ReasoningDelta {
        /// The run.
        run_id: String,
        /// The text.
        text: String,
        /// The strict step the reasoning belongs to (`None` in a standard run).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step_id: Option<String>,
    },
    /// Plan-and-Execute: text the model produced inside a step (PLAN, ACT, STEP_RESULT). Only
    /// `Agent::stream_all` and event sinks see it.
    StepModelDelta {
        /// The run.
        run_id: String,
        /// The step (`plan` while planning).
        step_id: String,
        /// The text.
        text: String,
    },
    /// Plan-and-Execute: a step result did not validate, or reported `failed`.
    StepResultRejected {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// `invalid_step_result` or `step_reported_failed`.
        reason: String,
        /// The attempt that was rejected, from 1.
        attempt: u32,
    },
    /// Plan-and-Execute: a step result was validated and committed.
    StepCommitted {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
    },
    /// Plan-and-Execute: the policy ended the run in this step.
    StepFailed {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// Why.
        cause: crate::codes::PlanFailureCause,
    },
    /// Plan-and-Execute: a tool failure is being recovered.
    ToolRecovery {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// The failed call.
        call_id: String,
        /// The tool.
        tool: String,
        /// `repair_call`, `replan` or `fail`.
        action: String,
        /// The tool error's reason or the runtime's (sanitised).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Plan-and-Execute: every step is committed; the final answer comes next.
    PlanVerified {
        /// The run.
        run_id: String,
        /// Steps committed.
        steps: usize,
    },
    /// Plan-and-Execute: a piece of the final answer (FINALIZE).
    FinalDelta {
        /// The run.
        run_id: String,
        /// The text.
        text: String,
    },
    /// The run finished with an answer.
    RunCompleted {
        /// The run.
        run_id: String,
        /// The agent's name.
        agent: String,
        /// The run's usage.
        usage: Usage,
        /// The output as JSON.
        output: serde_json::Value,
        /// How long the run took, in milliseconds.
        duration_ms: u64,
    },
    /// The run paused for a person: calls wait for approval or for input (see
    /// [`RunOutcome::Paused`](crate::RunOutcome::Paused)). Not a failure: `Agent::resume`
    /// continues it once they are answered.
    RunPaused {
        /// The run.
        run_id: String,
        /// The agent's name.
        agent: String,
        /// The run's usage so far.
        usage: Usage,
        /// How many calls wait for a person (approvals and asks for input).
        pending: usize,
        /// How long the run took until it paused, in milliseconds.
        duration_ms: u64,
    },
    /// The run ended with an error.
    RunFailed {
        /// The run.
        run_id: String,
        /// The agent's name.
        agent: String,
        /// The run's usage.
        usage: Usage,
        /// The error.
        error: AgentError,
        /// How long the run took, in milliseconds.
        duration_ms: u64,
    },
}

/// A sink failure. The run loop logs it and carries on: a sink never stops a run.
#[derive(Debug, thiserror::Error)]
#[error("event sink failed: {message}")]
#[non_exhaustive]
pub struct SinkError {
    /// What went wrong.
    pub message: String,
}

/// Receives every event of the runs of an agent.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Handles one event. An error (or a panic) is logged and counted; it never stops the run.
    /// The run awaits it: a sink that may be slow belongs in a `CompositeEventSink` (its own
    /// bounded queue).
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError>;

    /// Whether this sink wants the model's text deltas (`ModelDelta`, `StepModelDelta`,
    /// `FinalDelta`). When no sink wants them and no caller streams the run, the model is
    /// asked for whole answers instead of streams. Default: `true`.
    fn wants_deltas(&self) -> bool {
        true
    }
}

/// A sink that collects events in memory (for tests and debugging).
#[derive(Debug, Default)]
pub struct CollectingEventSink {
    events: std::sync::Mutex<Vec<AgentEvent>>,
}
