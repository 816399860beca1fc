//! The run's tools: the agent's own, then each tool provider's, opened once per run
//! ([`Run::open_tools`]) and brought up to date before each model request
//! ([`Run::refresh_tools`]), so a tool a server adds during the run is offered from the next
//! request on and one it removes is refused.

use super::chat::with_deadline;
use super::{Run, VisibleTool, find_agent};
use crate::agent::compile_tool;
use crate::error::AgentError;

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
            && let Some(target) = find_agent(&self.env.agent, &active, 8)
        {
            self.env.agent = target;
            self.env.ctx = self.env.ctx.with_agent_name(active);
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

    /// Asks every session whether its tools changed; re-indexes the run's tools when one did.
    pub(super) async fn refresh_tools(&mut self) -> Result<(), AgentError> {
        let mut changed = false;
        for (_, session) in &self.sessions {
            changed |= session.refresh().await;
        }
        if changed { self.index_tools() } else { Ok(()) }
    }

    /// The run's tools by name, in order: the agent's own, then each session's. A name offered
    /// twice is a configuration error.
    fn index_tools(&mut self) -> Result<(), AgentError> {
        self.env.tools.clear();
        self.env.tool_order.clear();
        for entry in &self.env.agent.tools {
            let name = entry.tool.spec().name.clone();
            self.env.tool_order.push(name.clone());
            self.env.tools.insert(name, VisibleTool { entry: entry.clone() });
        }
        for (provider, session) in &self.sessions {
            for tool in session.tools() {
                let name = tool.spec().name.clone();
                if self.env.tools.contains_key(&name) {
                    return Err(AgentError::Configuration {
                        message: format!("tool provider {provider} offers tool {name:?}, which already exists"),
                    });
                }
                let entry = compile_tool(tool)?;
                self.env.tool_order.push(name.clone());
                self.env.tools.insert(name, VisibleTool { entry });
            }
        }
        Ok(())
    }
}
