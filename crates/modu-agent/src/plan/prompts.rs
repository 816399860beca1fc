//! Every model-facing text of strict Plan-and-Execute: the planner's prompt and schema, the plan
//! context of a step, the repair, step-result and final prompts.

use super::PlanAndExecutePolicy;
use super::state::StrictState;
use super::{PlanFailure, StepStatus};
use crate::model::ToolDefinition;

/// The planner's response format for one run: at most `max_steps` steps whose tools are
/// limited to `tools` (an `enum`), so servers with constrained decoding (vLLM, llama.cpp,
/// OpenAI strict mode) can only produce plans that validate.
pub(crate) fn plan_format(max_steps: usize, tools: &[String]) -> crate::model::ResponseFormat {
    let tool_items = if tools.is_empty() {
        serde_json::json!({"type": "array", "items": {"type": "string"}, "maxItems": 0})
    } else {
        // maxItems: a tool is named once per step (small models otherwise repeat names).
        serde_json::json!({"type": "array", "items": {"type": "string", "enum": tools}, "maxItems": tools.len()})
    };
    crate::model::ResponseFormat::new(
        "PlanDraft",
        serde_json::json!({
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": max_steps,
                    "items": {
                        "type": "object",
                        "properties": {
                            "description": {"type": "string", "description": "What to do in this step."},
                            "allowed_tools": tool_items
                        },
                        "required": ["description", "allowed_tools"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["steps"],
            "additionalProperties": false
        }),
    )
}

/// PLAN: the planner's request.
pub(crate) fn plan(max: usize, catalogue: &str) -> String {
    format!(
        "Plan how to answer the request above. Split the work into at most {max} steps, in order. \
         For each step give a short description and the names of the tools it may call (an empty \
         list when it needs none). Answer only with JSON that fits the schema.\n{catalogue}"
    )
}

/// The tools a plan may name, as the planner reads them (plus the generator's instructions).
pub(crate) fn catalogue(tools: &[ToolDefinition], policy: &PlanAndExecutePolicy) -> String {
    let mut text = if tools.is_empty() {
        "No tools are available: every step's allowed_tools must be empty.".to_owned()
    } else {
        let mut t = "Tools:\n".to_owned();
        for tool in tools {
            t.push_str(&format!("- {}: {}\n", tool.name, tool.description));
        }
        t
    };
    if let Some(extra) = &policy.generator.instructions {
        text.push('\n');
        text.push_str(extra);
    }
    text
}

/// The corrective request after a plan that does not validate.
pub(crate) fn plan_rejected(problem: &str) -> String {
    format!("That plan cannot be used: {problem}. Answer again with only the JSON plan.")
}

/// The corrective request after a plan cut at the output limit (which is not repeated).
pub(crate) fn plan_cut(max: usize) -> String {
    format!(
        "Your plan was cut off at the output limit before it ended. Answer again with a much \
         shorter plan: only the JSON plan, at most {max} steps, each description one short sentence."
    )
}

/// REPLAN: the planner's request for the unfinished part of the plan.
pub(crate) fn replan(st: &StrictState, failure: &PlanFailure, room: usize, catalogue: &str) -> String {
    let mut completed_text = String::new();
    for s in st.plan.steps.iter().filter(|s| s.status == StepStatus::Completed) {
        completed_text.push_str(&format!(
            "- {}: {} — result: {}\n",
            s.id,
            s.description,
            s.result.as_deref().unwrap_or("")
        ));
    }
    let failed_text = st
        .current_step()
        .map(|s| format!("{}: {}", s.id, s.description))
        .unwrap_or_default();
    let error_text = match (&failure.error_class, &failure.reason) {
        (Some(class), Some(reason)) => format!("{class} error ({reason})"),
        _ => failure.cause.to_string(),
    };
    format!(
        "The plan for the request above must change: step {failed_text} failed with a {error_text}.\n\
         Completed steps (keep their results; do not plan them again):\n{}\n\
         Plan only the remaining work, at most {room} steps, in order. Answer only with JSON that \
         fits the schema.\n{catalogue}",
        if completed_text.is_empty() {
            "(none)\n".to_owned()
        } else {
            completed_text
        },
    )
}

/// The plan and the current step, as the executing model sees them.
pub(crate) fn plan_context(st: &StrictState) -> String {
    let mut text = String::from("You are carrying out a plan for the request above.\nPlan:\n");
    for (i, step) in st.plan.steps.iter().enumerate() {
        if step.status == StepStatus::Superseded {
            continue;
        }
        let mark = match step.status {
            StepStatus::Completed => "done",
            _ if i == st.current => "current",
            _ => "later",
        };
        text.push_str(&format!("{}. [{mark}] {}", step.id, step.description));
        if let Some(result) = &step.result {
            text.push_str(&format!(" — result: {result}"));
        }
        text.push('\n');
    }
    if let Some(step) = st.current_step() {
        text.push_str(&format!("\nWork only on step {}: {}\n", step.id, step.description));
        if step.allowed_tools.is_empty() {
            text.push_str("This step uses no tools.");
        } else {
            text.push_str(&format!("Tools for this step: {}.", step.allowed_tools.join(", ")));
        }
    }
    text
}

/// ACT_TOOL after a failed call the model may repair once.
pub(crate) fn repair(call_id: &str, tool: &str) -> String {
    format!(
        "The call {call_id} to {tool} failed (see its error). Call {tool} exactly once more with corrected \
         arguments, or answer without calling a tool if it cannot be corrected."
    )
}

/// STEP_RESULT: the request for the current step's outcome.
pub(crate) fn step_result(step_id: &str) -> String {
    format!(
        "Report the outcome of step {step_id} now, as JSON that fits the schema: status \"completed\" \
         when the step's goal was reached, \"failed\" otherwise, and result: the facts later steps \
         need. Do not call tools."
    )
}

/// A completed step result with an empty `result`.
pub(crate) const STEP_RESULT_EMPTY: &str =
    "Your step result could not be used: result is empty. Answer again with only the JSON step result.";

/// A step result that does not parse.
pub(crate) fn step_result_invalid(problem: &str) -> String {
    format!("Your step result could not be used: {problem}. Answer again with only the JSON step result.")
}

/// A step the model reported as failed: it works on it again.
pub(crate) fn step_not_complete(step_id: &str) -> String {
    format!("Step {step_id} is not complete. Work on it again: use the step's tools if they help, then report.")
}

/// FINALIZE: the committed results and the request for the final answer.
pub(crate) fn finalize(st: &StrictState) -> String {
    let mut summary = String::from("Verified results of the plan's steps:\n");
    for step in st.plan.steps.iter().filter(|s| s.status == StepStatus::Completed) {
        summary.push_str(&format!(
            "- {}: {} — {}\n",
            step.id,
            step.description,
            step.result.as_deref().unwrap_or("")
        ));
    }
    summary.push_str(
        "\nWrite the final answer to the request above now, using only these results, in the requested format, without calling tools.",
    );
    summary
}
