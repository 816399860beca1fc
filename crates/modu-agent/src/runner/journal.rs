//! What a run writes outside itself: checkpoints (the format, its versions, save, load and
//! decode), events (to the sink and the caller's stream), and the end of a run (history
//! appended, the final checkpoint, the result).

use serde::Serialize;

use super::chat::with_deadline;
use super::state::{CHECKPOINT_SCHEMA_VERSION, Checkpoint, OLDEST_READABLE_SCHEMA_VERSION};
use super::{Env, Run, RunState};
use crate::agent::Agent;
use crate::context::UserContext;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::lease::Fence;
use crate::outcome::RunOutcome;
use crate::store::{CheckpointMeta, CheckpointStatus};

impl<C, O> Run<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    pub(super) async fn checkpoint(&mut self) -> Result<(), AgentError> {
        if !self.env.keeps_state() {
            return Ok(());
        }
        self.state.usage = self.env.ctx.usage();
        self.state.usage_by_model = self.env.ctx.usage_by_model();
        save_checkpoint(&self.env, &self.state).await
    }

    pub(super) async fn store_failed(&self, operation: &str, message: &str) {
        if self.env.emitter.active() {
            self.env
                .emitter
                .emit(AgentEvent::StoreFailed {
                    run_id: self.env.ctx.run_id().to_owned(),
                    operation: operation.to_owned(),
                    message: message.to_owned(),
                })
                .await;
        }
    }

    pub(super) async fn finish(mut self: Box<Self>, outcome: Result<O, AgentError>) -> RunOutcome<O> {
        // The run's clones of the chat stacks go first: a permit a layer holds in one (an
        // abandoned call's) is not kept from the agent's other runs while this one ends.
        self.kept = Default::default();
        let strict_done = self.state.strict().is_some_and(|s| s.is_done());
        let already_stored = self.state.strict().is_some_and(|s| s.conversation_stored);
        let env = &self.env;
        let agent = &env.agent;
        let run_id = env.ctx.run_id().to_owned();
        let metadata = env.ctx.metadata().clone();
        let mut stats = crate::outcome::RunStats::default();
        stats.model_calls = self.state.model_calls;
        stats.tool_calls = self.state.tool_calls;
        stats.turns = self.state.turns;
        stats.resumed = self.resumed;
        stats.answer_cut = self.cut;
        let plan = match (self.state.strict(), &agent.policy) {
            (Some(strict), crate::plan::DecisionPolicy::PlanAndExecute(policy)) => {
                Some(strict.report(policy.trace_mode))
            }
            _ => None,
        };
        let (output, mut error) = match outcome {
            Ok(o) => (Some(o), None),
            Err(e) => (None, Some(e)),
        };
        let mut stored_now = false;
        if error.is_none()
            && !already_stored
            && let (Some(store), Some(session)) = (&env.root.conversations, env.ctx.session_id())
        {
            let append = async {
                match &env.fence {
                    Some(fence) => store.append_fenced(session, &self.state.messages, fence).await,
                    None => store.append(session, &self.state.messages).await,
                }
            };
            let append = tracing::Instrument::instrument(append, super::spans::store("conversation.append"));
            let appended = match with_deadline(env.deadline, agent.limits.timeout, append).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => {
                    self.store_failed("conversation.append", &e.to_string()).await;
                    Err(AgentError::from_store("conversation.append", &e))
                }
                Err(e) => Err(e),
            };
            match appended {
                Ok(()) => stored_now = true,
                Err(e) => {
                    // Keep the checkpoint so that a resume can append later.
                    error = Some(e);
                }
            }
        }
        let (interruptions, input_requests) = if matches!(error, Some(AgentError::Interrupted { .. })) {
            if let Some(slot) = &env.nested_pause {
                // The parent keeps the nested run's state in its own checkpoint.
                match serde_json::to_value(checkpoint_ref(env, &self.state)) {
                    Ok(state) => *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(state),
                    Err(e) => tracing::warn!(error = %e, "could not hand the nested run's state to its parent"),
                }
            }
            (self.state.interruptions.clone(), self.state.input_requests.clone())
        } else {
            (Vec::new(), Vec::new())
        };
        if let Some(store) = &env.root.checkpoints {
            // A strict run's terminal DONE state stays, so that resuming it again does not
            // finalize twice (give the store a TTL).
            let keep_done = strict_done && error.is_none();
            let keep = keep_done
                || error
                    .as_ref()
                    .is_some_and(|e| e.is_resumable() || matches!(e, AgentError::Interrupted { .. }));
            if keep_done && stored_now {
                if let Some(strict) = self.state.strict_mut() {
                    strict.conversation_stored = true;
                }
                if let Err(e) = save_checkpoint(env, &self.state).await {
                    // The answer is stored; only a later resume of this run could append it again.
                    tracing::warn!(error = %e, "could not record that the strict run's answer was stored");
                }
            }
            if keep
                && !keep_done
                && error.as_ref().is_some_and(AgentError::is_resumable)
                && let Err(e) = save_checkpoint_as(env, &self.state, CheckpointStatus::Failed).await
            {
                // The checkpoint of the last step stays (status `running`); resume still works.
                tracing::debug!(error = %e, "could not mark the checkpoint as failed");
            }
            if !keep {
                let delete = async {
                    match &env.fence {
                        Some(fence) => store.delete_fenced(&run_id, fence).await,
                        None => store.delete(&run_id).await,
                    }
                };
                let delete = tracing::Instrument::instrument(delete, super::spans::store("checkpoint.delete"));
                match with_deadline(env.deadline, agent.limits.timeout, delete).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => self.store_failed("checkpoint.delete", &e.to_string()).await,
                    Err(timeout) => {
                        // The answer stands; the checkpoint stays until its TTL or a purge.
                        self.store_failed("checkpoint.delete", &timeout.to_string()).await;
                    }
                }
            }
        }
        if error.is_some() && output.is_some() {
            // The answer exists but was not stored: report both.
            stats.answer_not_stored = true;
        }
        let usage = env.ctx.usage();
        let duration_ms = env.started.elapsed().as_millis() as u64;
        // A run's terminal event goes to the sink only (its stream ends with the outcome).
        if env.emitter.has_sink() {
            let event = match (&output, &error) {
                (Some(o), None) => AgentEvent::RunCompleted {
                    run_id: run_id.clone(),
                    agent: agent.name.clone(),
                    usage,
                    output: agent.codec.to_json(o),
                    duration_ms,
                },
                (_, Some(AgentError::Interrupted { pending })) => AgentEvent::RunPaused {
                    run_id: run_id.clone(),
                    agent: agent.name.clone(),
                    usage,
                    pending: *pending,
                    duration_ms,
                },
                (_, Some(e)) => AgentEvent::RunFailed {
                    run_id: run_id.clone(),
                    agent: agent.name.clone(),
                    usage,
                    error: e.clone(),
                    duration_ms,
                },
                (None, None) => AgentEvent::RunFailed {
                    run_id: run_id.clone(),
                    agent: agent.name.clone(),
                    usage,
                    error: AgentError::Cancelled,
                    duration_ms,
                },
            };
            env.emitter.emit(event).await;
        }
        let mut report = crate::outcome::RunReport::new(run_id, agent.name.clone());
        report.messages = std::mem::take(&mut self.state.messages);
        report.usage = usage;
        report.usage_by_model = env.ctx.usage_by_model();
        report.stats = stats;
        report.plan = plan;
        report.metadata = metadata;
        match (output, error) {
            (Some(output), None) => RunOutcome::Completed(crate::outcome::CompletedRun::new(output, report)),
            (_, Some(AgentError::Interrupted { .. })) => {
                RunOutcome::Paused(crate::outcome::PausedRun::new(interruptions, input_requests, report))
            }
            (unstored_output, error) => {
                let mut failed = crate::outcome::FailedRun::new(error.unwrap_or(AgentError::Cancelled), report);
                failed.unstored_output = unstored_output;
                RunOutcome::Failed(failed)
            }
        }
    }
}

impl<C, O> Agent<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Saves `checkpoint`; only while `fence` is its session's live lease, when given.
    pub(crate) async fn store_checkpoint(
        &self,
        checkpoint: &Checkpoint,
        fence: Option<&Fence>,
    ) -> Result<(), AgentError> {
        let Some(store) = &self.inner.checkpoints else {
            return Err(AgentError::Configuration {
                message: "approvals and resume need a checkpoint store".into(),
            });
        };
        let bytes = serde_json::to_vec(checkpoint).map_err(|e| AgentError::Store {
            operation: "checkpoint.encode".into(),
            message: e.to_string(),
        })?;
        let meta = CheckpointMeta::new(checkpoint.agent.clone(), checkpoint.state.status())
            .with_session(checkpoint.session_id.clone());
        let saved = match fence {
            Some(fence) => store.save_fenced(&checkpoint.run_id, &meta, &bytes, fence).await,
            None => store.save(&checkpoint.run_id, &meta, &bytes).await,
        };
        saved.map_err(|e| AgentError::from_store("checkpoint.save", &e))
    }

    /// Loads `run_id`'s checkpoint, lets `edit` change it (and say whether to save it), and
    /// saves it. With session leases this happens under the session's lease, fenced: an edit
    /// of a paused run (a decision, an answer) then never lands after a resume of the run went
    /// on in another process, which would bring the run's old state back. A resume in flight
    /// makes it wait (`LeaseOptions::wait`), then fail with `SessionBusy`.
    pub(crate) async fn edit_checkpoint<T>(
        &self,
        run_id: &str,
        edit: impl FnOnce(&mut Checkpoint) -> Result<(bool, T), AgentError>,
    ) -> Result<T, AgentError> {
        // Two edits of one run read, change and write its checkpoint: without an order, the
        // later write drops the earlier one's change (a decision lost). Under a session's
        // lease they are ordered by the lease (of every process); without one, this process's
        // edits of a run take turns. The turn is never held while waiting for a lease: its
        // locks are shared by many runs.
        let turn = match self.inner.leases {
            None => Some(self.inner.edits.turn(run_id).await),
            Some(_) => None,
        };
        let mut checkpoint = self.load_checkpoint(run_id).await?;
        let (Some(leases), Some(session)) = (&self.inner.leases, checkpoint.session_id.clone()) else {
            let _turn = match turn {
                Some(turn) => turn,
                // Leases, but a run without a session: its turn, then its checkpoint again.
                None => {
                    let turn = self.inner.edits.turn(run_id).await;
                    checkpoint = self.load_checkpoint(run_id).await?;
                    turn
                }
            };
            let (save, value) = edit(&mut checkpoint)?;
            if save {
                self.store_checkpoint(&checkpoint, None).await?;
            }
            return Ok(value);
        };
        let held = super::lease::take(leases, &session, super::lease::Wait::Edit).await?;
        let fence = held.fence();
        let edited = async {
            // Read again under the lease: a resume may have moved the run on meanwhile.
            let mut checkpoint = self.load_checkpoint(run_id).await?;
            let (save, value) = edit(&mut checkpoint)?;
            if save {
                self.store_checkpoint(&checkpoint, Some(&fence)).await?;
            }
            Ok(value)
        }
        .await;
        held.release().await;
        edited
    }

    pub(crate) async fn load_checkpoint(&self, run_id: &str) -> Result<Checkpoint, AgentError> {
        let Some(store) = &self.inner.checkpoints else {
            return Err(AgentError::Configuration {
                message: "resume needs a checkpoint store".into(),
            });
        };
        let bytes = store
            .load(run_id)
            .await
            .map_err(|e| AgentError::from_store("checkpoint.load", &e))?
            .ok_or_else(|| AgentError::CheckpointNotFound {
                run_id: run_id.to_owned(),
            })?;
        let raw: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| AgentError::CheckpointInvalid {
            run_id: run_id.to_owned(),
            message: format!("not valid JSON: {e}"),
        })?;
        let checkpoint = self.decode_checkpoint(run_id, raw)?;
        Ok(checkpoint)
    }

    pub(crate) fn decode_checkpoint(&self, run_id: &str, raw: serde_json::Value) -> Result<Checkpoint, AgentError> {
        let invalid = |message: String| AgentError::CheckpointInvalid {
            run_id: run_id.to_owned(),
            message,
        };
        let version = raw
            .get("schema_version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| invalid("no schema_version".into()))?;
        if !(u64::from(OLDEST_READABLE_SCHEMA_VERSION)..=u64::from(CHECKPOINT_SCHEMA_VERSION)).contains(&version) {
            return Err(invalid(format!(
                "schema_version {version} is not supported (this build reads {OLDEST_READABLE_SCHEMA_VERSION} to {CHECKPOINT_SCHEMA_VERSION})"
            )));
        }
        let raw = migrate(raw, version).map_err(invalid)?;
        let checkpoint: Checkpoint =
            serde_json::from_value(raw).map_err(|e| invalid(format!("malformed state: {e}")))?;
        if checkpoint.run_id != run_id {
            return Err(invalid(format!("it belongs to run {}", checkpoint.run_id)));
        }
        if *checkpoint.fingerprint != *self.inner.fingerprint {
            return Err(AgentError::ResumeIncompatible {
                run_id: run_id.to_owned(),
                message: format!(
                    "the checkpoint was written by agent {:?} with fingerprint {}, this agent has {}",
                    checkpoint.agent, checkpoint.fingerprint, self.inner.fingerprint
                ),
            });
        }
        Ok(checkpoint)
    }
}

pub(super) async fn save_checkpoint<C, O>(env: &Env<C, O>, state: &RunState) -> Result<(), AgentError> {
    save_checkpoint_as(env, state, state.status()).await
}

pub(super) async fn save_checkpoint_as<C, O>(
    env: &Env<C, O>,
    state: &RunState,
    status: CheckpointStatus,
) -> Result<(), AgentError> {
    let Some(store) = &env.root.checkpoints else {
        return Ok(());
    };
    let checkpoint = checkpoint_ref(env, state);
    let bytes = serde_json::to_vec(&checkpoint).map_err(|e| AgentError::Store {
        operation: "checkpoint.encode".into(),
        message: e.to_string(),
    })?;
    let meta = CheckpointMeta::new(env.root.name.clone(), status).with_session(env.ctx.session_id());
    let save = async {
        match &env.fence {
            Some(fence) => store.save_fenced(env.ctx.run_id(), &meta, &bytes, fence).await,
            None => store.save(env.ctx.run_id(), &meta, &bytes).await,
        }
    };
    let save = tracing::Instrument::instrument(save, super::spans::store("checkpoint.save"));
    match with_deadline(env.deadline, env.agent.limits.timeout, save).await? {
        Ok(()) => {
            if env.emitter.active() {
                env.emitter
                    .emit(AgentEvent::CheckpointSaved {
                        run_id: env.ctx.run_id().to_owned(),
                    })
                    .await;
            }
            Ok(())
        }
        Err(e) => {
            if env.emitter.active() {
                env.emitter
                    .emit(AgentEvent::StoreFailed {
                        run_id: env.ctx.run_id().to_owned(),
                        operation: "checkpoint.save".into(),
                        message: e.to_string(),
                    })
                    .await;
            }
            Err(AgentError::from_store("checkpoint.save", &e))
        }
    }
}

fn checkpoint_ref<'a, C, O>(env: &'a Env<C, O>, state: &'a RunState) -> CheckpointRef<'a> {
    CheckpointRef {
        schema_version: CHECKPOINT_SCHEMA_VERSION,
        run_id: env.ctx.run_id(),
        agent: &env.root.name,
        fingerprint: &env.fingerprint,
        session_id: env.ctx.session_id(),
        user: env.ctx.user(),
        metadata: env.ctx.metadata(),
        state,
    }
}

/// Rewrites a checkpoint of schema 1 or 2 in the current layout: `state.phase` and
/// `state.strict` become `state.policy`.
pub(crate) fn migrate(mut raw: serde_json::Value, version: u64) -> Result<serde_json::Value, String> {
    if version >= 3 {
        return Ok(raw);
    }
    let Some(state) = raw.get_mut("state").and_then(serde_json::Value::as_object_mut) else {
        return Err("malformed state: no state object".into());
    };
    let phase = state.remove("phase");
    let policy = match state.remove("strict") {
        Some(strict) if !strict.is_null() => serde_json::json!({"id": "plan_and_execute/1", "state": strict}),
        _ => match phase {
            Some(phase) => serde_json::json!({"id": "standard/1", "state": phase}),
            None => return Err("malformed state: missing field `phase`".into()),
        },
    };
    state.insert("policy".into(), policy);
    if let Some(v) = raw.get_mut("schema_version") {
        *v = serde_json::Value::from(CHECKPOINT_SCHEMA_VERSION);
    }
    Ok(raw)
}

/// The borrowed form of [`Checkpoint`], so saving does not clone the state.
#[derive(Serialize)]
struct CheckpointRef<'a> {
    schema_version: u32,
    run_id: &'a str,
    agent: &'a str,
    fingerprint: &'a str,
    session_id: Option<&'a str>,
    user: &'a UserContext,
    metadata: &'a serde_json::Map<String, serde_json::Value>,
    state: &'a RunState,
}

#[cfg(test)]
mod tests {

    use super::super::state::{Phase, PolicyState};
    use super::*;
    use crate::message::{Message, Usage};

    #[test]
    fn checkpoint_ref_and_owned_forms_agree() -> Result<(), serde_json::Error> {
        let state = RunState {
            policy: PolicyState::Standard(Phase::Finalize { draft: "d".into() }),
            usage: Usage::new(1, 2),
            model_calls: 1,
            turns: 1,
            ..RunState::new(vec![Message::user("hi")])
        };
        let user = UserContext::default();
        let meta = serde_json::Map::new();
        let r = CheckpointRef {
            schema_version: 1,
            run_id: "r",
            agent: "a",
            fingerprint: "f",
            session_id: Some("s"),
            user: &user,
            metadata: &meta,
            state: &state,
        };
        let bytes = serde_json::to_vec(&r)?;
        let back: Checkpoint = serde_json::from_slice(&bytes)?;
        assert_eq!(back.session_id.as_deref(), Some("s"));
        assert_eq!(back.state.phase(), Phase::Finalize { draft: "d".into() });
        Ok(())
    }
}
