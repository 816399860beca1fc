//! The tool gate: one tool call admitted (lookup, JSON, schema, the approval decision, RBAC)
//! and executed through the function stack (user function layers, then the tool's timeout and
//! retries). A batch of them is `batch`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::time::Instant;

use super::chat::with_deadline;
use super::policy::{CallReport, ToolCallOutcome};
use super::{Env, VisibleTool};
use crate::approval::{ApprovalDecision, ApprovalRequest, NestedPause, NestedResume, nested_call_id};
use crate::context::CallScope;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::input::{InputAnswer, InputRequest};
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
    /// Boxed: a request carries the call's arguments, rare beside the other outcomes.
    Approval(Box<ApprovalRequest>),
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
    pub(super) fn run_tool_unless_cancelled<'a>(
        &'a self,
        call: &'a crate::message::ToolCall,
        gate: ApprovalGate<'a>,
        sanitized: bool,
    ) -> impl Future<Output = Option<Result<RawToolRun, AgentError>>> + Send + 'a {
        let blocking = self.tools.get(&call.name).is_some_and(|t| t.entry.tool.spec().blocking);
        let token = self.cancel.clone().filter(|_| !blocking);
        super::guard::unless_cancelled(self.run_tool_raw(call, gate, sanitized), token)
    }

    /// The synchronous half of the gate: the tool by name (offered and enabled), the arguments
    /// as JSON that fits its schema, the tools allowed now, the approval decision, and RBAC
    /// last, right before execution, on the tool that really runs (a meta tool's external
    /// tool). Each refusal says what was wrong in words the model can act on.
    fn admit<'a>(
        &'a self,
        call: &crate::message::ToolCall,
        gate: ApprovalGate<'_>,
    ) -> Result<(&'a VisibleTool<C>, serde_json::Value), Refusal> {
        let offered = gate.offered;
        let tool = self
            .tools
            .get(&call.name)
            .filter(|_| offered.is_none_or(|o| o.contains(&call.name)))
            .filter(|t| t.entry.tool.is_enabled(&self.ctx))
            .ok_or_else(|| self.unknown_tool(call, offered))?;
        let args = call.parse_arguments().map_err(invalid_json)?;
        let problems = tool.entry.validator.problems(&args);
        if !problems.is_empty() {
            return Err(invalid_arguments(&problems));
        }
        if let Some(allowed) = gate.allowed {
            let identity = tool.entry.tool.identity(&args);
            if !allowed.contains(identity.as_ref()) {
                return Err(not_allowed(&identity, allowed));
            }
        }
        // A decision recorded for this call (approve, approve_always or reject) binds it,
        // whatever `needs_approval` says now: the predicate is asked only for calls nobody
        // decided yet, each time such a call reaches the gate (first run and resumes).
        let decision = match gate.decisions.get(&call.id) {
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
                    None => return Err(Refusal::Approval(Box::new(request))),
                }
            }
            None => None,
        };
        if let Some(ApprovalDecision::Rejected { message }) = decision {
            return Err(rejected(message));
        }
        self.agent
            .authorizer
            .authorize(self.ctx.user(), &tool.entry.tool.identity(&args))
            .map_err(Refusal::Error)?;
        Ok((tool, args))
    }

    /// The refusal of a call to a tool the run does not offer now, naming the ones it does.
    #[cold]
    #[inline(never)]
    fn unknown_tool(&self, call: &crate::message::ToolCall, offered: Option<&super::state::ToolNames>) -> Refusal {
        let available: Vec<&str> = self
            .definitions
            .iter()
            .map(|d| d.name.as_str())
            .filter(|n| offered.is_none_or(|o| o.contains(n)))
            .filter(|n| self.tool_enabled(n))
            .collect();
        Refusal::Error(
            ToolError::new(ToolErrorKind::NotFound, "unknown_tool").with_message(format!(
                "there is no tool named {:?}; available tools: {}",
                call.name,
                available.join(", ")
            )),
        )
    }

    /// One tool call: lookup, argument checks, approval, authorization, execution with timeout
    /// and retry, events; reported in detail (failures are data the caller turns into a tool
    /// message; only the run's own deadline ends the run). With `sanitized` (strict policy) the
    /// events carry the arguments with secret keys masked and errors without their message.
    ///
    /// An `async` block, not an `async fn`: an `async fn` keeps its arguments twice in its
    /// state (as arguments and as the locals its body moves them into).
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep its arguments twice")]
    pub(super) fn run_tool_raw<'a>(
        &'a self,
        call: &'a crate::message::ToolCall,
        gate: ApprovalGate<'a>,
        sanitized: bool,
    ) -> impl Future<Output = Result<RawToolRun, AgentError>> + Send + 'a {
        async move {
            let started = Instant::now();
            // Lookup, checks and approval, synchronous and in a block of their own: what they
            // leave behind is not kept in this future's state while the tool runs.
            let admitted = {
                let checked = self.admit(call, gate);
                // A call whose nested run paused earlier goes on only when every one of the nested
                // calls has a decision; it then resumes the nested run with them.
                let mut nested_resume = None;
                if checked.is_ok()
                    && let Some(pause) = gate.nested.get(&call.id)
                {
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

                match checked {
                    Err(Refusal::Approval(request)) => return Ok(RawToolRun::NeedsApproval(*request)),
                    Err(Refusal::Error(error)) => {
                        let identity = self
                            .tools
                            .get(&call.name)
                            .zip(call.parse_arguments().ok())
                            .map_or_else(|| call.name.clone(), |(t, a)| t.entry.tool.identity(&a).into_owned());
                        Err((ToolCallOutcome::Err(error), 0, None, identity))
                    }
                    Ok((tool, args)) => {
                        let identity = tool.entry.tool.identity(&args).into_owned();
                        // The arguments as the tool sees them (defaults in, nulls out): only a strict
                        // run's trace keeps them.
                        let effective = self.traces_arguments().then(|| {
                            Box::new(crate::canonical::effective_arguments(
                                &tool.entry.tool.spec().parameters,
                                &args,
                            ))
                        });
                        let answers = gate.inputs.get(&call.id).cloned().unwrap_or_default();
                        let scope = Arc::new(CallScope::new(&call.id, nested_resume, answers));
                        Ok((tool, args, identity, effective, scope))
                    }
                }
            };
            let (outcome, attempts, validated, identity) = match admitted {
                Err(refused) => refused,
                Ok((tool, args, identity, effective, scope)) => {
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
            let accepts = self.agent.model.input_modalities();
            let outcome = outcome.and_then(|value| crate::media::check_tool_value(value, accepts));
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

#[cold]
#[inline(never)]
fn invalid_json(error: serde_json::Error) -> Refusal {
    Refusal::Error(ToolError::validation(
        "invalid_json",
        format!("the arguments are not valid JSON ({error}); send a JSON object"),
    ))
}

#[cold]
#[inline(never)]
fn invalid_arguments(problems: &[String]) -> Refusal {
    Refusal::Error(ToolError::validation(
        "invalid_arguments",
        format!("the arguments do not fit the tool's schema: {}", problems.join("; ")),
    ))
}

#[cold]
#[inline(never)]
fn not_allowed(identity: &str, allowed: &BTreeSet<String>) -> Refusal {
    Refusal::Error(
        ToolError::new(ToolErrorKind::NotFound, "tool_not_allowed").with_message(format!(
            "{identity} is not among the tools allowed now; allowed: {}",
            allowed.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
        )),
    )
}

#[cold]
#[inline(never)]
fn rejected(message: Option<String>) -> Refusal {
    Refusal::Error(
        ToolError::new(ToolErrorKind::Rejected, "rejected_by_user")
            .with_message(message.unwrap_or_else(|| "a person rejected this call; do not retry it".to_owned())),
    )
}
