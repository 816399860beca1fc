//! Composing agents: an agent as another agent's tool.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

use std::sync::{Arc, PoisonError};

use crate::agent::{Agent, AgentRequest};
use crate::approval::NestedPause;
use crate::context::RunContext;
use crate::message::Usage;
use crate::outcome::RunOutcome;
use crate::tool::{Tool, ToolError, ToolErrorKind, ToolSpec, parse_arguments};

/// An agent used as a tool by another agent ([`Agent::as_tool`]).
///
/// The nested run shares the parent's application context, user context and code-made
/// approval decisions ([`RunContext::approve_tool`], [`AgentRequest::approve_tool`]), receives
/// its structured input as [`RunContext::tool_input`] (and, as JSON, as its user message), and
/// its usage is added to the parent's. Its run id is `{parent run id}.{call id}`.
///
/// A nested run that reaches a tool needing approval pauses the parent: the parent's result
/// lists the nested calls in `interruptions` with ids `{parent call id}/{nested call id}` and
/// metadata `nested_agent`, `nested_run_id`, `nested_call_id`, `parent_call_id`.
/// [`Agent::approve`] / [`Agent::reject`] on the parent decide them, and resuming the parent
/// continues the nested run from its own state (kept inside the parent's checkpoint, so it
/// survives [`Agent::export_state`] / [`Agent::import_state`] into another process) without
/// re-running its finished calls. The nested agent needs no checkpoint store of its own.
/// The tool itself can require approval: `expert.as_tool::<Q>(..).needs_approval(true)`.
pub struct AgentTool<C, O, A> {
    agent: Agent<C, O>,
    spec: ToolSpec,
    _input: PhantomData<fn() -> A>,
}

impl<C, O> Agent<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// This agent as a tool taking input `A`.
    ///
    /// ```
    /// use modu_agent::Agent;
    /// use modu_testing::ScriptedModel;
    ///
    /// #[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
    /// struct Question { text: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let expert = Agent::builder(ScriptedModel::new().text("42")).name("expert").build()?;
    /// let boss = Agent::builder(
    ///     ScriptedModel::new().tool_call("ask_expert", serde_json::json!({"text": "meaning?"})).text("It is 42."),
    /// )
    /// .tool(expert.as_tool::<Question>("ask_expert", "Ask the expert"))
    /// .build()?;
    /// let outcome = boss.run("What is the meaning?").await;
    /// assert_eq!(outcome.usage().requests, 3); // two of the boss, one of the expert
    /// assert_eq!(outcome.into_result()?, "It is 42.");
    /// # Ok(()) }
    /// ```
    pub fn as_tool<A>(&self, name: impl Into<String>, description: impl Into<String>) -> AgentTool<C, O, A>
    where
        A: DeserializeOwned + Serialize + schemars::JsonSchema + Send + 'static,
    {
        AgentTool {
            agent: self.clone(),
            spec: ToolSpec::for_args::<A>(name, description),
            _input: PhantomData,
        }
    }
}

impl<C, O, A> AgentTool<C, O, A> {
    /// Whether a person must approve each call of this tool before the nested run starts.
    pub fn needs_approval(mut self, yes: bool) -> Self {
        self.spec = self.spec.needs_approval(yes);
        self
    }

    /// Changes the tool's spec (timeout, flags, result cap, …).
    pub fn map_spec(mut self, f: impl FnOnce(ToolSpec) -> ToolSpec) -> Self {
        self.spec = f(self.spec);
        self
    }
}

#[async_trait]
impl<C, O, A> Tool<C> for AgentTool<C, O, A>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
    A: DeserializeOwned + Serialize + Send + 'static,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &RunContext<C>, arguments: serde_json::Value) -> Result<serde_json::Value, ToolError> {
        let slot: crate::agent::PauseSlot = Arc::default();
        let scope = ctx.call_scope().cloned();
        let (result, earlier, earlier_by_model) = match scope.as_ref().and_then(|s| s.resume.clone()) {
            // The parent resumes: continue the nested run from the state it kept.
            Some(resume) => {
                let state = &resume.pause.state;
                let earlier = state
                    .pointer("/state/usage")
                    .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok())
                    .unwrap_or_default();
                let earlier_by_model = state
                    .pointer("/state/usage_by_model")
                    .and_then(|u| serde_json::from_value::<BTreeMap<String, Usage>>(u.clone()).ok())
                    .unwrap_or_default();
                let result = self
                    .agent
                    .resume_nested(resume, ctx.context_arc(), ctx.shared_approvals(), Arc::clone(&slot))
                    .await;
                (result, earlier, earlier_by_model)
            }
            None => {
                let input: A = parse_arguments(arguments.clone())?;
                let text = serde_json::to_string(&input).map_err(|_| ToolError::execution("unserializable_input"))?;
                let mut request = AgentRequest::new(ctx.context_arc(), text).user(ctx.user().clone());
                request.tool_input = Some(arguments);
                request.parent_run_id = Some(ctx.run_id().to_owned());
                request.approvals = Some(ctx.shared_approvals());
                if let Some(scope) = &scope {
                    // A stable id, so the parent's checkpoint names the nested run.
                    request.run_id = Some(format!("{}.{}", ctx.run_id(), scope.call_id));
                    request.nested_pause = Some(Arc::clone(&slot));
                }
                (self.agent.run(request).await, Usage::default(), BTreeMap::new())
            }
        };
        let report = result.report();
        ctx.add_usage(report.usage - earlier);
        for (model, usage) in &report.usage_by_model {
            let before = earlier_by_model.get(model).copied().unwrap_or_default();
            ctx.add_model_usage(model, *usage - before);
        }
        match result {
            RunOutcome::Completed(done) => Ok(self.agent.inner.codec.to_json(&done.output)),
            RunOutcome::Paused(paused) if !paused.inputs.is_empty() => {
                Err(ToolError::execution("nested_input_unsupported").with_message(format!(
                    "the nested agent {} asked a person for input, which a nested run cannot do",
                    self.agent.name()
                )))
            }
            RunOutcome::Paused(paused) => {
                let tools: Vec<String> = paused.approvals.iter().map(|r| r.tool_name.clone()).collect();
                let state = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let (Some(scope), Some(state)) = (&scope, state) {
                    // The parent pauses too, listing these calls; its decisions resume us.
                    *scope.pause.lock().unwrap_or_else(PoisonError::into_inner) = Some(NestedPause {
                        agent: self.agent.name().to_owned(),
                        run_id: paused.report.run_id,
                        state,
                        requests: paused.approvals,
                    });
                }
                Err(
                    ToolError::new(ToolErrorKind::Rejected, "nested_approval_required").with_message(format!(
                        "the nested agent {} needs approval for {}",
                        self.agent.name(),
                        tools.join(", ")
                    )),
                )
            }
            RunOutcome::Failed(failed) => Err(ToolError::execution("nested_run_failed").with_message(format!(
                "the nested agent {} failed: {}",
                self.agent.name(),
                nested_failure(&failed.error)
            ))),
        }
    }

    fn fingerprint(&self) -> Option<&str> {
        Some(self.agent.fingerprint())
    }
}

/// A nested run's failure as the parent's model (and whatever shows tool results, such as an
/// AG-UI client) sees it: modu's own words, never a model server's, store's or provider's text,
/// which may quote what it should not (the full error goes to the log).
pub(crate) fn nested_failure(error: &crate::error::AgentError) -> String {
    use crate::error::AgentError;
    let shown = match error {
        AgentError::Model { kind, .. } => format!("the model call failed ({kind})"),
        AgentError::Store { operation, .. } => format!("store operation {operation} failed"),
        AgentError::ToolProvider { provider, .. } => format!("tool provider {provider} failed"),
        AgentError::ContextProvider { provider, .. } => format!("context provider {provider} failed"),
        // A panic's message is whatever the code that panicked formatted (a server's reply in
        // an `expect`, say).
        AgentError::Panicked { .. } => "the run panicked".to_owned(),
        other => return other.to_string(),
    };
    tracing::warn!(error = %error, "a nested run failed");
    shown
}

type OnHandoff<C> = Arc<dyn Fn(&RunContext<C>, serde_json::Value) -> Result<(), String> + Send + Sync>;
type HandoffEnabled<C> = Arc<dyn Fn(&RunContext<C>) -> bool + Send + Sync>;

/// A transfer of the conversation to another agent, offered to the model as a tool
/// (`transfer_to_<agent>` by default).
///
/// When the model calls it, the input is validated against the handoff's schema and
/// `on_handoff` runs first — it can refuse (the model gets a `rejected` tool error and nothing
/// else happens). Once it accepts, the run continues with the target agent's instructions,
/// model and tools, on the same conversation; [`RunReport::agent`](crate::RunReport::agent) names the agent that
/// answered. The run stays the first agent's: its conversation and checkpoint stores keep it
/// (the target needs none of its own), it keeps that agent's finalization mode, and it is
/// resumed and recovered through that agent.
/// When it ends, the context providers of every agent it passed through hear `run_finished`
/// (a provider added to several of them, once per agent).
/// `enabled_when` hides the handoff for a turn, like a tool's `is_enabled`.
pub struct Handoff<C, O> {
    pub(crate) target: Agent<C, O>,
    pub(crate) tool_name: String,
    pub(crate) description: String,
    pub(crate) input_schema: Arc<serde_json::Value>,
    pub(crate) on_handoff: Option<OnHandoff<C>>,
    pub(crate) enabled: Option<HandoffEnabled<C>>,
}

impl<C, O> Clone for Handoff<C, O> {
    fn clone(&self) -> Self {
        Handoff {
            target: self.target.clone(),
            tool_name: self.tool_name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
            on_handoff: self.on_handoff.clone(),
            enabled: self.enabled.clone(),
        }
    }
}

impl<C: Send + Sync + 'static, O: Send + 'static> Handoff<C, O> {
    /// A handoff to `target`, taking no input.
    pub fn to(target: &Agent<C, O>) -> Self {
        let name = crate::tool::sanitize_name(target.name());
        Handoff {
            target: target.clone(),
            tool_name: format!("transfer_to_{name}"),
            description: format!("Hand the conversation over to the {} agent.", target.name()),
            input_schema: Arc::new(serde_json::json!({"type": "object", "properties": {}})),
            on_handoff: None,
            enabled: None,
        }
    }

    /// Sets the tool's name.
    pub fn tool_name(mut self, name: impl Into<String>) -> Self {
        self.tool_name = name.into();
        self
    }

    /// Sets the tool's description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Takes a typed input `T` and checks it before anything happens: `Err(reason)` refuses
    /// the handoff (the model sees the reason).
    pub fn on_handoff<T, F>(mut self, f: F) -> Self
    where
        T: DeserializeOwned + schemars::JsonSchema + 'static,
        F: Fn(&RunContext<C>, T) -> Result<(), String> + Send + Sync + 'static,
    {
        self.input_schema = Arc::new(crate::tool::schema_for::<T>());
        self.on_handoff = Some(Arc::new(move |ctx, value| {
            let input: T = serde_json::from_value(value).map_err(|e| format!("invalid handoff input: {e}"))?;
            f(ctx, input)
        }));
        self
    }

    /// Offers the handoff only when the predicate holds (evaluated each turn).
    pub fn enabled_when<P>(mut self, predicate: P) -> Self
    where
        P: Fn(&RunContext<C>) -> bool + Send + Sync + 'static,
    {
        self.enabled = Some(Arc::new(predicate));
        self
    }

    pub(crate) fn is_enabled(&self, ctx: &RunContext<C>) -> bool {
        self.enabled.as_ref().is_none_or(|p| p(ctx))
    }

    pub(crate) fn definition(&self) -> crate::model::ToolDefinition {
        crate::model::ToolDefinition::new(
            self.tool_name.clone(),
            self.description.clone(),
            self.input_schema.clone(),
        )
    }

    /// Runs the checks: JSON, schema, `on_handoff`.
    pub(crate) fn accept(&self, ctx: &RunContext<C>, raw_arguments: &str) -> Result<(), ToolError> {
        let value = crate::message::parse_tool_arguments(raw_arguments)
            .map_err(|e| ToolError::validation("invalid_json", format!("the arguments are not valid JSON ({e})")))?;
        if let Ok(validator) = crate::tool::ArgumentValidator::new(&self.input_schema)
            && let Err(problems) = validator.check(&value)
        {
            return Err(ToolError::validation("invalid_arguments", problems));
        }
        if let Some(check) = &self.on_handoff {
            check(ctx, value)
                .map_err(|reason| ToolError::new(ToolErrorKind::Rejected, "handoff_refused").with_message(reason))?;
        }
        Ok(())
    }
}
