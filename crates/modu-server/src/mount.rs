//! Mounted agents behind one object-safe trait, whatever their context and output types.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use modu_agent::{Agent, AgentRequest, ModelSettings, StreamItem};
use modu_core::{
    AgentError, AgentEvent, ApprovalRequest, CheckpointQuery, CheckpointStatus, InputRequest, Message, Role,
    RunOutcome, ToolChoice, Usage, UserContext,
};
use serde::{Deserialize, Serialize};

use tokio_util::sync::CancellationToken;

use crate::auth::Principal;

/// Builds the application context of one run from the caller's principal.
pub(crate) type ContextFactory<C> = Arc<dyn Fn(&Principal) -> C + Send + Sync>;

/// What the server hands a mounted agent for one run. The user and roles come from the
/// principal only (never from the payload).
#[derive(Debug)]
pub(crate) struct RunInput {
    pub messages: Vec<Message>,
    pub session_id: Option<String>,
    pub run_id: String,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Cancels the run at its next boundary.
    pub cancel: CancellationToken,
    /// The run's own model settings, over the agent's (`None`: the agent's).
    pub model_settings: Option<ModelSettings>,
}

/// A run's end, with the output already turned into text and JSON.
#[derive(Debug)]
pub(crate) struct Finished {
    /// The output as text: a string output as it is, anything else as compact JSON.
    pub text: Option<String>,
    /// The output as JSON.
    pub output: Option<serde_json::Value>,
    pub error: Option<AgentError>,
    pub usage: Usage,
    pub messages: Vec<Message>,
    pub interruptions: Vec<ApprovalRequest>,
    /// A paused run's asks for a person's input that wait for an answer.
    pub inputs: Vec<InputRequest>,
    /// Whether the answer was cut at the model's output limit (`RunStats::answer_cut`).
    pub cut: bool,
}

/// One item of a served run's stream.
#[derive(Debug)]
// Events are nearly every item; boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Item {
    Event(AgentEvent),
    Done(Box<Finished>),
}

/// A paused (or failed) run as its checkpoint holds it: whose it is, and what it waits for.
#[derive(Clone, Debug, Default)]
pub(crate) struct PausedRun {
    /// The user the run runs for (its owner).
    pub user: Option<String>,
    pub session_id: Option<String>,
    /// How many messages the run has so far.
    pub message_count: usize,
    /// The ids of every tool call the run's messages hold.
    pub call_ids: Vec<String>,
    pub approvals: Vec<ApprovalRequest>,
    /// The asks for a person's input ([`InputRequest`]) that have no answer yet.
    pub inputs: Vec<InputRequest>,
    /// Whether the run waits for a person at all (approvals, or asks for input answered or
    /// not): a checkpoint that waits for nothing is a run that was working when it saved.
    pub waits: bool,
}

impl PausedRun {
    /// Whether `principal` may see and decide this run: the run's user is the principal's.
    pub(crate) fn owned_by(&self, principal: &Principal) -> bool {
        self.user == principal.user
    }
}

/// The parts of an exported run state ([`Agent::export_state`]) the server reads.
#[derive(Deserialize)]
struct Exported {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    user: UserContext,
    state: ExportedState,
}

#[derive(Deserialize)]
struct ExportedState {
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    interruptions: Vec<ApprovalRequest>,
    #[serde(default)]
    input_requests: Vec<InputRequest>,
    /// The answers given so far, by call id (in the order asked).
    #[serde(default)]
    inputs: std::collections::BTreeMap<String, Vec<serde_json::Value>>,
}

/// A stored session: its id and when it was last appended to, in Unix milliseconds.
pub(crate) type Session = (String, u64);

/// A person's decision on one waiting call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Approve { always: bool },
    Reject { message: Option<String> },
}

/// A person's answer to one ask for input.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum InputReply {
    /// The value (checked against the ask's schema).
    Given(serde_json::Value),
    /// Declined, with why (for the model).
    Declined(Option<String>),
}

/// An agent the server can run.
pub(crate) trait Served: Send + Sync {
    /// The agent's name as it calls itself.
    fn agent_name(&self) -> String;
    /// The format the agent answers in (`None`: free text).
    fn response_format(&self) -> Option<modu_core::ResponseFormat>;
    /// The paused run `run_id` (a typed error when there is no such checkpoint).
    fn paused(&self, run_id: &str) -> futures::future::BoxFuture<'static, Result<PausedRun, AgentError>>;
    /// Records a decision on one waiting call of a paused run.
    fn decide(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> futures::future::BoxFuture<'static, Result<(), AgentError>>;
    /// Records a person's answer to one ask for input of a paused run.
    fn answer(
        &self,
        run_id: &str,
        call_id: &str,
        reply: InputReply,
    ) -> futures::future::BoxFuture<'static, Result<(), AgentError>>;
    /// Resumes a paused (or cancelled) run to its end (or its next pause); `cancel` stops it
    /// at its next boundary.
    fn resume(
        &self,
        principal: &Principal,
        run_id: &str,
        cancel: CancellationToken,
    ) -> futures::future::BoxFuture<'static, Finished>;
    /// Resumes a paused run, yielding events and then exactly one [`Item::Done`]. `cancel`
    /// stops it at its next boundary with its checkpoint kept (a `blocking` tool in flight
    /// finishes first), so it can be resumed again.
    fn resume_stream(&self, principal: &Principal, run_id: &str, cancel: CancellationToken)
    -> BoxStream<'static, Item>;
    /// Drops a paused run's checkpoint, so it can no longer be resumed.
    fn discard(&self, run_id: &str) -> futures::future::BoxFuture<'static, Result<(), AgentError>>;
    /// A session's stored messages (`None` when the agent keeps no conversations).
    fn history(
        &self,
        session_id: &str,
    ) -> futures::future::BoxFuture<'static, Result<Option<Vec<Message>>, AgentError>>;
    /// The stored sessions, each with the time of its last append in Unix milliseconds
    /// (`None` when the agent keeps no conversations).
    fn sessions(&self) -> futures::future::BoxFuture<'static, Result<Option<Vec<Session>>, AgentError>>;
    /// The ids of the session's runs that wait for approvals.
    fn paused_runs(&self, session_id: &str) -> futures::future::BoxFuture<'static, Result<Vec<String>, AgentError>>;
    /// Runs to the end, without streaming the model.
    fn run(&self, principal: &Principal, input: RunInput) -> futures::future::BoxFuture<'static, Finished>;
    /// Runs, yielding events and then exactly one [`Item::Done`].
    fn stream(&self, principal: &Principal, input: RunInput) -> BoxStream<'static, Item>;
    /// Whether the agent keeps conversations itself (then a thread's history is server-side).
    fn keeps_history(&self) -> bool;
    /// Whether a checkpoint exists under this run id (a store error counts as yes).
    fn has_run(&self, run_id: &str) -> futures::future::BoxFuture<'static, bool>;
}

pub(crate) struct Mounted<C, O> {
    pub agent: Agent<C, O>,
    pub context: ContextFactory<C>,
}

impl<C, O> Mounted<C, O>
where
    C: Send + Sync + 'static,
    O: Serialize + Send + 'static,
{
    fn request(&self, principal: &Principal, input: RunInput) -> AgentRequest<C> {
        let mut request = AgentRequest::new(Arc::new((self.context)(principal)), String::new())
            .messages(input.messages)
            .user(principal.user_context())
            .run_id(input.run_id)
            .cancel_token(input.cancel);
        request.session_id = input.session_id;
        request.metadata = input.metadata;
        request.model_settings = input.model_settings.map(|mut settings| {
            let own = self.agent.model_settings();
            // A client may lower the agent's output limit, never raise it: the operator's
            // limit bounds what a request can spend.
            if let (Some(asked), Some(own)) = (settings.max_tokens, own.max_tokens) {
                settings.max_tokens = Some(asked.min(own));
            }
            // Nor loosen the operator's tool policy: a request's choice counts only where the
            // agent leaves the model free (`auto` or unset), so a tool the agent must call is
            // still asked for, whatever choices later versions add.
            if !matches!(own.tool_choice, None | Some(ToolChoice::Auto)) {
                settings.tool_choice = None;
            }
            if own.parallel_tool_calls == Some(false) {
                settings.parallel_tool_calls = Some(false);
            }
            settings
        });
        request
    }
}

/// The name of the tool an earlier assistant message called under `call_id` (`None` when no
/// message did): what a tool result sent by a client is filed under.
pub(crate) fn called_tool(earlier: &[Message], call_id: &str) -> Option<String> {
    earlier
        .iter()
        .flat_map(|m| &m.tool_calls)
        .find(|c| c.id == call_id)
        .map(|c| c.name.clone())
}

/// A stream item of a run as the server hands it on.
fn item<O: Serialize>(item: StreamItem<O>) -> Item {
    match item {
        StreamItem::Event(event) => Item::Event(event),
        StreamItem::Completed(done) => Item::Done(Box::new(finished(RunOutcome::Completed(*done)))),
        StreamItem::Paused(paused) => Item::Done(Box::new(finished(RunOutcome::<O>::Paused(*paused)))),
        StreamItem::Failed(failed) => Item::Done(Box::new(finished(RunOutcome::Failed(*failed)))),
    }
}

pub(crate) fn finished<O: Serialize>(outcome: RunOutcome<O>) -> Finished {
    // The wire keeps its shape: a paused run answers with the `approval_required` error and
    // lists the calls that wait.
    let mut inputs = Vec::new();
    let (output, error, interruptions, report) = match outcome {
        RunOutcome::Completed(done) => match serde_json::to_value(&done.output) {
            Ok(value) => (Some(value), None, Vec::new(), done.report),
            // An output that cannot be turned into JSON is an output error, not a success.
            Err(_) => (
                None,
                Some(AgentError::Output {
                    message: "the output could not be serialised".into(),
                }),
                Vec::new(),
                done.report,
            ),
        },
        RunOutcome::Paused(paused) => {
            inputs = paused.inputs;
            (
                None,
                Some(AgentError::Interrupted {
                    pending: paused.approvals.len() + inputs.len(),
                }),
                paused.approvals,
                paused.report,
            )
        }
        RunOutcome::Failed(failed) => {
            let output = failed.unstored_output.and_then(|o| serde_json::to_value(&o).ok());
            (output, Some(failed.error), Vec::new(), failed.report)
        }
    };
    let text = output.as_ref().map(|value| match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    Finished {
        text,
        output,
        error,
        cut: report.stats.answer_cut,
        usage: report.usage,
        messages: report.messages,
        interruptions,
        inputs,
    }
}

impl Finished {
    /// Whether the run paused for asks for input alone (no call waits for approval): it is
    /// answered on the run-control routes, not approved.
    pub(crate) fn waits_for_input_only(&self) -> bool {
        self.interruptions.is_empty() && !self.inputs.is_empty()
    }
}

impl<C, O> Served for Mounted<C, O>
where
    C: Send + Sync + 'static,
    O: Serialize + Send + 'static,
{
    fn run(&self, principal: &Principal, input: RunInput) -> futures::future::BoxFuture<'static, Finished> {
        let agent = self.agent.clone();
        let request = self.request(principal, input);
        Box::pin(async move { finished(agent.run(request).await) })
    }

    fn stream(&self, principal: &Principal, input: RunInput) -> BoxStream<'static, Item> {
        self.agent.stream(self.request(principal, input)).map(item).boxed()
    }

    fn keeps_history(&self) -> bool {
        self.agent.conversation_store().is_some()
    }

    fn has_run(&self, run_id: &str) -> futures::future::BoxFuture<'static, bool> {
        let agent = self.agent.clone();
        let run_id = run_id.to_owned();
        Box::pin(async move { agent.has_checkpoint(&run_id).await.unwrap_or(true) })
    }

    fn agent_name(&self) -> String {
        self.agent.name().to_owned()
    }

    fn response_format(&self) -> Option<modu_core::ResponseFormat> {
        self.agent.response_format()
    }

    fn paused(&self, run_id: &str) -> futures::future::BoxFuture<'static, Result<PausedRun, AgentError>> {
        let agent = self.agent.clone();
        let run_id = run_id.to_owned();
        Box::pin(async move {
            let state = agent.export_state(&run_id).await?;
            let exported: Exported = serde_json::from_value(state).map_err(|e| AgentError::CheckpointInvalid {
                run_id: run_id.clone(),
                message: e.to_string(),
            })?;
            let call_ids = exported
                .state
                .messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone()))
                .collect();
            let state = exported.state;
            let waits = !state.interruptions.is_empty() || !state.input_requests.is_empty();
            let answers = state.inputs;
            let inputs = state
                .input_requests
                .into_iter()
                .filter(|r| !r.is_answered(answers.get(&r.call_id).map_or(0, Vec::len)))
                .collect();
            Ok(PausedRun {
                user: exported.user.user_id,
                session_id: exported.session_id,
                message_count: state.messages.len(),
                call_ids,
                approvals: state.interruptions,
                inputs,
                waits,
            })
        })
    }

    fn decide(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> futures::future::BoxFuture<'static, Result<(), AgentError>> {
        let agent = self.agent.clone();
        let (run_id, call_id) = (run_id.to_owned(), call_id.to_owned());
        Box::pin(async move {
            match decision {
                Decision::Approve { always: false } => agent.approve(&run_id, &call_id).await,
                Decision::Approve { always: true } => agent.approve_always(&run_id, &call_id).await,
                Decision::Reject { message } => agent.reject(&run_id, &call_id, message).await,
            }
        })
    }

    fn answer(
        &self,
        run_id: &str,
        call_id: &str,
        reply: InputReply,
    ) -> futures::future::BoxFuture<'static, Result<(), AgentError>> {
        let agent = self.agent.clone();
        let (run_id, call_id) = (run_id.to_owned(), call_id.to_owned());
        Box::pin(async move {
            match reply {
                InputReply::Given(value) => agent.answer(&run_id, &call_id, value).await,
                InputReply::Declined(message) => agent.decline(&run_id, &call_id, message).await,
            }
        })
    }

    fn resume(
        &self,
        principal: &Principal,
        run_id: &str,
        cancel: CancellationToken,
    ) -> futures::future::BoxFuture<'static, Finished> {
        let agent = self.agent.clone();
        let context = Arc::new((self.context)(principal));
        let run_id = run_id.to_owned();
        Box::pin(async move { finished(agent.resume_cancellable(&run_id, context, cancel).await) })
    }

    fn resume_stream(
        &self,
        principal: &Principal,
        run_id: &str,
        cancel: CancellationToken,
    ) -> BoxStream<'static, Item> {
        self.agent
            .resume_stream_cancellable(run_id, Arc::new((self.context)(principal)), cancel)
            .map(item)
            .boxed()
    }

    fn discard(&self, run_id: &str) -> futures::future::BoxFuture<'static, Result<(), AgentError>> {
        let store = self.agent.checkpoint_store().cloned();
        let run_id = run_id.to_owned();
        Box::pin(async move {
            match store {
                Some(store) => store
                    .delete(&run_id)
                    .await
                    .map_err(|e| store_error("checkpoint.delete", &e)),
                None => Ok(()),
            }
        })
    }

    fn history(
        &self,
        session_id: &str,
    ) -> futures::future::BoxFuture<'static, Result<Option<Vec<Message>>, AgentError>> {
        let store = self.agent.conversation_store().cloned();
        let session_id = session_id.to_owned();
        Box::pin(async move {
            match store {
                Some(store) => store
                    .load(&session_id)
                    .await
                    .map(Some)
                    .map_err(|e| store_error("conversation.load", &e)),
                None => Ok(None),
            }
        })
    }

    fn sessions(&self) -> futures::future::BoxFuture<'static, Result<Option<Vec<Session>>, AgentError>> {
        let store = self.agent.conversation_store().cloned();
        Box::pin(async move {
            let Some(store) = store else {
                return Ok(None);
            };
            let sessions = store
                .list_sessions()
                .await
                .map_err(|e| store_error("conversation.list_sessions", &e))?;
            Ok(Some(
                sessions
                    .into_iter()
                    .map(|s| {
                        let millis = s
                            .last_used
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                        (s.session_id, millis)
                    })
                    .collect(),
            ))
        })
    }

    fn paused_runs(&self, session_id: &str) -> futures::future::BoxFuture<'static, Result<Vec<String>, AgentError>> {
        let store = self.agent.checkpoint_store().cloned();
        let name = self.agent.name().to_owned();
        let session_id = session_id.to_owned();
        Box::pin(async move {
            let Some(store) = store else {
                return Ok(Vec::new());
            };
            let mut runs = Vec::new();
            let mut query = CheckpointQuery::default();
            loop {
                let page = store
                    .list(&query)
                    .await
                    .map_err(|e| store_error("checkpoint.list", &e))?;
                runs.extend(
                    page.items
                        .into_iter()
                        .filter(|s| {
                            s.meta.status == CheckpointStatus::Paused
                                && s.meta.agent == name
                                && s.meta.session_id.as_deref() == Some(session_id.as_str())
                        })
                        .map(|s| s.run_id),
                );
                match page.next {
                    Some(next) => query.after = Some(next),
                    None => return Ok(runs),
                }
            }
        })
    }
}

fn store_error(operation: &str, err: &modu_core::StoreError) -> AgentError {
    AgentError::Store {
        operation: operation.to_owned(),
        message: err.to_string(),
    }
}

/// The error of a run as the client sees it: the error's kind and a fixed sentence, so no
/// tool's or provider's own text (which may quote internals) reaches the wire.
pub(crate) fn public_error(error: &AgentError) -> (&'static str, &'static str) {
    match error {
        AgentError::Model { .. } => ("model_error", "the model call failed"),
        AgentError::Timeout { .. } => ("timeout", "the run timed out"),
        AgentError::MaxTurnsExceeded { .. } => ("max_turns_exceeded", "the run reached its turn limit"),
        AgentError::MaxToolCallsExceeded { .. } => ("max_tool_calls_exceeded", "the run reached its tool-call limit"),
        AgentError::Output { .. } => ("output_error", "the answer did not fit the agent's output format"),
        AgentError::Store { .. } => ("store_error", "a store operation failed"),
        AgentError::ToolProvider { .. } => ("tool_provider_error", "the run's tools could not be opened"),
        AgentError::ContextProvider { .. } => ("context_provider_error", "a context provider failed"),
        AgentError::MemoryOverflow { .. } => ("memory_overflow", "the conversation does not fit the model"),
        AgentError::Interrupted { .. } => ("approval_required", "the run waits for a person's approval"),
        AgentError::PlanFailed { .. } => ("plan_failed", "the plan failed"),
        AgentError::Cancelled => ("cancelled", "the run was cancelled"),
        AgentError::SessionBusy { .. } => (
            "session_busy",
            "another run of this session is in progress; try again once it has ended",
        ),
        AgentError::LeaseLost { .. } => (
            "lease_lost",
            "another worker took this run's session over and continues the run; do not submit it again",
        ),
        AgentError::ResumeIncompatible { .. } => (
            "resume_incompatible",
            "the run was started by a different version of this agent (other tools, output or policy) and cannot be resumed by this one",
        ),
        AgentError::AlreadyCompleted { .. } => ("already_completed", "the run has already completed"),
        AgentError::CheckpointInvalid { .. } => ("checkpoint_invalid", "the run's checkpoint cannot be read"),
        AgentError::GuardrailTripped { .. } => ("guardrail_tripped", "a guardrail stopped the run"),
        _ => ("run_failed", "the run failed"),
    }
}
