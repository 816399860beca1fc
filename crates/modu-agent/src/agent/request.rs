//! What goes into a run ([`AgentRequest`]) and what comes out ([`RunOutcome`](crate::RunOutcome)).

use std::fmt;
use std::sync::Arc;

use crate::context::UserContext;
use crate::message::Message;
use crate::model::ToolChoice;

use super::settings::ModelSettings;

/// One run's input: the new messages, the application context and run options.
pub struct AgentRequest<C> {
    /// The new input messages (usually one user message).
    pub input: Vec<Message>,
    /// The application's context, shared with every tool call.
    pub context: Arc<C>,
    /// The session (conversation) to continue and append to.
    pub session_id: Option<String>,
    /// Who the run is for.
    pub user: UserContext,
    /// Free metadata for the run (tool providers read their options here, e.g. `mcp.servers`).
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// A run id to use instead of a fresh one.
    pub run_id: Option<String>,
    /// For a run nested in another (agent-as-tool): its structured input.
    pub tool_input: Option<serde_json::Value>,
    /// For a run nested in another: the parent run's id.
    pub parent_run_id: Option<String>,
    /// Sampling settings for this run, over the agent's ([`ModelSettings::over`]): a field set
    /// here wins. Kept in the run's checkpoint, so a resumed run uses them too.
    pub model_settings: Option<ModelSettings>,
    pub(crate) stream: Option<tokio::sync::mpsc::Sender<Box<crate::event::AgentEvent>>>,
    /// Cancels the run at its next boundary ([`AgentRequest::cancel_token`]).
    pub(crate) cancel: Option<tokio_util::sync::CancellationToken>,
    pub(crate) approvals: Option<Arc<std::sync::Mutex<crate::context::SharedApprovals>>>,
    /// For a run nested as a tool: where it leaves its state when it pauses for approvals.
    pub(crate) nested_pause: Option<PauseSlot>,
    /// For a resumed run: its checkpoint (the request's session, user and metadata start as
    /// the checkpoint's).
    pub(crate) resume: Option<Box<crate::runner::state::Resume>>,
    /// A resume that claims an orphaned run ([`crate::Agent::recover_orphans`]): it does not
    /// wait for the session's lease, and runs only a checkpoint still marked running.
    pub(crate) claim: bool,
}

/// Where a nested run leaves its exported state when it pauses.
pub(crate) type PauseSlot = Arc<std::sync::Mutex<Option<serde_json::Value>>>;

impl<C> Clone for AgentRequest<C> {
    fn clone(&self) -> Self {
        AgentRequest {
            input: self.input.clone(),
            context: Arc::clone(&self.context),
            session_id: self.session_id.clone(),
            user: self.user.clone(),
            metadata: self.metadata.clone(),
            run_id: self.run_id.clone(),
            tool_input: self.tool_input.clone(),
            parent_run_id: self.parent_run_id.clone(),
            model_settings: self.model_settings.clone(),
            stream: self.stream.clone(),
            cancel: self.cancel.clone(),
            approvals: self.approvals.clone(),
            nested_pause: self.nested_pause.clone(),
            resume: self.resume.clone(),
            claim: self.claim,
        }
    }
}

impl<C> fmt::Debug for AgentRequest<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentRequest")
            .field("input", &self.input)
            .field("session_id", &self.session_id)
            .field("user", &self.user)
            .field("run_id", &self.run_id)
            .field("resume", &self.resume.is_some())
            .finish_non_exhaustive()
    }
}

impl<C> AgentRequest<C> {
    /// A request with a user message and an application context: a `C`, or an `Arc<C>`
    /// shared with other runs (not cloned).
    pub fn new(context: impl Into<Arc<C>>, input: impl Into<String>) -> Self {
        // The run appends to this vector: its answer at least, usually after a tool round.
        // Room for those now saves growing it on the way.
        let mut messages = Vec::with_capacity(4);
        messages.push(Message::user(input));
        AgentRequest {
            input: messages,
            context: context.into(),
            session_id: None,
            user: UserContext::default(),
            metadata: serde_json::Map::new(),
            run_id: None,
            tool_input: None,
            parent_run_id: None,
            model_settings: None,
            stream: None,
            cancel: None,
            approvals: None,
            nested_pause: None,
            resume: None,
            claim: false,
        }
    }

    /// Whether this request continues a run from its checkpoint ([`Agent::resume`](crate::Agent::resume) and the
    /// other resume methods): agent middleware sees resumed runs too, and can tell them apart
    /// here. Such a request has no new input; its run id, session, user and metadata are the
    /// paused run's.
    pub fn is_resume(&self) -> bool {
        self.resume.is_some()
    }

    /// Continues (and appends to) a session.
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Sets the user context.
    pub fn user(mut self, user: UserContext) -> Self {
        self.user = user;
        self
    }

    /// Adds a metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// Cancels the run when `token` is cancelled, at its next boundary: a model request in
    /// flight is abandoned, tool calls in flight are aborted unless their tool is `blocking`
    /// (those finish), and the run ends with [`AgentError::Cancelled`](crate::AgentError::Cancelled).
    /// With a checkpoint store the run's checkpoint is kept, with every finished call's result,
    /// so [`Agent::resume`](crate::Agent::resume) continues it.
    ///
    /// ```
    /// use modu_agent::{Agent, AgentRequest};
    /// use modu_core::AgentError;
    /// use modu_testing::ScriptedModel;
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let agent: Agent<()> = Agent::builder(ScriptedModel::new().text("hello")).build().unwrap();
    /// let token = CancellationToken::new();
    /// token.cancel();
    /// let outcome = agent.run(AgentRequest::new((), "hi").cancel_token(token)).await;
    /// assert_eq!(outcome.error(), Some(&AgentError::Cancelled));
    /// # }
    /// ```
    pub fn cancel_token(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Sampling settings for this run, over the agent's ([`AgentRequest::model_settings`]).
    pub fn model_settings(mut self, settings: ModelSettings) -> Self {
        self.model_settings = Some(settings);
        self
    }

    /// Whether and which tool the model must call in this run, over the agent's setting
    /// ([`ModelSettings::tool_choice`]; reset after the model's first tool call unless
    /// [`ModelSettings::keep_tool_choice`]).
    ///
    /// ```
    /// use modu_agent::AgentRequest;
    /// use modu_core::ToolChoice;
    ///
    /// let request = AgentRequest::new((), "What is 2 + 3?").tool_choice(ToolChoice::Named("add".into()));
    /// assert_eq!(request.model_settings.and_then(|s| s.tool_choice), Some(ToolChoice::Named("add".into())));
    /// ```
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        let settings = self.model_settings.take().unwrap_or_default();
        self.model_settings = Some(settings.tool_choice(choice));
        self
    }

    /// Uses this run id.
    pub fn run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Replaces the input messages.
    pub fn messages(mut self, input: Vec<Message>) -> Self {
        self.input = input;
        self
    }

    /// Approves every call of `tool` in this run and the runs nested in it in advance, as
    /// [`RunContext::approve_tool`](crate::RunContext::approve_tool) does from code (for an MCP tool, its external name).
    pub fn approve_tool(mut self, tool: impl Into<String>) -> Self {
        self.approvals
            .get_or_insert_with(Arc::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .approve(tool.into());
        self
    }

    /// Rejects every call of `tool` in this run and the runs nested in it in advance; the
    /// model sees `message`.
    pub fn reject_tool(mut self, tool: impl Into<String>, message: Option<String>) -> Self {
        self.approvals
            .get_or_insert_with(Arc::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .reject(tool.into(), message);
        self
    }
}

impl<C: Default> From<&str> for AgentRequest<C> {
    fn from(s: &str) -> Self {
        AgentRequest::new(C::default(), s)
    }
}

impl<C: Default> From<String> for AgentRequest<C> {
    fn from(s: String) -> Self {
        AgentRequest::new(C::default(), s)
    }
}
