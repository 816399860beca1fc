//! PLAN: the planner's prompt, its answer checked against the tools, and REPLAN after a failure.

use std::collections::HashSet;

use super::super::Run;
use super::super::ask::{Ask, Format, ModelSlot, Offer};
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::Message;
use crate::model::ToolDefinition;
use crate::plan::{PlanAndExecutePolicy, PlanDraft, PlanFailure, PlanStep, StepStatus};
use crate::provider::Stage;

use super::*;

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// The tools a plan may name: every visible, enabled tool.
    pub(super) fn plannable_tools(&self) -> Vec<ToolDefinition> {
        self.env
            .tool_order
            .iter()
            .filter_map(|name| self.env.tools.get(name))
            .filter(|t| t.entry.tool.is_enabled(&self.env.ctx))
            .map(|t| t.entry.tool.spec().definition())
            .collect()
    }

    // ----- PLAN -----

    pub(super) async fn strict_plan(&mut self, policy: &PlanAndExecutePolicy) -> Result<(), AgentError> {
        let max = self.max_steps(policy);
        let prompt = format!(
            "Plan how to answer the request above. Split the work into at most {max} steps, in order. \
             For each step give a short description and the names of the tools it may call (an empty \
             list when it needs none). Answer only with JSON that fits the schema.\n{}",
            self.tool_catalogue(policy)
        );
        let steps = self.generate_steps(prompt, max).await?;
        let st = self.st();
        for draft in steps {
            let id = format!("s{}", st.next_step);
            st.next_step += 1;
            st.plan.steps.push(PlanStep {
                id,
                description: draft.description,
                allowed_tools: draft.allowed_tools,
                status: StepStatus::Pending,
                result: None,
                attempts: 0,
            });
        }
        st.current = 0;
        st.phase = StrictPhase::Act;
        let plan = st.plan.clone();
        let run_id = self.run_id();
        self.emit(AgentEvent::PlanCreated { run_id, plan }).await;
        self.checkpoint().await
    }

    pub(super) fn tool_catalogue(&self, policy: &PlanAndExecutePolicy) -> String {
        let tools = self.plannable_tools();
        let mut text = if tools.is_empty() {
            "No tools are available: every step's allowed_tools must be empty.".to_owned()
        } else {
            let mut t = "Tools:\n".to_owned();
            for tool in &tools {
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

    /// Asks the planner for steps (one corrective request when the plan does not validate).
    pub(super) async fn generate_steps(
        &mut self,
        prompt: String,
        max: usize,
    ) -> Result<Vec<crate::plan::PlanDraftStep>, AgentError> {
        let names: Vec<String> = self.plannable_tools().into_iter().map(|t| t.name).collect();
        let format = Some(crate::plan::plan_format(max, &names));
        let known: HashSet<String> = names.into_iter().collect();
        let mut extra = vec![Message::user(prompt)];
        for attempt in 1..=2 {
            let response = self
                .ask(
                    Ask::new(Stage::Plan)
                        .extra(extra.clone())
                        .offer(Offer::Only(Vec::new()))
                        .format(Format::Fixed(format.clone()))
                        .route(super::super::DeltaRoute::Step("plan".into()))
                        .model(ModelSlot::Planner),
                )
                .await?
                .response;
            let text = response.message.text();
            let problem = match parse_draft(&text) {
                Ok(draft) => match validate_draft(draft, max, &known) {
                    Ok(steps) => return Ok(steps),
                    Err(problem) => problem,
                },
                Err(e) => format!("the plan is not valid JSON for the schema: {e}"),
            };
            if attempt == 2 {
                let st = self.st();
                st.failure = Some(failure("plan_invalid", None, None, None, None));
                return Err(AgentError::PlanFailed {
                    cause: "plan_invalid".into(),
                    step_id: None,
                });
            }
            extra.push(Message::assistant(text));
            extra.push(Message::user(format!(
                "That plan cannot be used: {problem}. Answer again with only the JSON plan."
            )));
        }
        Err(AgentError::PlanFailed {
            cause: "plan_invalid".into(),
            step_id: None,
        })
    }

    /// The plan and the current step, as the executing model sees them.
    pub(super) fn plan_context(&mut self) -> String {
        let st = self.st();
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

    // ----- ACT_TOOL -----

    /// Revises the unfinished part of the plan: completed steps stay, the rest is superseded
    /// by the planner's new steps.
    pub(super) async fn replan(
        &mut self,
        policy: &PlanAndExecutePolicy,
        failure: PlanFailure,
    ) -> Result<(), AgentError> {
        let max = self.max_steps(policy);
        let (completed_text, failed_text, room) = {
            let st = self.st();
            let completed: Vec<&PlanStep> = st
                .plan
                .steps
                .iter()
                .filter(|s| s.status == StepStatus::Completed)
                .collect();
            let mut completed_text = String::new();
            for s in &completed {
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
            (completed_text, failed_text, max.saturating_sub(completed.len()))
        };
        if room == 0 {
            let mut f = failure;
            f.cause = "max_steps".into();
            return Err(self.record_failure(f));
        }
        let error_text = match (&failure.error_class, &failure.reason) {
            (Some(class), Some(reason)) => format!("{class} error ({reason})"),
            _ => failure.cause.clone(),
        };
        let prompt = format!(
            "The plan for the request above must change: step {failed_text} failed with a {error_text}.\n\
             Completed steps (keep their results; do not plan them again):\n{}\n\
             Plan only the remaining work, at most {room} steps, in order. Answer only with JSON that \
             fits the schema.\n{}",
            if completed_text.is_empty() {
                "(none)\n".to_owned()
            } else {
                completed_text
            },
            self.tool_catalogue(policy)
        );
        let steps = match self.generate_steps(prompt, room).await {
            Ok(steps) => steps,
            Err(e) => return Err(e),
        };
        let st = self.st();
        for step in st.plan.steps.iter_mut() {
            if matches!(step.status, StepStatus::Pending | StepStatus::InProgress) {
                step.status = StepStatus::Superseded;
            }
        }
        let first_new = st.plan.steps.len();
        for draft in steps {
            let id = format!("s{}", st.next_step);
            st.next_step += 1;
            st.plan.steps.push(PlanStep {
                id,
                description: draft.description,
                allowed_tools: draft.allowed_tools,
                status: StepStatus::Pending,
                result: None,
                attempts: 0,
            });
        }
        st.plan.revision += 1;
        st.replans += 1;
        st.current = first_new;
        st.phase = StrictPhase::Act;
        st.step_messages.clear();
        st.step_repairs = 0;
        st.repair = None;
        st.repairing = None;
        let plan = st.plan.clone();
        let cause = failure.cause;
        let run_id = self.run_id();
        self.emit(AgentEvent::PlanRevised { run_id, plan, cause }).await;
        self.checkpoint().await
    }
}

/// Parses a planner's answer (a code fence around the JSON is tolerated).
fn parse_draft(text: &str) -> Result<PlanDraft, serde_json::Error> {
    serde_json::from_str(crate::output::strip_code_fence(text.trim()))
}

/// Checks a planner's draft: 1..=max steps, descriptions, known tools (deduplicated).
fn validate_draft(
    draft: PlanDraft,
    max: usize,
    known: &HashSet<String>,
) -> Result<Vec<crate::plan::PlanDraftStep>, String> {
    if draft.steps.is_empty() {
        return Err("it has no steps".into());
    }
    if draft.steps.len() > max {
        return Err(format!("it has {} steps; at most {max} are allowed", draft.steps.len()));
    }
    let mut steps = Vec::with_capacity(draft.steps.len());
    for (i, mut step) in draft.steps.into_iter().enumerate() {
        if step.description.trim().is_empty() {
            return Err(format!("step {} has no description", i + 1));
        }
        let mut seen = HashSet::new();
        step.allowed_tools.retain(|t| seen.insert(t.clone()));
        if let Some(unknown) = step.allowed_tools.iter().find(|t| !known.contains(*t)) {
            let mut names: Vec<&String> = known.iter().collect();
            names.sort();
            return Err(format!(
                "step {} names the unknown tool {unknown:?}; the tools are: {}",
                i + 1,
                names.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        steps.push(step);
    }
    Ok(steps)
}
