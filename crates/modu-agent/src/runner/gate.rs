//! The tool gate: a batch of tool calls from one model answer, each admitted (lookup, JSON,
//! schema, the approval decision, RBAC) and executed through the function stack (user
//! function layers, then the tool's timeout and retries), results in call order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::chat::with_deadline;
use super::journal::save_checkpoint;
use super::policy::{CallReport, ToolCallOutcome, View};
use super::state::RunState;
use super::{Env, Run, VisibleTool};
use crate::agent::AgentInner;
use crate::approval::{ApprovalDecision, ApprovalRequest, NestedPause, NestedResume, nested_call_id};
use crate::context::CallScope;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::input::{InputAnswer, InputRequest};
use crate::message::{ContentPart, Message};
use crate::middleware::ToolInvocation;
use crate::tool::{ToolError, ToolErrorKind};

/// What the tool loop knows about approvals when it runs a batch.
#[derive(Clone, Copy)]
pub(super) struct ApprovalGate<'a> {
    pub(super) offered: Option<&'a super::state::ToolNames>,
    pub(super) decisions: &'a BTreeMap<String, ApprovalDecision>,
    pub(super) always_approved: &'a BTreeSet<String>,
    /// Nested runs paused by calls of this batch (by the parent's call id).
    pub(super) nested: &'a BTreeMap<String, NestedPause>,
    /// The tool identities admitted this turn (`None`: every offered tool).
    pub(super) allowed: Option<&'a BTreeSet<String>>,
    /// People's answers to the calls' asks for input (by call id).
    pub(super) inputs: &'a BTreeMap<String, Vec<InputAnswer>>,
}

/// Why a call did not run.
pub(super) enum Refusal {
    Error(ToolError),
    Approval(ApprovalRequest),
}

/// How one call of a batch ended.
pub(super) enum RawToolRun {
    Done(CallReport),
    NeedsApproval(ApprovalRequest),
    /// The call's nested run (agent-as-tool) paused for approvals.
    Nested(NestedPause),
    /// The call asked a person for input it has no answer for.
    NeedsInput(InputRequest),
}

/// What a batch waits for before the run can go on.
#[derive(Default)]
struct Waiting {
    approvals: Vec<(usize, ApprovalRequest)>,
    inputs: Vec<(usize, InputRequest)>,
}

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Runs a batch of tool calls concurrently; results are appended in call order.
    pub(super) async fn run_tools(&mut self, calls: Vec<crate::message::ToolCall>) -> Result<(), AgentError> {
        // Handoffs first: checks only, no side effects, at most one accepted per batch.
        let mut handed_to: Option<Arc<AgentInner<C, O>>> = None;
        for call in &calls {
            if self.state.pending_results.contains_key(&call.id) {
                continue;
            }
            let Some(handoff) = self
                .env
                .agent
                .handoffs
                .iter()
                .find(|h| h.tool_name == call.name)
                .cloned()
            else {
                continue;
            };
            let outcome = if !handoff.is_enabled(&self.env.ctx) {
                Err(ToolError::new(ToolErrorKind::NotFound, "unknown_tool")
                    .with_message(format!("the handoff {} is not available now", call.name)))
            } else if handed_to.is_some() {
                Err(ToolError::new(ToolErrorKind::Rejected, "handoff_already_done")
                    .with_message("the conversation was already handed over in this turn"))
            } else {
                handoff.accept(&self.env.ctx, &call.arguments)
            };
            let (content, is_error) = match outcome {
                Ok(()) => {
                    handed_to = Some(Arc::clone(&handoff.target.inner));
                    (
                        serde_json::json!({"transferred_to": handoff.target.name()}).to_string(),
                        false,
                    )
                }
                Err(e) => (e.model_content(true), true),
            };
            self.state.pending_results.insert(
                call.id.clone(),
                Message::tool_result(call.id.clone(), call.name.clone(), content, is_error),
            );
        }
        self.run_batch(&calls, false, |env, _state, call, report| {
            let (content, is_error) = match report.outcome {
                ToolCallOutcome::Ok(value) => (env.result_content(&call.name, value), false),
                ToolCallOutcome::Err(e) => (vec![ContentPart::text(e.model_content(true))], true),
            };
            Message::tool_result_parts(call.id.clone(), call.name.clone(), content, is_error)
        })
        .await?;
        for call in &calls {
            if let Some(m) = self.state.pending_results.remove(&call.id) {
                self.state.messages.push(m);
            }
        }
        if let Some(target) = handed_to {
            let from = self.env.agent.name.clone();
            let to = target.name.clone();
            self.env.agent = target;
            self.kept = Default::default();
            self.env.ctx = self.env.ctx.with_agent_name(to.clone());
            self.state.active_agent = Some(to.clone());
            self.open_tools().await?;
            if self.env.emitter.active() {
                self.env
                    .emitter
                    .emit(AgentEvent::Handoff {
                        run_id: self.env.ctx.run_id().to_owned(),
                        from,
                        to,
                    })
                    .await;
            }
        }
        self.checkpoint().await
    }

    /// Runs the calls of a batch that have no result yet, concurrently, through the tool gate;
    /// `finished` turns each call's report into its tool message (and may record more in the
    /// state), which waits in `pending_results` until the caller takes the batch in call order.
    /// The state is checkpointed after each finished call while others still run. Calls that
    /// need approval pause the run (`AgentError::Interrupted`) once the rest finished. With
    /// `sanitized` (strict policy) events carry arguments with secret keys masked.
    pub(super) async fn run_batch<F>(
        &mut self,
        calls: &[crate::message::ToolCall],
        sanitized: bool,
        mut finished: F,
    ) -> Result<(), AgentError>
    where
        F: FnMut(&Env<C, O>, &mut RunState, &crate::message::ToolCall, CallReport) -> Message,
    {
        self.state.interruptions.clear();
        self.state.input_requests.clear();
        // The gate reads decisions while `finished` writes the state: it gets its own copies.
        let decisions = self.state.decisions.clone();
        let always_approved = self.state.always_approved.clone();
        let nested = self.state.nested.clone();
        let inputs = self.state.inputs.clone();
        let mut waiting = Waiting::default();
        {
            let env = &self.env;
            let state = &mut self.state;
            let gate = ApprovalGate {
                offered: self.offered.as_ref(),
                decisions: &decisions,
                always_approved: &always_approved,
                nested: &nested,
                allowed: self.allowed.as_ref(),
                inputs: &inputs,
            };
            let mut pending = calls
                .iter()
                .enumerate()
                .filter(|(_, c)| !state.pending_results.contains_key(&c.id));
            let first = pending.next();
            let second = pending.next();
            match (first, second) {
                (None, _) => {}
                // One call (the common case): awaited in place, no task set to allocate.
                (Some((index, call)), None) => {
                    if let Some(result) = env.run_tool_unless_cancelled(call, gate, sanitized).await
                        && record(env, state, calls, index, result, &mut finished, &mut waiting)?
                        && !sanitized
                    {
                        result_to_stream(env, state, call).await;
                    }
                }
                (Some(first), Some(second)) => {
                    let mut running: FuturesUnordered<_> = [first, second]
                        .into_iter()
                        .chain(pending)
                        .map(|(index, call)| async move {
                            (index, env.run_tool_unless_cancelled(call, gate, sanitized).await)
                        })
                        .collect();
                    while let Some((index, result)) = running.next().await {
                        let Some(result) = result else { continue };
                        let done = record(env, state, calls, index, result, &mut finished, &mut waiting)?;
                        if done && !sanitized {
                            result_to_stream(env, state, &calls[index]).await;
                        }
                        if done && env.agent.checkpoints.is_some() && !running.is_empty() {
                            save_checkpoint(env, state).await?;
                        }
                    }
                }
            }
        }
        if self.env.cancelled() {
            // The calls that finished keep their results (in the checkpoint the run's end
            // writes); the aborted ones run again on resume.
            return Err(AgentError::Cancelled);
        }
        if waiting.approvals.is_empty() && waiting.inputs.is_empty() {
            return Ok(());
        }
        waiting.approvals.sort_by_key(|(index, _)| *index);
        waiting.inputs.sort_by_key(|(index, _)| *index);
        let requests: Vec<ApprovalRequest> = waiting.approvals.into_iter().map(|(_, r)| r).collect();
        let input_requests: Vec<InputRequest> = waiting.inputs.into_iter().map(|(_, r)| r).collect();
        if self.env.emitter.active() {
            for r in &input_requests {
                self.env
                    .emitter
                    .emit(AgentEvent::InputRequested {
                        run_id: self.env.ctx.run_id().to_owned(),
                        request: r.clone(),
                    })
                    .await;
            }
            for r in &requests {
                let mut shown = r.clone();
                if sanitized {
                    // Events get the arguments with secret keys masked; the result's
                    // `interruptions` keep them, for the person who decides.
                    shown.arguments = crate::canonical::mask_arguments(&shown.arguments);
                    for value in shown.metadata.values_mut() {
                        *value = crate::canonical::mask_arguments(value);
                    }
                }
                self.env
                    .emitter
                    .emit(AgentEvent::ApprovalRequested {
                        run_id: self.env.ctx.run_id().to_owned(),
                        request: shown,
                    })
                    .await;
            }
        }
        self.state.interruptions = requests;
        self.state.input_requests = input_requests;
        self.checkpoint().await?;
        Err(AgentError::Interrupted {
            pending: self.state.interruptions.len() + self.state.input_requests.len(),
        })
    }
}

/// Sends a finished call's result to the caller's stream ([`AgentEvent::ToolCallResult`]).
async fn result_to_stream<C, O>(env: &Env<C, O>, state: &RunState, call: &crate::message::ToolCall)
where
    C: Send + Sync + 'static,
{
    if !env.emitter.has_stream() {
        return;
    }
    if let Some(message) = state.pending_results.get(&call.id) {
        env.emitter
            .emit_to_stream(AgentEvent::ToolCallResult {
                run_id: env.ctx.run_id().to_owned(),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                content: message.text(),
                is_error: message.is_error,
            })
            .await;
    }
}

/// Records one finished call of a batch: its tool message waits in `pending_results`, an
/// approval request or a nested pause in `waiting`. `true` when the call has its result.
fn record<C, O, F>(
    env: &Env<C, O>,
    state: &mut RunState,
    calls: &[crate::message::ToolCall],
    index: usize,
    result: Result<RawToolRun, AgentError>,
    finished: &mut F,
    waiting: &mut Waiting,
) -> Result<bool, AgentError>
where
    F: FnMut(&Env<C, O>, &mut RunState, &crate::message::ToolCall, CallReport) -> Message,
{
    let call = &calls[index];
    match result? {
        RawToolRun::Done(report) => {
            let message = finished(env, state, call, report);
            state.nested.remove(&call.id);
            state.pending_results.insert(call.id.clone(), message);
            state.usage = env.ctx.usage();
            if env.keeps_state() {
                state.usage_by_model = env.ctx.usage_by_model();
            }
            Ok(true)
        }
        RawToolRun::NeedsApproval(request) => {
            waiting.approvals.push((index, request));
            Ok(false)
        }
        RawToolRun::NeedsInput(request) => {
            waiting.inputs.push((index, request));
            Ok(false)
        }
        RawToolRun::Nested(pause) => {
            for request in pause.parent_requests(&call.id) {
                waiting.approvals.push((index, request));
            }
            state.nested.insert(call.id.clone(), pause);
            Ok(false)
        }
    }
}

impl<C, O> Env<C, O>
where
    C: Send + Sync + 'static,
{
    /// Whether the run's cancel token (if any) is cancelled.
    pub(super) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|t| t.is_cancelled())
    }

    /// [`Env::run_tool_raw`], abandoned (`None`) when the run is cancelled first, unless the
    /// tool is `blocking` (its work cannot be stopped, so the call finishes and is recorded).
    async fn run_tool_unless_cancelled(
        &self,
        call: &crate::message::ToolCall,
        gate: ApprovalGate<'_>,
        sanitized: bool,
    ) -> Option<Result<RawToolRun, AgentError>> {
        let run = self.run_tool_raw(call, gate, sanitized);
        let blocking = self.tools.get(&call.name).is_some_and(|t| t.entry.tool.spec().blocking);
        match self.cancel.as_ref().filter(|_| !blocking) {
            None => Some(run.await),
            Some(token) => tokio::select! {
                result = run => Some(result),
                () = token.cancelled() => None,
            },
        }
    }

    /// One tool call: lookup, argument checks, approval, authorization, execution with timeout
    /// and retry, events; reported in detail (failures are data the caller turns into a tool
    /// message; only the run's own deadline ends the run). With `sanitized` (strict policy) the
    /// events carry the arguments with secret keys masked and errors without their message.
    pub(super) async fn run_tool_raw(
        &self,
        call: &crate::message::ToolCall,
        gate: ApprovalGate<'_>,
        sanitized: bool,
    ) -> Result<RawToolRun, AgentError> {
        let started = Instant::now();
        let offered = gate.offered;
        let refused = Refusal::Error;
        let checked: Result<(&VisibleTool<C>, serde_json::Value), Refusal> = (|| {
            let tool = self
                .tools
                .get(&call.name)
                .filter(|_| offered.is_none_or(|o| o.contains(&call.name)))
                .filter(|t| t.entry.tool.is_enabled(&self.ctx))
                .ok_or_else(|| {
                    let available: Vec<&str> = self
                        .definitions
                        .iter()
                        .map(|d| d.name.as_str())
                        .filter(|n| offered.is_none_or(|o| o.contains(n)))
                        .filter(|n| self.tool_enabled(n))
                        .collect();
                    refused(
                        ToolError::new(ToolErrorKind::NotFound, "unknown_tool").with_message(format!(
                            "there is no tool named {:?}; available tools: {}",
                            call.name,
                            available.join(", ")
                        )),
                    )
                })?;
            let args = call.parse_arguments().map_err(|e| {
                refused(ToolError::validation(
                    "invalid_json",
                    format!("the arguments are not valid JSON ({e}); send a JSON object"),
                ))
            })?;
            let problems = tool.entry.validator.problems(&args);
            if !problems.is_empty() {
                return Err(refused(ToolError::validation(
                    "invalid_arguments",
                    format!("the arguments do not fit the tool's schema: {}", problems.join("; ")),
                )));
            }
            if let Some(allowed) = gate.allowed {
                let identity = tool.entry.tool.identity(&args);
                if !allowed.contains(identity.as_ref()) {
                    return Err(refused(
                        ToolError::new(ToolErrorKind::NotFound, "tool_not_allowed").with_message(format!(
                            "{identity} is not among the tools allowed now; allowed: {}",
                            allowed.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
                        )),
                    ));
                }
            }
            // A decision recorded for this call (approve, approve_always or reject) binds it,
            // whatever `needs_approval` says now: the predicate is asked only for calls nobody
            // decided yet, each time such a call reaches the gate (first run and resumes).
            let recorded = gate.decisions.get(&call.id);
            let decision = match recorded {
                Some(d) => Some(d.clone()),
                None if tool.entry.tool.needs_approval(&self.ctx, &args) => {
                    // Decisions that cover a whole tool use the tool's identity (for a meta tool
                    // such as MCP's mcp_call_tool, the external tool), not the called name.
                    let request = tool.entry.tool.approval_request(&call.id, &args);
                    let in_code = self.ctx.tool_decision(&request.tool_name).map(|d| match d {
                        Ok(()) => ApprovalDecision::Approved,
                        Err(message) => ApprovalDecision::Rejected { message },
                    });
                    let always = gate
                        .always_approved
                        .contains(&request.tool_name)
                        .then_some(ApprovalDecision::Approved);
                    match always.or(in_code) {
                        Some(d) => Some(d),
                        None => return Err(Refusal::Approval(request)),
                    }
                }
                None => None,
            };
            if let Some(ApprovalDecision::Rejected { message }) = decision {
                return Err(refused(
                    ToolError::new(ToolErrorKind::Rejected, "rejected_by_user").with_message(
                        message.unwrap_or_else(|| "a person rejected this call; do not retry it".to_owned()),
                    ),
                ));
            }
            // Authorization comes last, right before execution (after approval), on the tool
            // that really runs (a meta tool's external tool).
            self.agent
                .authorizer
                .authorize(self.ctx.user(), &tool.entry.tool.identity(&args))
                .map_err(refused)?;
            Ok((tool, args))
        })();
        // A call whose nested run paused earlier goes on only when every one of the nested
        // calls has a decision; it then resumes the nested run with them.
        let mut nested_resume = None;
        if let (Ok(_), Some(pause)) = (&checked, gate.nested.get(&call.id)) {
            let mut decisions = Vec::with_capacity(pause.requests.len());
            for r in &pause.requests {
                match gate.decisions.get(&nested_call_id(&call.id, &r.call_id)) {
                    Some(d) => decisions.push((
                        r.call_id.clone(),
                        d.clone(),
                        gate.always_approved.contains(&r.tool_name),
                    )),
                    None if gate.always_approved.contains(&r.tool_name) => {
                        decisions.push((r.call_id.clone(), ApprovalDecision::Approved, true))
                    }
                    None => return Ok(RawToolRun::Nested(pause.clone())),
                }
            }
            nested_resume = Some(NestedResume {
                pause: pause.clone(),
                decisions,
            });
        }

        let (outcome, attempts, validated, identity) = match checked {
            Err(Refusal::Approval(request)) => return Ok(RawToolRun::NeedsApproval(request)),
            Err(Refusal::Error(error)) => {
                let identity = self
                    .tools
                    .get(&call.name)
                    .zip(call.parse_arguments().ok())
                    .map_or_else(|| call.name.clone(), |(t, a)| t.entry.tool.identity(&a).into_owned());
                (ToolCallOutcome::Err(error), 0, None, identity)
            }
            Ok((tool, args)) => {
                let identity = tool.entry.tool.identity(&args).into_owned();
                if self.emitter.active() {
                    self.emitter
                        .emit(AgentEvent::ToolCallStarted {
                            run_id: self.ctx.run_id().to_owned(),
                            call_id: call.id.clone(),
                            tool: identity.clone(),
                            arguments: if sanitized {
                                crate::canonical::mask_arguments(&args)
                            } else {
                                args.clone()
                            },
                        })
                        .await;
                }
                // The arguments as the tool sees them (defaults in, nulls out): only a strict
                // run's trace keeps them.
                let effective = self
                    .traces_arguments()
                    .then(|| crate::canonical::effective_arguments(&tool.entry.tool.spec().parameters, &args));
                let answers = gate.inputs.get(&call.id).cloned().unwrap_or_default();
                let scope = Arc::new(CallScope::new(&call.id, nested_resume, answers));
                let (outcome, attempts) = self.execute(&scope, tool, args).await?;
                self.guardrails_checked(&scope, &call.id).await?;
                if let Some(pause) = scope.take_pause() {
                    return Ok(RawToolRun::Nested(pause));
                }
                if let Some((index, spec)) = scope.take_input() {
                    // Whatever the call returned is discarded: it runs again once answered.
                    return Ok(RawToolRun::NeedsInput(InputRequest::new(
                        call.id.clone(),
                        identity,
                        index,
                        spec,
                    )));
                }
                (outcome, attempts, effective, identity)
            }
        };
        let outcome = outcome.and_then(crate::media::check_tool_value);
        let duration_ms = started.elapsed().as_millis() as u64;
        if self.emitter.active() {
            let error = outcome.as_ref().err().map(|e| {
                if sanitized {
                    let mut shown = e.clone();
                    shown.message = None;
                    shown
                } else {
                    e.clone()
                }
            });
            self.emitter
                .emit(AgentEvent::ToolCallFinished {
                    run_id: self.ctx.run_id().to_owned(),
                    call_id: call.id.clone(),
                    tool: identity.clone(),
                    ok: error.is_none(),
                    attempts,
                    duration_ms,
                    error,
                })
                .await;
        }
        Ok(RawToolRun::Done(CallReport {
            outcome,
            attempts,
            validated,
            identity,
            duration_ms,
        }))
    }

    /// Runs an admitted call through the function stack within the run's deadline; returns
    /// its outcome and how often the tool was called.
    pub(super) async fn execute(
        &self,
        scope: &Arc<CallScope>,
        tool: &VisibleTool<C>,
        args: serde_json::Value,
    ) -> Result<(ToolCallOutcome, u32), AgentError> {
        let mut invocation = ToolInvocation {
            call_id: scope.call_id.clone(),
            tool_name: tool.entry.tool.spec().name.clone(),
            arguments: args,
            ctx: self.ctx.for_call(Arc::clone(scope)),
            tool: Arc::clone(&tool.entry.tool),
            extensions: crate::model::Extensions::default(),
        };
        invocation.extensions.deadline = self.deadline;
        let span = super::spans::tool(&invocation.tool_name, &scope.call_id);
        let call = tower::ServiceExt::oneshot(self.agent.function_service.clone(), invocation);
        let outcome =
            super::spans::tool_call(span, with_deadline(self.deadline, self.agent.limits.timeout, call)).await?;
        // A call a user layer answered without calling the tool counts as one attempt.
        let attempts = scope.attempts.load(std::sync::atomic::Ordering::Relaxed);
        Ok((outcome, attempts.max(1)))
    }
}
