//! `AgentBuilder::build`: the tools compiled and checked, the fingerprint, and the agent, chat,
//! planner-chat and function stacks built once.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Agent, AgentBuilder, AgentInner, FinalizationMode, Instructions, ToolEntry, compile_tool};
use crate::agent::BuildError;
use crate::output::OutputCodec;

impl<C: Send + Sync + 'static, O: Send + 'static, S> AgentBuilder<C, O, S> {
    /// Builds the agent, checking tool names and schemas, handoff names, retries and the
    /// decision policy's settings.
    pub fn build(self) -> Result<Agent<C, O>, BuildError> {
        let AgentBuilder { config, typed, .. } = self;
        let mut entries = Vec::with_capacity(typed.tools.len());
        let mut seen = HashMap::new();
        for tool in typed.tools {
            let name = tool.spec().name.clone();
            if seen.insert(name.clone(), ()).is_some() {
                return Err(BuildError::DuplicateTool { name });
            }
            entries.push(compile_tool(tool)?);
        }
        for h in &typed.handoffs {
            if seen.insert(h.tool_name.clone(), ()).is_some() {
                return Err(BuildError::HandoffNameTaken {
                    name: h.tool_name.clone(),
                });
            }
            if matches!(h.target.inner.policy, crate::plan::DecisionPolicy::PlanAndExecute(_)) {
                return Err(BuildError::HandoffToStrictPolicy {
                    name: h.tool_name.clone(),
                    target: h.target.name().to_owned(),
                });
            }
        }
        if config.retry.max_attempts == 0 {
            return Err(BuildError::ZeroRetryAttempts);
        }
        let chat = crate::runner::chat::stack(Arc::clone(&config.model), &config.chat_layers, &config.retry);
        let planner_chat = match &config.policy {
            crate::plan::DecisionPolicy::PlanAndExecute(p) => p
                .generator
                .model
                .clone()
                .map(|model| crate::runner::chat::stack(model, &config.chat_layers, &config.retry)),
            _ => None,
        };
        let mut guardrails = typed.guardrails;
        guardrails.mode = config.guardrail_mode;
        let function_service = crate::runner::function::stack(&typed.function_layers, &guardrails.tool, &config.retry);
        if let crate::plan::DecisionPolicy::PlanAndExecute(p) = &config.policy {
            if config.finalization == FinalizationMode::Disabled {
                return Err(BuildError::StrictPolicyWithoutFinalization);
            }
            if config.limits.max_steps == 0 || p.generator.max_steps == 0 {
                return Err(BuildError::StrictPolicyZeroSteps);
            }
            if config.limits.max_step_attempts == 0 {
                return Err(BuildError::StrictPolicyZeroStepAttempts);
            }
            if !typed.handoffs.is_empty() {
                return Err(BuildError::StrictPolicyWithHandoffs {
                    count: typed.handoffs.len(),
                });
            }
        }
        let policy_tag = match &config.policy {
            crate::plan::DecisionPolicy::Standard => "standard/1",
            crate::plan::DecisionPolicy::PlanAndExecute(p) => p.fingerprint_tag(),
        };
        // A run resumed after a handoff continues with the target: its name and its own
        // fingerprint (tools, output, its handoffs) are part of what the checkpoint depends on.
        let handoffs: Vec<(&str, &str, &str)> = typed
            .handoffs
            .iter()
            .map(|h| (h.tool_name.as_str(), h.target.name(), h.target.fingerprint()))
            .collect();
        let fingerprint = Arc::from(fingerprint(&entries, &handoffs, typed.codec.as_ref(), policy_tag));
        let instructions = match (typed.instructions_fn, config.instructions) {
            (Some(f), _) => Some(Instructions::Dynamic(f)),
            (None, Some(text)) => Some(Instructions::Static(text)),
            (None, None) => None,
        };
        let agent_layers = typed.agent_layers;
        Ok(Agent {
            inner: Arc::new_cyclic(|weak| AgentInner {
                agent_service: crate::runner::start::agent_stack(weak, &agent_layers),
                name: config.name,
                instructions,
                model: config.model,
                tools: entries,
                tool_index: std::sync::OnceLock::new(),
                offered_names: std::sync::OnceLock::new(),
                tool_providers: typed.tool_providers,
                context_providers: typed.context_providers,
                codec: typed.codec,
                retry: config.retry,
                limits: config.limits,
                finalization: config.finalization,
                policy: config.policy,
                settings: config.settings,
                sink: config.sink,
                conversations: config.conversations,
                memory: config.memory,
                memory_is_default: config.memory_is_default,
                checkpoints: config.checkpoints,
                leases: config.leases,
                edits: crate::runner::edits::EditLocks::default(),
                authorizer: config.authorizer,
                fingerprint,
                chat,
                planner_chat,
                function_service,
                handoffs: typed.handoffs,
                guardrails,
                compaction: config.compaction,
            }),
        })
    }
}

fn fingerprint<C, O: Send + 'static>(
    tools: &[ToolEntry<C>],
    handoffs: &[(&str, &str, &str)],
    codec: &dyn OutputCodec<Output = O>,
    policy: &str,
) -> String {
    // A stable hash of a canonical description.
    let mut names: Vec<(String, String)> = tools
        .iter()
        .map(|t| (t.tool.spec().name.clone(), sorted_json(&t.tool.spec().parameters)))
        .collect();
    names.sort();
    let mut desc = serde_json::json!({
        "policy": policy,
        "tools": names,
        "output": codec.response_format().map(|f| f.schema),
    });
    // Tools with state of their own in a checkpoint (an agent as a tool: its agent's
    // fingerprint). Absent when there are none, so other agents' fingerprints stay as they were.
    let mut nested: Vec<(String, String)> = tools
        .iter()
        .filter_map(|t| Some((t.tool.spec().name.clone(), t.tool.fingerprint()?.to_owned())))
        .collect();
    if !nested.is_empty() {
        nested.sort();
        desc["nested"] = serde_json::json!(nested);
    }
    // Handoff targets (tool name, agent name, fingerprint); absent without handoffs, likewise.
    if !handoffs.is_empty() {
        let mut handoffs = handoffs.to_vec();
        handoffs.sort();
        desc["handoffs"] = serde_json::json!(handoffs);
    }
    crate::canonical::stable_hash(&sorted_json(&desc))
}

/// `value` as JSON text with every object's keys in sorted order, whatever order they were
/// built or parsed in (serde_json keeps insertion order): the text fingerprints were always
/// hashed from, so checkpoints saved by earlier versions still resume.
fn sorted_json(value: &serde_json::Value) -> String {
    let mut value = value.clone();
    value.sort_all_objects();
    value.to_string()
}
