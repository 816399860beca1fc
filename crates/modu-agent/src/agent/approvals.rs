//! The run API for approvals ([`crate::approval`]): listing a paused run's waiting calls and
//! deciding them.

use super::Agent;
use crate::approval::{ApprovalDecision, ApprovalRequest};
use crate::error::AgentError;
use crate::event::AgentEvent;

impl<C, O> Agent<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// The calls of a paused run that wait for a decision, each once (a call decided already,
    /// or of a tool approved with [`Agent::approve_always`], waiting only for the run to
    /// resume, is not listed).
    pub async fn pending_approvals(&self, run_id: &str) -> Result<Vec<ApprovalRequest>, AgentError> {
        let state = self.load_checkpoint(run_id).await?.state;
        // A run lists each call once; a checkpoint written by hand may repeat one.
        let mut listed = std::collections::HashSet::new();
        Ok(state
            .interruptions
            .into_iter()
            .filter(|r| {
                !state.decisions.contains_key(&r.call_id)
                    && !state.always_approved.contains(&r.tool_name)
                    && listed.insert(r.call_id.clone())
            })
            .collect())
    }

    /// Approves one waiting call; it runs once when the run resumes.
    ///
    /// A decision binds its call: approving it again does nothing, and rejecting an approved
    /// call (or approving a rejected one) is refused with [`AgentError::UnknownApproval`], as
    /// is deciding a call whose run has been resumed.
    pub async fn approve(&self, run_id: &str, call_id: &str) -> Result<(), AgentError> {
        self.decide(run_id, call_id, ApprovalDecision::Approved, false).await
    }

    /// Approves one waiting call and every later call of the same tool in this run.
    pub async fn approve_always(&self, run_id: &str, call_id: &str) -> Result<(), AgentError> {
        self.decide(run_id, call_id, ApprovalDecision::Approved, true).await
    }

    /// Rejects one waiting call: it does not run, and the model sees the rejection (with the
    /// message, if any). Rejecting it again does nothing; approving it afterwards is refused
    /// (see [`Agent::approve`]).
    pub async fn reject(&self, run_id: &str, call_id: &str, message: Option<String>) -> Result<(), AgentError> {
        self.decide(run_id, call_id, ApprovalDecision::Rejected { message }, false)
            .await
    }

    async fn decide(
        &self,
        run_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
        always: bool,
    ) -> Result<(), AgentError> {
        let approved = decision == ApprovalDecision::Approved;
        let unknown = || AgentError::UnknownApproval {
            run_id: run_id.to_owned(),
            call_id: call_id.to_owned(),
        };
        let decided = self
            .edit_checkpoint(run_id, |checkpoint| {
                let state = &mut checkpoint.state;
                let request = state
                    .interruptions
                    .iter()
                    .find(|r| r.call_id == call_id)
                    .ok_or_else(unknown)?;
                let tool = request.tool_name.clone();
                // A recorded decision binds its call: the same one again (a double click, a
                // second reviewer) changes nothing, the other one is refused: the call no longer
                // waits.
                match state.decisions.get(call_id) {
                    Some(recorded) if (*recorded == ApprovalDecision::Approved) != approved => return Err(unknown()),
                    Some(_) if !always || state.always_approved.contains(&tool) => return Ok((false, None)),
                    Some(_) => {}
                    None => {
                        state.decisions.insert(call_id.to_owned(), decision);
                    }
                }
                if always {
                    // By the name the approval showed: for MCP, the external tool, not
                    // mcp_call_tool.
                    state.always_approved.insert(tool.clone());
                }
                Ok((true, Some(tool)))
            })
            .await?;
        let Some(tool_name) = decided else {
            return Ok(());
        };
        if let Some(sink) = &self.inner.sink {
            let event = AgentEvent::ApprovalResolved {
                run_id: run_id.to_owned(),
                call_id: call_id.to_owned(),
                tool_name,
                approved,
            };
            if let Err(err) = sink.publish(&event).await {
                tracing::warn!(error = %err, "event sink failed");
            }
        }
        Ok(())
    }
}
