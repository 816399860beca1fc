//! Middleware: tower [`Layer`]s at three places of a run. Each stack is built once, when the
//! agent is built.
//!
//! ```text
//! Agent::run / stream / resume
//!   └─ agent middleware      Service<AgentRequest<C>> → RunOutcome<O>   (around every run, resumed ones too)
//!       └─ run loop
//!           ├─ chat middleware      Service<ChatRequest> → ChatResponse  (around every model request)
//!           │     └─ model retry (RetryConfig) → per-attempt events → ChatModel
//!           └─ lookup → JSON/schema validation → approval gate → authorizer
//!                 └─ function middleware  Service<ToolInvocation<C>> → Value  (around every tool call)
//!                       └─ tool retry (RetryConfig) → tool timeout → Tool::call
//! ```
//!
//! Layers added first are outermost. Each layer can inspect and change the input and the
//! output, or short-circuit (answer without calling the inner service). Because they are plain
//! tower layers, tower's own `RetryLayer`, `TimeoutLayer`, `RateLimitLayer`,
//! `ConcurrencyLimitLayer` and `Buffer` work unchanged where they fit; what a call needs from
//! its run (where text deltas go, the deadline) rides in [`ChatRequest::extensions`] and
//! [`ToolInvocation::extensions`], so a layer may run the inner call on another task. tower's
//! timeout turns errors into [`tower::BoxError`]: put `MapErrLayer::new(into_model_error)` (or
//! [`into_tool_error`]) directly outside it so the layers above see typed errors again.
//!
//! The agent's own retries sit below your layers: a chat layer sees one request per model
//! call, a function layer one invocation per tool call, however often the model or the tool
//! is retried. To retry with your own policy instead, set `RetryConfig::none()` and add a
//! tower `RetryLayer`: it is then the only retry.
//!
//! Function middleware sits after the checks (lookup, validation, approval, authorization), so
//! it only sees calls that may run.

use std::convert::Infallible;
use std::sync::Arc;

use futures::future::BoxFuture;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service};

use crate::agent::request::AgentRequest;
use crate::context::RunContext;
use crate::model::{ChatRequest, ChatResponse, ModelError};
use crate::outcome::RunOutcome;
use crate::tool::{Tool, ToolError, ToolErrorKind};

/// The boxed service chat middleware wraps.
pub type ChatService = BoxCloneSyncService<ChatRequest, ChatResponse, ModelError>;

/// The boxed service function middleware wraps.
pub type FunctionService<C> = BoxCloneSyncService<ToolInvocation<C>, serde_json::Value, ToolError>;

/// The boxed service agent middleware wraps.
pub type AgentService<C, O> = BoxCloneSyncService<AgentRequest<C>, RunOutcome<O>, Infallible>;

pub(crate) type ChatLayerFn = Arc<dyn Fn(ChatService) -> ChatService + Send + Sync>;
pub(crate) type FunctionLayerFn<C> = Arc<dyn Fn(FunctionService<C>) -> FunctionService<C> + Send + Sync>;
pub(crate) type AgentLayerFn<C, O> = Arc<dyn Fn(AgentService<C, O>) -> AgentService<C, O> + Send + Sync>;

/// One tool call, as function middleware sees it.
pub struct ToolInvocation<C> {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// The validated arguments (middleware may change them).
    pub arguments: serde_json::Value,
    /// The run's context.
    pub ctx: RunContext<C>,
    /// The tool that will be called.
    pub tool: Arc<dyn Tool<C>>,
    /// Per-call data for the services of the function stack (the run's deadline, the attempt
    /// counter), as [`ChatRequest::extensions`] carries it for model calls. Cloning the
    /// invocation carries it over.
    pub extensions: crate::model::Extensions,
}

impl<C> Clone for ToolInvocation<C> {
    fn clone(&self) -> Self {
        ToolInvocation {
            call_id: self.call_id.clone(),
            tool_name: self.tool_name.clone(),
            arguments: self.arguments.clone(),
            ctx: self.ctx.clone(),
            tool: Arc::clone(&self.tool),
            extensions: self.extensions.clone(),
        }
    }
}

impl<C> std::fmt::Debug for ToolInvocation<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolInvocation")
            .field("call_id", &self.call_id)
            .field("tool_name", &self.tool_name)
            .field("arguments", &self.arguments)
            .finish_non_exhaustive()
    }
}

/// The innermost function service: calls the tool.
#[derive(Clone, Copy)]
pub(crate) struct CallTool;

impl<C: Send + Sync + 'static> Service<ToolInvocation<C>> for CallTool {
    type Response = serde_json::Value;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<serde_json::Value, ToolError>>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), ToolError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, inv: ToolInvocation<C>) -> Self::Future {
        Box::pin(async move { inv.tool.call(&inv.ctx, inv.arguments).await })
    }
}

/// Turns a layer into the boxing function the agent stores.
pub(crate) fn chat_layer_fn<L>(layer: L) -> ChatLayerFn
where
    L: Layer<ChatService> + Send + Sync + 'static,
    L::Service: Service<ChatRequest, Response = ChatResponse, Error = ModelError> + Clone + Send + Sync + 'static,
    <L::Service as Service<ChatRequest>>::Future: Send + 'static,
{
    Arc::new(move |inner| BoxCloneSyncService::new(layer.layer(inner)))
}

pub(crate) fn function_layer_fn<C, L>(layer: L) -> FunctionLayerFn<C>
where
    C: Send + Sync + 'static,
    L: Layer<FunctionService<C>> + Send + Sync + 'static,
    L::Service:
        Service<ToolInvocation<C>, Response = serde_json::Value, Error = ToolError> + Clone + Send + Sync + 'static,
    <L::Service as Service<ToolInvocation<C>>>::Future: Send + 'static,
{
    Arc::new(move |inner| BoxCloneSyncService::new(layer.layer(inner)))
}

pub(crate) fn agent_layer_fn<C, O, L>(layer: L) -> AgentLayerFn<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
    L: Layer<AgentService<C, O>> + Send + Sync + 'static,
    L::Service: Service<AgentRequest<C>, Response = RunOutcome<O>, Error = Infallible> + Clone + Send + Sync + 'static,
    <L::Service as Service<AgentRequest<C>>>::Future: Send + 'static,
{
    Arc::new(move |inner| BoxCloneSyncService::new(layer.layer(inner)))
}

/// Wraps `inner` in `layers`, the first layer outermost.
pub(crate) fn apply<S>(inner: S, layers: &[Arc<dyn Fn(S) -> S + Send + Sync>]) -> S {
    layers.iter().rev().fold(inner, |svc, layer| layer(svc))
}

/// Maps a tower error back to a [`ModelError`]: a `ModelError` inside is returned as is, tower's
/// timeout becomes [`ModelError::Timeout`], anything else a transport error.
pub fn into_model_error(err: BoxError) -> ModelError {
    match err.downcast::<ModelError>() {
        Ok(e) => *e,
        Err(other) => {
            if other.is::<tower::timeout::error::Elapsed>() {
                ModelError::Timeout(std::time::Duration::ZERO)
            } else {
                ModelError::Transport {
                    message: other.to_string(),
                    source: Some(other),
                }
            }
        }
    }
}

/// Maps a tower error back to a [`ToolError`] (tower's timeout becomes a timeout error).
pub fn into_tool_error(err: BoxError) -> ToolError {
    match err.downcast::<ToolError>() {
        Ok(e) => *e,
        Err(other) => {
            if other.is::<tower::timeout::error::Elapsed>() {
                ToolError::new(ToolErrorKind::Timeout, "timeout").retryable(true)
            } else {
                ToolError::execution("middleware_error")
            }
        }
    }
}
