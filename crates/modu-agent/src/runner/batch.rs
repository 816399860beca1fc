//! A tool batch: the calls of one model answer, run concurrently through the gate
//! ([`super::gate`]), their results recorded in call order, with a checkpoint after each finished
//! call while others still run, and the run paused for the approvals and inputs they wait for.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::gate::{ApprovalGate, RawToolRun};
use super::journal::save_checkpoint;
use super::policy::{CallReport, ToolCallOutcome, View};
use super::state::RunState;
use super::{Env, Run};
use crate::agent::AgentInner;
use crate::approval::ApprovalRequest;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::input::InputRequest;
use crate::message::{ContentPart, Message};
use crate::tool::{ToolError, ToolErrorKind};

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
            if let Some(done) = self.state.pending_results.get(&call.id) {
                // Accepted before the batch paused (or was cancelled, or its worker died): the
                // model was told of the transfer, so it is still due once the batch ends.
                if !done.is_error && handed_to.is_none() {
                    handed_to = Some(Arc::clone(&handoff.target.inner));
                }
                continue;
            }
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
            self.answer_with(target);
            self.state.active_agent = Some(to.clone());
            // The agent handing over takes its providers' tools with it: the target is offered
            // its own (and may open the same provider again). Its sessions close with the run's.
            let handed_over = std::mem::take(&mut self.sessions);
            self.retired.sessions.extend(handed_over);
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
        let was_paused = !self.state.interruptions.is_empty() || !self.state.input_requests.is_empty();
        self.state.interruptions.clear();
        self.state.input_requests.clear();
        if was_paused {
            // A resumed pause goes on: its checkpoint says so before the decided calls run, so a
            // worker that dies in one leaves a `running` run for `recover_orphans`, and a
            // decision arriving now is refused (its call no longer waits).
            self.checkpoint().await?;
        }
        let mut waiting = Waiting::default();
        {
            // The gate reads decisions while `finished` writes the state: it gets its own copies.
            let decisions = self.state.decisions.clone();
            let always_approved = self.state.always_approved.clone();
            let nested = self.state.nested.clone();
            let inputs = self.state.inputs.clone();
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
                    // Not an `if let` chain: its scrutinee (the call's result) would stay in this
                    // future's state while the result goes to the stream.
                    let done = match env.run_tool_unless_cancelled(call, gate, sanitized).await {
                        Some(result) => record(env, state, calls, index, result, &mut finished, &mut waiting)?,
                        None => false,
                    };
                    if done && !sanitized {
                        result_to_stream(env, state, call).await;
                    }
                }
                (Some(first), Some(second)) => {
                    let running: FuturesUnordered<_> = [first, second]
                        .into_iter()
                        .chain(pending)
                        .map(|(index, call)| async move {
                            (index, env.run_tool_unless_cancelled(call, gate, sanitized).await)
                        })
                        .collect();
                    drain_batch(env, state, calls, running, sanitized, &mut finished, &mut waiting).await?;
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
        // Boxed: a batch waits for people rarely, and its events and checkpoint would otherwise
        // take room in the state of every batch.
        Box::pin(self.pause_batch(waiting, sanitized)).await
    }

    /// Pauses the run for the approvals and inputs a batch waits for: their events, the
    /// checkpoint that keeps them, and `AgentError::Interrupted`.
    async fn pause_batch(&mut self, mut waiting: Waiting, sanitized: bool) -> Result<(), AgentError> {
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

/// Records each call of a concurrent batch as it finishes (see [`Run::run_batch`]), with a
/// checkpoint after each while others still run. Its own function: in `run_batch` its locals
/// would take room in the state of every batch, one-call batches included.
async fn drain_batch<C, O, F, Fut>(
    env: &Env<C, O>,
    state: &mut RunState,
    calls: &[crate::message::ToolCall],
    mut running: FuturesUnordered<Fut>,
    sanitized: bool,
    finished: &mut F,
    waiting: &mut Waiting,
) -> Result<(), AgentError>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
    F: FnMut(&Env<C, O>, &mut RunState, &crate::message::ToolCall, CallReport) -> Message,
    Fut: Future<Output = (usize, Option<Result<RawToolRun, AgentError>>)>,
{
    while let Some((index, result)) = running.next().await {
        let Some(result) = result else { continue };
        let done = record(env, state, calls, index, result, finished, waiting)?;
        if done && !sanitized {
            result_to_stream(env, state, &calls[index]).await;
        }
        if done && env.root.checkpoints.is_some() && !running.is_empty() {
            save_checkpoint(env, state).await?;
        }
    }
    Ok(())
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
