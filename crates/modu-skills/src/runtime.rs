//! Skills in a run: selection, instructions, tool narrowing and the resource tools.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use modu_agent::{AgentBuilder, Fixed};
use modu_core::{
    ChatModel, ChatRequest, Message, ResponseFormat, Role, RunContext, Tool, ToolError, ToolErrorKind, ToolSpec, Usage,
};
use modu_core::{
    context_provider::{ContextProvider, ContextProviderError, ModelContext, Stage},
    tool_provider::{StaticToolSession, ToolProvider, ToolProviderError, ToolSession},
};
use serde_json::{Value, json};

use crate::error::SkillError;
use crate::registry::{Skill, SkillRegistry};

/// The run metadata key listing skills to activate (`["invoice-review"]`).
pub const METADATA_SKILLS: &str = "skills";
/// The run metadata key choosing the selection mode (`"explicit"`, `"auto"`, `"hybrid"`).
pub const METADATA_SKILL_MODE: &str = "skill_mode";
/// The name of the tool that reads a skill resource.
pub const READ_TOOL: &str = "modu_skill_read";
/// The name of the tool that searches skill resources.
pub const SEARCH_TOOL: &str = "modu_skill_search";

/// Per-run limits of skill use.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkillLimits {
    /// Calls of the resource tools (reads and searches) per run. They count here, not against
    /// the agent's `max_tool_calls` (their specs are `exempt_from_tool_limit`).
    pub max_resource_reads: u32,
    /// The most bytes one read returns.
    pub max_read_bytes: usize,
    /// The most matches one search returns.
    pub max_search_results: usize,
}

impl Default for SkillLimits {
    fn default() -> Self {
        SkillLimits {
            max_resource_reads: 16,
            max_read_bytes: 8 * 1024,
            max_search_results: 10,
        }
    }
}

impl SkillLimits {
    /// Sets `max_resource_reads`.
    pub fn max_resource_reads(mut self, n: u32) -> Self {
        self.max_resource_reads = n;
        self
    }
    /// Sets `max_read_bytes`.
    pub fn max_read_bytes(mut self, n: usize) -> Self {
        self.max_read_bytes = n.max(1);
        self
    }
    /// Sets `max_search_results`.
    pub fn max_search_results(mut self, n: usize) -> Self {
        self.max_search_results = n;
        self
    }
}

/// How a run's skills are chosen (`skill_mode` in the run metadata).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SkillMode {
    /// Only the skills listed in `skills` (the default).
    #[default]
    Explicit,
    /// The selector chooses from names and descriptions.
    Auto,
    /// The listed skills, plus what the selector adds up to its maximum.
    Hybrid,
}

impl SkillMode {
    fn parse(s: &str) -> Option<SkillMode> {
        match s {
            "explicit" => Some(SkillMode::Explicit),
            "auto" => Some(SkillMode::Auto),
            "hybrid" => Some(SkillMode::Hybrid),
            _ => None,
        }
    }
}

/// What a selector sees of a skill: its name and description, nothing else.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SkillCandidate {
    /// The skill's name.
    pub name: String,
    /// The skill's description.
    pub description: String,
}

/// A selector's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SkillSelection {
    /// The chosen skill names.
    pub skills: Vec<String>,
    /// What choosing cost (added to the run's usage).
    pub usage: Usage,
}

/// Chooses skills for a request (`skill_mode: auto` and `hybrid`).
#[async_trait]
pub trait SkillSelector: Send + Sync {
    /// The most skills one run gets from this selector (pinned ones included, in hybrid mode).
    fn max_skills(&self) -> usize;

    /// Chooses at most `limit` of `candidates` for `request`.
    async fn select(
        &self,
        request: &str,
        candidates: &[SkillCandidate],
        limit: usize,
    ) -> Result<SkillSelection, SkillError>;
}

/// Selects skills with a separate model call: structured output (a JSON schema whose names are
/// an enum of the candidates), **no tools**, and only names and descriptions in the prompt. It
/// never disturbs the run's own tool calling or output format.
#[derive(Clone)]
pub struct ModelSkillSelector {
    /// The model asked (it may be the agent's own).
    pub model: Arc<dyn ChatModel>,
    /// The most skills per run.
    pub max_skills: usize,
}

impl ModelSkillSelector {
    /// A selector asking `model` for at most `max_skills` skills.
    pub fn new(model: Arc<dyn ChatModel>, max_skills: usize) -> Self {
        ModelSkillSelector { model, max_skills }
    }

    /// The request sent to the model (public so it can be inspected and tested).
    pub fn request(request: &str, candidates: &[SkillCandidate], limit: usize) -> ChatRequest {
        let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
        let listing = serde_json::to_string_pretty(candidates).unwrap_or_default();
        let system = format!(
            "You choose which skills help with a user's request. A skill is a documented procedure; \
             choose a skill only when its description fits the request. Choose at most {limit}, \
             most relevant first, or none. Answer only with JSON: {{\"skills\": [names]}}."
        );
        let user = format!("Request:\n{request}\n\nAvailable skills:\n{listing}");
        let schema = json!({
            "type": "object",
            "properties": {
                "skills": {
                    "type": "array",
                    "items": {"type": "string", "enum": names},
                    "description": format!("At most {limit} skill names, most relevant first."),
                }
            },
            "required": ["skills"],
            "additionalProperties": false,
        });
        let mut req = ChatRequest::new(vec![Message::system(system), Message::user(user)])
            .with_response_format(ResponseFormat::new("skill_selection", schema));
        req.temperature = Some(0.0);
        req
    }
}

impl std::fmt::Debug for ModelSkillSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSkillSelector")
            .field("model", &self.model.model_name())
            .field("max_skills", &self.max_skills)
            .finish()
    }
}

#[async_trait]
impl SkillSelector for ModelSkillSelector {
    fn max_skills(&self) -> usize {
        self.max_skills
    }

    async fn select(
        &self,
        request: &str,
        candidates: &[SkillCandidate],
        limit: usize,
    ) -> Result<SkillSelection, SkillError> {
        if limit == 0 || candidates.is_empty() {
            return Ok(SkillSelection::default());
        }
        let req = Self::request(request, candidates, limit);
        let response = self.model.complete(req).await.map_err(|e| SkillError::Selection {
            message: format!("the selector model call failed ({}): {e}", e.kind()),
        })?;
        let text = response.message.text();
        let trimmed = strip_fences(&text);
        let value: Value = serde_json::from_str(trimmed).map_err(|e| SkillError::Selection {
            message: format!("the selector's answer is not JSON: {e}"),
        })?;
        let names = value
            .get("skills")
            .and_then(Value::as_array)
            .ok_or_else(|| SkillError::Selection {
                message: "the selector's answer has no \"skills\" list".into(),
            })?;
        let mut chosen: Vec<String> = Vec::new();
        for name in names.iter().filter_map(Value::as_str) {
            // Names outside the candidates are ignored (the schema forbids them anyway).
            if candidates.iter().any(|c| c.name == name) && !chosen.iter().any(|c| c == name) {
                chosen.push(name.to_owned());
            }
        }
        chosen.truncate(limit);
        Ok(SkillSelection {
            skills: chosen,
            usage: response.usage,
        })
    }
}

fn strip_fences(text: &str) -> &str {
    let t = text.trim();
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .map(|rest| rest.trim_end().trim_end_matches("```"))
        .unwrap_or(t);
    t.trim()
}

/// The skills of one run and its resource-read counter.
struct RunSkills {
    active: Vec<Arc<Skill>>,
    reads: AtomicU32,
}

type RunTable = Mutex<HashMap<String, Arc<RunSkills>>>;

/// Adds skills to an agent: a [`ContextProvider`] that selects the run's skills and puts
/// their instructions in the model's system message (never in the conversation), and a
/// [`ToolProvider`] for the resource tools [`READ_TOOL`] and [`SEARCH_TOOL`].
///
/// Install both halves with [`SkillsProvider::install`]. The selection is made before the
/// run's first model call, from the run metadata (`skills`, `skill_mode`), cached by run id
/// and dropped when the run ends.
#[derive(Clone)]
pub struct SkillsProvider {
    registry: Arc<SkillRegistry>,
    selector: Option<Arc<dyn SkillSelector>>,
    limits: SkillLimits,
    default_mode: SkillMode,
    runs: Arc<RunTable>,
}

impl std::fmt::Debug for SkillsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillsProvider")
            .field("skills", &self.registry.names())
            .field("limits", &self.limits)
            .field("default_mode", &self.default_mode)
            .finish_non_exhaustive()
    }
}

impl SkillsProvider {
    /// Skills from this registry (or a shared `Arc<SkillRegistry>`), explicit selection,
    /// default limits.
    pub fn new(registry: impl Into<Arc<SkillRegistry>>) -> Self {
        SkillsProvider {
            registry: registry.into(),
            selector: None,
            limits: SkillLimits::default(),
            default_mode: SkillMode::Explicit,
            runs: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The selector for `auto` and `hybrid` runs.
    pub fn selector(mut self, selector: impl SkillSelector + 'static) -> Self {
        self.selector = Some(Arc::new(selector));
        self
    }

    /// Per-run limits.
    pub fn limits(mut self, limits: SkillLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The mode of runs whose metadata has no `skill_mode` (default explicit).
    pub fn default_mode(mut self, mode: SkillMode) -> Self {
        self.default_mode = mode;
        self
    }

    /// The registry.
    pub fn registry(&self) -> &SkillRegistry {
        &self.registry
    }

    /// Adds this provider to an agent as both context provider and tool provider.
    pub fn install<C, O, S>(&self, builder: AgentBuilder<C, O, S>) -> AgentBuilder<C, O, Fixed>
    where
        C: Send + Sync + 'static,
        O: Send + 'static,
    {
        builder.context_provider(self.clone()).tool_provider(self.clone())
    }

    /// The active skills of a run in progress (`None` before selection or after the run).
    pub fn active_skills(&self, run_id: &str) -> Option<Vec<String>> {
        self.run(run_id)
            .map(|r| r.active.iter().map(|s| s.name().to_owned()).collect())
    }

    /// How many resource reads a run in progress has made.
    pub fn resource_reads(&self, run_id: &str) -> Option<u32> {
        self.run(run_id).map(|r| r.reads.load(Ordering::SeqCst))
    }

    /// How many runs hold a cached selection (0 when no run is in progress).
    pub fn cached_runs(&self) -> usize {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    fn run(&self, run_id: &str) -> Option<Arc<RunSkills>> {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(run_id)
            .cloned()
    }

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
         Returns the text from `offset` (bytes), at most `length` bytes, and `next_offset` when more follows.",
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
