//! Table-driven transition tests of the strict machine: one or more per row of the
//! Plan-and-Execute table in docs/architecture.md, as plain `#[test]`s with no runtime and no
//! IO. Each feeds the machine a state and what the driver would feed it, and checks the `Next`
//! it answers, the state it leaves and the events it pushes.

use serde_json::json;

use super::*;
use crate::event::AgentEvent;
use crate::model::ResponseFormat;
use crate::plan::test_support::*;
use crate::plan::{RecoveryFallback, ToolFailureRecoveryConfig};
use crate::tool::{RecoveryAction, ToolError, ToolErrorKind};

// ----- PLAN -----

#[test]
fn plan_asks_the_planner_with_the_plan_schema_and_no_tools() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = fresh();
    let Next::Ask(ask) = m.next(&mut state, &view, Fed::Start, &mut out) else {
        panic!("PLAN asks first");
    };
    assert_eq!(ask.stage, Stage::Plan);
    assert!(ask.model == ModelSlot::Planner);
    assert!(matches!(&ask.offer, Offer::Only(tools) if tools.is_empty()));
    assert!(matches!(&ask.format, Format::Fixed(Some(f)) if f.name == "PlanDraft"));
    let prompt = ask.extra[0].text();
    assert!(
        prompt.contains("- search: The search tool") && !prompt.contains("hidden"),
        "{prompt}"
    );
    assert_eq!(phase(&state), StrictPhase::Plan);
}

#[test]
fn a_valid_plan_is_created_and_saved() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = fresh();
    m.next(&mut state, &view, Fed::Start, &mut out);
    let next = m.next(
        &mut state,
        &view,
        text(plan_json(&[("Look it up", &["search", "search"])])),
        &mut out,
    );
    assert!(matches!(next, Next::Save));
    assert_eq!(kinds(&mut out), ["plan_created"]);
    let s = st(&state);
    assert_eq!(s.phase, StrictPhase::Act);
    assert_eq!(s.plan.steps[0].id, "s1");
    assert_eq!(s.plan.steps[0].allowed_tools, ["search"], "names are deduplicated");
    assert_eq!(s.plan.steps[0].status, StepStatus::Pending);
}

#[test]
fn an_invalid_plan_gets_one_correction_then_fails() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = fresh();
    m.next(&mut state, &view, Fed::Start, &mut out);
    let Next::Ask(again) = m.next(&mut state, &view, text(plan_json(&[("x", &["nope"])])), &mut out) else {
        panic!("one corrective request");
    };
    assert!(
        again
            .extra
            .last()
            .is_some_and(|m| m.text().contains("unknown tool \"nope\""))
    );
    let next = m.next(&mut state, &view, text("not json"), &mut out);
    assert_eq!(fail_cause(&next), Some("plan_invalid"));
    assert_eq!(
        st(&state).failure.as_ref().map(|f| f.cause.as_str()),
        Some("plan_invalid")
    );
}

// ----- ACT_TOOL -----

#[test]
fn act_offers_only_the_steps_enabled_tools_and_starts_the_step() {
    let (mut m, mut view, mut out) = (machine(), FakeView::new(), Out::new(true));
    view.tools.push((tool("extra"), true));
    let mut state = planned(&mut m, &view, &[("Look it up", &["search"])]);
    out.take();
    let Next::Ask(ask) = m.next(&mut state, &view, Fed::Saved, &mut out) else {
        panic!("ACT asks");
    };
    assert_eq!(ask.stage, Stage::Act);
    let Offer::Only(tools) = &ask.offer else {
        panic!("a fixed offer")
    };
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["search"]);
    assert!(matches!(&ask.route, DeltaRoute::Step(id) if id == "s1"));
    assert_eq!(kinds(&mut out), ["step_started"]);
    assert_eq!(st(&state).plan.steps[0].status, StepStatus::InProgress);
}

#[test]
fn act_tool_calls_are_saved_then_run_with_only_the_steps_tools() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = planned(&mut m, &view, &[("Look it up", &["search"])]);
    m.next(&mut state, &view, Fed::Saved, &mut out);
    let next = m.next(
        &mut state,
        &view,
        calls(vec![ToolCall::new("c1", "search", "{}")]),
        &mut out,
    );
    assert!(matches!(next, Next::Save));
    assert_eq!((state.turns, state.tool_calls), (1, 1));
    let Next::RunTools { calls, allowed } = m.next(&mut state, &view, Fed::Saved, &mut out) else {
        panic!("the saved calls run");
    };
    assert_eq!(calls[0].id, "c1");
    assert_eq!(allowed, Some(std::collections::HashSet::from(["search".to_owned()])));
}

#[test]
fn a_batch_that_ran_leads_to_step_result() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let call = ToolCall::new("c1", "search", r#"{"q":"x"}"#);
    let mut state = acting(&mut m, &view, vec![call.clone()]);
    finish_call(&mut m, &mut state, &view, &call, Ok(json!("found")), true);
    assert!(matches!(m.next(&mut state, &view, Fed::Tools, &mut out), Next::Save));
    let s = st(&state);
    assert_eq!(s.phase, StrictPhase::StepResult { feedback: None });
    assert_eq!(s.step_messages.len(), 2, "the call and its result join the step");
    assert_eq!(s.trace.len(), 1);
    assert!(state.pending_results.is_empty());
}

#[test]
fn refused_calls_are_fed_back_and_the_model_acts_again() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let call = ToolCall::new("c1", "search", "{");
    let mut state = acting(&mut m, &view, vec![call.clone()]);
    let refused = ToolError::new(ToolErrorKind::Validation, "invalid_json");
    finish_call(&mut m, &mut state, &view, &call, Err(refused), false);
    assert!(matches!(m.next(&mut state, &view, Fed::Tools, &mut out), Next::Save));
    assert_eq!(phase(&state), StrictPhase::Act);
    assert!(matches!(m.next(&mut state, &view, Fed::Saved, &mut out), Next::Ask(_)));
}

#[test]
fn a_plain_act_answer_is_a_draft_and_step_result_follows() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = planned(&mut m, &view, &[("Look it up", &["search"])]);
    m.next(&mut state, &view, Fed::Saved, &mut out);
    assert!(matches!(
        m.next(&mut state, &view, text("I think 5"), &mut out),
        Next::Save
    ));
    assert_eq!(phase(&state), StrictPhase::StepResult { feedback: None });
    assert_eq!(
        st(&state).plan.steps[0].status,
        StepStatus::InProgress,
        "a draft completes nothing"
    );
}

#[test]
fn a_step_without_usable_tools_goes_straight_to_step_result() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = planned(&mut m, &view, &[("Think", &[])]);
    assert!(matches!(m.next(&mut state, &view, Fed::Saved, &mut out), Next::Save));
    assert_eq!(phase(&state), StrictPhase::StepResult { feedback: None });
}

#[test]
fn act_stops_at_max_turns() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = planned(&mut m, &view, &[("Look it up", &["search"])]);
    state.turns = view.limits.max_turns;
    let next = m.next(&mut state, &view, Fed::Saved, &mut out);
    assert!(matches!(next, Next::Fail(AgentError::MaxTurnsExceeded { limit: 10 })));
}

#[test]
fn a_repairable_failure_asks_for_one_repair_and_rejects_the_same_arguments() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let call = ToolCall::new("c1", "fetch", r#"{"q":"x"}"#);
    let mut state = acting(&mut m, &view, vec![call.clone()]);
    let error = ToolError::new(ToolErrorKind::Validation, "bad_url").with_recovery(RecoveryAction::RepairCall);
    finish_call(&mut m, &mut state, &view, &call, Err(error), true);
    out.take();
    assert!(matches!(m.next(&mut state, &view, Fed::Tools, &mut out), Next::Save));
    assert_eq!(kinds(&mut out), ["tool_recovery"]);
    assert!(st(&state).repair.is_some());
    let Next::Ask(ask) = m.next(&mut state, &view, Fed::Saved, &mut out) else {
        panic!("the repair request");
    };
    let Offer::Only(tools) = &ask.offer else {
        panic!("a fixed offer")
    };
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["fetch"]);
    assert!(
        ask.extra
            .last()
            .is_some_and(|m| m.text().contains("Call fetch exactly once more"))
    );
    let same = ToolCall::new("c2", "fetch", r#"{ "q" : "x" }"#);
    assert!(matches!(
        m.next(&mut state, &view, calls(vec![same]), &mut out),
        Next::Save
    ));
    assert!(matches!(
        phase(&state),
        StrictPhase::Recovering { failure, .. } if failure.cause == "repair_same_arguments"
    ));
}

#[test]
fn a_failure_after_a_call_that_succeeded_in_the_batch_is_terminal() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let (a, b) = (
        ToolCall::new("c1", "search", r#"{"q":"a"}"#),
        ToolCall::new("c2", "fetch", r#"{"q":"b"}"#),
    );
    let mut state = acting(&mut m, &view, vec![a.clone(), b.clone()]);
    finish_call(&mut m, &mut state, &view, &a, Ok(json!(1)), true);
    let error = ToolError::new(ToolErrorKind::Execution, "down").with_recovery(RecoveryAction::Replan);
    finish_call(&mut m, &mut state, &view, &b, Err(error), true);
    let next = m.next(&mut state, &view, Fed::Tools, &mut out);
    assert_eq!(fail_cause(&next), Some("partial_batch_failure"));
}

// ----- RECOVERING -----

#[test]
fn a_failed_tool_is_recovered_after_a_save_and_fails_when_configured_so() {
    let recovery = ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Fail);
    let (mut m, view, mut out) = (machine_with(recovery), FakeView::new(), Out::new(true));
    let (mut state, next) = one_failed_call(&mut m, &view, ToolError::new(ToolErrorKind::Execution, "down"));
    assert!(matches!(next, Next::Save));
    assert!(
        matches!(phase(&state), StrictPhase::Recovering { .. }),
        "saved before recovering"
    );
    let next = m.next(&mut state, &view, Fed::Saved, &mut out);
    assert_eq!(fail_cause(&next), Some("tool_failed"));
    assert_eq!(kinds(&mut out), ["tool_recovery"]);
    assert_eq!(
        st(&state).trace[0].error.as_ref().and_then(|e| e.recovery.as_deref()),
        Some("fail")
    );
}

#[test]
fn a_timed_out_blocking_tool_is_never_replanned() {
    let recovery = ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Replan);
    let mut m = machine_with(recovery);
    let timeout = ToolError::new(ToolErrorKind::Timeout, "timeout").with_recovery(RecoveryAction::Fail);
    let (_, next) = one_failed_call(&mut m, &FakeView::new(), timeout);
    assert_eq!(fail_cause(&next), Some("uncancellable_timeout"));
}

#[test]
fn replan_keeps_completed_steps_and_supersedes_the_rest() {
    // Replan is the default fallback.
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let (mut state, _) = one_failed_call(&mut m, &view, ToolError::new(ToolErrorKind::Execution, "down"));
    let Next::Ask(ask) = m.next(&mut state, &view, Fed::Saved, &mut out) else {
        panic!("the replan request");
    };
    assert_eq!(ask.stage, Stage::Plan);
    assert!(
        ask.extra[0]
            .text()
            .contains("step s1: Look it up failed with a execution error (down)")
    );
    assert_eq!(kinds(&mut out), ["tool_recovery"]);
    let next = m.next(
        &mut state,
        &view,
        text(plan_json(&[("Try fetch", &["fetch"])])),
        &mut out,
    );
    assert!(matches!(next, Next::Save));
    assert_eq!(kinds(&mut out), ["plan_revised"]);
    let s = st(&state);
    let statuses: Vec<_> = s.plan.steps.iter().map(|p| (p.id.as_str(), p.status)).collect();
    assert_eq!(
        statuses,
        [
            ("s1", StepStatus::Superseded),
            ("s2", StepStatus::Superseded),
            ("s3", StepStatus::Pending)
        ]
    );
    assert_eq!((s.current, s.replans, s.plan.revision), (2, 1, 1));
    assert_eq!(s.phase, StrictPhase::Act);
}

#[test]
fn no_replan_is_left_after_the_limit() {
    let recovery = ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Replan);
    let (mut m, view, mut out) = (machine_with(recovery), FakeView::new(), Out::new(true));
    let (mut state, _) = one_failed_call(&mut m, &view, ToolError::new(ToolErrorKind::Execution, "down"));
    state.strict_or_init().replans = view.limits.max_replans;
    let next = m.next(&mut state, &view, Fed::Saved, &mut out);
    assert_eq!(fail_cause(&next), Some("replan_limit"));
}

// ----- STEP_RESULT -----

fn at_step_result(m: &mut Strict, view: &FakeView) -> RunState {
    let mut state = planned(m, view, &[("Think", &[]), ("Answer", &[])]);
    let mut out = Out::new(true);
    m.next(&mut state, view, Fed::Saved, &mut out); // no tools: STEP_RESULT, saved
    state
}

#[test]
fn step_result_asks_with_its_schema_and_no_tools() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = at_step_result(&mut m, &view);
    let Next::Ask(ask) = m.next(&mut state, &view, Fed::Saved, &mut out) else {
        panic!("STEP_RESULT asks");
    };
    assert!(matches!(&ask.offer, Offer::Only(tools) if tools.is_empty()));
    assert!(matches!(&ask.format, Format::Fixed(Some(_))));
    assert!(
        ask.extra
            .last()
            .is_some_and(|m| m.text().starts_with("Report the outcome of step s1"))
    );
}

#[test]
fn a_valid_step_result_commits_and_moves_on() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = at_step_result(&mut m, &view);
    m.next(&mut state, &view, Fed::Saved, &mut out);
    out.take();
    let result = json!({"status": "completed", "result": "5"}).to_string();
    assert!(matches!(m.next(&mut state, &view, text(result), &mut out), Next::Save));
    assert_eq!(kinds(&mut out), ["step_committed"]);
    let s = st(&state);
    assert_eq!(s.plan.steps[0].status, StepStatus::Completed);
    assert_eq!(s.plan.steps[0].result.as_deref(), Some("5"));
    assert_eq!((s.current, s.phase.clone()), (1, StrictPhase::Act));
}

#[test]
fn an_invalid_step_result_is_asked_again_then_exhausts_the_attempts() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = at_step_result(&mut m, &view);
    m.next(&mut state, &view, Fed::Saved, &mut out);
    out.take();
    let empty = json!({"status": "completed", "result": " "}).to_string();
    assert!(matches!(m.next(&mut state, &view, text(empty), &mut out), Next::Save));
    assert_eq!(kinds(&mut out), ["step_result_rejected"]);
    assert!(matches!(phase(&state), StrictPhase::StepResult { feedback: Some(f) } if f.contains("result is empty")));
    m.next(&mut state, &view, Fed::Saved, &mut out);
    let next = m.next(&mut state, &view, text("nope"), &mut out);
    assert_eq!(fail_cause(&next), Some("step_attempts_exhausted"));
}

#[test]
fn a_step_reported_failed_is_worked_on_again() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = at_step_result(&mut m, &view);
    m.next(&mut state, &view, Fed::Saved, &mut out);
    out.take();
    let failed = json!({"status": "failed", "result": "could not"}).to_string();
    assert!(matches!(m.next(&mut state, &view, text(failed), &mut out), Next::Save));
    assert_eq!(kinds(&mut out), ["step_result_rejected", "step_started"]);
    assert_eq!(phase(&state), StrictPhase::Act);
}

// ----- VERIFY, FINALIZE, DONE -----

fn all_committed(m: &mut Strict, view: &FakeView) -> RunState {
    let mut state = at_step_result(m, view);
    let mut out = Out::new(true);
    for _ in 0..2 {
        m.next(&mut state, view, Fed::Saved, &mut out);
        let done = json!({"status": "completed", "result": "ok"}).to_string();
        m.next(&mut state, view, text(done), &mut out);
        if phase(&state) == StrictPhase::Act {
            m.next(&mut state, view, Fed::Saved, &mut out); // step 2 has no tools
        }
    }
    assert_eq!(phase(&state), StrictPhase::Verify);
    state
}

#[test]
fn verify_passes_when_every_step_is_committed() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = all_committed(&mut m, &view);
    assert!(matches!(m.next(&mut state, &view, Fed::Saved, &mut out), Next::Save));
    assert_eq!(kinds(&mut out), ["plan_verified"]);
    assert_eq!(phase(&state), StrictPhase::Finalize);
}

#[test]
fn verify_fails_when_a_step_is_not_committed() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = all_committed(&mut m, &view);
    state.strict_or_init().plan.steps[1].status = StepStatus::Pending;
    let next = m.next(&mut state, &view, Fed::Saved, &mut out);
    assert_eq!(fail_cause(&next), Some("verify_failed"));
}

#[test]
fn finalize_asks_with_the_results_then_saves_done_before_returning() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = all_committed(&mut m, &view);
    m.next(&mut state, &view, Fed::Saved, &mut out);
    let Next::Ask(ask) = m.next(&mut state, &view, Fed::Saved, &mut out) else {
        panic!("FINALIZE asks");
    };
    assert_eq!(ask.stage, Stage::Finalize);
    assert!(
        matches!(ask.route, DeltaRoute::Final),
        "text finals stream as FinalDelta"
    );
    assert!(ask.extra[0].text().contains("- s1: Think — ok"));
    let Next::Finish { route, .. } = m.next(&mut state, &view, text("5"), &mut out) else {
        panic!("the answer is accepted by the driver");
    };
    assert!(
        matches!(route, DeltaRoute::Step(id) if id == "finalize"),
        "corrections stream as internal work"
    );
    state.messages.push(Message::assistant("5"));
    assert!(matches!(m.next(&mut state, &view, Fed::Accepted, &mut out), Next::Save));
    let s = st(&state);
    assert_eq!(
        (s.phase.clone(), s.final_emitted, s.final_text.as_deref()),
        (StrictPhase::Done, true, Some("5"))
    );
    assert!(matches!(m.next(&mut state, &view, Fed::Saved, &mut out), Next::Done));
}

#[test]
fn a_structured_final_answer_goes_out_once_as_final_delta_after_it_parsed() {
    let (mut m, mut view, mut out) = (machine(), FakeView::new(), Out::new(true));
    view.format = Some(ResponseFormat::new("Answer", json!({"type": "object"})));
    let mut state = all_committed(&mut m, &view);
    m.next(&mut state, &view, Fed::Saved, &mut out);
    let Next::Ask(ask) = m.next(&mut state, &view, Fed::Saved, &mut out) else {
        panic!("FINALIZE asks");
    };
    assert!(matches!(ask.route, DeltaRoute::Step(_)));
    out.take();
    m.next(&mut state, &view, text(r#"{"n":5}"#), &mut out);
    state.messages.push(Message::assistant(r#"{"n":5}"#));
    m.next(&mut state, &view, Fed::Accepted, &mut out);
    assert!(matches!(out.events(), [AgentEvent::FinalDelta { text, .. }] if text == r#"{"n":5}"#));
}

#[test]
fn a_done_run_replays_its_stored_answer_without_a_model_call() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = fresh();
    let s = state.strict_or_init();
    s.phase = StrictPhase::Done;
    s.final_emitted = true;
    s.final_text = Some("5".into());
    assert!(matches!(m.next(&mut state, &view, Fed::Start, &mut out), Next::Replay { text } if text == "5"));
    assert!(st(&state).replayed);
}

#[test]
fn a_newer_strict_state_is_refused() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = fresh();
    state.strict_or_init().version = STRICT_STATE_VERSION + 1;
    let next = m.next(&mut state, &view, Fed::Start, &mut out);
    assert!(matches!(next, Next::Fail(AgentError::CheckpointInvalid { .. })));
}

#[test]
fn a_terminal_error_fails_the_step_and_an_interruption_does_not() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(true));
    let mut state = planned(&mut m, &view, &[("Look it up", &["search"])]);
    m.next(&mut state, &view, Fed::Saved, &mut out);
    out.take();
    m.failed(&mut state, &view, &AgentError::Interrupted { pending: 1 }, &mut out);
    assert_eq!(st(&state).plan.steps[0].status, StepStatus::InProgress);
    m.failed(
        &mut state,
        &view,
        &AgentError::MaxToolCallsExceeded { limit: 1 },
        &mut out,
    );
    assert_eq!(st(&state).plan.steps[0].status, StepStatus::Failed);
    assert_eq!(kinds(&mut out), ["step_failed"]);
    assert_eq!(
        st(&state).failure.as_ref().map(|f| f.cause.as_str()),
        Some("max_tool_calls")
    );
}

#[test]
fn events_are_not_built_when_nobody_listens() {
    let (mut m, view, mut out) = (machine(), FakeView::new(), Out::new(false));
    let mut state = fresh();
    m.next(&mut state, &view, Fed::Start, &mut out);
    m.next(&mut state, &view, text(plan_json(&[("x", &[])])), &mut out);
    assert!(out.events().is_empty());
}
