//! The run's tools: the agent's own, then each tool provider's, opened once per run
//! ([`Run::open_tools`]) and brought up to date before each model request
//! ([`Run::refresh_tools`]), so a tool a server adds during the run is offered from the next
//! request on and one it removes is refused.

use foldhash::HashMap;
use std::sync::Arc;

use super::chat::with_deadline;
use super::{Run, VisibleTool, find_agent};
use crate::agent::{AgentInner, ToolEntry, ToolIndex, compile_tool};
use crate::error::AgentError;
use crate::model::ToolDefinition;
use crate::outcome::RunOutcome;
use crate::tool_provider::ToolSession;

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Opens every tool provider's session and indexes the run's tools.
    pub(super) async fn open_tools(&mut self) -> Result<(), AgentError> {
        // A resumed run continues with the agent it had handed over to.
        if let Some(active) = self.state.active_agent.clone()
            && active != self.env.agent.name
        {
            let Some(target) = find_agent(&self.env.agent, &active, 8) else {
                return Err(AgentError::ResumeIncompatible {
                    run_id: self.env.ctx.run_id().to_owned(),
                    message: format!("the run was handed over to agent {active:?}, which this agent cannot reach"),
                });
            };
            self.answer_with(target);
        }
        let providers = self.env.agent.tool_providers.clone();
        for provider in providers {
            let session = with_deadline(
                self.env.deadline,
                self.env.agent.limits.timeout,
                provider.open(&self.env.ctx),
            )
            .await?
            .map_err(|e| AgentError::ToolProvider {
                provider: e.provider.clone(),
                kind: e.kind,
                message: e.message.clone(),
            })?;
            self.sessions.push((provider.name().to_owned(), session));
        }
        self.index_tools()
    }

    /// Makes `target` the agent that answers from the next request on (a handoff): its model
    /// (also for the run's tools, `RunContext::model`), instructions, settings and retries.
    pub(super) fn answer_with(&mut self, target: Arc<AgentInner<C, O>>) {
        let ctx = self.env.ctx.with_agent_name(target.name.clone());
        self.env.ctx = ctx.with_model(Arc::clone(&target.model));
        self.env.attempts.set_max_attempts(target.retry.max_attempts);
        let handing_over = std::mem::replace(&mut self.env.agent, target);
        self.retired.agents.push(handing_over);
        self.kept = Default::default();
    }

    /// Tells the context providers of every agent of the run (those that handed it over, and
    /// the one answering) that it ended.
    pub(super) async fn run_finished(&self) {
        let agents = self.retired.agents.iter().chain(std::iter::once(&self.env.agent));
        for provider in agents.flat_map(|agent| &agent.context_providers) {
            provider.run_finished(&self.env.ctx).await;
        }
    }

    /// Asks every session whether its tools changed; re-indexes the run's tools when one did.
    /// Within the run's deadline: a server that announced a change and never lists its tools
    /// ends the run with its timeout, not with the server's own call timeout.
    pub(super) async fn refresh_tools(&mut self) -> Result<(), AgentError> {
        if self.sessions.is_empty() {
            return Ok(());
        }
        let sessions = &self.sessions;
        let refresh = async move {
            let mut changed = false;
            for (_, session) in sessions {
                changed |= session.refresh().await;
            }
            changed
        };
        let changed = with_deadline(self.env.deadline, self.env.agent.limits.timeout, refresh).await?;
        if changed { self.index_tools() } else { Ok(()) }
    }

    /// The run's tools by name, and their definitions in order: the agent's own, then each
    /// session's. A name offered twice is a configuration error.
    fn index_tools(&mut self) -> Result<(), AgentError> {
        if self.sessions.is_empty() {
            // Only the agent's own tools (again: a resumed run may have handed over).
            (self.env.tools, self.env.definitions) = own_index(&self.env.agent);
            return Ok(());
        }
        let (mut tools, mut definitions) = (HashMap::default(), Vec::new());
        index_own(&self.env.agent.tools, &mut tools, &mut definitions);
        for (provider, session) in &self.sessions {
            for tool in session.tools() {
                let name = tool.spec().name.clone();
                if tools.contains_key(&name) {
                    return Err(AgentError::Configuration {
                        message: format!("tool provider {provider} offers tool {name:?}, which already exists"),
                    });
                }
                let entry = compile_tool(tool)?;
                definitions.push(entry.tool.spec().definition());
                tools.insert(name, VisibleTool { entry });
            }
        }
        self.env.tools = Arc::new(tools);
        self.env.definitions = Arc::new(definitions);
        Ok(())
    }
}

/// The index of `agent`'s own tools, built once per agent and shared by its runs (a run sets
/// out with it, and keeps it unless tool providers add theirs).
pub(super) fn own_index<C, O>(agent: &AgentInner<C, O>) -> ToolIndex<C> {
    let (tools, definitions) = agent.tool_index.get_or_init(|| {
        let (mut tools, mut definitions) = (HashMap::default(), Vec::new());
        index_own(&agent.tools, &mut tools, &mut definitions);
        (Arc::new(tools), Arc::new(definitions))
    });
    (Arc::clone(tools), Arc::clone(definitions))
}

/// Indexes the agent's own tools, and their definitions in order.
fn index_own<C>(
    entries: &[ToolEntry<C>],
    tools: &mut HashMap<String, VisibleTool<C>>,
    definitions: &mut Vec<ToolDefinition>,
) {
    for entry in entries {
        definitions.push(entry.tool.spec().definition());
        tools.insert(entry.tool.spec().name.clone(), VisibleTool { entry: entry.clone() });
    }
}

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Closes a run's tool sessions, then gives back its outcome: boxed, so the run's future does
    /// not hold the outcome beside the sessions' closing in its own state (every run would pay
    /// for the few that have sessions).
    pub(super) fn close_sessions(
        sessions: Vec<(String, Box<dyn ToolSession<C>>)>,
        ended: RunOutcome<O>,
    ) -> futures::future::BoxFuture<'static, RunOutcome<O>> {
        Box::pin(async move {
            for (_, session) in sessions {
                session.close().await;
            }
            ended
        })
    }
}
