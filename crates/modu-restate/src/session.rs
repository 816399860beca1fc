//! [`DurableSession`]: the Restate Virtual Object whose key is a session id and whose `run`
//! handler is one agent run.

use std::sync::Arc;
use std::time::Duration;

use modu_agent::{Agent, AgentRequest};
use modu_core::{ApprovalDecision, ApprovalRequest, Message, RunOutcome, Usage};
use restate_sdk::context::{DurableFuture, RequestTarget};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::journal;

/// The object state key of a session's conversation (a JSON array of messages).
pub const HISTORY_KEY: &str = "history";
/// The object state key of the calls the running run waits on (a JSON array of
/// [`PendingApproval`]).
pub const APPROVALS_KEY: &str = "approvals";
/// The object's name in Restate (the SDK 0.13 cannot rename a service at bind time).
pub const DEFAULT_NAME: &str = "ModuSession";
/// The object state key of the decisions the running run has received in its current pause (a
/// JSON object, call id → [`ApprovalDecision`]), cleared when the pause ends.
const DECISIONS_KEY: &str = "decisions";
/// The state key, on the object keyed by an awakeable id, of the decision `decide` resolved
/// that awakeable with (the first one; later ones are compared with it).
const SETTLED_KEY: &str = "settled";
/// The handlers only modu calls (ingress-private, in the object's own discovery).
const SETTLE: &str = "settle";
const FORGET: &str = "forget";

/// The input of the `run` handler (JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunInput {
    /// The user's message.
    pub message: String,
    /// A run id; default: the Restate invocation id (stable across the invocation's retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Run metadata, passed to the agent as [`AgentRequest::metadata`].
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// The output of the `run` handler (JSON).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunOutput {
    /// The run's id.
    pub run_id: String,
    /// The agent's output, when the run succeeded.
    pub output: Option<serde_json::Value>,
    /// Why the run failed, when it did (the session's history is then left as it was).
    pub error: Option<String>,
    /// The run's usage.
    pub usage: Usage,
    /// The messages the run added to the session.
    pub messages: Vec<Message>,
}

/// A call waiting for a person, as the `approvals` handler lists it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The run that waits.
    pub run_id: String,
    /// The awakeable that resumes it: `POST /restate/awakeables/<id>/resolve` on the ingress,
    /// with an [`ApprovalDecision`] as the JSON body.
    pub awakeable_id: String,
    /// The call (its `call_id` is what the `decide` handler takes).
    pub request: ApprovalRequest,
}

/// The input of the `decide` handler.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Decision {
    /// The call decided on.
    pub call_id: String,
    /// The decision.
    #[serde(flatten)]
    pub decision: ApprovalDecision,
}

/// An agent served as a Restate Virtual Object, one object per session.
///
/// Handlers (`<ingress>/<name>/<session id>/<handler>`):
/// - `run` (exclusive; [`RunInput`] → [`RunOutput`]): one run of the agent on the session's
///   history, which it extends when the run succeeds. Restate runs one `run` per session at a
///   time, across every worker. A cancelled invocation stops the run at its next journaled
///   step (or awaited approval): the handler fails with Restate's cancellation (a terminal
///   error, code 409) and the history stays as it was.
/// - `approvals` (shared; → `[PendingApproval]`): the calls the running run waits on (a call
///   leaves the list once the run has received its decision).
/// - `decide` (shared; [`Decision`] → `bool`): decides one of them. `true`: the decision is the
///   call's (the first decision on a call, or the same one again while the run's pause lasts).
///   `false`: it was not applied: no such call waits (unknown, of an earlier pause of the run,
///   or of a run that has ended), or the call was decided the other way already (a decision
///   binds its call, as [`Agent::approve`] says).
/// - `history` (shared; → `[Message]`): the session's conversation.
///
/// Two more handlers are private to Restate (not callable through the ingress, however the
/// object is bound: [`DurableSession::definition`] or the SDK's `Endpoint::builder().bind`):
/// `settle` and `forget`, which `decide` and `run` call on the
/// object keyed by a call's awakeable id. There the first decision on the call is recorded (an
/// exclusive handler of that key, so two decisions at once are ordered) until the run has
/// received every decision of its pause, or has been cancelled.
///
/// The agent must be built with [`crate::durable`] (so its model and tool calls are journaled)
/// and, to pause for approvals, with a checkpoint store (an in-memory one does: a worker that
/// replays a run re-creates its checkpoint from the journal). The handler deletes the run's
/// checkpoint when the run ends, however it ends: a durable run is never resumed from it.
pub struct DurableSession<C, O> {
    agent: Agent<C, O>,
    context: Arc<C>,
}

impl<C, O> DurableSession<C, O>
where
    C: Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
{
    /// Serves `agent`, each run with the application context `context`.
    pub fn new(agent: Agent<C, O>, context: Arc<C>) -> Self {
        DurableSession { agent, context }
    }

    /// The object's definition (named [`DEFAULT_NAME`]), with Restate's retry of a failed
    /// attempt (a worker that died, a step that failed) starting at `retry_initial` and growing
    /// to `retry_max`, for an [`Endpoint`]'s `bind`.
    pub fn definition(self, retry_initial: Duration, retry_max: Duration) -> ServiceDefinition {
        self.into_service_definition().options(
            ServiceOptions::new()
                .retry_policy_initial_interval(retry_initial)
                .retry_policy_exponentiation_factor(2.0)
                .retry_policy_max_interval(retry_max),
        )
    }
}

/// Maps a state read error of Restate's onto a handler error.
fn state_error(e: TerminalError) -> HandlerError {
    HandlerError::from(e)
}

/// The input of the private `settle` handler (on the object keyed by the awakeable id).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Settle {
    /// The session whose run waits on the awakeable.
    session: String,
    /// The decision.
    decision: ApprovalDecision,
}

/// Whether two decisions on one call agree (both approve, or both reject; a rejection's
/// message does not count).
fn same_way(a: &ApprovalDecision, b: &ApprovalDecision) -> bool {
    (*a == ApprovalDecision::Approved) == (*b == ApprovalDecision::Approved)
}

#[restate_sdk::object(name = "ModuSession")]
impl<C, O> DurableSession<C, O>
where
    C: Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
{
    /// One run of the agent on the session.
    #[handler]
    async fn run(&self, ctx: ObjectContext<'_>, input: Json<RunInput>) -> Result<Json<RunOutput>, HandlerError> {
        let input = input.into_inner();
        let session = ctx.key().to_owned();
        let run_id = input.run_id.unwrap_or_else(|| ctx.invocation_id().to_owned());
        let history = ctx
            .get::<Json<Vec<Message>>>(HISTORY_KEY)
            .await
            .map_err(state_error)?
            .map(Json::into_inner)
            .unwrap_or_default();
        let known = history.len();
        let mut messages = history;
        messages.push(Message::user(input.message));
        let mut request = AgentRequest::new(Arc::clone(&self.context), "")
            .messages(messages)
            .session(session)
            .run_id(run_id.clone());
        request.metadata = input.metadata;
        let ended = self.run_to_end(&ctx, &run_id, request).await;
        // The run has ended (completed, failed, cancelled): nothing resumes it from the agent's
        // checkpoint (a retried invocation replays its journal and writes it again), so it goes.
        self.drop_checkpoint(&run_id).await;
        let result = match ended {
            Ok(result) => result,
            Err(error) => {
                // Cancelled (or a decision that cannot be recorded): the run did not finish, so
                // the session's history stays as it was and the invocation fails with `error`.
                ctx.clear(APPROVALS_KEY);
                ctx.clear(DECISIONS_KEY);
                return Err(error.into());
            }
        };
        ctx.clear(APPROVALS_KEY);
        ctx.clear(DECISIONS_KEY);
        if result.is_completed() {
            ctx.set(HISTORY_KEY, Json(result.messages().to_vec()));
        }
        Ok(Json(output(result, known)))
    }

    /// The calls the session's running run waits on.
    #[handler]
    async fn approvals(&self, ctx: SharedObjectContext<'_>) -> Result<Json<Vec<PendingApproval>>, HandlerError> {
        Ok(ctx
            .get::<Json<Vec<PendingApproval>>>(APPROVALS_KEY)
            .await
            .map_err(state_error)?
            .unwrap_or_default())
    }

    /// Decides one waiting call: `true` when the decision is the call's, `false` when it was
    /// not applied (no such call waits, or it was decided the other way).
    #[handler]
    async fn decide(&self, ctx: SharedObjectContext<'_>, decision: Json<Decision>) -> Result<bool, HandlerError> {
        let Decision { call_id, decision } = decision.into_inner();
        // Received by the run already: the decision it got binds the call.
        let received = ctx
            .get::<Json<std::collections::HashMap<String, ApprovalDecision>>>(DECISIONS_KEY)
            .await
            .map_err(state_error)?
            .map(Json::into_inner)
            .unwrap_or_default();
        if let Some(recorded) = received.get(&call_id) {
            return Ok(same_way(recorded, &decision));
        }
        let pending = ctx
            .get::<Json<Vec<PendingApproval>>>(APPROVALS_KEY)
            .await
            .map_err(state_error)?
            .map(Json::into_inner)
            .unwrap_or_default();
        let Some(waiting) = pending.into_iter().find(|p| p.request.call_id == call_id) else {
            return Ok(false);
        };
        // A shared handler cannot record the decision: the exclusive `settle` of the object
        // keyed by the awakeable id does (the run holds this key's lock while it waits).
        let settle = Settle {
            session: ctx.key().to_owned(),
            decision,
        };
        let applied = ctx
            .request::<_, bool>(
                RequestTarget::object(DEFAULT_NAME, waiting.awakeable_id, SETTLE),
                Json(settle),
            )
            .call()
            .await?;
        Ok(applied)
    }

    /// Private (on the object keyed by an awakeable id): resolves the awakeable with the first
    /// decision on its call, and answers whether `settle`'s decision is that one.
    #[handler(ingress_private)]
    async fn settle(&self, ctx: ObjectContext<'_>, settle: Json<Settle>) -> Result<bool, HandlerError> {
        let Settle { session, decision } = settle.into_inner();
        if let Some(first) = ctx
            .get::<Json<ApprovalDecision>>(SETTLED_KEY)
            .await
            .map_err(state_error)?
        {
            return Ok(same_way(&first.into_inner(), &decision));
        }
        // No decision recorded here: the call must still wait (a run that has received its
        // decision, through the awakeable endpoint or before `forget`, no longer lists it).
        let awakeable_id = ctx.key().to_owned();
        let pending = ctx
            .request::<_, Json<Vec<PendingApproval>>>(RequestTarget::object(DEFAULT_NAME, session, "approvals"), ())
            .call()
            .await?
            .into_inner();
        if !pending.iter().any(|p| p.awakeable_id == awakeable_id) {
            return Ok(false);
        }
        ctx.set(SETTLED_KEY, Json(decision.clone()));
        ctx.resolve_awakeable(&awakeable_id, Json(decision));
        Ok(true)
    }

    /// Private (on the object keyed by an awakeable id): drops the recorded decision, once the
    /// run has received it and no longer lists the call.
    #[handler(ingress_private)]
    async fn forget(&self, ctx: ObjectContext<'_>) -> Result<(), HandlerError> {
        ctx.clear(SETTLED_KEY);
        Ok(())
    }

    /// The session's conversation.
    #[handler]
    async fn history(&self, ctx: SharedObjectContext<'_>) -> Result<Json<Vec<Message>>, HandlerError> {
        Ok(ctx
            .get::<Json<Vec<Message>>>(HISTORY_KEY)
            .await
            .map_err(state_error)?
            .unwrap_or_default())
    }
}

impl<C, O> DurableSession<C, O>
where
    C: Send + Sync + 'static,
    O: Serialize + Send + Sync + 'static,
{
    /// Runs the agent on `request`, through every pause for approvals, to its outcome. `Err`
    /// when the invocation is cancelled (code 409, from a journaled step or an awaited approval)
    /// or a decision cannot be recorded.
    async fn run_to_end(
        &self,
        ctx: &ObjectContext<'_>,
        run_id: &str,
        request: AgentRequest<C>,
    ) -> Result<RunOutcome<O>, TerminalError> {
        let mut result = journal::drive(ctx, self.agent.run(request)).await?;
        while result.is_paused() {
            result = self.wait_for_people(ctx, run_id, result).await?;
        }
        Ok(result)
    }

    /// Deletes the run's checkpoint from the agent's store. The agent deletes it when a run
    /// completes, but keeps it for a run that failed with an error it could resume from, and a
    /// cancelled run is stopped before it gets there. A durable run is never resumed from it,
    /// so a worker with an in-memory store and no TTL kept every such checkpoint. A store
    /// error is logged: the run's outcome stands.
    async fn drop_checkpoint(&self, run_id: &str) {
        let Some(store) = self.agent.checkpoint_store() else {
            return;
        };
        if let Err(error) = store.delete(run_id).await {
            tracing::warn!(run_id, %error, "could not delete the checkpoint of a durable run that ended");
        }
    }

    /// A run paused for approvals: one awakeable per call (listed in the object's state), each
    /// decision recorded in the agent's checkpoint as it comes (whatever the order) and the call
    /// taken off the list, then the run resumed.
    async fn wait_for_people(
        &self,
        ctx: &ObjectContext<'_>,
        run_id: &str,
        paused: RunOutcome<O>,
    ) -> Result<RunOutcome<O>, TerminalError> {
        let mut listed = Vec::new();
        let mut waits = DurableFuturesUnordered::new();
        for request in paused.approvals().to_vec() {
            let (awakeable_id, wait) = ctx.awakeable::<Json<ApprovalDecision>>();
            listed.push(PendingApproval {
                run_id: run_id.to_owned(),
                awakeable_id,
                request,
            });
            waits.push(wait);
        }
        ctx.set(APPROVALS_KEY, Json(listed.clone()));
        let waited = self.take_decisions(ctx, run_id, &listed, waits).await;
        if waited.is_err() {
            // Cancelled (or a decision that cannot be recorded): no call waits any more. The
            // list goes before the records of `settle` do, so a late `decide` finds no call.
            ctx.clear(APPROVALS_KEY);
        }
        // Every decision is received and kept in DECISIONS_KEY (or the run stops): the records
        // of `settle` are not needed any more (a late `decide` finds the call decided, or not
        // waiting).
        for pending in &listed {
            ctx.request::<_, ()>(
                RequestTarget::object(DEFAULT_NAME, pending.awakeable_id.clone(), FORGET),
                (),
            )
            .send();
        }
        waited?;
        // The pause is over: its calls wait no more, so a decision on one of them is refused
        // from now on (as `Agent::approve` refuses it once a resume has gone on).
        ctx.clear(DECISIONS_KEY);
        journal::drive(ctx, self.agent.resume(run_id, Arc::clone(&self.context))).await
    }

    /// Takes the decisions on the `listed` calls as they come, in any order: each recorded in
    /// the agent's checkpoint, kept in DECISIONS_KEY and its call taken off the list.
    async fn take_decisions<F>(
        &self,
        ctx: &ObjectContext<'_>,
        run_id: &str,
        listed: &[PendingApproval],
        mut waits: DurableFuturesUnordered<F>,
    ) -> Result<(), TerminalError>
    where
        F: DurableFuture<Output = Result<Json<ApprovalDecision>, TerminalError>>,
    {
        let mut still = listed.to_vec();
        let mut received = ctx
            .get::<Json<std::collections::HashMap<String, ApprovalDecision>>>(DECISIONS_KEY)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        while let Some((index, decision)) = waits.next().await? {
            let decision = decision?.into_inner();
            let Some(pending) = listed.get(index) else {
                continue;
            };
            let call = pending.request.call_id.clone();
            let recorded = match &decision {
                ApprovalDecision::Approved => self.agent.approve(run_id, &call).await,
                ApprovalDecision::Rejected { message } => self.agent.reject(run_id, &call, message.clone()).await,
                other => {
                    return Err(TerminalError::new(format!(
                        "a decision this version does not know on {call}: {other:?}"
                    )));
                }
            };
            recorded.map_err(|e| TerminalError::new(format!("cannot record the decision on {call}: {e}")))?;
            // The call waits no more: off the list, and its decision kept for `decide`.
            received.insert(call.clone(), decision);
            ctx.set(DECISIONS_KEY, Json(received.clone()));
            still.retain(|p| p.request.call_id != call);
            ctx.set(APPROVALS_KEY, Json(still.clone()));
        }
        Ok(())
    }
}

fn output<O: Serialize>(outcome: RunOutcome<O>, known: usize) -> RunOutput {
    let (output, error) = match &outcome {
        RunOutcome::Completed(done) => (serde_json::to_value(&done.output).ok(), None),
        RunOutcome::Paused(paused) => {
            let pending = modu_core::AgentError::Interrupted {
                pending: paused.approvals.len() + paused.inputs.len(),
            };
            (None, Some(pending.to_string()))
        }
        RunOutcome::Failed(failed) => (
            failed
                .unstored_output
                .as_ref()
                .and_then(|o| serde_json::to_value(o).ok()),
            Some(failed.error.to_string()),
        ),
    };
    let report = outcome.into_report();
    RunOutput {
        run_id: report.run_id,
        output,
        error,
        usage: report.usage,
        messages: report.messages.into_iter().skip(known).collect(),
    }
}
