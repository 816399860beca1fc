//! Human approval of tool calls.
//!
//! A tool that needs approval ([`crate::ToolSpec::needs_approval`], or
//! [`crate::Tool::needs_approval`] deciding from the context and arguments) pauses the run
//! before it executes: the other calls of the batch run, the state is checkpointed, and the
//! A paused run ([`crate::RunOutcome::Paused`]) lists the pending [`ApprovalRequest`]s in [`PausedRun::approvals`](crate::PausedRun::approvals). A person
//! decides with `Agent::approve`, `Agent::approve_always` or
//! `Agent::reject`, and `Agent::resume` continues — in this process or another
//! one sharing the checkpoint store. An approved call runs once; a rejected one does not run
//! and the model sees the rejection. A recorded decision binds its call: whether a call needs
//! approval is asked only while it has none, so a later `needs_approval` answer cannot undo a
//! rejection. Every call has an id unique within its run (a server's repeated id is renamed
//! `{id}_{n}` before anything else sees it), so one decision never covers two calls.
//!
//! A run nested with `Agent::as_tool` that reaches a call needing approval pauses its
//! parent: the parent lists the nested call as `{parent call id}/{nested call id}` (metadata:
//! `nested_agent`, `nested_run_id`, `nested_call_id`, `parent_call_id`), its decisions go to
//! the nested run, and resuming the parent resumes the nested run from the state kept in the
//! parent's checkpoint.
//!
//! The run state (`Agent::export_state`) is JSON holding the messages, decisions,
//! usage, user context and metadata. The application context `C` is never part of it — the
//! process that resumes passes its own — so keep secrets in `C`, never in metadata or the user
//! context.

use serde::{Deserialize, Serialize};

/// A tool call waiting for a person's decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The call's id (what `approve` / `reject` take).
    pub call_id: String,
    /// The tool to approve: for MCP calls, the external tool (`weather__forecast`), not the
    /// meta tool.
    pub tool_name: String,
    /// The call's arguments (validated).
    pub arguments: serde_json::Value,
    /// Extra details for the prompt (`mcp_tool_name`, `mcp_arguments` for MCP calls).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl ApprovalRequest {
    /// A request to approve the call `call_id` of `tool_name` with these arguments.
    pub fn new(call_id: impl Into<String>, tool_name: impl Into<String>, arguments: serde_json::Value) -> Self {
        ApprovalRequest {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            arguments,
            metadata: serde_json::Map::new(),
        }
    }

    /// With these extra details for the prompt.
    pub fn with_metadata(mut self, metadata: serde_json::Map<String, serde_json::Value>) -> Self {
        self.metadata = metadata;
        self
    }
}

/// A person's decision on one call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// Run the call.
    Approved,
    /// Do not run it; the model is told, with the message if any.
    Rejected {
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
}

/// A nested run (agent-as-tool) that paused for approvals: its exported state travels in the
/// parent's checkpoint, so the parent can be resumed in another process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[doc(hidden)]
pub struct NestedPause {
    /// The nested agent's name.
    #[doc(hidden)]
    pub agent: String,
    /// The nested run's id.
    #[doc(hidden)]
    pub run_id: String,
    /// The nested run's exported state (`Agent::export_state`).
    #[doc(hidden)]
    pub state: serde_json::Value,
    /// The nested run's pending approvals, with the nested run's own call ids.
    #[doc(hidden)]
    pub requests: Vec<ApprovalRequest>,
}

/// How a parent resumes a nested run: its state and the decisions made on the parent.
#[derive(Clone, Debug)]
#[doc(hidden)]
pub struct NestedResume {
    #[doc(hidden)]
    pub pause: NestedPause,
    /// (nested call id, decision, approve always).
    #[doc(hidden)]
    pub decisions: Vec<(String, ApprovalDecision, bool)>,
}

/// The id under which a parent lists a nested run's pending call.
#[doc(hidden)]
pub fn nested_call_id(parent_call_id: &str, nested_call_id: &str) -> String {
    format!("{parent_call_id}/{nested_call_id}")
}

impl NestedPause {
    /// The requests as the parent lists them: ids `{parent call}/{nested call}` and metadata
    /// naming the nested agent, run and call.
    #[doc(hidden)]
    pub fn parent_requests(&self, parent_call_id: &str) -> Vec<ApprovalRequest> {
        self.requests
            .iter()
            .map(|r| {
                let mut metadata = r.metadata.clone();
                metadata
                    .entry("nested_agent")
                    .or_insert_with(|| self.agent.clone().into());
                metadata
                    .entry("nested_run_id")
                    .or_insert_with(|| self.run_id.clone().into());
                metadata
                    .entry("nested_call_id")
                    .or_insert_with(|| r.call_id.clone().into());
                metadata.insert("parent_call_id".into(), parent_call_id.into());
                ApprovalRequest {
                    call_id: nested_call_id(parent_call_id, &r.call_id),
                    tool_name: r.tool_name.clone(),
                    arguments: r.arguments.clone(),
                    metadata,
                }
            })
            .collect()
    }
}
