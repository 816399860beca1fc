//! The strict Plan-and-Execute decision policy: a state machine over [`StrictState`], which is
//! part of every checkpoint of a strict run.
//!
//! PLAN → ACT_TOOL → STEP_RESULT → STEP_VALIDATE/COMMIT → … → VERIFY → FINALIZE → DONE. Each
//! transition is checkpointed. See [`crate::plan`] for the rules.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::ask::{Ask, Format, ModelSlot, Offer};
use super::{Run, ToolCallOutcome};
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::{Message, Role, ToolCall};
use crate::model::ToolDefinition;
use crate::output::{JsonCodec, OutputCodec};
use crate::plan::{
    ArgumentsSource, FeedbackMode, MAX_TRACE_ENTRIES, Plan, PlanAndExecutePolicy, PlanDraft, PlanFailure, PlanStep,
    RecoveryFallback, StepOutcome, StepResult, StepStatus, ToolTraceEntry, ToolTraceMode, TraceError, canonical_json,
    effective_arguments, json_hash, sanitize_id, sanitize_message, trace_arguments,
};
use crate::provider::Stage;
use crate::tool::{RecoveryAction, ToolError};

/// The version of [`StrictState`]'s layout inside a checkpoint.
const STRICT_STATE_VERSION: u32 = 1;

/// Where a strict run is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub(super) enum StrictPhase {
    /// Making the plan.
    Plan,
    /// ACT_TOOL for the current step.
    Act,
    /// Asking for the current step's result (with feedback on a rejected one).
    StepResult {
        #[serde(default)]
        feedback: Option<String>,
    },
    /// A tool failure is being recovered (replan or fail); saved before the planner is asked,
    /// so a resume after an interruption recovers again instead of re-running the tool.
    Recovering {
        failure: PlanFailure,
        call_id: String,
        tool: String,
        replan_requested: bool,
    },
    /// Every step committed; checking the plan.
    Verify,
    /// Writing the final answer.
    Finalize,
    /// The final answer was produced (`final_emitted`).
    Done,
}

/// A failed call the model may repair once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct PendingRepair {
    call_id: String,
    tool: String,
    /// Canonical JSON of the arguments the model sent.
    canonical: String,
    /// Hash of the effective arguments it ran with.
    effective_hash: String,
}

/// How one call of the current batch ended, for classification after the batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct CallVerdict {
    /// The tool body ran (not refused before running).
    ran: bool,
    ok: bool,
    #[serde(default)]
    error: Option<ToolError>,
    /// The arguments the model sent, canonical.
    canonical: String,
    /// Hash of the effective arguments (when it ran).
    #[serde(default)]
    effective_hash: Option<String>,
}

/// The serialisable state of a strict run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct StrictState {
    version: u32,
    phase: StrictPhase,
    plan: Plan,
    /// Index of the current step in `plan.steps`.
    current: usize,
    /// The current step's ACT conversation (tool calls, results, the model's draft).
    step_messages: Vec<Message>,
    /// Repairs made in the current step.
    step_repairs: u32,
    replans: u32,
    /// Repairs made in the run.
    tool_repairs: u32,
    /// A failed call waiting for the model's one repair call.
    repair: Option<PendingRepair>,
    /// The repair call in flight: (its call id, the id of the call it repairs).
    repairing: Option<(String, String)>,
    /// Verdicts of the current batch's finished calls (by call id).
    batch: BTreeMap<String, CallVerdict>,
    trace: Vec<ToolTraceEntry>,
    trace_dropped: u32,
    failure: Option<PlanFailure>,
    final_emitted: bool,
    final_text: Option<String>,
    /// The answer was appended to the session (a replay must not append it again).
    pub(super) conversation_stored: bool,
    /// The number the next new step's id gets.
    next_step: u32,
    /// This process returned the stored answer of a DONE run.
    #[serde(skip)]
    replayed: bool,
}

impl StrictState {
    fn new() -> Self {
        StrictState {
            version: STRICT_STATE_VERSION,
            phase: StrictPhase::Plan,
            plan: Plan::default(),
            current: 0,
            step_messages: Vec::new(),
            step_repairs: 0,
            replans: 0,
            tool_repairs: 0,
            repair: None,
            repairing: None,
            batch: BTreeMap::new(),
            trace: Vec::new(),
            trace_dropped: 0,
            failure: None,
            final_emitted: false,
            final_text: None,
            conversation_stored: false,
            next_step: 1,
            replayed: false,
        }
    }

    /// The run produced its final answer.
    /// The call ids this strict run has used: the current step's calls and the traced ones.
    pub(super) fn used_call_ids(&self) -> impl Iterator<Item = &str> {
        self.step_messages
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
            .chain(self.trace.iter().map(|t| t.call_id.as_str()))
    }

    pub(super) fn is_done(&self) -> bool {
        self.phase == StrictPhase::Done && self.final_emitted
    }

    fn current_step(&self) -> Option<&PlanStep> {
        self.plan.steps.get(self.current)
    }

    fn current_step_id(&self) -> String {
        self.current_step().map_or_else(|| "plan".to_owned(), |s| s.id.clone())
    }

    fn push_trace(&mut self, entry: ToolTraceEntry) {
        if self.trace.len() < MAX_TRACE_ENTRIES {
            self.trace.push(entry);
        } else {
            self.trace_dropped += 1;
        }
    }

    fn set_trace_recovery(&mut self, call_id: &str, action: &str) {
        if let Some(entry) = self.trace.iter_mut().rev().find(|e| e.call_id == sanitize_id(call_id))
            && let Some(error) = entry.error.as_mut()
        {
            error.recovery = Some(action.to_owned());
        }
    }

    /// `plan`, `tool_trace`, `plan_usage` and `failure` for the result's metadata.
    pub(super) fn write_metadata(
        &self,
        metadata: &mut serde_json::Map<String, serde_json::Value>,
        mode: ToolTraceMode,
    ) {
        metadata.insert("policy".into(), "plan_and_execute".into());
        metadata.insert(
            "plan".into(),
            serde_json::to_value(&self.plan).unwrap_or(serde_json::Value::Null),
        );
        if mode != ToolTraceMode::Off {
            metadata.insert(
                "tool_trace".into(),
                serde_json::to_value(&self.trace).unwrap_or(serde_json::Value::Null),
            );
            if self.trace_dropped > 0 {
                metadata.insert("tool_trace_dropped".into(), self.trace_dropped.into());
            }
        }
        let completed = self
            .plan
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
            .count();
        metadata.insert(
            "plan_usage".into(),
            serde_json::json!({
                "steps_completed": completed,
                "replans": self.replans,
                "tool_repairs": self.tool_repairs,
            }),
        );
        if let Some(failure) = &self.failure {
            metadata.insert(
                "failure".into(),
                serde_json::to_value(failure).unwrap_or(serde_json::Value::Null),
            );
        }
        if self.replayed {
            metadata.insert("final_replayed".into(), true.into());
        }
    }
}

/// The STEP_RESULT codec (its schema is generated once per process).
fn step_result_codec() -> &'static JsonCodec<StepResult> {
    static CODEC: std::sync::OnceLock<JsonCodec<StepResult>> = std::sync::OnceLock::new();
    CODEC.get_or_init(JsonCodec::new)
}

/// A sanitised failure.
fn failure(
    cause: &str,
    step_id: Option<&str>,
    tool: Option<&str>,
    call_id: Option<&str>,
    error: Option<&ToolError>,
) -> PlanFailure {
    PlanFailure {
        step_id: step_id.map(sanitize_id),
        tool_name: tool.map(sanitize_id),
        call_id: call_id.map(sanitize_id),
        error_class: error.map(|e| e.kind.as_str().to_owned()),
        reason: error.map(|e| sanitize_id(&e.reason)),
        cause: sanitize_id(cause),
    }
}

/// What the model sees of a failed call in a strict run: type and reason, plus the sanitised
/// message in [`FeedbackMode::SafeMessage`]; never details, never a raw error.
fn strict_error_content(error: &ToolError, mode: FeedbackMode) -> String {
    ToolError {
        reason: sanitize_id(&error.reason),
        message: error.message.as_deref().map(sanitize_message),
        ..error.clone()
    }
    .model_content(mode == FeedbackMode::SafeMessage)
}

fn trace_error(error: &ToolError) -> TraceError {
    TraceError {
        kind: error.kind.as_str().to_owned(),
        retryable: error.retryable,
        reason: Some(sanitize_id(&error.reason)),
        recovery: None,
    }
}

/// A snake_case code for an error that ended a strict run.
fn error_code(error: &AgentError) -> String {
    match error {
        AgentError::PlanFailed { cause, .. } => cause.clone(),
        AgentError::MaxTurnsExceeded { .. } => "max_turns".into(),
        AgentError::MaxToolCallsExceeded { .. } => "max_tool_calls".into(),
        AgentError::Output { .. } => "output_invalid".into(),
        AgentError::Model { .. } => "model_error".into(),
        AgentError::MemoryOverflow { .. } => "memory_overflow".into(),
        AgentError::ContextProvider { .. } => "context_provider".into(),
        AgentError::Configuration { .. } => "configuration".into(),
        _ => "run_failed".into(),
    }
}

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    fn st(&mut self) -> &mut StrictState {
        self.state.strict.get_or_insert_with(|| Box::new(StrictState::new()))
    }

    async fn emit(&self, event: AgentEvent) {
        if self.env.emitter.active() {
            self.env.emitter.emit(event).await;
        }
    }

    fn run_id(&self) -> String {
        self.env.ctx.run_id().to_owned()
    }

    pub(super) async fn strict_loop(&mut self, policy: &PlanAndExecutePolicy) -> Result<O, AgentError> {
        let version = self.st().version;
        if version > STRICT_STATE_VERSION {
            return Err(AgentError::CheckpointInvalid {
                run_id: self.run_id(),
                message: format!(
                    "the strict state has version {version}; this build reads up to {STRICT_STATE_VERSION}"
                ),
            });
        }
        let outcome = self.strict_machine(policy).await;
        if let Err(error) = &outcome
            && !error.is_resumable()
            && !matches!(error, AgentError::Interrupted { .. })
        {
            // A terminal failure decided by the policy (or a limit) fails the step; a resumable
            // interruption leaves it in progress.
            let code = error_code(error);
            let st = self.st();
            let in_step = matches!(
                st.phase,
                StrictPhase::Act | StrictPhase::StepResult { .. } | StrictPhase::Recovering { .. }
            );
            let step_id = st.current_step().filter(|_| in_step).map(|s| s.id.clone());
            if let Some(step) = st.plan.steps.get_mut(st.current)
                && matches!(step.status, StepStatus::InProgress | StepStatus::Pending)
                && in_step
            {
                step.status = StepStatus::Failed;
            }
            if st.failure.is_none() {
                st.failure = Some(failure(&code, step_id.as_deref(), None, None, None));
            }
            if let Some(step_id) = step_id {
                let run_id = self.run_id();
                self.emit(AgentEvent::StepFailed {
                    run_id,
                    step_id,
                    cause: sanitize_id(&code),
                })
                .await;
            }
        }
        outcome
    }

    async fn strict_machine(&mut self, policy: &PlanAndExecutePolicy) -> Result<O, AgentError> {
        loop {
            let phase = self.st().phase.clone();
            match phase {
                StrictPhase::Plan => self.strict_plan(policy).await?,
                StrictPhase::Act => self.strict_act(policy).await?,
                StrictPhase::StepResult { feedback } => self.strict_step_result(feedback).await?,
                StrictPhase::Recovering {
                    failure,
                    call_id,
                    tool,
                    replan_requested,
                } => {
                    self.fallback(policy, failure, &call_id, &tool, replan_requested)
                        .await?
                }
                StrictPhase::Verify => self.strict_verify().await?,
                StrictPhase::Finalize => return self.strict_finalize().await,
                StrictPhase::Done => {
                    if let Some(output) = self.strict_replay() {
                        return output;
                    }
                    self.st().phase = StrictPhase::Finalize;
                }
            }
        }
    }

    /// The most steps a plan may have.
    fn max_steps(&self, policy: &PlanAndExecutePolicy) -> usize {
        self.env.agent.limits.max_steps.min(policy.generator.max_steps) as usize
    }

    /// The tools a plan may name: every visible, enabled tool.
    fn plannable_tools(&self) -> Vec<ToolDefinition> {
        self.env
            .tool_order
            .iter()
            .filter_map(|name| self.env.tools.get(name))
            .filter(|t| t.entry.tool.is_enabled(&self.env.ctx))
            .map(|t| t.entry.tool.spec().definition())
            .collect()
    }

    // ----- PLAN -----

    async fn strict_plan(&mut self, policy: &PlanAndExecutePolicy) -> Result<(), AgentError> {
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

    fn tool_catalogue(&self, policy: &PlanAndExecutePolicy) -> String {
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
    async fn generate_steps(
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
                        .route(super::DeltaRoute::Step("plan".into()))
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
    fn plan_context(&mut self) -> String {
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

    async fn strict_act(&mut self, policy: &PlanAndExecutePolicy) -> Result<(), AgentError> {
        let run_id = self.run_id();
        let (step, repair) = {
            let st = self.st();
            let Some(step) = st.plan.steps.get_mut(st.current) else {
                st.phase = StrictPhase::Verify;
                return Ok(());
            };
            let started = step.status == StepStatus::Pending;
            if started {
                step.status = StepStatus::InProgress;
            }
            let snapshot = step.clone();
            let repair = st.repair.clone();
            if started {
                let index = st.current;
                self.emit(AgentEvent::StepStarted {
                    run_id: run_id.clone(),
                    step_id: snapshot.id.clone(),
                    index,
                    attempt: snapshot.attempts + 1,
                })
                .await;
            }
            (snapshot, repair)
        };
        // Calls of the last answer without results (also after a resume): run them.
        let unanswered = self
            .st()
            .step_messages
            .last()
            .filter(|m| m.role == Role::Assistant && m.has_tool_calls())
            .map(|m| m.tool_calls.clone());
        if let Some(calls) = unanswered {
            return self.strict_run_tools(policy, &step, calls).await;
        }
        let names: Vec<String> = match &repair {
            Some(r) => vec![r.tool.clone()],
            None => step.allowed_tools.clone(),
        };
        let definitions: Vec<ToolDefinition> = names
            .iter()
            .filter_map(|n| self.env.tools.get(n))
            .filter(|t| t.entry.tool.is_enabled(&self.env.ctx))
            .map(|t| t.entry.tool.spec().definition())
            .collect();
        if definitions.is_empty() && repair.is_none() {
            // Nothing to act with: the step's result is next.
            self.st().phase = StrictPhase::StepResult { feedback: None };
            return self.checkpoint().await;
        }
        if self.state.turns >= self.env.agent.limits.max_turns {
            return Err(AgentError::MaxTurnsExceeded {
                limit: self.env.agent.limits.max_turns,
            });
        }
        let mut extra = vec![Message::user(self.plan_context())];
        extra.extend(self.st().step_messages.iter().cloned());
        if let Some(r) = &repair {
            extra.push(Message::user(format!(
                "The call {} to {} failed (see its error). Call {} exactly once more with corrected \
                 arguments, or answer without calling a tool if it cannot be corrected.",
                r.call_id, r.tool, r.tool
            )));
        }
        let response = self
            .ask(
                Ask::new(Stage::Act)
                    .extra(extra)
                    .offer(Offer::Only(definitions))
                    .route(super::DeltaRoute::Step(step.id.clone())),
            )
            .await?
            .response;
        self.state.turns += 1;
        if let Some(r) = repair {
            self.st().repair = None;
            if let Err(reason) = self.check_repair(&r, &response.message) {
                return self.reject_repair(policy, &step, &r, &response.message, reason).await;
            }
            let st = self.st();
            if let Some(call) = response.message.tool_calls.first() {
                st.repairing = Some((call.id.clone(), r.call_id.clone()));
            }
            st.tool_repairs += 1;
            st.step_repairs += 1;
        }
        if response.message.has_tool_calls() {
            self.count_tool_calls(&response.message)?;
            self.st().step_messages.push(response.message);
            return self.checkpoint().await;
        }
        // A plain answer is a draft: it does not complete the step; its step result does.
        let st = self.st();
        st.step_messages.push(response.message);
        st.phase = StrictPhase::StepResult { feedback: None };
        self.checkpoint().await
    }

    /// Checks a repair answer before anything runs: one call, the same tool, a new call id,
    /// different canonical arguments and different effective arguments.
    fn check_repair(&self, repair: &PendingRepair, answer: &Message) -> Result<(), &'static str> {
        let call = match answer.tool_calls.as_slice() {
            [] => return Err("repair_declined"),
            [call] => call,
            _ => return Err("repair_not_single_call"),
        };
        if call.name != repair.tool {
            return Err("repair_other_tool");
        }
        if call.id == repair.call_id {
            return Err("repair_same_call_id");
        }
        let args = call.parse_arguments().map_err(|_| "repair_invalid_arguments")?;
        if canonical_json(&args) == repair.canonical {
            return Err("repair_same_arguments");
        }
        let tool = self.env.tools.get(&call.name).ok_or("repair_other_tool")?;
        if !tool.entry.validator.problems(&args).is_empty() {
            return Err("repair_invalid_arguments");
        }
        let effective = effective_arguments(&tool.entry.tool.spec().parameters, &args);
        if json_hash(&effective) == repair.effective_hash {
            return Err("repair_same_effective_arguments");
        }
        Ok(())
    }

    /// A repair answer that failed the checks: traced, not run, then the fallback.
    async fn reject_repair(
        &mut self,
        policy: &PlanAndExecutePolicy,
        step: &PlanStep,
        repair: &PendingRepair,
        answer: &Message,
        reason: &'static str,
    ) -> Result<(), AgentError> {
        let mode = policy.trace_mode;
        let st = self.st();
        for call in &answer.tool_calls {
            let requested = call
                .parse_arguments()
                .unwrap_or_else(|_| serde_json::Value::String("<invalid JSON>".into()));
            st.push_trace(ToolTraceEntry {
                step_id: sanitize_id(&step.id),
                call_id: sanitize_id(&call.id),
                tool_name: sanitize_id(&call.name),
                ok: false,
                attempts: 0,
                duration_ms: 0,
                error: Some(TraceError {
                    kind: "validation".into(),
                    retryable: false,
                    reason: Some(reason.to_owned()),
                    recovery: None,
                }),
                recovery_of_call_id: Some(sanitize_id(&repair.call_id)),
                arguments: (mode == ToolTraceMode::Arguments).then(|| trace_arguments(&requested)),
                arguments_source: (mode == ToolTraceMode::Arguments).then_some(ArgumentsSource::Requested),
            });
        }
        let failure = failure(reason, Some(&step.id), Some(&repair.tool), Some(&repair.call_id), None);
        // The fallback is recorded on the rejected call's entry; the failed call keeps its
        // `repair_call`.
        let traced = answer
            .tool_calls
            .first()
            .map_or_else(|| repair.call_id.clone(), |c| c.id.clone());
        self.recover(failure, &traced, &repair.tool, false).await
    }

    /// Runs a batch of the current step's calls and classifies how it ended.
    async fn strict_run_tools(
        &mut self,
        policy: &PlanAndExecutePolicy,
        step: &PlanStep,
        calls: Vec<ToolCall>,
    ) -> Result<(), AgentError> {
        let recovery = policy.recovery;
        let mode = policy.trace_mode;
        // Only the step's tools (or the tool under repair) may run, also after a resume.
        let repairing = self.st().repairing.clone();
        let mut allowed: HashSet<String> = step.allowed_tools.iter().cloned().collect();
        if let Some((new_id, _)) = &repairing
            && let Some(call) = calls.iter().find(|c| &c.id == new_id)
        {
            allowed = HashSet::from([call.name.clone()]);
        }
        self.offered = Some(allowed);
        let step_id = sanitize_id(&step.id);
        self.run_batch(&calls, true, |env, state, call, report| {
            let requested = call.parse_arguments().ok();
            let (content, is_error, error) = match report.outcome {
                ToolCallOutcome::Ok(value) => (env.result_content(&call.name, value), false, None),
                ToolCallOutcome::Err(e) => (strict_error_content(&e, recovery.feedback_mode), true, Some(e)),
            };
            let recovery_of = repairing
                .as_ref()
                .filter(|(new_id, _)| new_id == &call.id)
                .map(|(_, old)| sanitize_id(old));
            let (arguments, arguments_source) = match (mode, &report.validated) {
                (ToolTraceMode::Arguments, Some(v)) => (Some(trace_arguments(v)), Some(ArgumentsSource::Validated)),
                (ToolTraceMode::Arguments, None) => (
                    Some(trace_arguments(
                        requested
                            .as_ref()
                            .unwrap_or(&serde_json::Value::String("<invalid JSON>".into())),
                    )),
                    Some(ArgumentsSource::Requested),
                ),
                _ => (None, None),
            };
            let verdict = CallVerdict {
                ran: report.validated.is_some(),
                ok: !is_error,
                error: error.clone(),
                canonical: requested.as_ref().map(canonical_json).unwrap_or_default(),
                effective_hash: report.validated.as_ref().map(json_hash),
            };
            let entry = ToolTraceEntry {
                step_id: step_id.clone(),
                call_id: sanitize_id(&call.id),
                tool_name: sanitize_id(&report.identity),
                ok: !is_error,
                attempts: report.attempts,
                duration_ms: report.duration_ms,
                error: error.as_ref().map(trace_error),
                recovery_of_call_id: recovery_of,
                arguments,
                arguments_source,
            };
            // Recorded with the call's result, so a checkpoint taken mid-batch keeps both.
            let st = state.strict.get_or_insert_with(|| Box::new(StrictState::new()));
            st.batch.insert(call.id.clone(), verdict);
            st.push_trace(entry);
            Message::tool_result(call.id.clone(), call.name.clone(), content, is_error)
        })
        .await?;
        // The batch is complete: its results join the step's conversation in call order.
        let mut verdicts = Vec::with_capacity(calls.len());
        for call in &calls {
            if let Some(m) = self.state.pending_results.remove(&call.id) {
                self.st().step_messages.push(m);
            }
            if let Some(v) = self.st().batch.remove(&call.id) {
                verdicts.push((call.clone(), v));
            }
        }
        let st = self.st();
        st.batch.clear();
        st.repairing = None;
        let succeeded = verdicts.iter().filter(|(_, v)| v.ok).count();
        let failed: Vec<&(ToolCall, CallVerdict)> = verdicts.iter().filter(|(_, v)| v.ran && !v.ok).collect();
        let Some((call, verdict)) = failed.first().map(|(c, v)| (c.clone(), v.clone())) else {
            if succeeded > 0 {
                // ACT_TOOL → STEP_RESULT: the step's outcome is asked for next.
                st.phase = StrictPhase::StepResult { feedback: None };
            }
            // Calls refused before running were fed back: the model acts again.
            return self.checkpoint().await;
        };
        let error = verdict.error.clone();
        if succeeded > 0 {
            // Side effects already happened in this batch: never re-run them.
            let f = failure(
                "partial_batch_failure",
                Some(&step.id),
                Some(&call.name),
                Some(&call.id),
                error.as_ref(),
            );
            return self.terminal(f, &call.id, &call.name).await;
        }
        let action = error.as_ref().and_then(|e| e.recovery);
        match action {
            Some(RecoveryAction::Fail) => {
                let cause = if error
                    .as_ref()
                    .is_some_and(|e| e.kind == crate::tool::ToolErrorKind::Timeout)
                {
                    // A timed-out blocking tool may still be running: never replanned.
                    "uncancellable_timeout"
                } else {
                    "tool_requested_fail"
                };
                let f = failure(cause, Some(&step.id), Some(&call.name), Some(&call.id), error.as_ref());
                self.terminal(f, &call.id, &call.name).await
            }
            Some(RecoveryAction::Replan) => {
                let f = failure(
                    "tool_requested_replan",
                    Some(&step.id),
                    Some(&call.name),
                    Some(&call.id),
                    error.as_ref(),
                );
                self.recover(f, &call.id, &call.name, true).await
            }
            Some(RecoveryAction::RepairCall) => {
                let repair_safe = self
                    .env
                    .tools
                    .get(&call.name)
                    .is_some_and(|t| t.entry.tool.spec().repair_safe);
                let cause = if failed.len() > 1 || calls.len() > 1 {
                    Some("repair_not_single_call")
                } else if recovery.require_repair_safe && !repair_safe {
                    Some("repair_not_safe")
                } else if self.st().step_repairs >= self.env.agent.limits.max_tool_repair_attempts {
                    Some("repair_limit")
                } else {
                    None
                };
                if let Some(cause) = cause {
                    let f = failure(cause, Some(&step.id), Some(&call.name), Some(&call.id), error.as_ref());
                    return self.recover(f, &call.id, &call.name, false).await;
                }
                let st = self.st();
                st.repair = Some(PendingRepair {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    canonical: verdict.canonical.clone(),
                    effective_hash: verdict.effective_hash.clone().unwrap_or_default(),
                });
                st.set_trace_recovery(&call.id, "repair_call");
                let run_id = self.run_id();
                self.emit(AgentEvent::ToolRecovery {
                    run_id,
                    step_id: step.id.clone(),
                    call_id: sanitize_id(&call.id),
                    tool: sanitize_id(&call.name),
                    action: "repair_call".into(),
                    reason: error.as_ref().map(|e| sanitize_id(&e.reason)),
                })
                .await;
                self.checkpoint().await
            }
            // Retry already happened where allowed (same call, same arguments); what is left
            // is the fallback.
            Some(RecoveryAction::RetryCall) | None => {
                let f = failure(
                    "tool_failed",
                    Some(&step.id),
                    Some(&call.name),
                    Some(&call.id),
                    error.as_ref(),
                );
                self.recover(f, &call.id, &call.name, false).await
            }
        }
    }

    /// Saves the decision to recover (the batch's results with it), then leaves the recovery
    /// to the RECOVERING phase.
    async fn recover(
        &mut self,
        failure: PlanFailure,
        call_id: &str,
        tool: &str,
        replan_requested: bool,
    ) -> Result<(), AgentError> {
        self.st().phase = StrictPhase::Recovering {
            failure,
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            replan_requested,
        };
        self.checkpoint().await
    }

    /// Replan (when the configuration or the tool asks for it and replans remain), else fail.
    async fn fallback(
        &mut self,
        policy: &PlanAndExecutePolicy,
        mut failure: PlanFailure,
        call_id: &str,
        tool: &str,
        tool_asked_replan: bool,
    ) -> Result<(), AgentError> {
        let wants_replan = tool_asked_replan || policy.recovery.fallback == RecoveryFallback::Replan;
        if !wants_replan {
            return self.terminal(failure, call_id, tool).await;
        }
        if self.st().replans >= self.env.agent.limits.max_replans {
            failure.cause = "replan_limit".into();
            return self.terminal(failure, call_id, tool).await;
        }
        self.st().set_trace_recovery(call_id, "replan");
        let step_id = self.st().current_step_id();
        let run_id = self.run_id();
        self.emit(AgentEvent::ToolRecovery {
            run_id,
            step_id,
            call_id: sanitize_id(call_id),
            tool: sanitize_id(tool),
            action: "replan".into(),
            reason: failure.reason.clone(),
        })
        .await;
        self.replan(policy, failure).await
    }

    /// Ends the run: the failure is recorded and the step fails.
    async fn terminal(&mut self, failure: PlanFailure, call_id: &str, tool: &str) -> Result<(), AgentError> {
        let st = self.st();
        st.set_trace_recovery(call_id, "fail");
        let step_id = failure.step_id.clone();
        let cause = failure.cause.clone();
        st.failure = Some(failure.clone());
        let run_id = self.run_id();
        self.emit(AgentEvent::ToolRecovery {
            run_id,
            step_id: step_id.clone().unwrap_or_default(),
            call_id: sanitize_id(call_id),
            tool: sanitize_id(tool),
            action: "fail".into(),
            reason: failure.reason.clone(),
        })
        .await;
        Err(AgentError::PlanFailed { cause, step_id })
    }

    /// Revises the unfinished part of the plan: completed steps stay, the rest is superseded
    /// by the planner's new steps.
    async fn replan(&mut self, policy: &PlanAndExecutePolicy, failure: PlanFailure) -> Result<(), AgentError> {
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

    fn record_failure(&mut self, failure: PlanFailure) -> AgentError {
        let cause = failure.cause.clone();
        let step_id = failure.step_id.clone();
        self.st().failure = Some(failure);
        AgentError::PlanFailed { cause, step_id }
    }

    // ----- STEP_RESULT, STEP_VALIDATE/COMMIT -----

    async fn strict_step_result(&mut self, feedback: Option<String>) -> Result<(), AgentError> {
        let Some(step) = self.st().current_step().cloned() else {
            self.st().phase = StrictPhase::Verify;
            return Ok(());
        };
        let codec = step_result_codec();
        let format = codec.response_format();
        let mut extra = vec![Message::user(self.plan_context())];
        extra.extend(self.st().step_messages.iter().cloned());
        extra.push(Message::user(format!(
            "Report the outcome of step {} now, as JSON that fits the schema: status \"completed\" \
             when the step's goal was reached, \"failed\" otherwise, and result: the facts later steps \
             need. Do not call tools.",
            step.id
        )));
        if let Some(feedback) = feedback {
            extra.push(Message::user(feedback));
        }
        let response = self
            .ask(
                Ask::new(Stage::Act)
                    .extra(extra)
                    .offer(Offer::Only(Vec::new()))
                    .format(Format::Fixed(format))
                    .route(super::DeltaRoute::Step(step.id.clone())),
            )
            .await?
            .response;
        let text = response.message.text();
        let max_attempts = self.env.agent.limits.max_step_attempts;
        let st = self.st();
        let attempt = {
            let Some(s) = st.plan.steps.get_mut(st.current) else {
                return Ok(());
            };
            s.attempts += 1;
            s.attempts
        };
        let verdict = match codec.parse(&text) {
            Ok(result) if result.status == StepOutcome::Completed && !result.result.trim().is_empty() => {
                Ok(result.result)
            }
            Ok(result) if result.status == StepOutcome::Completed => Err((
                "invalid_step_result",
                "Your step result could not be used: result is empty. Answer again with only the JSON step result."
                    .to_owned(),
            )),
            Ok(_) => Err((
                "step_reported_failed",
                format!(
                    "Step {} is not complete. Work on it again: use the step's tools if they help, then report.",
                    step.id
                ),
            )),
            Err(e) => Err((
                "invalid_step_result",
                format!(
                    "Your step result could not be used: {}. Answer again with only the JSON step result.",
                    e.message
                ),
            )),
        };
        match verdict {
            Ok(result) => {
                // STEP_VALIDATE passed: COMMIT.
                if let Some(s) = st.plan.steps.get_mut(st.current) {
                    s.status = StepStatus::Completed;
                    s.result = Some(result);
                }
                st.step_messages.clear();
                st.step_repairs = 0;
                st.repair = None;
                let next = st
                    .plan
                    .steps
                    .iter()
                    .enumerate()
                    .skip(st.current + 1)
                    .find(|(_, s)| s.status == StepStatus::Pending)
                    .map(|(i, _)| i);
                match next {
                    Some(i) => {
                        st.current = i;
                        st.phase = StrictPhase::Act;
                    }
                    None => st.phase = StrictPhase::Verify,
                }
                let run_id = self.run_id();
                self.emit(AgentEvent::StepCommitted {
                    run_id,
                    step_id: step.id.clone(),
                })
                .await;
                self.checkpoint().await
            }
            Err((reason, message)) => {
                let reported_failed = reason == "step_reported_failed";
                if attempt >= max_attempts {
                    let f = PlanFailure {
                        step_id: Some(sanitize_id(&step.id)),
                        tool_name: None,
                        call_id: None,
                        error_class: Some("step_result".into()),
                        reason: Some(reason.into()),
                        cause: "step_attempts_exhausted".into(),
                    };
                    let run_id = self.run_id();
                    self.emit(AgentEvent::StepResultRejected {
                        run_id,
                        step_id: step.id.clone(),
                        reason: reason.into(),
                        attempt,
                    })
                    .await;
                    return Err(self.record_failure(f));
                }
                if reported_failed {
                    st.step_messages.push(Message::assistant(text));
                    st.step_messages.push(Message::user(message));
                    st.phase = StrictPhase::Act;
                } else {
                    st.phase = StrictPhase::StepResult {
                        feedback: Some(message),
                    };
                }
                let run_id = self.run_id();
                self.emit(AgentEvent::StepResultRejected {
                    run_id: run_id.clone(),
                    step_id: step.id.clone(),
                    reason: reason.into(),
                    attempt,
                })
                .await;
                if reported_failed {
                    let index = self.st().current;
                    self.emit(AgentEvent::StepStarted {
                        run_id,
                        step_id: step.id.clone(),
                        index,
                        attempt: attempt + 1,
                    })
                    .await;
                }
                self.checkpoint().await
            }
        }
    }

    // ----- VERIFY -----

    async fn strict_verify(&mut self) -> Result<(), AgentError> {
        let st = self.st();
        let active: Vec<&PlanStep> = st
            .plan
            .steps
            .iter()
            .filter(|s| s.status != StepStatus::Superseded)
            .collect();
        if active.is_empty() || active.iter().any(|s| s.status != StepStatus::Completed) {
            let pending = active
                .iter()
                .find(|s| s.status != StepStatus::Completed)
                .map(|s| s.id.clone());
            let f = PlanFailure {
                step_id: pending.as_deref().map(sanitize_id),
                tool_name: None,
                call_id: None,
                error_class: Some("plan".into()),
                reason: None,
                cause: "verify_failed".into(),
            };
            return Err(self.record_failure(f));
        }
        let steps = active.len();
        st.phase = StrictPhase::Finalize;
        let run_id = self.run_id();
        self.emit(AgentEvent::PlanVerified { run_id, steps }).await;
        self.checkpoint().await
    }

    // ----- FINALIZE, DONE -----

    async fn strict_finalize(&mut self) -> Result<O, AgentError> {
        let mut summary = String::from("Verified results of the plan's steps:\n");
        for step in self
            .st()
            .plan
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
        {
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
        let format = self.env.agent.codec.response_format();
        let structured = format.is_some();
        // Text streams as FinalDelta as it arrives. A structured answer may fail to parse and
        // be corrected, so it streams as internal work, and the answer that is returned goes
        // out as one FinalDelta once it parsed: `FinalDelta` never shows a rejected answer.
        let route = if structured {
            super::DeltaRoute::Step("finalize".into())
        } else {
            super::DeltaRoute::Final
        };
        let answer = self
            .ask(
                Ask::new(Stage::Finalize)
                    .extra(vec![Message::user(summary)])
                    .format(Format::Fixed(format))
                    .route(route),
            )
            .await?;
        let output = self
            .accept_final(
                answer.response.message,
                answer.format,
                super::DeltaRoute::Step("finalize".into()),
            )
            .await?;
        let text = self
            .state
            .messages
            .last()
            .filter(|m| m.role == Role::Assistant)
            .map(Message::text)
            .unwrap_or_default();
        if structured && self.env.emitter.active() && !text.is_empty() {
            self.env
                .emitter
                .emit(AgentEvent::FinalDelta {
                    run_id: self.env.ctx.run_id().to_owned(),
                    text: text.clone(),
                })
                .await;
        }
        let st = self.st();
        st.final_text = Some(text);
        st.final_emitted = true;
        st.phase = StrictPhase::Done;
        // DONE is saved before the answer leaves: resuming this run again returns it instead of
        // finalizing a second time.
        self.checkpoint().await?;
        Ok(output)
    }

    /// A DONE run's stored answer (no model call, no deltas); `None` when it cannot be parsed.
    fn strict_replay(&mut self) -> Option<Result<O, AgentError>> {
        let st = self.st();
        if !st.final_emitted {
            return None;
        }
        let text = st.final_text.clone()?;
        st.replayed = true;
        match self.env.agent.codec.parse(&text) {
            Ok(output) => Some(Ok(output)),
            Err(e) => Some(Err(AgentError::Output { message: e.message })),
        }
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
