//! PLAN and REPLAN: a planner's answer parsed, checked against the tools, and committed.

use std::collections::HashSet;

use super::state::{StrictPhase, StrictState};
use super::{PlanDraft, PlanDraftStep, PlanFailure, PlanStep, StepStatus};
use crate::event::AgentEvent;
use crate::runner::policy::{Next, Out, View};

/// Why the planner is asked.
#[derive(Debug)]
pub(crate) enum Planning {
    /// The first plan.
    First,
    /// A revision after this failure.
    Replan(PlanFailure),
}

/// A plan that validated: PLAN → ACT_TOOL (PlanCreated), or REPLAN → ACT_TOOL (PlanRevised).
pub(crate) fn commit_plan(
    st: &mut StrictState,
    view: &dyn View,
    why: Planning,
    steps: Vec<PlanDraftStep>,
    out: &mut Out,
) -> Next {
    if matches!(why, Planning::Replan(_)) {
        for step in st.plan.steps.iter_mut() {
            if matches!(step.status, StepStatus::Pending | StepStatus::InProgress) {
                step.status = StepStatus::Superseded;
            }
        }
    }
    let first_new = st.plan.steps.len();
    for draft in steps {
        let id = format!("s{}", st.next_step);
        st.next_step += 1;
        st.plan
            .steps
            .push(PlanStep::new(id, draft.description, draft.allowed_tools));
    }
    st.phase = StrictPhase::Act;
    let run_id = view.run_id().to_owned();
    match why {
        Planning::First => {
            st.current = 0;
            out.push(|| AgentEvent::PlanCreated {
                run_id,
                plan: st.plan.clone(),
            });
        }
        Planning::Replan(failure) => {
            st.plan.revision += 1;
            st.replans += 1;
            st.current = first_new;
            st.step_messages.clear();
            st.step_repairs = 0;
            st.repair = None;
            st.repairing = None;
            out.push(|| AgentEvent::PlanRevised {
                run_id,
                plan: st.plan.clone(),
                cause: failure.cause,
            });
        }
    }
    Next::Save
}

/// Parses a planner's answer (a code fence, prose around it or thinking before it is
/// tolerated, as for structured output).
pub(crate) fn parse_draft(text: &str) -> Result<PlanDraft, serde_json::Error> {
    crate::output::parse_json_answer(text)
}

/// Why a planner's answer cannot be used: a code for the failure's `reason`, and the problem
/// as the corrective request tells the model.
pub(crate) type Rejected = (&'static str, String);

/// Parses and checks a planner's answer.
pub(crate) fn check_draft(text: &str, max: usize, known: &HashSet<String>) -> Result<Vec<PlanDraftStep>, Rejected> {
    match parse_draft(text) {
        Ok(draft) => validate_draft(draft, max, known),
        Err(e) => {
            let code = match e.classify() {
                serde_json::error::Category::Data => "schema_mismatch",
                _ => "invalid_json",
            };
            Err((code, format!("the plan is not valid JSON for the schema: {e}")))
        }
    }
}

/// Checks a planner's draft: 1..=max steps, descriptions, known tools (deduplicated).
pub(crate) fn validate_draft(
    draft: PlanDraft,
    max: usize,
    known: &HashSet<String>,
) -> Result<Vec<PlanDraftStep>, Rejected> {
    if draft.steps.is_empty() {
        return Err(("no_steps", "it has no steps".into()));
    }
    if draft.steps.len() > max {
        return Err((
            "too_many_steps",
            format!("it has {} steps; at most {max} are allowed", draft.steps.len()),
        ));
    }
    let mut steps = Vec::with_capacity(draft.steps.len());
    for (i, mut step) in draft.steps.into_iter().enumerate() {
        if step.description.trim().is_empty() {
            return Err(("empty_description", format!("step {} has no description", i + 1)));
        }
        let mut seen = HashSet::new();
        step.allowed_tools.retain(|t| seen.insert(t.clone()));
        if let Some(unknown) = step.allowed_tools.iter().find(|t| !known.contains(*t)) {
            let mut names: Vec<&String> = known.iter().collect();
            names.sort();
            return Err((
                "unknown_tool",
                format!(
                    "step {} names the unknown tool {unknown:?}; the tools are: {}",
                    i + 1,
                    names.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        steps.push(step);
    }
    Ok(steps)
}

/// The failure of a planner that answered no usable plan twice: why (`reason`, class `plan`),
/// or, for a revision, the tool failure that asked for it (its step, tool and call).
pub(crate) fn plan_invalid(why: Planning, reason: &'static str) -> PlanFailure {
    match why {
        Planning::Replan(mut failure) => {
            failure.cause = crate::codes::PlanFailureCause::PlanInvalid;
            failure
        }
        Planning::First => {
            let mut failure = PlanFailure::new(crate::codes::PlanFailureCause::PlanInvalid);
            failure.error_class = Some("plan".into());
            failure.reason = Some(reason.into());
            failure
        }
    }
}
