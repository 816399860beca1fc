//! Guardrails: checks on a run's input, its final output, and each tool call's arguments and
//! result. A check passes, or fires a [`Tripwire`] that ends the run with
//! [`AgentError::GuardrailTripped`](crate::AgentError::GuardrailTripped), which is never
//! resumable. A tool guardrail may instead replace the call's result with a message to the
//! model ([`ToolVerdict::Replace`]).
//!
//! Where each kind runs (docs/pipeline.md draws it in the order of the layers):
//!
//! - **Input** ([`InputGuardrail`]): on a fresh run's input, once, with the first model
//!   request. [`GuardrailMode::Concurrent`] (the default) sends the request at the same time and
//!   drops it when a tripwire fires first; the answer is acted on (tools run, output accepted)
//!   only after every input guardrail passed, but a streamed run's reader may already have
//!   received that answer's deltas when a slower guardrail trips. [`GuardrailMode::Blocking`]
//!   checks before the request is sent. A resumed run is not checked again once they passed; one that stopped
//!   before its first request (cancelled) is checked with the first request of its resume.
//! - **Output** ([`OutputGuardrail`]): on the final output once it parsed, as JSON; the
//!   [`output`] constructor decodes it into your type, so a structured output is checked typed.
//! - **Tool** ([`ToolGuardrail`]): a layer of the function stack, below your function layers and
//!   above the tool's retries and timeout. The arguments are checked before the tool runs (a
//!   replacement skips the tool), the result before the model sees it.
//!
//! Every check appears as an [`AgentEvent::GuardrailChecked`](crate::AgentEvent) event. A
//! model-backed check is an agent whose structured output decides: see
//! [`Agent::as_guardrail`](crate::Agent::as_guardrail).
//!
//! ```
//! use modu_agent::guardrail::{self, Tripwire, Verdict};
//! use modu_agent::Agent;
//! # use modu_testing::ScriptedModel;
//! let agent = Agent::builder(ScriptedModel::new().text("hi"))
//!     .input_guardrail(guardrail::input("no_secrets", |_ctx, input| {
//!         if input.iter().any(|m| m.text().contains("password")) {
//!             Verdict::Trip(Tripwire::new("secret_in_input", "the input contains a password"))
//!         } else {
//!             Verdict::Pass
//!         }
//!     }))
//!     .build()?;
//! # Ok::<(), modu_core::AgentError>(())
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::context::RunContext;
use crate::message::Message;
use crate::tripwire::Checked;
pub use crate::tripwire::{GuardrailKind, Tripwire};

/// What an input or output guardrail decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Go on.
    Pass,
    /// End the run.
    Trip(Tripwire),
}

/// What a tool guardrail decided.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolVerdict {
    /// Go on.
    Pass,
    /// End the run.
    Trip(Tripwire),
    /// Give the model this text as the call's result instead (on arguments: the tool does not
    /// run).
    Replace(String),
}

/// When input guardrails run relative to the first model request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardrailMode {
    /// With the request; the request is dropped when a tripwire fires first (its answer is
    /// not acted on, though a streamed run's reader may have received its deltas).
    #[default]
    Concurrent,
    /// Before the request.
    Blocking,
}

/// A check on a fresh run's input messages.
#[async_trait]
pub trait InputGuardrail<C>: Send + Sync {
    /// The guardrail's name, in events and errors.
    fn name(&self) -> &str;
    /// Checks the run's input (the messages the run was asked with, without session history).
    async fn check(&self, ctx: &RunContext<C>, input: &[Message]) -> Verdict;
}

/// A check on a run's final output, as JSON (the output codec's form).
#[async_trait]
pub trait OutputGuardrail<C>: Send + Sync {
    /// The guardrail's name, in events and errors.
    fn name(&self) -> &str;
    /// Checks the output.
    async fn check(&self, ctx: &RunContext<C>, output: &serde_json::Value) -> Verdict;
}

/// A check on tool calls: their arguments before the tool runs, their results before the model
/// sees them. Both pass by default.
#[async_trait]
pub trait ToolGuardrail<C>: Send + Sync {
    /// The guardrail's name, in events and errors.
    fn name(&self) -> &str;
    /// Checks a call's (validated) arguments; `tool` is the called tool's name.
    async fn check_arguments(&self, _ctx: &RunContext<C>, _tool: &str, _arguments: &serde_json::Value) -> ToolVerdict {
        ToolVerdict::Pass
    }
    /// Checks a call's successful result.
    async fn check_result(&self, _ctx: &RunContext<C>, _tool: &str, _result: &serde_json::Value) -> ToolVerdict {
        ToolVerdict::Pass
    }
}

#[async_trait]
impl<C: Send + Sync, G: InputGuardrail<C> + ?Sized> InputGuardrail<C> for Arc<G> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn check(&self, ctx: &RunContext<C>, input: &[Message]) -> Verdict {
        (**self).check(ctx, input).await
    }
}

#[async_trait]
impl<C: Send + Sync, G: OutputGuardrail<C> + ?Sized> OutputGuardrail<C> for Arc<G> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn check(&self, ctx: &RunContext<C>, output: &serde_json::Value) -> Verdict {
        (**self).check(ctx, output).await
    }
}

/// An input guardrail from a function.
pub fn input<C, F>(name: impl Into<String>, check: F) -> impl InputGuardrail<C>
where
    C: Send + Sync + 'static,
    F: Fn(&RunContext<C>, &[Message]) -> Verdict + Send + Sync + 'static,
{
    FnInput {
        name: name.into(),
        check,
    }
}

/// An output guardrail from a function over the output decoded as `T` (for a text agent,
/// `String`). An output that does not decode as `T` trips `output_not_decodable`.
pub fn output<C, T, F>(name: impl Into<String>, check: F) -> impl OutputGuardrail<C>
where
    C: Send + Sync + 'static,
    T: serde::de::DeserializeOwned + Send + Sync + 'static,
    F: Fn(&RunContext<C>, &T) -> Verdict + Send + Sync + 'static,
{
    FnOutput {
        name: name.into(),
        check,
        _output: std::marker::PhantomData::<fn() -> T>,
    }
}

/// A tool guardrail on arguments, from a function of the context, the tool's name and the
/// arguments.
pub fn tool_arguments<C, F>(name: impl Into<String>, check: F) -> impl ToolGuardrail<C>
where
    C: Send + Sync + 'static,
    F: Fn(&RunContext<C>, &str, &serde_json::Value) -> ToolVerdict + Send + Sync + 'static,
{
    FnTool {
        name: name.into(),
        check,
        on_result: false,
    }
}

/// A tool guardrail on results, from a function of the context, the tool's name and the
/// result.
pub fn tool_result<C, F>(name: impl Into<String>, check: F) -> impl ToolGuardrail<C>
where
    C: Send + Sync + 'static,
    F: Fn(&RunContext<C>, &str, &serde_json::Value) -> ToolVerdict + Send + Sync + 'static,
{
    FnTool {
        name: name.into(),
        check,
        on_result: true,
    }
}

struct FnInput<F> {
    name: String,
    check: F,
}

#[async_trait]
impl<C, F> InputGuardrail<C> for FnInput<F>
where
    C: Send + Sync + 'static,
    F: Fn(&RunContext<C>, &[Message]) -> Verdict + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    async fn check(&self, ctx: &RunContext<C>, input: &[Message]) -> Verdict {
        (self.check)(ctx, input)
    }
}

struct FnOutput<F, T> {
    name: String,
    check: F,
    _output: std::marker::PhantomData<fn() -> T>,
}

#[async_trait]
impl<C, T, F> OutputGuardrail<C> for FnOutput<F, T>
where
    C: Send + Sync + 'static,
    T: serde::de::DeserializeOwned + Send + Sync + 'static,
    F: Fn(&RunContext<C>, &T) -> Verdict + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    async fn check(&self, ctx: &RunContext<C>, output: &serde_json::Value) -> Verdict {
        match T::deserialize(output) {
            Ok(typed) => (self.check)(ctx, &typed),
            Err(e) => Verdict::Trip(Tripwire::new(
                "output_not_decodable",
                format!("the output does not decode as the guardrail's type: {e}"),
            )),
        }
    }
}

struct FnTool<F> {
    name: String,
    check: F,
    on_result: bool,
}

#[async_trait]
impl<C, F> ToolGuardrail<C> for FnTool<F>
where
    C: Send + Sync + 'static,
    F: Fn(&RunContext<C>, &str, &serde_json::Value) -> ToolVerdict + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    async fn check_arguments(&self, ctx: &RunContext<C>, tool: &str, arguments: &serde_json::Value) -> ToolVerdict {
        if self.on_result {
            ToolVerdict::Pass
        } else {
            (self.check)(ctx, tool, arguments)
        }
    }
    async fn check_result(&self, ctx: &RunContext<C>, tool: &str, result: &serde_json::Value) -> ToolVerdict {
        if self.on_result {
            (self.check)(ctx, tool, result)
        } else {
            ToolVerdict::Pass
        }
    }
}

/// The decision of a model-backed guardrail ([`crate::Agent::as_guardrail`]): the checking
/// agent's structured output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuardrailDecision {
    /// Whether the checked text must be stopped.
    pub tripped: bool,
    /// Why, in one sentence.
    pub reason: String,
}

/// One input or output check as the run records it.
fn checked(guardrail: &str, kind: GuardrailKind, verdict: Verdict) -> Checked {
    Checked {
        guardrail: guardrail.to_owned(),
        kind,
        tripped: match verdict {
            Verdict::Pass => None,
            Verdict::Trip(t) => Some(t),
        },
        replaced: false,
    }
}

/// The input guardrails of an agent, checked together (concurrently).
pub(crate) async fn check_input<C: Send + Sync + 'static>(
    guardrails: &[Arc<dyn InputGuardrail<C>>],
    ctx: &RunContext<C>,
    input: &[Message],
) -> Vec<Checked> {
    futures::future::join_all(
        guardrails
            .iter()
            .map(|g| async move { checked(g.name(), GuardrailKind::Input, g.check(ctx, input).await) }),
    )
    .await
}

/// The output guardrails of an agent, checked together (concurrently).
pub(crate) async fn check_output<C: Send + Sync + 'static>(
    guardrails: &[Arc<dyn OutputGuardrail<C>>],
    ctx: &RunContext<C>,
    output: &serde_json::Value,
) -> Vec<Checked> {
    futures::future::join_all(
        guardrails
            .iter()
            .map(|g| async move { checked(g.name(), GuardrailKind::Output, g.check(ctx, output).await) }),
    )
    .await
}

/// An agent's guardrails, as the builder collects them.
pub(crate) struct Guardrails<C> {
    pub(crate) input: Vec<Arc<dyn InputGuardrail<C>>>,
    pub(crate) mode: GuardrailMode,
    pub(crate) output: Vec<Arc<dyn OutputGuardrail<C>>>,
    pub(crate) tool: Vec<Arc<dyn ToolGuardrail<C>>>,
}

impl<C> Default for Guardrails<C> {
    fn default() -> Self {
        Guardrails {
            input: Vec::new(),
            mode: GuardrailMode::default(),
            output: Vec::new(),
            tool: Vec::new(),
        }
    }
}
