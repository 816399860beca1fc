//! What the strict machine's table tests share: a [`View`] of plain values and the feeds the
//! driver would give.

use serde_json::json;

use super::machine::Strict;
use super::state::{StrictPhase, StrictState};
use super::{LlmPlanGenerator, PlanAndExecutePolicy, ToolFailureRecoveryConfig};
use crate::error::AgentError;
use crate::message::{Message, ToolCall, Usage};
use crate::model::{ChatResponse, ResponseFormat, ToolDefinition};
use crate::runner::policy::{Answer, CallReport, Fed, Limits, Next, Out, Policy, ToolCallOutcome, View};
use crate::runner::state::RunState;
use crate::tool::ToolSpec;

pub(crate) struct FakeView {
    pub(crate) tools: Vec<(ToolSpec, bool)>,
    pub(crate) limits: Limits,
    pub(crate) format: Option<ResponseFormat>,
}

impl FakeView {
    pub(crate) fn new() -> Self {
        FakeView {
            tools: vec![
                (tool("search"), true),
                (tool("fetch").repair_safe(true), true),
                (tool("hidden"), false),
            ],
            limits: Limits {
                max_turns: 10,
                max_tool_calls: 20,
                max_steps: 5,
                max_step_attempts: 2,
                max_replans: 1,
                max_tool_repair_attempts: 1,
            },
            format: None,
        }
    }
}

pub(crate) fn tool(name: &str) -> ToolSpec {
    ToolSpec::new(
        name,
        format!("The {name} tool"),
        json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    )
}

impl View for FakeView {
    fn run_id(&self) -> &str {
        "run-1"
    }
    fn limits(&self) -> Limits {
        self.limits
    }
    fn final_format(&self) -> Option<ResponseFormat> {
        self.format.clone()
    }
    fn enabled_tools(&self) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .filter(|(_, on)| *on)
            .map(|(s, _)| s.definition())
            .collect()
    }
    fn enabled_tool(&self, name: &str) -> Option<ToolDefinition> {
        self.tools
            .iter()
            .find(|(s, on)| *on && s.name == name)
            .map(|(s, _)| s.definition())
    }
    fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|(s, _)| s.name == name).map(|(s, _)| s)
    }
    fn valid_arguments(&self, _name: &str, args: &serde_json::Value) -> bool {
        args.is_object()
    }
    fn result_content(&self, _name: &str, value: serde_json::Value) -> Vec<crate::message::ContentPart> {
        vec![crate::message::ContentPart::text(value.to_string())]
    }
}

pub(crate) fn machine() -> Strict {
    Strict::new(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
}

pub(crate) fn machine_with(recovery: ToolFailureRecoveryConfig) -> Strict {
    Strict::new(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()).tool_failure_recovery(recovery))
}

pub(crate) fn fresh() -> RunState {
    RunState::new(vec![Message::user("What is 2 + 3?")])
}

pub(crate) fn answer(message: Message) -> Fed {
    Fed::Answer(Answer {
        response: ChatResponse::new(message, Usage::default(), None),
        offered_tools: false,
        format: None,
    })
}

pub(crate) fn text(t: impl Into<String>) -> Fed {
    answer(Message::assistant(t))
}

pub(crate) fn calls(calls: Vec<ToolCall>) -> Fed {
    answer(Message::assistant_tool_calls("", calls))
}

pub(crate) fn plan_json(steps: &[(&str, &[&str])]) -> String {
    let steps: Vec<_> = steps
        .iter()
        .map(|(d, tools)| json!({"description": d, "allowed_tools": tools}))
        .collect();
    json!({ "steps": steps }).to_string()
}

pub(crate) fn st(state: &RunState) -> &StrictState {
    state.strict().expect("a strict state")
}

pub(crate) fn phase(state: &RunState) -> StrictPhase {
    st(state).phase.clone()
}

pub(crate) fn kinds(out: &mut Out) -> Vec<&'static str> {
    out.take().map(|e| e.kind()).collect()
}

pub(crate) fn fail_cause(next: &Next) -> Option<&str> {
    match next {
        Next::Fail(AgentError::PlanFailed { cause, .. }) => Some(cause.as_str()),
        _ => None,
    }
}

/// Drives a fresh run through PLAN to ACT_TOOL of a plan with these steps.
pub(crate) fn planned(m: &mut Strict, view: &FakeView, steps: &[(&str, &[&str])]) -> RunState {
    let mut state = fresh();
    let mut out = Out::new(true);
    assert!(matches!(m.next(&mut state, view, Fed::Start, &mut out), Next::Ask(_)));
    assert!(matches!(
        m.next(&mut state, view, text(plan_json(steps)), &mut out),
        Next::Save
    ));
    state
}

/// A finished call of the batch, as the driver records it.
pub(crate) fn finish_call(
    m: &mut Strict,
    state: &mut RunState,
    view: &FakeView,
    call: &ToolCall,
    outcome: ToolCallOutcome,
    ran: bool,
) {
    let report = CallReport {
        outcome,
        attempts: u32::from(ran),
        validated: ran.then(|| Box::new(json!({"q": "x"}))),
        identity: call.name.clone(),
        duration_ms: 1,
    };
    let message = m.tool_result(state, view, call, report);
    state.pending_results.insert(call.id.clone(), message);
}

/// ACT_TOOL up to a batch of `batch` ready to run.
pub(crate) fn acting(m: &mut Strict, view: &FakeView, batch: Vec<ToolCall>) -> RunState {
    let mut state = planned(m, view, &[("Look it up", &["search", "fetch"]), ("Answer", &[])]);
    let mut out = Out::new(true);
    assert!(matches!(m.next(&mut state, view, Fed::Saved, &mut out), Next::Ask(_)));
    assert!(matches!(m.next(&mut state, view, calls(batch), &mut out), Next::Save));
    match m.next(&mut state, view, Fed::Saved, &mut out) {
        Next::RunTools { allowed: Some(_), .. } => state,
        _ => panic!("expected the batch to run"),
    }
}

/// ACT_TOOL with one `search` call that ran and failed with `error`, the batch fed back: the
/// state and what the machine answers.
pub(crate) fn one_failed_call(m: &mut Strict, view: &FakeView, error: crate::tool::ToolError) -> (RunState, Next) {
    let call = ToolCall::new("c1", "search", r#"{"q":"x"}"#);
    let mut state = acting(m, view, vec![call.clone()]);
    finish_call(m, &mut state, view, &call, Err(error), true);
    let next = m.next(&mut state, view, Fed::Tools, &mut Out::new(true));
    (state, next)
}
