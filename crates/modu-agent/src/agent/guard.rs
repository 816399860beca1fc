//! Guardrails and run compaction on the builder, and an agent as a model-backed guardrail.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Agent, AgentBuilder, AgentRequest, Fixed};
use crate::context::RunContext;
use crate::guardrail::{
    GuardrailDecision, GuardrailMode, InputGuardrail, OutputGuardrail, ToolGuardrail, Tripwire, Verdict,
};
use crate::message::{Message, Role};

impl<C: Send + Sync + 'static, O: Send + 'static, S> AgentBuilder<C, O, S> {
    /// Adds a guardrail on a fresh run's input ([`crate::guardrail`]).
    pub fn input_guardrail(self, guardrail: impl InputGuardrail<C> + 'static) -> AgentBuilder<C, O, Fixed> {
        let mut b = self.fix_types();
        b.typed.guardrails.input.push(Arc::new(guardrail));
        b
    }

    /// Whether input guardrails run with the first model request (the default) or before it.
    pub fn guardrail_mode(mut self, mode: GuardrailMode) -> Self {
        self.config.guardrail_mode = mode;
        self
    }

    /// Adds a guardrail on the final output.
    pub fn output_guardrail(self, guardrail: impl OutputGuardrail<C> + 'static) -> AgentBuilder<C, O, Fixed> {
        let mut b = self.fix_types();
        b.typed.guardrails.output.push(Arc::new(guardrail));
        b
    }

    /// Compacts the run's own messages in each request that would exceed the compaction's
    /// token budget ([`crate::compaction`]); off by default.
    pub fn run_compaction(mut self, compaction: crate::compaction::RunCompaction) -> Self {
        self.config.compaction = Some(compaction);
        self
    }

    /// Adds a guardrail on tool calls' arguments and results (a layer of the function stack,
    /// below the function layers).
    pub fn tool_guardrail(self, guardrail: impl ToolGuardrail<C> + 'static) -> AgentBuilder<C, O, Fixed> {
        let mut b = self.fix_types();
        b.typed.guardrails.tool.push(Arc::new(guardrail));
        b
    }
}

impl Agent<(), GuardrailDecision> {
    /// This agent as a model-backed guardrail named `name`: it is asked with the checked text
    /// (the input's user messages, or the output as JSON) and its structured
    /// [`GuardrailDecision`] decides. A check whose run fails trips `guardrail_unavailable`
    /// (a guardrail fails closed), whose message names the failure in modu's words, never a
    /// model server's (the full error goes to the log). Its usage counts in the checked run's,
    /// as a nested agent's does.
    ///
    /// ```
    /// use modu_agent::{Agent, guardrail::GuardrailDecision};
    /// # use modu_testing::ScriptedModel;
    /// let checker = Agent::builder(ScriptedModel::new().text(r#"{"tripped":false,"reason":"fine"}"#))
    ///     .instructions("Decide whether the text asks for something illegal.")
    ///     .output::<GuardrailDecision>()
    ///     .build()?;
    /// let agent = Agent::builder(ScriptedModel::new().text("hello"))
    ///     .input_guardrail(checker.as_guardrail("legality"))
    ///     .build()?;
    /// # Ok::<(), modu_core::AgentError>(())
    /// ```
    pub fn as_guardrail(&self, name: impl Into<String>) -> AgentGuardrail {
        AgentGuardrail {
            name: name.into(),
            agent: self.clone(),
        }
    }
}

/// A guardrail backed by an agent ([`Agent::as_guardrail`]); usable on input and output.
#[derive(Clone)]
pub struct AgentGuardrail {
    name: String,
    agent: Agent<(), GuardrailDecision>,
}

impl std::fmt::Debug for AgentGuardrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentGuardrail").field("name", &self.name).finish()
    }
}

impl AgentGuardrail {
    /// The checking agent's verdict on `text`; its usage counts in the checked run's (`ctx`).
    async fn decide<C>(&self, ctx: &RunContext<C>, text: String) -> Verdict {
        let result = self.agent.run(AgentRequest::new((), text)).await;
        let report = result.report();
        ctx.add_usage(report.usage);
        for (model, usage) in &report.usage_by_model {
            ctx.add_model_usage(model, *usage);
        }
        match result.into_result() {
            Ok(GuardrailDecision { tripped: false, .. }) => Verdict::Pass,
            Ok(GuardrailDecision { tripped: true, reason }) => Verdict::Trip(Tripwire::new("tripped", reason)),
            // In modu's own words: the checker's error may quote a model server's answer.
            Err(e) => Verdict::Trip(Tripwire::new(
                "guardrail_unavailable",
                format!("the guardrail's check did not finish: {}", unavailable(&e)),
            )),
        }
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> InputGuardrail<C> for AgentGuardrail {
    fn name(&self) -> &str {
        &self.name
    }

    async fn check(&self, ctx: &RunContext<C>, input: &[Message]) -> Verdict {
        let text: Vec<String> = input
            .iter()
            .filter(|m| m.role == Role::User)
            .map(Message::text)
            .collect();
        self.decide(ctx, text.join("\n\n")).await
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> OutputGuardrail<C> for AgentGuardrail {
    fn name(&self) -> &str {
        &self.name
    }

    async fn check(&self, ctx: &RunContext<C>, output: &serde_json::Value) -> Verdict {
        let text = match output {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        self.decide(ctx, text).await
    }
}

/// Why a model-backed guardrail's check did not finish, in modu's own words (the full error
/// goes to the log).
fn unavailable(error: &crate::RunError) -> String {
    match error {
        crate::RunError::Failed { error, .. } => super::compose::nested_failure(error),
        other => other.to_string(),
    }
}
