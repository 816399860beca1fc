//! Input and output guardrails around the driver's steps ([`crate::guardrail`]): input
//! guardrails with the first model request of a fresh run (concurrently or before it), output
//! guardrails on the accepted final output. Tool guardrails are a layer of the function stack
//! (`function`).

use futures::future::BoxFuture;

use super::policy::{Answer, Ask};
use super::{Env, Run};
use crate::context::CallScope;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::guardrail::{GuardrailMode, check_input, check_output};
use crate::tripwire::Checked;

/// The input guardrails' checks, running on their own (owned) future.
pub(super) type InputCheck = BoxFuture<'static, Vec<Checked>>;

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// The input guardrails' check of a fresh run, `None` for a resumed run or an agent
    /// without input guardrails.
    pub(super) fn input_check(&self) -> Option<InputCheck> {
        let guardrails = &self.env.agent.guardrails.input;
        if self.resumed || guardrails.is_empty() {
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
    pub(super) async fn ask_checked(&mut self, ask: Ask, check: Option<InputCheck>) -> Result<Answer, AgentError> {
        match check {
            None => self.ask_cancellable(ask).await,
            Some(check) => Box::pin(self.ask_guarded(ask, check)).await,
        }
    }

    async fn ask_guarded(&mut self, ask: Ask, check: InputCheck) -> Result<Answer, AgentError> {
        // Blocking: the checks settle before the request. Either way there is one
        // `ask_cancellable` future below (two would each take their own room in this future's
        // state, which every model request creates and moves).
        let check = if self.env.agent.guardrails.mode == GuardrailMode::Blocking {
            let checks = check.await;
            self.env.settle(&checks, None).await?;
            None
        } else {
            Some(check)
        };
        let (checks, answer) = {
            let asking = self.ask_cancellable(ask);
            tokio::pin!(asking);
            let Some(mut check) = check else {
                return (&mut asking).await;
            };
            tokio::select! {
                checks = &mut check => {
                    if checks.iter().any(|c| c.tripped.is_some()) {
                        (checks, None)
                    } else {
                        (checks, Some((&mut asking).await))
                    }
                }
                answer = &mut asking => (check.await, Some(answer)),
            }
        };
        self.env.settle(&checks, None).await?;
        answer.unwrap_or_else(|| {
            Err(AgentError::Configuration {
                message: "the model request ended without an answer".into(),
            })
        })
    }

    async fn ask_cancellable(&mut self, ask: Ask) -> Result<Answer, AgentError> {
        match self.env.cancel.clone() {
            None => self.ask(ask).await,
            Some(token) => tokio::select! {
                answer = self.ask(ask) => answer,
                () = token.cancelled() => Err(AgentError::Cancelled),
            },
        }
    }

    /// The output guardrails' check of an accepted output (as the codec's JSON).
    pub(super) fn check_output(&self, output: &O) -> impl Future<Output = Result<(), AgentError>> + Send + '_ {
        // The output itself is not held across the checks (`O` need not be `Sync`).
        let json = (!self.env.agent.guardrails.output.is_empty()).then(|| self.env.agent.codec.to_json(output));
        async move {
            match json {
                Some(json) => self.check_output_json(json).await,
                None => Ok(()),
            }
        }
    }

    async fn check_output_json(&self, json: serde_json::Value) -> Result<(), AgentError> {
        let checks = check_output(&self.env.agent.guardrails.output, &self.env.ctx, &json).await;
        self.env.settle(&checks, None).await
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
                tripwire: tripwire.clone(),
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
