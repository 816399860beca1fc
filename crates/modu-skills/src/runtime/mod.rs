//! Skills in a run: selection, instructions, tool narrowing and the resource tools.
//!
//! This module holds the limits, the modes and [`SkillsProvider`] with its per-run state;
//! the selectors, the context-provider half and the resource tools live in its submodules.

mod context;
mod selector;
mod tools;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use modu_agent::{AgentBuilder, Fixed};
#[cfg(doc)] // the targets of doc links
use modu_core::{context_provider::ContextProvider, tool_provider::ToolProvider};

use crate::registry::{Skill, SkillRegistry};

pub use selector::{ModelSkillSelector, SkillCandidate, SkillSelection, SkillSelector};

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
}
