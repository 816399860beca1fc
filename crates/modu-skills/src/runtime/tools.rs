//! The tool-provider half of [`SkillsProvider`]: the resource tools [`READ_TOOL`] and
//! [`SEARCH_TOOL`], limited per run by [`SkillLimits`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use modu_core::tool_provider::{StaticToolSession, ToolProvider, ToolProviderError, ToolSession};
use modu_core::{RunContext, Tool, ToolError, ToolErrorKind, ToolSpec};
use serde_json::{Value, json};

use super::{READ_TOOL, RunSkills, RunTable, SEARCH_TOOL, SkillLimits, SkillsProvider};
use crate::error::SkillError;
use crate::registry::Skill;

#[async_trait]
impl<C: Send + Sync + 'static> ToolProvider<C> for SkillsProvider {
    fn name(&self) -> &str {
        "skills"
    }

    async fn open(&self, _ctx: &RunContext<C>) -> Result<Box<dyn ToolSession<C>>, ToolProviderError> {
        let read: Arc<dyn Tool<C>> = Arc::new(ReadTool {
            spec: read_spec(),
            runs: Arc::clone(&self.runs),
            limits: self.limits.clone(),
        });
        let search: Arc<dyn Tool<C>> = Arc::new(SearchTool {
            spec: search_spec(),
            runs: Arc::clone(&self.runs),
            limits: self.limits.clone(),
        });
        Ok(Box::new(StaticToolSession::new(vec![read, search])))
    }
}

fn read_spec() -> ToolSpec {
    ToolSpec::new(
        READ_TOOL,
        "Read part of a resource file of an active skill (a path under references/ or assets/). \
         Returns the text from `offset` (bytes), at most `length` bytes (at least one whole character), and `next_offset` when more follows.",
        json!({
            "type": "object",
            "properties": {
                "skill": {"type": "string", "description": "The skill's name."},
                "path": {"type": "string", "description": "The file, e.g. references/policy.md."},
                "offset": {"type": "integer", "minimum": 0, "description": "Byte offset to start at (default 0)."},
                "length": {"type": "integer", "minimum": 1, "description": "Most bytes to return."}
            },
            "required": ["skill", "path"],
            "additionalProperties": false
        }),
    )
    .idempotent(true)
    .exempt_from_tool_limit(true)
}

fn search_spec() -> ToolSpec {
    ToolSpec::new(
        SEARCH_TOOL,
        "Search the resource files (references/, assets/) of the active skills for a text, case-insensitively. \
         Returns matching lines with their file and line number.",
        json!({
            "type": "object",
            "properties": {
                "skill": {"type": "string", "description": "Only this skill (default: every active skill)."},
                "query": {"type": "string", "minLength": 1, "description": "The text to look for."}
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    )
    .idempotent(true)
    .exempt_from_tool_limit(true)
}

/// Finds the run, counts one resource read against the limit, and returns the run's skills.
fn begin_read(runs: &RunTable, run_id: &str, limits: &SkillLimits) -> Result<Arc<RunSkills>, ToolError> {
    let state = runs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(run_id)
        .cloned()
        .ok_or_else(|| {
            ToolError::new(ToolErrorKind::Execution, "skills_not_active")
                .with_message("no skills are active in this run (is the skills context provider installed?)")
        })?;
    let n = state.reads.fetch_add(1, Ordering::SeqCst) + 1;
    if n > limits.max_resource_reads {
        return Err(
            ToolError::new(ToolErrorKind::LimitExceeded, "skill_resource_limit").with_message(format!(
                "this run has used its {} skill resource reads; answer with what you have",
                limits.max_resource_reads
            )),
        );
    }
    Ok(state)
}

fn find_skill<'a>(state: &'a RunSkills, name: &str) -> Result<&'a Arc<Skill>, ToolError> {
    state.active.iter().find(|s| s.name() == name).ok_or_else(|| {
        let active: Vec<&str> = state.active.iter().map(|s| s.name()).collect();
        ToolError::new(ToolErrorKind::NotFound, "skill_not_active").with_message(format!(
            "skill {name:?} is not active in this run; active skills: {}",
            if active.is_empty() {
                "none".to_owned()
            } else {
                active.join(", ")
            }
        ))
    })
}

fn resource_error(e: SkillError) -> ToolError {
    match e {
        SkillError::PathRefused { reason, message, .. } => {
            ToolError::validation(format!("path_refused_{}", reason.id()), message)
        }
        SkillError::NotFound { .. } => ToolError::new(ToolErrorKind::NotFound, "no_such_resource")
            .with_message("the skill has no such file; the instructions list its resources"),
        SkillError::Validation { rule, .. } => {
            ToolError::new(ToolErrorKind::Execution, format!("resource_invalid_{}", rule.id()))
        }
        _ => ToolError::new(ToolErrorKind::Execution, "resource_unreadable"),
    }
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

struct ReadTool {
    spec: ToolSpec,
    runs: Arc<RunTable>,
    limits: SkillLimits,
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for ReadTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &RunContext<C>, args: Value) -> Result<Value, ToolError> {
        let state = begin_read(&self.runs, ctx.run_id(), &self.limits)?;
        let name = str_arg(&args, "skill").unwrap_or_default();
        let path = str_arg(&args, "path").unwrap_or_default();
        let skill = find_skill(&state, name)?;
        let text = skill.read_resource(path).map_err(resource_error)?;
        let total = text.len();
        let mut start = args
            .get("offset")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(total as u64) as usize;
        while !text.is_char_boundary(start) {
            start += 1;
        }
        let want = args
            .get("length")
            .and_then(Value::as_u64)
            .map_or(self.limits.max_read_bytes, |l| {
                (l as usize).min(self.limits.max_read_bytes)
            });
        let mut end = start.saturating_add(want).min(total);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        // At least one whole character when any is left: a range too short for the character
        // at `offset` (`length: 1` on a 3-byte one) would otherwise return nothing with
        // `next_offset` equal to `offset`, and a model paging on would ask the same forever.
        if end == start && start < total {
            end = start + 1;
            while !text.is_char_boundary(end) {
                end += 1;
            }
        }
        let mut out = json!({
            "skill": name,
            "path": path,
            "offset": start,
            "length": end - start,
            "total_bytes": total,
            "content": &text[start..end],
        });
        if end < total {
            out["next_offset"] = json!(end);
        }
        Ok(out)
    }
}

struct SearchTool {
    spec: ToolSpec,
    runs: Arc<RunTable>,
    limits: SkillLimits,
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for SearchTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &RunContext<C>, args: Value) -> Result<Value, ToolError> {
        let state = begin_read(&self.runs, ctx.run_id(), &self.limits)?;
        let query = str_arg(&args, "query").unwrap_or_default().trim().to_lowercase();
        if query.is_empty() {
            return Err(ToolError::validation("empty_query", "give a non-empty query"));
        }
        let skills: Vec<&Arc<Skill>> = match str_arg(&args, "skill") {
            Some(name) => vec![find_skill(&state, name)?],
            None => state.active.iter().collect(),
        };
        let mut matches = Vec::new();
        let mut truncated = false;
        'outer: for skill in skills {
            for path in skill.resources() {
                // A file that cannot be read now (changed, swapped for a link) is skipped.
                let Ok(text) = skill.read_resource(path) else {
                    continue;
                };
                for (i, line) in text.lines().enumerate() {
                    if line.to_lowercase().contains(&query) {
                        if matches.len() >= self.limits.max_search_results {
                            truncated = true;
                            break 'outer;
                        }
                        let shown: String = line.trim().chars().take(240).collect();
                        matches.push(json!({
                            "skill": skill.name(),
                            "path": path,
                            "line": i + 1,
                            "text": shown,
                        }));
                    }
                }
            }
        }
        Ok(json!({ "query": query, "matches": matches, "truncated": truncated }))
    }
}
