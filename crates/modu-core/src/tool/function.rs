//! [`FunctionTool`]'s constructors and setters, and its [`Tool`] implementation.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde::Serialize;

use super::{FunctionTool, Tool, ToolError, ToolSpec, parse_arguments, run_blocking, to_result_value};
use crate::context::RunContext;

impl<C> Clone for FunctionTool<C> {
    fn clone(&self) -> Self {
        FunctionTool {
            spec: self.spec.clone(),
            handler: Arc::clone(&self.handler),
            enabled: self.enabled.clone(),
            approval: self.approval.clone(),
        }
    }
}

impl<C: Send + Sync + 'static> FunctionTool<C> {
    /// An async tool.
    pub fn new<F, Fut>(spec: ToolSpec, f: F) -> Self
    where
        F: Fn(RunContext<C>, serde_json::Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<serde_json::Value, ToolError>> + Send + 'static,
    {
        FunctionTool {
            spec,
            handler: Arc::new(move |ctx, args| Box::pin(f(ctx, args))),
            enabled: None,
            approval: None,
        }
    }

    /// A synchronous tool, run on the blocking thread pool (the spec is marked `blocking`).
    pub fn blocking<F>(spec: ToolSpec, f: F) -> Self
    where
        F: Fn(RunContext<C>, serde_json::Value) -> Result<serde_json::Value, ToolError> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        FunctionTool {
            spec: spec.blocking(true),
            handler: Arc::new(move |ctx, args| {
                let f = Arc::clone(&f);
                Box::pin(run_blocking(move || f(ctx, args)))
            }),
            enabled: None,
            approval: None,
        }
    }

    /// A typed async tool: arguments are deserialised into `A` (its schema is the tool's
    /// parameter schema) and the result `R` serialised.
    pub fn typed<A, R, F, Fut>(name: impl Into<String>, description: impl Into<String>, f: F) -> Self
    where
        A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
        R: Serialize,
        F: Fn(RunContext<C>, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
    {
        let f = Arc::new(f);
        Self::new(ToolSpec::for_args::<A>(name, description), move |ctx, args| {
            let f = Arc::clone(&f);
            async move {
                let args: A = parse_arguments(args)?;
                let out = f(ctx, args).await?;
                to_result_value(&out)
            }
        })
    }

    /// Sets an `is_enabled` predicate.
    pub fn enabled_when<P>(mut self, predicate: P) -> Self
    where
        P: Fn(&RunContext<C>) -> bool + Send + Sync + 'static,
    {
        self.enabled = Some(Arc::new(predicate));
        self
    }

    /// Requires approval for calls this predicate picks (from the context and arguments).
    ///
    /// The predicate is evaluated when a call reaches the tool gate — after its arguments
    /// passed schema validation, before RBAC — each time an undecided call does so: on the
    /// first run and again on every resume while the call has no decision. Once a person's
    /// decision (approve, approve_always, reject) is recorded for a call, that decision binds
    /// the call and the predicate is not asked again for it: a rejected call never runs, even
    /// when the resuming agent's predicate would now return `false`.
    pub fn needs_approval_when<P>(mut self, predicate: P) -> Self
    where
        P: Fn(&RunContext<C>, &serde_json::Value) -> bool + Send + Sync + 'static,
    {
        self.approval = Some(Arc::new(predicate));
        self
    }

    /// Changes the spec (to set flags after construction).
    pub fn map_spec(mut self, f: impl FnOnce(ToolSpec) -> ToolSpec) -> Self {
        self.spec = f(self.spec);
        self
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for FunctionTool<C> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    // The handler's future is returned as it is (it owns what it needs): an `async fn` here
    // would box it again, one more allocation per call.
    fn call<'life0, 'life1, 'async_trait>(
        &'life0 self,
        ctx: &'life1 RunContext<C>,
        arguments: serde_json::Value,
    ) -> BoxFuture<'async_trait, Result<serde_json::Value, ToolError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        (self.handler)(ctx.clone(), arguments)
    }
    fn is_enabled(&self, ctx: &RunContext<C>) -> bool {
        self.enabled.as_ref().is_none_or(|p| p(ctx))
    }
    fn needs_approval(&self, ctx: &RunContext<C>, arguments: &serde_json::Value) -> bool {
        match &self.approval {
            Some(p) => p(ctx, arguments),
            None => self.spec.needs_approval,
        }
    }
}
