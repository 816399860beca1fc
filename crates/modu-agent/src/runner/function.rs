//! The function stack, built once when the agent is built:
//!
//! ```text
//! user function layers → ToolRetryLayer → ToolTimeoutLayer → CallTool → Tool::call
//! ```
//!
//! The run puts its deadline in [`ToolInvocation::extensions`] (its `deadline` slot); attempts
//! are counted in the call's scope (its context). User layers see one invocation per call,
//! and the retry layer below them repeats only the tool.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use futures::future::{BoxFuture, Either};
use tokio::time::Instant;
use tower::{Layer, Service};

use super::chat::retry_wait;
use crate::agent::RetryConfig;
use crate::guardrail::{GuardrailKind, ToolGuardrail, ToolVerdict};
use crate::middleware::{CallTool, FunctionLayerFn, FunctionService, ToolInvocation};
use crate::tool::{RecoveryAction, ToolError, ToolErrorKind};
use crate::tripwire::Checked;

/// Builds the function stack.
pub(crate) fn stack<C: Send + Sync + 'static>(
    user_layers: &[FunctionLayerFn<C>],
    guardrails: &[Arc<dyn ToolGuardrail<C>>],
    retry: &RetryConfig,
) -> FunctionService<C> {
    let retry = tower::retry::RetryLayer::new(ToolRetry {
        config: Arc::new(retry.clone()),
        attempt: 1,
    });
    let inner = retry.layer(ToolTimeout { inner: CallTool });
    let guarded = if guardrails.is_empty() {
        FunctionService::new(inner)
    } else {
        FunctionService::new(ToolGuard {
            guardrails: guardrails.into(),
            inner: FunctionService::new(inner),
        })
    };
    crate::middleware::apply(guarded, user_layers)
}

/// The tool guardrails: the arguments are checked before the call's attempts, the result after
/// them; every check is recorded in the call's scope (the gate emits them and ends the run on a
/// tripwire).
struct ToolGuard<C: Send + Sync + 'static> {
    guardrails: Arc<[Arc<dyn ToolGuardrail<C>>]>,
    inner: FunctionService<C>,
}

impl<C: Send + Sync + 'static> Clone for ToolGuard<C> {
    fn clone(&self) -> Self {
        ToolGuard {
            guardrails: Arc::clone(&self.guardrails),
            inner: self.inner.clone(),
        }
    }
}

/// What one check decided for the call: go on, or answer with this result now.
fn judge(
    scope: Option<&Arc<crate::context::CallScope>>,
    guardrail: &str,
    kind: GuardrailKind,
    verdict: ToolVerdict,
) -> Option<Result<serde_json::Value, ToolError>> {
    let (tripped, replaced, answer) = match verdict {
        ToolVerdict::Pass => (None, false, None),
        ToolVerdict::Trip(tripwire) => {
            let refusal = ToolError::new(ToolErrorKind::Rejected, "guardrail_tripped")
                .with_message(format!("the guardrail {guardrail} stopped this call"));
            (Some(tripwire), false, Some(Err(refusal)))
        }
        ToolVerdict::Replace(text) => (None, true, Some(Ok(serde_json::Value::String(text)))),
    };
    if let Some(scope) = scope {
        scope.record_guardrail(Checked {
            guardrail: guardrail.to_owned(),
            kind,
            tripped,
            replaced,
        });
    }
    answer
}

impl<C: Send + Sync + 'static> Service<ToolInvocation<C>> for ToolGuard<C> {
    type Response = serde_json::Value;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<serde_json::Value, ToolError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, invocation: ToolInvocation<C>) -> Self::Future {
        // The ready service answers this call; a fresh clone waits for the next one.
        let fresh = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, fresh);
        let guardrails = Arc::clone(&self.guardrails);
        Box::pin(async move {
            let ctx = invocation.ctx.clone();
            let scope = ctx.call_scope();
            let tool = invocation.tool_name.clone();
            for g in guardrails.iter() {
                let verdict = g.check_arguments(&ctx, &tool, &invocation.arguments).await;
                if let Some(answer) = judge(scope, g.name(), GuardrailKind::ToolArguments, verdict) {
                    return answer;
                }
            }
            let mut inner = inner;
            let value = inner.call(invocation).await?;
            for g in guardrails.iter() {
                let verdict = g.check_result(&ctx, &tool, &value).await;
                if let Some(answer) = judge(scope, g.name(), GuardrailKind::ToolResult, verdict) {
                    return answer;
                }
            }
            Ok(value)
        })
    }
}

/// Applies the tool's own timeout, unless the run's deadline comes first (then the run's
/// timeout ends the run, outside the stack). Counts attempts.
#[derive(Clone)]
pub(crate) struct ToolTimeout<S> {
    inner: S,
}

impl<C, S> Service<ToolInvocation<C>> for ToolTimeout<S>
where
    C: Send + Sync + 'static,
    S: Service<ToolInvocation<C>, Response = serde_json::Value, Error = ToolError>,
    S::Future: Send + 'static,
{
    type Response = serde_json::Value;
    type Error = ToolError;
    /// The inner call as it is when no timeout of the tool's own applies (no second box).
    type Future = Either<S::Future, BoxFuture<'static, Result<serde_json::Value, ToolError>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, invocation: ToolInvocation<C>) -> Self::Future {
        if let Some(scope) = invocation.ctx.call_scope() {
            scope.attempts.fetch_add(1, Ordering::Relaxed);
            // Each attempt asks from the first answer on.
            scope.restart_inputs();
        }
        let limit = invocation.tool.spec().timeout;
        let deadline = invocation.extensions.deadline;
        let fut = self.inner.call(invocation);
        let Some(limit) = limit else {
            return Either::Left(fut);
        };
        if deadline.is_some_and(|d| d.saturating_duration_since(Instant::now()) < limit) {
            return Either::Left(fut);
        }
        Either::Right(Box::pin(async move {
            match tokio::time::timeout(limit, fut).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::timeout(limit)),
            }
        }))
    }
}

/// The agent's tool retry: an idempotent tool's retryable error is retried (up to
/// `max_attempts` attempts in all, with the backoff), unless the tool classified it as
/// something else than `retry_call`, and never a timed-out blocking tool whose work may still
/// run (its error is marked not retryable, recovery `fail`). A retry whose backoff would end at
/// or past the run's deadline is not made: the error goes to the model as it is.
#[derive(Clone)]
pub(crate) struct ToolRetry {
    config: Arc<RetryConfig>,
    attempt: u32,
}

impl<C> tower::retry::Policy<ToolInvocation<C>, serde_json::Value, ToolError> for ToolRetry {
    type Future = std::pin::Pin<Box<tokio::time::Sleep>>;

    fn retry(
        &mut self,
        invocation: &mut ToolInvocation<C>,
        result: &mut Result<serde_json::Value, ToolError>,
    ) -> Option<Self::Future> {
        let error = result.as_mut().err()?;
        let spec = invocation.tool.spec();
        let uncancellable_timeout = error.kind == ToolErrorKind::Timeout && spec.blocking && !spec.timeout_retry_safe;
        if uncancellable_timeout {
            // The blocking work may still run: never retried, never replanned.
            error.retryable = false;
            error.recovery = Some(RecoveryAction::Fail);
            return None;
        }
        let retry_wanted = error.recovery.is_none_or(|r| r == RecoveryAction::RetryCall);
        if !(spec.idempotent && error.retryable && retry_wanted && self.attempt < self.config.max_attempts) {
            return None;
        }
        let wait = self.config.wait(self.attempt);
        let sleep = retry_wait(invocation.extensions.deadline, wait)?;
        self.attempt += 1;
        Some(sleep)
    }

    fn clone_request(&mut self, invocation: &ToolInvocation<C>) -> Option<ToolInvocation<C>> {
        // Only an idempotent tool is ever called again, and only a blocking tool's timeout needs
        // `retry` to mark it final: the others need no copy (without one, tower skips `retry`).
        let spec = invocation.tool.spec();
        (spec.idempotent || spec.blocking).then(|| invocation.clone())
    }
}
