//! Input and output guardrails around the driver's steps ([`crate::guardrail`]): input
//! guardrails with the first model request of a fresh run (concurrently or before it), output
//! guardrails on the accepted final output, which is parsed here (with its one corrective
//! request). Tool guardrails are a layer of the function stack (`function`).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::{BoxFuture, Either};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::chat::with_deadline;
use super::policy::{Answer, Ask, DeltaRoute, Format};
use super::{Env, Run};
use crate::context::CallScope;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::guardrail::{GuardrailMode, check_input, check_output};
use crate::message::Message;
use crate::model::ResponseFormat;
use crate::tripwire::Checked;

/// The input guardrails' checks, running on their own (owned) future.
pub(super) type InputCheck = BoxFuture<'static, Vec<Checked>>;

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Parses the final answer; one corrective request on failure. The answer that parsed
    /// joins the run's messages.
    ///
    /// A final answer's tool calls are dropped: a final answer comes from a request that
    /// offered no tools (an acting answer with calls runs them instead), so they cannot run, and
    /// an assistant message with calls but no results would make every later request of the
    /// session invalid (OpenAI refuses it).
    pub(super) async fn accept_final(
        &mut self,
        mut answer: Message,
        cut: bool,
        format: Option<ResponseFormat>,
        route: DeltaRoute,
    ) -> Result<O, AgentError> {
        drop_calls(&mut answer);
        let first = match self.env.agent.codec.parse(&answer.text()) {
            Ok(output) => {
                self.check_output(&output).await?;
                self.state.messages.push(answer);
                self.cut = cut;
                return Ok(output);
            }
            Err(first) => first,
        };
        let extra = vec![
            answer,
            Message::user(format!(
                "Your answer could not be parsed: {}. Answer again with only a JSON value that fits the required schema.",
                first.message
            )),
        ];
        let ask = Ask::new(crate::context_provider::Stage::Finalize)
            .extra(extra)
            .format(Format::Fixed(format))
            .route(route);
        // Boxed: a corrective request is rare, and in place its future would size the
        // future of every run (this one's state is held beside each step's).
        let answer = Box::pin(self.ask(ask)).await?;
        // An answer cut at the output token limit rarely parses: the error says so.
        let cut = answer.cut();
        let mut message = answer.response.message;
        drop_calls(&mut message);
        match self.env.agent.codec.parse(&message.text()) {
            Ok(output) => {
                self.check_output(&output).await?;
                self.state.messages.push(message);
                self.cut = cut;
                Ok(output)
            }
            Err(second) => Err(AgentError::Output {
                message: second.message + if cut { CUT } else { "" },
            }),
        }
    }

    /// The input guardrails' check of a fresh run, or of a resumed one whose input they have
    /// not passed yet (it stopped before its first request); `None` otherwise.
    pub(super) fn input_check(&self) -> Option<InputCheck> {
        let guardrails = &self.env.agent.guardrails.input;
        if !self.state.input_unchecked || guardrails.is_empty() {
            return None;
        }
        let guardrails = guardrails.clone();
        let ctx = self.env.ctx.clone();
        let input = self.state.messages.clone();
        Some(Box::pin(async move { check_input(&guardrails, &ctx, &input).await }))
    }

    /// A model request, cancelled with the run; with `check`, the request goes with the input
    /// guardrails (or after them, in blocking mode) and its answer counts only once they all
    /// passed. A tripwire that fires first drops the request.
    ///
    /// The guarded request is boxed: its future (two requests and the checks) would otherwise
    /// make every unguarded request's future, and every future around it, twice as large.
    ///
    /// A combinator, not an `async fn`: an `async fn` would keep the request (`ask`) in its own
    /// state beside the request's future, which holds it too.
    pub(super) fn ask_checked(
        &mut self,
        ask: Ask,
        check: Option<InputCheck>,
    ) -> impl Future<Output = Result<Answer, AgentError>> + Send + '_ {
        match check {
            None => Either::Left(self.ask_cancellable(ask)),
            Some(check) => Either::Right(Box::pin(self.ask_guarded(ask, check))),
        }
    }

    async fn ask_guarded(&mut self, ask: Ask, check: InputCheck) -> Result<Answer, AgentError> {
        // Blocking: the checks settle before the request. Either way there is one
        // `ask_cancellable` future below (two would each take their own room in this future's
        // state, which every model request creates and moves).
        let check = if self.env.agent.guardrails.mode == GuardrailMode::Blocking {
            let checks = self.bounded(check).await?;
            self.env.settle(&checks, None).await?;
            self.state.input_unchecked = false;
            None
        } else {
            Some(self.bounded(check))
        };
        let (checks, answer) = {
            let asking = self.ask_cancellable(ask);
            tokio::pin!(asking);
            let Some(check) = check else {
                return (&mut asking).await;
            };
            tokio::pin!(check);
            tokio::select! {
                checks = &mut check => {
                    let checks = checks?;
                    if checks.iter().any(|c| c.tripped.is_some()) {
                        (checks, None)
                    } else {
                        (checks, Some((&mut asking).await))
                    }
                }
                answer = &mut asking => (check.await?, Some(answer)),
            }
        };
        self.env.settle(&checks, None).await?;
        self.state.input_unchecked = false;
        answer.unwrap_or_else(|| {
            Err(AgentError::Configuration {
                message: "the model request ended without an answer".into(),
            })
        })
    }

    /// A model request that ends with `AgentError::Cancelled` when the run is cancelled first.
    fn ask_cancellable(&mut self, ask: Ask) -> impl Future<Output = Result<Answer, AgentError>> + Send + '_ {
        let token = self.env.cancel.clone();
        unless_cancelled(self.ask(ask), token).map(|answer| answer.unwrap_or(Err(AgentError::Cancelled)))
    }

    /// The output guardrails' check of an accepted output (as the codec's JSON).
    pub(super) fn check_output(&self, output: &O) -> impl Future<Output = Result<(), AgentError>> + Send + '_ {
        // The output itself is not held across the checks (`O` need not be `Sync`).
        let json = (!self.env.agent.guardrails.output.is_empty()).then(|| self.env.agent.codec.to_json(output));
        async move {
            match json {
                // Boxed: output guardrails are rare, and their check would size every run's future.
                Some(json) => Box::pin(self.check_output_json(json)).await,
                None => Ok(()),
            }
        }
    }

    async fn check_output_json(&self, json: serde_json::Value) -> Result<(), AgentError> {
        let checks = check_output(&self.env.agent.guardrails.output, &self.env.ctx, &json);
        let checks = self.bounded(checks).await?;
        self.env.settle(&checks, None).await
    }

    /// Guardrail checks within the run's deadline (`Timeout`) and ended by its cancellation
    /// (`Cancelled`), as a model request is: a slow check cannot hold the run past either.
    fn bounded<F: Future<Output = Vec<Checked>>>(
        &self,
        checks: F,
    ) -> impl Future<Output = Result<Vec<Checked>, AgentError>> + use<F, C, O> {
        let checks = unless_cancelled(checks, self.env.cancel.clone());
        with_deadline(self.env.deadline, self.env.agent.limits.timeout, checks)
            .map(|checked| checked.and_then(|c| c.ok_or(AgentError::Cancelled)))
    }
}

impl<C, O> Env<C, O>
where
    C: Send + Sync + 'static,
{
    /// Emits the checks; the first tripwire ends the run.
    pub(super) async fn settle(&self, checks: &[Checked], call_id: Option<&str>) -> Result<(), AgentError> {
        self.guardrail_events(checks, call_id).await;
        match checks.iter().find_map(|c| c.tripped.as_ref().map(|t| (c, t))) {
            Some((c, tripwire)) => Err(AgentError::GuardrailTripped {
                guardrail: c.guardrail.clone(),
                kind: c.kind,
                tripwire: Box::new(tripwire.clone()),
            }),
            None => Ok(()),
        }
    }
}

impl<C, O> Env<C, O>
where
    C: Send + Sync + 'static,
{
    /// Emits the tool guardrails' checks of a call; a tripwire ends the run.
    pub(super) async fn guardrails_checked(&self, scope: &CallScope, call_id: &str) -> Result<(), AgentError> {
        let checks = scope.take_guardrails();
        if checks.is_empty() {
            return Ok(());
        }
        self.settle(&checks, Some(call_id)).await
    }

    /// One `GuardrailChecked` event per check.
    pub(super) async fn guardrail_events(&self, checks: &[Checked], call_id: Option<&str>) {
        if !self.emitter.active() {
            return;
        }
        for c in checks {
            self.emitter
                .emit(AgentEvent::GuardrailChecked {
                    run_id: self.ctx.run_id().to_owned(),
                    guardrail: c.guardrail.clone(),
                    kind: c.kind,
                    call_id: call_id.map(str::to_owned),
                    tripped: c.tripped.is_some(),
                    replaced: c.replaced,
                    code: c.tripped.as_ref().map(|t| t.code.clone()),
                })
                .await;
        }
    }
}

pin_project_lite::pin_project! {
    /// `future`, ended early (with `None`) when `cancelled` fires first: what `tokio::select!`
    /// over the two does, without an `async` block's state keeping a second copy of `future`.
    /// A token cancelled before the start ends it unpolled (its work is not begun); later, a
    /// future and a cancellation that are ready together give the future's output (as
    /// tokio-util's `run_until_cancelled`).
    pub(super) struct UnlessCancelled<F> {
        #[pin]
        future: F,
        #[pin]
        cancelled: Option<WaitForCancellationFutureOwned>,
        already: bool,
    }
}

/// `future`, cancelled by `token` when there is one (see [`UnlessCancelled`]).
pub(super) fn unless_cancelled<F: Future>(future: F, token: Option<CancellationToken>) -> UnlessCancelled<F> {
    UnlessCancelled {
        future,
        already: token.as_ref().is_some_and(CancellationToken::is_cancelled),
        cancelled: token.map(CancellationToken::cancelled_owned),
    }
}

impl<F: Future> Future for UnlessCancelled<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if *this.already {
            return Poll::Ready(None);
        }
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Some(output));
        }
        match this.cancelled.as_pin_mut().map(|cancelled| cancelled.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(None),
            _ => Poll::Pending,
        }
    }
}

/// What an unparsable corrective answer's error adds when the answer was cut.
const CUT: &str = " (the answer was cut at the output token limit, finish reason `length`: raise max_tokens)";

/// Drops the tool calls of an answer to a request that offered no tools (see
/// [`Run::accept_final`]).
fn drop_calls(answer: &mut Message) {
    if answer.has_tool_calls() {
        tracing::debug!(
            calls = answer.tool_calls.len(),
            "a final answer called tools its request did not offer; dropped"
        );
        answer.tool_calls.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn without_a_token_the_future_runs_to_its_end() {
        assert_eq!(unless_cancelled(async { 7 }, None).await, Some(7));
    }

    #[tokio::test]
    async fn a_token_cancelled_before_the_start_leaves_the_work_unbegun() {
        let token = CancellationToken::new();
        token.cancel();
        let polled = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&polled);
        let work = async move {
            seen.store(true, Ordering::SeqCst);
            7
        };
        assert_eq!(unless_cancelled(work, Some(token)).await, None);
        assert!(!polled.load(Ordering::SeqCst), "the work was started");
    }

    #[tokio::test]
    async fn a_cancellation_ends_a_pending_future() {
        let token = CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            cancel.cancel();
        });
        let never = std::future::pending::<u32>();
        assert_eq!(unless_cancelled(never, Some(token)).await, None);
    }

    #[tokio::test]
    async fn an_output_ready_with_the_cancellation_is_kept() {
        let token = CancellationToken::new();
        let ready = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&ready);
        let work = std::future::poll_fn(move |_| {
            if done.load(Ordering::SeqCst) {
                Poll::Ready(7)
            } else {
                Poll::Pending
            }
        });
        let mut running = std::pin::pin!(unless_cancelled(work, Some(token.clone())));
        assert!(futures::poll!(running.as_mut()).is_pending());
        // Both are ready when it is polled again: the output wins.
        token.cancel();
        ready.store(true, Ordering::SeqCst);
        assert_eq!(running.await, Some(7));
    }
}
