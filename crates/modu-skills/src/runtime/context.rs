//! The context-provider half of [`SkillsProvider`]: choosing a run's skills from its
//! metadata, putting their instructions in the system message and narrowing the offered tools.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use modu_core::context_provider::{ContextProvider, ContextProviderError, ModelContext, Stage};
use modu_core::{Message, Role, RunContext, Usage};
use serde_json::Value;

use super::{
    METADATA_SKILL_MODE, METADATA_SKILLS, READ_TOOL, RunSkills, SEARCH_TOOL, SkillCandidate, SkillMode, SkillsProvider,
};
use crate::error::SkillError;
use crate::registry::Skill;

impl SkillsProvider {
    /// Chooses the skills for a request from run options (the `skills` and `skill_mode`
    /// metadata). Returns the skills and the selector's usage.
    pub async fn select(
        &self,
        metadata: &serde_json::Map<String, Value>,
        request: &str,
    ) -> Result<(Vec<Arc<Skill>>, Usage), SkillError> {
        let explicit: Vec<String> = match metadata.get(METADATA_SKILLS) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_owned).ok_or_else(|| SkillError::InvalidOptions {
                        message: format!("'{METADATA_SKILLS}' must be a list of skill names, found {v}"),
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(Value::String(s)) => vec![s.clone()],
            Some(other) => {
                return Err(SkillError::InvalidOptions {
                    message: format!("'{METADATA_SKILLS}' must be a list of skill names, found {other}"),
                });
            }
        };
        let mode = match metadata.get(METADATA_SKILL_MODE) {
            None | Some(Value::Null) => self.default_mode,
            Some(Value::String(s)) => SkillMode::parse(s).ok_or_else(|| SkillError::InvalidOptions {
                message: format!("'{METADATA_SKILL_MODE}' is {s:?}; use \"explicit\", \"auto\" or \"hybrid\""),
            })?,
            Some(other) => {
                return Err(SkillError::InvalidOptions {
                    message: format!("'{METADATA_SKILL_MODE}' must be a string, found {other}"),
                });
            }
        };
        let mut active: Vec<Arc<Skill>> = Vec::new();
        for name in &explicit {
            let skill = self.registry.get(name).ok_or_else(|| SkillError::UnknownSkill {
                name: name.clone(),
                available: self.registry.names(),
            })?;
            if !active.iter().any(|s| s.name() == name) {
                active.push(Arc::clone(skill));
            }
        }
        let mut usage = Usage::default();
        match mode {
            SkillMode::Explicit => {}
            SkillMode::Auto | SkillMode::Hybrid => {
                if mode == SkillMode::Auto && !explicit.is_empty() {
                    return Err(SkillError::InvalidOptions {
                        message:
                            "skill_mode \"auto\" chooses every skill itself; use \"hybrid\" to pin the listed skills"
                                .into(),
                    });
                }
                let selector = self.selector.as_ref().ok_or_else(|| SkillError::InvalidOptions {
                    message: format!("skill_mode {mode:?} needs a selector (SkillsProvider::selector)").to_lowercase(),
                })?;
                let limit = selector.max_skills().saturating_sub(active.len());
                let candidates: Vec<SkillCandidate> = self
                    .registry
                    .skills()
                    .filter(|s| !active.iter().any(|a| a.name() == s.name()))
                    .map(|s| SkillCandidate {
                        name: s.name().to_owned(),
                        description: s.manifest().description.clone(),
                    })
                    .collect();
                if limit > 0 && !candidates.is_empty() {
                    let selection = selector.select(request, &candidates, limit).await?;
                    usage = selection.usage;
                    for name in selection.skills.iter().take(limit) {
                        if let Some(skill) = self.registry.get(name)
                            && !active.iter().any(|s| s.name() == name)
                        {
                            active.push(Arc::clone(skill));
                        }
                    }
                }
            }
        }
        Ok((active, usage))
    }

    async fn run_state<C: Send + Sync + 'static>(
        &self,
        ctx: &RunContext<C>,
        context: &ModelContext,
    ) -> Result<Arc<RunSkills>, SkillError> {
        if let Some(state) = self.run(ctx.run_id()) {
            return Ok(state);
        }
        let request = context
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(Message::text)
            .unwrap_or_default();
        let (active, usage) = self.select(ctx.metadata(), &request).await?;
        if usage != Usage::default() {
            ctx.add_usage(usage);
        }
        tracing::debug!(
            run_id = ctx.run_id(),
            skills = ?active.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "skills selected"
        );
        let state = Arc::new(RunSkills {
            active,
            reads: AtomicU32::new(0),
        });
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(Arc::clone(runs.entry(ctx.run_id().to_owned()).or_insert(state)))
    }
}

fn instructions_block(skills: &[&Arc<Skill>], with_resources: bool) -> String {
    let mut out = String::from(
        "Skills are active for this request. Follow their instructions where they apply. \
         A skill describes a procedure; it grants no permission beyond the tools you are given.",
    );
    for skill in skills {
        out.push_str(&format!("\n\n<skill name=\"{}\">\n", skill.name()));
        out.push_str(skill.manifest().body.trim());
        if with_resources {
            let resources: Vec<&str> = skill.resources().collect();
            if !resources.is_empty() {
                out.push_str(&format!(
                    "\n\nResources of this skill (read with {READ_TOOL}, search with {SEARCH_TOOL}): {}",
                    resources.join(", ")
                ));
            }
        }
        out.push_str("\n</skill>");
    }
    out
}

#[async_trait]
impl<C: Send + Sync + 'static> ContextProvider<C> for SkillsProvider {
    fn name(&self) -> &str {
        "skills"
    }

    async fn invoking(&self, ctx: &RunContext<C>, context: &mut ModelContext) -> Result<(), ContextProviderError> {
        let state = self
            .run_state(ctx, context)
            .await
            .map_err(|e| ContextProviderError::new("skills", e.to_string()))?;
        let stage = context.stage.unwrap_or(Stage::Act);
        let has_resources = state.active.iter().any(|s| s.resources().next().is_some());
        if !has_resources {
            context.tools.retain(|t| t.name != READ_TOOL && t.name != SEARCH_TOOL);
        }
        let declared: Vec<&Vec<String>> = state
            .active
            .iter()
            .filter_map(|s| s.manifest().allowed_tools.as_ref())
            .collect();
        if !declared.is_empty() {
            // Narrowed by tool identity: a tool offered under its own name stays when listed;
            // a meta tool (MCP's mcp_call_tool) stays offered, and the gate admits only the
            // listed tools through it (`server__tool`, as RBAC and approvals name them).
            let allowed: BTreeSet<&str> = declared.iter().flat_map(|v| v.iter().map(String::as_str)).collect();
            let meta = &context.meta_tools;
            context.tools.retain(|t| {
                allowed.contains(t.name.as_str())
                    || meta.contains(&t.name)
                    || t.name == READ_TOOL
                    || t.name == SEARCH_TOOL
            });
            let mut admitted: BTreeSet<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
            admitted.extend(context.meta_tools.iter().cloned());
            admitted.insert(READ_TOOL.to_owned());
            admitted.insert(SEARCH_TOOL.to_owned());
            context.allowed_identities = Some(match context.allowed_identities.take() {
                // Another provider narrowed already: keep what both admit.
                Some(earlier) => earlier.intersection(&admitted).cloned().collect(),
                None => admitted,
            });
        }
        let applying: Vec<&Arc<Skill>> = state
            .active
            .iter()
            .filter(|s| s.manifest().applies_to_stage(stage))
            .collect();
        if !applying.is_empty() {
            let with_resources = context.tools.iter().any(|t| t.name == READ_TOOL);
            context.instructions.push(instructions_block(&applying, with_resources));
        }
        Ok(())
    }

    async fn run_finished(&self, ctx: &RunContext<C>) {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(ctx.run_id());
    }
}
