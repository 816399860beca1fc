//! [`RunContext`]: what every tool, instruction function and hook of a run receives.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::message::Usage;
#[doc(hidden)]
pub use crate::model_usage::{ModelUsage, RunUsage, add_model_call};

/// Who the run is for: an id, roles (for RBAC) and free attributes.
///
/// It is serialised with the run state, so keep secrets out of it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UserContext {
    /// The user's id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The user's roles; the RBAC authorizer checks tools against them.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Anything else the application wants tools and policies to see.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

impl UserContext {
    /// The user `user_id`, with no roles.
    pub fn user(user_id: impl Into<String>) -> Self {
        UserContext {
            user_id: Some(user_id.into()),
            ..Self::default()
        }
    }

    /// A user context with these roles.
    pub fn with_roles<I, S>(roles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        UserContext {
            roles: roles.into_iter().map(Into::into).collect(),
            ..UserContext::default()
        }
    }

    /// Whether the user has this role.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// Tool-level approval decisions made in code, shared by a run and the runs nested in it.
#[derive(Debug, Default)]
#[doc(hidden)]
pub struct SharedApprovals {
    #[doc(hidden)]
    pub approved: std::collections::BTreeSet<String>,
    #[doc(hidden)]
    pub rejected: BTreeMap<String, Option<String>>,
}

impl SharedApprovals {
    /// Approves every call of `tool` (undoing a rejection).
    #[doc(hidden)]
    pub fn approve(&mut self, tool: String) {
        self.rejected.remove(&tool);
        self.approved.insert(tool);
    }

    /// Rejects every call of `tool` (undoing an approval).
    #[doc(hidden)]
    pub fn reject(&mut self, tool: String, message: Option<String>) {
        self.approved.remove(&tool);
        self.rejected.insert(tool, message);
    }
}

struct Inner<C> {
    context: Arc<C>,
    run_id: Arc<str>,
    session_id: Option<String>,
    agent_name: String,
    user: UserContext,
    usage: Arc<Mutex<RunUsage>>,
    tool_input: Option<serde_json::Value>,
    metadata: Arc<serde_json::Map<String, serde_json::Value>>,
    approvals: Arc<Mutex<SharedApprovals>>,
    model: Option<Arc<dyn crate::model::ChatModel>>,
    events: Option<Arc<dyn CallReports>>,
}

/// A run's metadata, shared: no metadata (most runs) is one map for every run.
fn shared_metadata(
    metadata: serde_json::Map<String, serde_json::Value>,
) -> Arc<serde_json::Map<String, serde_json::Value>> {
    static NONE: std::sync::LazyLock<Arc<serde_json::Map<String, serde_json::Value>>> =
        std::sync::LazyLock::new(Arc::default);
    if metadata.is_empty() {
        Arc::clone(&NONE)
    } else {
        Arc::new(metadata)
    }
}

/// A report's future.
#[doc(hidden)]
pub type Reported<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;

/// Where a tool call's reports go while it runs: the run's events (set only when anyone
/// listens). The runner's emitter implements it, so this module names no event type.
#[doc(hidden)]
pub trait CallReports: Send + Sync {
    /// A call's progress.
    fn progress(
        &self,
        run_id: String,
        call_id: String,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> Reported<'_>;
    /// A model call a tool call made on the run's behalf.
    fn model_call(&self, run_id: String, call_id: String, model: String, usage: Usage, purpose: String)
    -> Reported<'_>;
}

/// The context of one run, handed to every tool call, instruction function and hook.
///
/// It wraps the application's own context `C` (dependencies, per-request data) and carries the
/// run's metadata: ids, the user context, the aggregated [`Usage`] and, for a run nested inside
/// another as a tool, the structured `tool_input`. Cloning is cheap (one `Arc`).
///
/// Nested runs (agent-as-tool) share the same application context and usage counter as their
/// parent: usage recorded in the child is visible in the parent.
pub struct RunContext<C> {
    inner: Arc<Inner<C>>,
    /// The tool call this context was handed to (`None` outside a tool call).
    call: Option<Arc<CallScope>>,
}

/// What [`RunContext::for_run`] builds a run's context from.
#[derive(Default)]
#[doc(hidden)]
pub struct RunParts {
    #[doc(hidden)]
    pub run_id: String,
    #[doc(hidden)]
    pub session_id: Option<String>,
    #[doc(hidden)]
    pub agent_name: String,
    #[doc(hidden)]
    pub user: UserContext,
    #[doc(hidden)]
    pub usage: Usage,
    #[doc(hidden)]
    pub usage_by_model: BTreeMap<String, Usage>,
    #[doc(hidden)]
    pub tool_input: Option<serde_json::Value>,
    #[doc(hidden)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    #[doc(hidden)]
    pub approvals: Option<Arc<Mutex<SharedApprovals>>>,
    #[doc(hidden)]
    pub model: Option<Arc<dyn crate::model::ChatModel>>,
    /// Where the run's events go (for [`RunContext::report_progress`]).
    #[doc(hidden)]
    pub events: Option<Arc<dyn CallReports>>,
}

/// What a context knows about the one tool call it was handed to.
#[doc(hidden)]
pub struct CallScope {
    #[doc(hidden)]
    pub call_id: String,
    /// A nested run this call paused earlier, with the decisions people made since.
    #[doc(hidden)]
    pub resume: Option<crate::approval::NestedResume>,
    /// Set by a tool whose nested run paused for approvals (agent-as-tool).
    #[doc(hidden)]
    pub pause: Mutex<Option<crate::approval::NestedPause>>,
    /// How often the call's tool was called (the function stack's timeout layer counts).
    #[doc(hidden)]
    pub attempts: std::sync::atomic::AtomicU32,
    /// The call's asks for a person's input: recorded answers and the ask waiting.
    #[doc(hidden)]
    pub inputs: Mutex<crate::input::CallInputs>,
    /// The tool guardrails' checks of the call, in order.
    #[doc(hidden)]
    pub guardrails: Mutex<Vec<crate::tripwire::Checked>>,
}

impl CallScope {
    #[doc(hidden)]
    pub fn new(
        call_id: &str,
        resume: Option<crate::approval::NestedResume>,
        answers: Vec<crate::input::InputAnswer>,
    ) -> Self {
        CallScope {
            call_id: call_id.to_owned(),
            resume,
            pause: Mutex::new(None),
            attempts: std::sync::atomic::AtomicU32::new(0),
            inputs: Mutex::new(crate::input::CallInputs {
                answers,
                ..Default::default()
            }),
            guardrails: Mutex::new(Vec::new()),
        }
    }

    /// Records a tool guardrail's check of the call.
    #[doc(hidden)]
    pub fn record_guardrail(&self, checked: crate::tripwire::Checked) {
        self.guardrails
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(checked);
    }

    /// The tool guardrails' checks of the call so far.
    #[doc(hidden)]
    pub fn take_guardrails(&self) -> Vec<crate::tripwire::Checked> {
        std::mem::take(&mut *self.guardrails.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The ask waiting for a person, if the call made one it had no answer for.
    #[doc(hidden)]
    pub fn take_input(&self) -> Option<(u32, crate::input::InputSpec)> {
        self.inputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .waiting
            .take()
    }

    /// Starts an execution of the call (a retry re-reads the answers from the first).
    #[doc(hidden)]
    pub fn restart_inputs(&self) {
        let mut inputs = self.inputs.lock().unwrap_or_else(PoisonError::into_inner);
        inputs.asked = 0;
    }

    #[doc(hidden)]
    pub fn take_pause(&self) -> Option<crate::approval::NestedPause> {
        self.pause.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl<C> Clone for RunContext<C> {
    fn clone(&self) -> Self {
        RunContext {
            inner: Arc::clone(&self.inner),
            call: self.call.clone(),
        }
    }
}

impl<C> std::fmt::Debug for RunContext<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("run_id", &self.inner.run_id)
            .field("session_id", &self.inner.session_id)
            .field("agent_name", &self.inner.agent_name)
            .field("user", &self.inner.user)
            .finish_non_exhaustive()
    }
}

impl<C> RunContext<C> {
    /// A context for a run. The run loop builds these; tests and custom runners may too.
    pub fn new(context: Arc<C>, run_id: impl Into<String>) -> Self {
        let parts = RunParts {
            run_id: run_id.into(),
            ..RunParts::default()
        };
        Self::for_run(context, parts)
    }

    /// A run's context, built in one allocation (the runner's way; `with_*` each rebuild it).
    #[doc(hidden)]
    pub fn for_run(context: Arc<C>, parts: RunParts) -> Self {
        RunContext {
            inner: Arc::new(Inner {
                context,
                run_id: Arc::from(parts.run_id),
                session_id: parts.session_id,
                agent_name: parts.agent_name,
                user: parts.user,
                usage: Arc::new(Mutex::new(RunUsage {
                    total: parts.usage,
                    by_model: ModelUsage::from(parts.usage_by_model),
                })),
                tool_input: parts.tool_input,
                metadata: shared_metadata(parts.metadata),
                approvals: parts.approvals.unwrap_or_default(),
                model: parts.model,
                events: parts.events,
            }),
            call: None,
        }
    }

    fn rebuild(&self, f: impl FnOnce(&mut Inner<C>)) -> Self {
        let mut inner = Inner {
            context: Arc::clone(&self.inner.context),
            run_id: Arc::clone(&self.inner.run_id),
            session_id: self.inner.session_id.clone(),
            agent_name: self.inner.agent_name.clone(),
            user: self.inner.user.clone(),
            usage: Arc::clone(&self.inner.usage),
            tool_input: self.inner.tool_input.clone(),
            metadata: Arc::clone(&self.inner.metadata),
            approvals: Arc::clone(&self.inner.approvals),
            model: self.inner.model.clone(),
            events: self.inner.events.as_ref().map(Arc::clone),
        };
        f(&mut inner);
        RunContext {
            inner: Arc::new(inner),
            call: None,
        }
    }

    /// The same context, handed to one tool call.
    #[doc(hidden)]
    pub fn for_call(&self, scope: Arc<CallScope>) -> Self {
        RunContext {
            inner: Arc::clone(&self.inner),
            call: Some(scope),
        }
    }

    #[doc(hidden)]
    pub fn call_scope(&self) -> Option<&Arc<CallScope>> {
        self.call.as_ref()
    }

    /// The id of the tool call this context was handed to (`None` outside a tool call): a
    /// stable key for a tool's own idempotency, the same on a retry and on a resume.
    pub fn call_id(&self) -> Option<&str> {
        self.call.as_deref().map(|c| c.call_id.as_str())
    }

    /// Asks a person for input: the recorded answer of this ask, or `None` when there is none
    /// yet, in which case the ask is recorded and the run pauses once the call returns (with
    /// whatever result: it is discarded, and the call runs again on resume). The low-level
    /// form of [`RunContext::ask_user`], for code that cannot return a [`crate::ToolError`]
    /// (an MCP elicitation handler). `None` too outside a tool call, without recording.
    pub fn request_input(&self, spec: crate::input::InputSpec) -> Option<crate::input::InputAnswer> {
        let scope = self.call.as_ref()?;
        scope.inputs.lock().unwrap_or_else(PoisonError::into_inner).next(spec)
    }

    /// The same context with a session id.
    pub fn with_session_id(&self, session_id: Option<String>) -> Self {
        self.rebuild(|i| i.session_id = session_id)
    }

    /// The same context with a user context.
    pub fn with_user(&self, user: UserContext) -> Self {
        self.rebuild(|i| i.user = user)
    }

    /// The same context with a structured tool input (for runs nested as tools).
    pub fn with_tool_input(&self, tool_input: Option<serde_json::Value>) -> Self {
        self.rebuild(|i| i.tool_input = tool_input)
    }

    /// The same context with run metadata.
    pub fn with_metadata(&self, metadata: serde_json::Map<String, serde_json::Value>) -> Self {
        self.rebuild(|i| i.metadata = shared_metadata(metadata))
    }

    /// The same context with an agent name.
    pub fn with_agent_name(&self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.rebuild(|i| i.agent_name = name)
    }

    /// A derived context for a nested run: same application context and usage counter, a new
    /// run id and the nested run's structured input.
    pub fn derive_nested(&self, run_id: impl Into<String>, tool_input: serde_json::Value) -> Self {
        let run_id = run_id.into();
        self.rebuild(|i| {
            i.run_id = Arc::from(run_id);
            i.tool_input = Some(tool_input);
        })
    }

    /// The application's context.
    pub fn context(&self) -> &C {
        &self.inner.context
    }

    /// The application's context as a shared pointer.
    pub fn context_arc(&self) -> Arc<C> {
        Arc::clone(&self.inner.context)
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The run id, shared (events and the chat stack keep it without copying).
    #[doc(hidden)]
    pub fn shared_run_id(&self) -> Arc<str> {
        Arc::clone(&self.inner.run_id)
    }

    /// The session (conversation) id, when the run belongs to one.
    pub fn session_id(&self) -> Option<&str> {
        self.inner.session_id.as_deref()
    }

    /// The name of the agent running.
    pub fn agent_name(&self) -> &str {
        &self.inner.agent_name
    }

    /// Who the run is for.
    pub fn user(&self) -> &UserContext {
        &self.inner.user
    }

    /// The structured input of a run nested as a tool (agent-as-tool), if this is one.
    pub fn tool_input(&self) -> Option<&serde_json::Value> {
        self.inner.tool_input.as_ref()
    }

    /// The model of the run's agent (its own [`ChatModel`](crate::ChatModel), without the
    /// agent's chat layers), for a tool or provider that asks it something on the run's
    /// behalf (MCP sampling, say). `None` in a context built outside an agent's run, unless
    /// set with [`RunContext::with_model`]. What such a request uses is the caller's to count
    /// ([`RunContext::add_usage`]).
    pub fn model(&self) -> Option<&Arc<dyn crate::model::ChatModel>> {
        self.inner.model.as_ref()
    }

    /// Reports the progress of the tool call this context was handed to: an
    /// [`AgentEvent::ToolProgress`](crate::AgentEvent::ToolProgress) to the run's event sink
    /// and stream. Nothing happens outside a tool call or when nobody listens. It waits while
    /// the caller's stream is full, as the run's other events do.
    ///
    /// ```
    /// # async fn tool(ctx: modu_core::RunContext<()>) {
    /// for step in 1..=3 {
    ///     // ... one step of the work ...
    ///     ctx.report_progress(f64::from(step), Some(3.0), Some(format!("step {step} of 3"))).await;
    /// }
    /// # }
    /// ```
    pub async fn report_progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let (Some(call), Some(events)) = (&self.call, &self.inner.events) else {
            return;
        };
        let run_id = self.inner.run_id.to_string();
        events
            .progress(run_id, call.call_id.clone(), progress, total, message)
            .await;
    }

    /// Reports a model call the tool call this context was handed to made on the run's behalf
    /// (`purpose` says why: `mcp_sampling`, say): its usage goes into
    /// [`RunContext::usage_by_model`] under `model`, and an
    /// [`AgentEvent::ToolModelCall`](crate::AgentEvent::ToolModelCall) to the run's event sink
    /// and stream. The run's total is the caller's to add ([`RunContext::add_usage`]), so a
    /// call counted there already is not counted twice. Nothing happens outside a tool call.
    pub async fn report_model_call(&self, model: &str, usage: Usage, purpose: &str) {
        let Some(call) = &self.call else {
            return;
        };
        self.add_model_usage(model, usage);
        if let Some(events) = &self.inner.events {
            let run_id = self.inner.run_id.to_string();
            events
                .model_call(
                    run_id,
                    call.call_id.clone(),
                    model.to_owned(),
                    usage,
                    purpose.to_owned(),
                )
                .await;
        }
    }

    /// This context with `model` as [`RunContext::model`] (for tests and custom runners).
    pub fn with_model(&self, model: Arc<dyn crate::model::ChatModel>) -> Self {
        self.rebuild(|i| i.model = Some(model))
    }

    #[doc(hidden)]
    pub fn shared_approvals(&self) -> Arc<Mutex<SharedApprovals>> {
        Arc::clone(&self.inner.approvals)
    }

    /// Approves every call of `tool` in this run and the runs nested in it, without asking.
    pub fn approve_tool(&self, tool: impl Into<String>) {
        self.inner
            .approvals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .approve(tool.into());
    }

    /// Rejects every call of `tool` in this run and the runs nested in it, without asking; the
    /// model sees `message`.
    pub fn reject_tool(&self, tool: impl Into<String>, message: Option<String>) {
        self.inner
            .approvals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reject(tool.into(), message);
    }

    /// The decision made in code for `tool`: `Some(Ok(()))` approved, `Some(Err(message))`
    /// rejected, `None` undecided.
    pub fn tool_decision(&self, tool: &str) -> Option<Result<(), Option<String>>> {
        let a = self.inner.approvals.lock().unwrap_or_else(PoisonError::into_inner);
        if a.approved.contains(tool) {
            Some(Ok(()))
        } else {
            a.rejected.get(tool).map(|m| Err(m.clone()))
        }
    }

    /// The run's metadata (`AgentRequest::metadata`): options for tool and context
    /// providers, such as `mcp.servers`.
    pub fn metadata(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.inner.metadata
    }

    /// The usage aggregated so far by this run (and by runs nested in it).
    pub fn usage(&self) -> Usage {
        self.usage_record().total
    }

    /// Adds usage to the run's total.
    pub fn add_usage(&self, usage: Usage) {
        self.usage_record().total += usage;
    }

    /// The run's usage record, locked.
    fn usage_record(&self) -> std::sync::MutexGuard<'_, RunUsage> {
        self.inner.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The run's usage record itself (the chat stack adds each attempt's usage to it).
    #[doc(hidden)]
    pub fn usage_handle(&self) -> Arc<Mutex<RunUsage>> {
        Arc::clone(&self.inner.usage)
    }

    /// The usage of the run's model calls so far, by the model that answered (a fallback
    /// chain's member) or was asked (failed calls). Usage added with [`RunContext::add_usage`]
    /// alone (memory summaries, compaction) is in [`RunContext::usage`] only.
    pub fn usage_by_model(&self) -> BTreeMap<String, Usage> {
        self.usage_record().by_model.to_map()
    }

    /// Adds the usage of a model's calls to the run's per-model breakdown (not to the total:
    /// [`RunContext::add_usage`] does that).
    pub fn add_model_usage(&self, model: &str, usage: Usage) {
        self.usage_record().by_model.add(model, usage);
    }
}
