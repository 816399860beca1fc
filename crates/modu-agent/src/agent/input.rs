//! The run API for asks for input ([`crate::input`]): listing, answering and declining a paused
//! run's waiting asks.

use super::Agent;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::input::{InputAnswer, InputRequest};

impl<C, O> Agent<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// The calls of a paused run that wait for a person's input ([`crate::input`]) and have
    /// no answer yet.
    pub async fn pending_inputs(&self, run_id: &str) -> Result<Vec<InputRequest>, AgentError> {
        let state = self.load_checkpoint(run_id).await?.state;
        Ok(state
            .input_requests
            .into_iter()
            .filter(|r| !answered(&state.inputs, r))
            .collect())
    }

    /// Answers a call's ask for input: the value must fit the request's schema
    /// ([`AgentError::InvalidInput`] otherwise, and nothing is recorded). The call runs again
    /// with the answer when the run resumes.
    pub async fn answer(&self, run_id: &str, call_id: &str, value: serde_json::Value) -> Result<(), AgentError> {
        self.record_input(run_id, call_id, |request| {
            let validator =
                crate::tool::ArgumentValidator::new(&request.schema).map_err(|message| AgentError::InvalidInput {
                    call_id: call_id.to_owned(),
                    message: format!("the requested schema is not a valid JSON schema: {message}"),
                })?;
            validator.check(&value).map_err(|message| AgentError::InvalidInput {
                call_id: call_id.to_owned(),
                message,
            })?;
            Ok(InputAnswer::Given { value })
        })
        .await
    }

    /// Declines a call's ask for input: when the run resumes, the ask fails with a tool error
    /// the model sees (with the message, if any).
    pub async fn decline(&self, run_id: &str, call_id: &str, message: Option<String>) -> Result<(), AgentError> {
        self.record_input(run_id, call_id, |_| Ok(InputAnswer::Declined { message }))
            .await
    }

    async fn record_input(
        &self,
        run_id: &str,
        call_id: &str,
        answer: impl FnOnce(&InputRequest) -> Result<InputAnswer, AgentError>,
    ) -> Result<(), AgentError> {
        let (request, given) = self
            .edit_checkpoint(run_id, |checkpoint| {
                let state = &mut checkpoint.state;
                // An answered ask stays listed until the run resumes: the run is still paused
                // (a checkpoint that lists no waiting call says `running`, and `recover_orphans`
                // would take the run over from its owner). Answering it again is refused: it no
                // longer waits.
                let request = state
                    .input_requests
                    .iter()
                    .find(|r| r.call_id == call_id && !answered(&state.inputs, r))
                    .cloned()
                    .ok_or_else(|| AgentError::UnknownInput {
                        run_id: run_id.to_owned(),
                        call_id: call_id.to_owned(),
                    })?;
                let answer = answer(&request)?;
                let answers = state.inputs.entry(call_id.to_owned()).or_default();
                // The answer belongs to the ask at `index`; asks before it were answered earlier.
                answers.truncate(request.index as usize);
                let given = matches!(answer, InputAnswer::Given { .. });
                answers.push(answer);
                Ok((true, (request, given)))
            })
            .await?;
        if let Some(sink) = &self.inner.sink {
            let event = AgentEvent::InputAnswered {
                run_id: run_id.to_owned(),
                call_id: call_id.to_owned(),
                tool_name: request.tool_name,
                answered: given,
            };
            if let Err(err) = sink.publish(&event).await {
                tracing::warn!(error = %err, "event sink failed");
            }
        }
        Ok(())
    }
}

/// Whether `request` (the ask at its index) has an answer in `inputs`.
fn answered(inputs: &std::collections::BTreeMap<String, Vec<InputAnswer>>, request: &InputRequest) -> bool {
    request.is_answered(inputs.get(&request.call_id).map_or(0, Vec::len))
}
