//! Mounted agents behind one object-safe trait, whatever their context and output types.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use modu_core::{
    Agent, AgentError, AgentEvent, AgentRequest, AgentResult, ApprovalRequest, Message, StreamItem, Usage,
};
use serde::Serialize;

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
}

/// One item of a served run's stream.
#[derive(Debug)]
pub(crate) enum Item {
    Event(AgentEvent),
    Done(Box<Finished>),
}

/// An agent the server can run.
pub(crate) trait Served: Send + Sync {
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
        let mut request = AgentRequest::with_context_arc(Arc::new((self.context)(principal)), String::new())
            .messages(input.messages)
            .user(principal.user_context())
            .run_id(input.run_id);
        request.session_id = input.session_id;
        request.metadata = input.metadata;
        request
    }
}

pub(crate) fn finished<O: Serialize>(result: AgentResult<O>) -> Finished {
    let output = result.output.as_ref().and_then(|o| serde_json::to_value(o).ok());
    let text = output.as_ref().map(|value| match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let error = match (&output, result.error) {
        // An output that cannot be turned into JSON is an output error, not a success.
        (None, None) if result.output.is_some() => Some(AgentError::Output {
            message: "the output could not be serialised".into(),
        }),
        (_, error) => error,
    };
    Finished {
        text,
        output,
        error,
        usage: result.usage,
        messages: result.messages,
        interruptions: result.interruptions,
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
        self.agent
            .stream(self.request(principal, input))
            .map(|item| match item {
                StreamItem::Event(event) => Item::Event(event),
                StreamItem::Completed(result) | StreamItem::Failed(result) => Item::Done(Box::new(finished(*result))),
            })
            .boxed()
    }

    fn keeps_history(&self) -> bool {
        self.agent.conversation_store().is_some()
    }

    fn has_run(&self, run_id: &str) -> futures::future::BoxFuture<'static, bool> {
        let agent = self.agent.clone();
        let run_id = run_id.to_owned();
        Box::pin(async move { agent.has_checkpoint(&run_id).await.unwrap_or(true) })
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
        _ => ("run_failed", "the run failed"),
    }
}
