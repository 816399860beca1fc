//! The serialisable state of a run: what a checkpoint holds besides its header, with the
//! decision policy's own state tagged by policy (`state.policy = {id, state}`, schema 3).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use tokio::time::Instant;

use crate::agent::settings::ModelSettings;
use crate::approval::{ApprovalDecision, ApprovalRequest, NestedPause};
use crate::context::UserContext;
use crate::input::{InputAnswer, InputRequest};
use crate::message::{Message, Role, ToolCall, Usage};
use crate::model::ToolDefinition;
use crate::plan::state::StrictState;
use crate::store::CheckpointStatus;

/// The version of the checkpoint format written by this crate.
///
/// 2 added the strict Plan-and-Execute state (`state.strict`); 3 keeps the decision policy's
/// state in `state.policy = {"id": "standard/1" | "plan_and_execute/1", "state": …}` instead of
/// `state.phase` and `state.strict`. Versions 1 and 2 are migrated when read.
pub const CHECKPOINT_SCHEMA_VERSION: u32 = 3;

/// The oldest checkpoint format this crate reads.
pub(crate) const OLDEST_READABLE_SCHEMA_VERSION: u32 = 1;

/// Where the standard policy is (its state inside `state.policy`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub(crate) enum Phase {
    /// Asking the model, running the tools it calls.
    Act,
    /// The tool loop ended with this draft; the final request is next.
    Finalize { draft: String },
}

/// The serialisable state of a run (what a checkpoint holds besides its header).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunState {
    /// The run's messages: input, tool calls, tool results, answer.
    pub(crate) messages: Vec<Message>,
    /// How many messages the session held when the run started (a leased run appends its
    /// messages right there, so a claim can tell whether a dead worker's run was already
    /// stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) history_len: Option<usize>,
    /// How many of `messages` are the run's input, when the input holds a tool call of its own
    /// (a transcript passed with `AgentRequest::messages`): a forced tool choice lasts until the
    /// model's first tool call *of the run*, after them. `None`: the input holds no tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input_len: Option<usize>,
    /// The decision policy's own state: `{"id": "standard/1" | "plan_and_execute/1", "state"}`.
    pub(crate) policy: PolicyState,
    pub(crate) usage: Usage,
    /// `usage` of the run's model calls by model (absent from checkpoints written before it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) usage_by_model: BTreeMap<String, Usage>,
    pub(crate) model_calls: u32,
    pub(crate) turns: u32,
    pub(crate) tool_calls: u32,
    /// Results of the current tool batch that already finished (by call id).
    #[serde(default)]
    pub(crate) pending_results: CallResults,
    /// People's decisions on calls that need approval (by call id).
    #[serde(default)]
    pub(crate) decisions: BTreeMap<String, ApprovalDecision>,
    /// Tools approved for the rest of the run.
    #[serde(default)]
    pub(crate) always_approved: BTreeSet<String>,
    /// Calls waiting for a decision (the run is paused while this is not empty).
    #[serde(default)]
    pub(crate) interruptions: Vec<ApprovalRequest>,
    /// Calls waiting for a person's input (the run is paused while this is not empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) input_requests: Vec<InputRequest>,
    /// People's answers to the calls' asks, in the order asked (by call id).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) inputs: BTreeMap<String, Vec<InputAnswer>>,
    /// Nested runs (agent-as-tool) paused for approvals, by the parent's call id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) nested: BTreeMap<String, NestedPause>,
    /// The tools offered and the identities admitted in the last standard request, so a
    /// batch resumed in another process is checked as it would have been.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) offered: Option<ToolNames>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) admitted: Option<BTreeSet<String>>,
    /// The agent answering after a handoff (`None`: the agent the run started with).
    #[serde(default)]
    pub(crate) active_agent: Option<String>,
    /// The input guardrails have not passed yet: set for a fresh run with input guardrails until
    /// they pass, so a run cancelled (or failed) before its first request checks its input when
    /// it is resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) input_unchecked: bool,
    /// The run's own sampling settings, over the agent's ([`crate::AgentRequest::model_settings`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) settings: Option<ModelSettings>,
}

/// A decision policy's state inside a checkpoint (schema 3: `state.policy`), tagged with the
/// policy and the version of its layout.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "id", content = "state")]
pub(crate) enum PolicyState {
    /// The standard policy: where its loop is.
    #[serde(rename = "standard/1")]
    Standard(Phase),
    /// Strict Plan-and-Execute: its state machine.
    #[serde(rename = "plan_and_execute/1")]
    PlanAndExecute(Box<StrictState>),
}

impl RunState {
    /// The standard policy's phase (`Act` for a strict run).
    pub(crate) fn phase(&self) -> Phase {
        match &self.policy {
            PolicyState::Standard(phase) => phase.clone(),
            PolicyState::PlanAndExecute(_) => Phase::Act,
        }
    }

    pub(crate) fn set_phase(&mut self, phase: Phase) {
        self.policy = PolicyState::Standard(phase);
    }

    /// The strict state, once a strict run has started.
    pub(crate) fn strict(&self) -> Option<&StrictState> {
        match &self.policy {
            PolicyState::PlanAndExecute(state) => Some(state),
            PolicyState::Standard(_) => None,
        }
    }

    pub(crate) fn strict_mut(&mut self) -> Option<&mut StrictState> {
        match &mut self.policy {
            PolicyState::PlanAndExecute(state) => Some(state),
            PolicyState::Standard(_) => None,
        }
    }

    /// The strict state, started when there is none yet.
    pub(crate) fn strict_or_init(&mut self) -> &mut StrictState {
        self.strict_and_pending().0
    }

    /// The strict state (started when there is none yet) and the finished results of the
    /// current batch, borrowed together.
    pub(crate) fn strict_and_pending(&mut self) -> (&mut StrictState, &mut CallResults) {
        if let PolicyState::Standard(_) = self.policy {
            self.policy = PolicyState::PlanAndExecute(Box::new(StrictState::new()));
        }
        let pending = &mut self.pending_results;
        match &mut self.policy {
            PolicyState::PlanAndExecute(state) => (state, pending),
            PolicyState::Standard(_) => unreachable!("started just above"),
        }
    }

    /// What a checkpoint of this state says about the run (a failure is recorded by the caller).
    pub(crate) fn status(&self) -> CheckpointStatus {
        if self.strict().is_some_and(|s| s.is_done()) {
            CheckpointStatus::Done
        } else if self.interruptions.is_empty() && self.input_requests.is_empty() {
            CheckpointStatus::Running
        } else {
            CheckpointStatus::Paused
        }
    }
}

impl RunState {
    /// A run's state before its first step: `messages` are its input.
    pub(crate) fn new(messages: Vec<Message>) -> Self {
        let input_len = messages
            .iter()
            .any(|m| m.role == Role::Assistant && m.has_tool_calls())
            .then_some(messages.len());
        RunState {
            messages,
            history_len: None,
            input_len,
            policy: PolicyState::Standard(Phase::Act),
            usage: Usage::default(),
            usage_by_model: BTreeMap::new(),
            model_calls: 0,
            turns: 0,
            tool_calls: 0,
            pending_results: CallResults::default(),
            decisions: BTreeMap::new(),
            always_approved: BTreeSet::new(),
            interruptions: Vec::new(),
            input_requests: Vec::new(),
            input_unchecked: false,
            inputs: BTreeMap::new(),
            nested: BTreeMap::new(),
            offered: None,
            admitted: None,
            active_agent: None,
            settings: None,
        }
    }

    /// The tool calls of the last assistant message of the run (they have no result yet).
    pub(crate) fn unanswered_tool_calls(&self) -> Option<Vec<ToolCall>> {
        let last = self.messages.last()?;
        (last.role == Role::Assistant && last.has_tool_calls()).then(|| last.tool_calls.clone())
    }
}

/// The results of the current tool batch that already finished, by call id.
///
/// A batch has a few calls, so they are kept in a vector: a map's first node for these
/// entries is about 1.4 KB, allocated by every run that calls a tool. Checkpoints hold it as
/// the map it always was (a JSON object, keys in order).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct CallResults(Vec<(String, Message)>);

impl CallResults {
    fn position(&self, call_id: &str) -> Option<usize> {
        self.0.iter().position(|(id, _)| id == call_id)
    }

    /// Whether the call `call_id` has its result.
    pub(crate) fn contains_key(&self, call_id: &str) -> bool {
        self.position(call_id).is_some()
    }

    /// The result of the call `call_id`.
    pub(crate) fn get(&self, call_id: &str) -> Option<&Message> {
        self.position(call_id).map(|i| &self.0[i].1)
    }

    /// Records the result of the call `call_id` (replacing an earlier one).
    pub(crate) fn insert(&mut self, call_id: String, message: Message) {
        match self.position(&call_id) {
            Some(i) => self.0[i].1 = message,
            None => self.0.push((call_id, message)),
        }
    }

    /// Takes the result of the call `call_id` out.
    pub(crate) fn remove(&mut self, call_id: &str) -> Option<Message> {
        let i = self.position(call_id)?;
        Some(self.0.swap_remove(i).1)
    }

    /// Whether no call has its result.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for CallResults {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut sorted: Vec<&(String, Message)> = self.0.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        serializer.collect_map(sorted.into_iter().map(|(id, m)| (id, m)))
    }
}

impl<'de> Deserialize<'de> for CallResults {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, Message>::deserialize(deserializer)?;
        Ok(CallResults(map.into_iter().collect()))
    }
}

/// The names of the tools a request offered. Built when the offer changes and shared by the
/// run (its tool gate admits only these) and its state; checkpoints hold it as the set it
/// always was.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ToolNames(Arc<BTreeSet<String>>);

impl ToolNames {
    /// Whether `name` was offered.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// Whether these are exactly the names of `tools`.
    pub(crate) fn names_exactly(&self, tools: &[ToolDefinition]) -> bool {
        self.0.len() == tools.len() && tools.iter().all(|t| self.0.contains(&t.name))
    }
}

impl FromIterator<String> for ToolNames {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Self {
        ToolNames(Arc::new(names.into_iter().collect()))
    }
}

/// A checkpoint: the run state with what is needed to check and rebuild the run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Checkpoint {
    pub(crate) schema_version: u32,
    pub(crate) run_id: String,
    pub(crate) agent: String,
    pub(crate) fingerprint: String,
    #[serde(default)]
    pub(crate) session_id: Option<String>,
    #[serde(default)]
    pub(crate) user: UserContext,
    #[serde(default)]
    pub(crate) metadata: serde_json::Map<String, serde_json::Value>,
    pub(crate) state: RunState,
}

/// What a resumed run's request carries: the checkpoint, and when the run's clock started
/// (before the checkpoint was loaded, so the load counts toward the run's one timeout).
#[derive(Clone)]
pub(crate) struct Resume {
    pub(crate) checkpoint: Checkpoint,
    pub(crate) started: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, text: &str) -> Message {
        Message::tool_result(id, "add", text, false)
    }

    /// Checkpoints hold the batch's results as the map they were: the same JSON, keys in order,
    /// whatever order the calls finished in, and read back into the same results.
    #[test]
    fn call_results_are_written_and_read_as_the_map_checkpoints_hold() -> Result<(), serde_json::Error> {
        let mut results = CallResults::default();
        let mut map = BTreeMap::new();
        for (id, text) in [("call_b", "2"), ("call_c", "3"), ("call_a", "1")] {
            results.insert(id.to_owned(), result(id, text));
            map.insert(id.to_owned(), result(id, text));
        }
        // A result recorded again replaces the first.
        results.insert("call_c".to_owned(), result("call_c", "33"));
        map.insert("call_c".to_owned(), result("call_c", "33"));
        let written = serde_json::to_string(&results)?;
        assert_eq!(written, serde_json::to_string(&map)?);
        let read: CallResults = serde_json::from_str(&written)?;
        for id in ["call_a", "call_b", "call_c"] {
            assert_eq!(read.get(id), map.get(id), "{id}");
        }
        assert!(!read.contains_key("call_d"));
        assert_eq!(results.remove("call_b"), map.remove("call_b"));
        assert!(!results.contains_key("call_b"));
        assert_eq!(serde_json::to_string(&results)?, serde_json::to_string(&map)?);
        assert_eq!(serde_json::to_string(&CallResults::default())?, "{}");
        Ok(())
    }

    /// The offered tools are written as the sorted set checkpoints always held, read back, and
    /// compared with an offer by its names only (order aside).
    #[test]
    fn offered_tools_are_written_and_read_as_the_set_checkpoints_hold() -> Result<(), serde_json::Error> {
        let names: ToolNames = ["search", "add", "fetch"].map(str::to_owned).into_iter().collect();
        let set: BTreeSet<String> = ["search", "add", "fetch"].map(str::to_owned).into_iter().collect();
        let written = serde_json::to_string(&names)?;
        assert_eq!(written, serde_json::to_string(&set)?);
        assert_eq!(written, r#"["add","fetch","search"]"#);
        let read: ToolNames = serde_json::from_str(&written)?;
        assert_eq!(read, names);
        assert!(read.contains("fetch") && !read.contains("delete"));
        let definition = |name: &str| ToolDefinition::new(name, "", serde_json::json!({"type": "object"}));
        let offer = [definition("fetch"), definition("search"), definition("add")];
        assert!(read.names_exactly(&offer));
        assert!(!read.names_exactly(&offer[..2]));
        assert!(!read.names_exactly(&[definition("fetch"), definition("search"), definition("delete")]));
        Ok(())
    }
}
