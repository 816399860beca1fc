//! Human approval of tool calls.
//!
//! A tool that needs approval ([`crate::ToolSpec::needs_approval`], or
//! [`crate::Tool::needs_approval`] deciding from the context and arguments) pauses the run
//! before it executes: the other calls of the batch run, the state is checkpointed, and the
//! [`crate::AgentResult`] lists the pending [`ApprovalRequest`]s in `interruptions`. A person
//! decides with [`crate::Agent::approve`], [`crate::Agent::approve_always`] or
//! [`crate::Agent::reject`], and [`crate::Agent::resume`] continues — in this process or another
//! one sharing the checkpoint store. An approved call runs once; a rejected one does not run
//! and the model sees the rejection.
//!
//! The run state ([`crate::Agent::export_state`]) is JSON holding the messages, decisions,
//! usage, user context and metadata. The application context `C` is never part of it — the
//! process that resumes passes its own — so keep secrets in `C`, never in metadata or the user
//! context.

use serde::{Deserialize, Serialize};

/// A tool call waiting for a person's decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

/// A person's decision on one call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
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
