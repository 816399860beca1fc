//! `AgentBuilder::build`: the tools compiled and checked, the fingerprint, and the agent, chat,
//! planner-chat and function stacks built once.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Agent, AgentBuilder, AgentInner, FinalizationMode, ToolEntry, compile_tool};
use crate::error::AgentError;
use crate::output::OutputCodec;

impl<C: Send + Sync + 'static, O: Send + 'static> AgentBuilder<C, O> {
    /// Builds the agent, checking tool names and schemas.
    pub fn build(self) -> Result<Agent<C, O>, AgentError> {
        let mut entries = Vec::with_capacity(self.tools.len());
        let mut seen = HashMap::new();
        for tool in self.tools {
            let name = tool.spec().name.clone();
            if seen.insert(name.clone(), ()).is_some() {
                return Err(AgentError::Configuration {
                    message: format!("two tools are named {name:?}"),
                });
            }
            entries.push(compile_tool(tool)?);
        }
        for h in &self.handoffs {
            if seen.insert(h.tool_name.clone(), ()).is_some() {
                return Err(AgentError::Configuration {
                    message: format!(
                        "the handoff tool {:?} has the name of another tool or handoff",
                        h.tool_name
                    ),
                });
            }
        }
        if self.retry.max_attempts == 0 {
            return Err(AgentError::Configuration {
                message: "retry.max_attempts must be at least 1".into(),
            });
        }
        if self.layers_lost {
            return Err(AgentError::Configuration {
                message: "agent layers were added before the output type was chosen; call .output() or .codec() first"
                    .into(),
            });
        }
        let chat = crate::runner::chat::stack(Arc::clone(&self.model), &self.chat_layers, &self.retry);
        let planner_chat = match &self.policy {
            crate::plan::DecisionPolicy::PlanAndExecute(p) => p
                .generator
                .model
                .clone()
                .map(|model| crate::runner::chat::stack(model, &self.chat_layers, &self.retry)),
            _ => None,
        };
        let function_service =
            crate::runner::function::stack(&self.function_layers, &self.guardrails.tool, &self.retry);
        if let crate::plan::DecisionPolicy::PlanAndExecute(p) = &self.policy {
            if self.finalization == FinalizationMode::Disabled {
                return Err(AgentError::Configuration {
                    message:
                        "a strict Plan-and-Execute policy always finalizes: finalization_mode must not be Disabled"
                            .into(),
                });
            }
            if self.limits.max_steps == 0 || p.generator.max_steps == 0 {
                return Err(AgentError::Configuration {
                    message: "a strict Plan-and-Execute policy needs max_steps of at least 1".into(),
                });
            }
            if self.limits.max_step_attempts == 0 {
                return Err(AgentError::Configuration {
                    message: "a strict Plan-and-Execute policy needs max_step_attempts of at least 1".into(),
                });
            }
            if !self.handoffs.is_empty() {
                return Err(AgentError::Configuration {
                    message: "handoffs are not supported with a strict Plan-and-Execute policy".into(),
                });
            }
        }
        let policy_tag = match &self.policy {
            crate::plan::DecisionPolicy::Standard => "standard/1",
            crate::plan::DecisionPolicy::PlanAndExecute(p) => p.fingerprint_tag(),
        };
        let fingerprint = fingerprint(&entries, self.codec.as_ref(), policy_tag);
        let agent_layers = self.agent_layers;
        Ok(Agent {
            inner: Arc::new_cyclic(|weak| AgentInner {
                agent_service: crate::runner::start::agent_stack(weak, &agent_layers),
                name: self.name,
                instructions: self.instructions,
                model: self.model,
                tools: entries,
                tool_index: std::sync::OnceLock::new(),
                tool_providers: self.tool_providers,
                context_providers: self.context_providers,
                codec: self.codec,
                retry: self.retry,
                limits: self.limits,
                finalization: self.finalization,
                policy: self.policy,
                settings: self.settings,
                sink: self.sink,
                conversations: self.conversations,
                memory: self.memory,
                checkpoints: self.checkpoints,
                leases: self.leases,
                authorizer: self.authorizer,
                fingerprint,
                chat,
                planner_chat,
                function_service,
                handoffs: self.handoffs,
                guardrails: self.guardrails,
                compaction: self.compaction,
            }),
        })
    }
}

fn fingerprint<C, O: Send + 'static>(
    tools: &[ToolEntry<C>],
    codec: &dyn OutputCodec<Output = O>,
    policy: &str,
) -> String {
    // A stable hash of a canonical description.
    let mut names: Vec<(String, String)> = tools
        .iter()
        .map(|t| (t.tool.spec().name.clone(), t.tool.spec().parameters.to_string()))
        .collect();
    names.sort();
    let desc = serde_json::json!({
        "policy": policy,
        "tools": names,
        "output": codec.response_format().map(|f| f.schema),
    })
    .to_string();
    crate::canonical::stable_hash(&desc)
}
