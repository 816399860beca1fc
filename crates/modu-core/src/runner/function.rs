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

use futures::future::BoxFuture;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::chat::retry_wait;
use crate::agent::RetryConfig;
use crate::middleware::{CallTool, FunctionLayerFn, FunctionService, ToolInvocation};
use crate::tool::{RecoveryAction, ToolError, ToolErrorKind};

/// Builds the function stack.
pub(crate) fn stack<C: Send + Sync + 'static>(
    user_layers: &[FunctionLayerFn<C>],
    retry: &RetryConfig,
) -> FunctionService<C> {
    let retry = tower::retry::RetryLayer::new(ToolRetry {
        config: Arc::new(retry.clone()),
        attempt: 1,
    });
    let inner = retry.layer(ToolTimeout { inner: CallTool });
    crate::middleware::apply(FunctionService::new(inner), user_layers)
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
    type Future = BoxFuture<'static, Result<serde_json::Value, ToolError>>;

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
            return Box::pin(fut);
        };
        if deadline.is_some_and(|d| d.saturating_duration_since(Instant::now()) < limit) {
            return Box::pin(fut);
        }
        Box::pin(async move {
            match tokio::time::timeout(limit, fut).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::timeout(limit)),
            }
        })
    }
}

/// The agent's tool retry: an idempotent tool's retryable error is retried (up to
/// `max_attempts` attempts in all, with the backoff), unless the tool classified it as
/// something else than `retry_call`, and never a timed-out blocking tool whose work may still
/// run (its error is marked not retryable, recovery `fail`).
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
        self.attempt += 1;
        Some(retry_wait(invocation.extensions.deadline, wait))
    }

    fn clone_request(&mut self, invocation: &ToolInvocation<C>) -> Option<ToolInvocation<C>> {
        // Only an idempotent tool is ever called again, and only a blocking tool's timeout needs
        // `retry` to mark it final: the others need no copy (without one, tower skips `retry`).
        let spec = invocation.tool.spec();
        (spec.idempotent || spec.blocking).then(|| invocation.clone())
    }
}
