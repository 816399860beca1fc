//! Tools: [`Tool`], its [`ToolSpec`], the typed [`ToolError`], and [`FunctionTool`] for tools
//! written as closures. The `#[tool]` attribute in `modu-macros` builds tools from functions.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::context::RunContext;
use crate::model::ToolDefinition;

/// Everything the run loop needs to know about a tool besides how to call it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model calls it by (letters, digits, `_`, `-`).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON schema of its arguments; the run loop validates arguments against it. Shared
    /// with every [`ToolDefinition`] the spec makes.
    pub parameters: Arc<serde_json::Value>,
    /// Running the same call twice is harmless: the run loop may retry it on a retryable error.
    #[serde(default)]
    pub idempotent: bool,
    /// The model may call it again with corrected arguments after a `repair_call` error.
    #[serde(default)]
    pub repair_safe: bool,
    /// A timed-out call may be retried (only for blocking tools whose work really stops on
    /// timeout, for example a database driver with a statement timeout).
    #[serde(default)]
    pub timeout_retry_safe: bool,
    /// The tool is synchronous and runs on the blocking thread pool. A timed-out blocking call
    /// cannot be cancelled, so it is never retried unless `timeout_retry_safe`.
    #[serde(default)]
    pub blocking: bool,
    /// The most time one call may take.
    #[serde(default, with = "opt_secs")]
    pub timeout: Option<Duration>,
    /// Results longer than this are cut, with a visible marker.
    #[serde(default)]
    pub max_result_bytes: Option<usize>,
    /// A person must approve each call before it runs (see [`Tool::needs_approval`]).
    #[serde(default)]
    pub needs_approval: bool,
    /// Calls do not count toward `RunLimits::max_tool_calls` (for internal tools with their
    /// own limit, such as skill resource reads).
    #[serde(default)]
    pub exempt_from_tool_limit: bool,
    /// The tool stands for other tools (MCP's `mcp_search_tools` / `mcp_call_tool`): a call
    /// runs the tool [`Tool::identity`] names. Context providers that narrow tools by identity
    /// (skills' `allowed-tools`) keep such tools offered and let the gate decide per call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub meta: bool,
}

mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let v: Option<f64> = Option::deserialize(d)?;
        Ok(v.and_then(|s| Duration::try_from_secs_f64(s).ok()))
    }
}

impl ToolSpec {
    /// A spec with a name, a description and a parameter schema; every flag off.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: serde_json::Value) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: Arc::new(parameters),
            idempotent: false,
            repair_safe: false,
            timeout_retry_safe: false,
            blocking: false,
            timeout: None,
            max_result_bytes: None,
            needs_approval: false,
            exempt_from_tool_limit: false,
            meta: false,
        }
    }

    /// A spec whose parameter schema comes from `A`'s [`schemars::JsonSchema`].
    pub fn for_args<A: schemars::JsonSchema>(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self::new(name, description, schema_for::<A>())
    }

    /// Marks the tool idempotent.
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// Marks the tool repair-safe.
    pub fn repair_safe(mut self, yes: bool) -> Self {
        self.repair_safe = yes;
        self
    }

    /// Marks a blocking tool's timeout as safe to retry.
    pub fn timeout_retry_safe(mut self, yes: bool) -> Self {
        self.timeout_retry_safe = yes;
        self
    }

    /// Marks the tool as blocking (synchronous).
    pub fn blocking(mut self, yes: bool) -> Self {
        self.blocking = yes;
        self
    }

    /// Sets the per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Requires a person's approval before every call.
    pub fn needs_approval(mut self, yes: bool) -> Self {
        self.needs_approval = yes;
        self
    }

    /// Marks the tool as one that stands for other tools (see [`ToolSpec::meta`]).
    pub fn meta(mut self, yes: bool) -> Self {
        self.meta = yes;
        self
    }

    /// Exempts the tool's calls from `RunLimits::max_tool_calls`.
    pub fn exempt_from_tool_limit(mut self, yes: bool) -> Self {
        self.exempt_from_tool_limit = yes;
        self
    }

    /// Sets the result size cap.
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = Some(bytes);
        self
    }

    /// The tool as the model sees it.
    pub fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
        }
    }
}

/// The JSON schema of `T` as a tool-parameter schema (draft 2020-12, no `$schema` key, and
/// `"type": "object"` with empty properties for unit-like argument types).
pub fn schema_for<T: schemars::JsonSchema>() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.meta_schema = None)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("title");
        if !obj.contains_key("type")
            && !obj.contains_key("$ref")
            && !obj.contains_key("anyOf")
            && !obj.contains_key("oneOf")
        {
            obj.insert("type".into(), serde_json::Value::String("object".into()));
        }
        if obj.get("type").and_then(|t| t.as_str()) == Some("object") && !obj.contains_key("properties") {
            obj.insert("properties".into(), serde_json::json!({}));
        }
    }
    value
}

/// The kind of a tool failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The arguments did not fit the tool's schema (or were not JSON).
    Validation,
    /// The tool ran and failed.
    Execution,
    /// The call did not finish in time.
    Timeout,
    /// The user is not allowed to call the tool.
    Authorization,
    /// No tool of that name is available to the model now.
    NotFound,
    /// A person rejected the call.
    Rejected,
    /// A run limit stopped the call.
    LimitExceeded,
    /// The call asked a person for input ([`crate::RunContext::ask_user`]); the run pauses
    /// and the call runs again once they answered.
    InputRequired,
}

impl ToolErrorKind {
    /// The snake_case name (`"validation"`, `"timeout"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorKind::Validation => "validation",
            ToolErrorKind::Execution => "execution",
            ToolErrorKind::Timeout => "timeout",
            ToolErrorKind::Authorization => "authorization",
            ToolErrorKind::NotFound => "not_found",
            ToolErrorKind::Rejected => "rejected",
            ToolErrorKind::LimitExceeded => "limit_exceeded",
            ToolErrorKind::InputRequired => "input_required",
        }
    }
}

impl fmt::Display for ToolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the run loop should do about a failed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecoveryAction {
    /// Run the same call again (only for idempotent tools with a retryable error).
    RetryCall,
    /// Let the model call the same tool once more with corrected arguments.
    RepairCall,
    /// Revise the plan (plan-and-execute).
    Replan,
    /// End the run.
    Fail,
}

/// A typed tool failure. A tool returns it, a per-tool error mapper builds it from the tool's
/// own error, and the run loop builds it for validation, timeout and lookup failures.
///
/// What the model sees of it is its kind, reason and (for non-strict policies) its `message`,
/// so `message` must be safe to show a model: never raw exceptions, SQL, tokens or paths.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind} error: {reason}")]
#[non_exhaustive]
pub struct ToolError {
    /// The kind of failure.
    pub kind: ToolErrorKind,
    /// A short machine-readable reason (`"invalid_arguments"`, `"unknown_tool"`, …).
    pub reason: String,
    /// A message safe to show the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether running the same call again may succeed.
    #[serde(default)]
    pub retryable: bool,
    /// What the tool suggests doing about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryAction>,
}

impl ToolError {
    /// An error of this kind with a reason.
    pub fn new(kind: ToolErrorKind, reason: impl Into<String>) -> Self {
        ToolError {
            kind,
            reason: reason.into(),
            message: None,
            retryable: false,
            recovery: None,
        }
    }

    /// A validation error with a message for the model.
    pub fn validation(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Validation, reason).with_message(message)
    }

    /// An execution error.
    pub fn execution(reason: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Execution, reason)
    }

    /// A timeout error (retryable).
    pub fn timeout(after: Duration) -> Self {
        Self::new(ToolErrorKind::Timeout, "timeout")
            .with_message(format!("the tool did not answer within {:.3}s", after.as_secs_f64()))
            .retryable(true)
    }

    /// Sets the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// Sets retryable.
    pub fn retryable(mut self, yes: bool) -> Self {
        self.retryable = yes;
        self
    }

    /// Sets the recovery action.
    pub fn with_recovery(mut self, action: RecoveryAction) -> Self {
        self.recovery = Some(action);
        self
    }

    /// The JSON the model receives for this error (the tool message's content):
    /// `{"error":{"type":…,"reason":…,"message":…}}`; `message` only when `with_message`.
    pub fn model_content(&self, with_message: bool) -> String {
        let mut err = serde_json::Map::new();
        err.insert("type".into(), self.kind.as_str().into());
        err.insert("reason".into(), self.reason.clone().into());
        if with_message && let Some(m) = &self.message {
            err.insert("message".into(), m.clone().into());
        }
        if self.retryable {
            err.insert("retryable".into(), true.into());
        }
        serde_json::json!({ "error": err }).to_string()
    }
}

/// Classifies a tool's own error into a [`ToolError`]; `None` leaves it to generic handling
/// (an `execution` error with reason `unhandled_error` and no message for the model).
pub type ErrorMapper = Arc<dyn Fn(&(dyn std::error::Error + Send + Sync + 'static)) -> Option<ToolError> + Send + Sync>;

/// Turns a tool's own error into a [`ToolError`]: a `ToolError` passes through, otherwise the
/// mapper decides, otherwise a generic execution error that reveals nothing of the original.
pub fn map_tool_error(err: BoxError, mapper: Option<&ErrorMapper>) -> ToolError {
    let err = match err.downcast::<ToolError>() {
        Ok(tool_error) => return *tool_error,
        Err(other) => other,
    };
    if let Some(mapper) = mapper
        && let Some(mapped) = mapper(err.as_ref())
    {
        return mapped;
    }
    // Only for the developer's own logs, and with key=value secrets masked: the model, events
    // and traces see the generic error below.
    tracing::debug!(
        error = %crate::mask::SecretMasker::default().mask_text(&err.to_string()),
        "unmapped tool error"
    );
    ToolError::execution("unhandled_error")
}

/// A tool the model can call, for runs whose application context is `C`.
///
/// Implement it directly, write a closure with [`FunctionTool`], or put `#[tool]` on a function.
#[async_trait]
pub trait Tool<C>: Send + Sync {
    /// The tool's spec (name, schema, flags).
    fn spec(&self) -> &ToolSpec;

    /// Runs one call with validated arguments.
    async fn call(&self, ctx: &RunContext<C>, arguments: serde_json::Value) -> Result<serde_json::Value, ToolError>;

    /// Whether the model may see and call the tool in this turn. A disabled tool is left out
    /// of the request and a call to it is refused.
    fn is_enabled(&self, _ctx: &RunContext<C>) -> bool {
        true
    }

    /// Whether this call must be approved by a person before it runs. The default follows
    /// [`ToolSpec::needs_approval`]; override it to decide from the context and arguments.
    /// It is asked only for calls without a recorded decision (see
    /// [`FunctionTool::needs_approval_when`] for when).
    fn needs_approval(&self, _ctx: &RunContext<C>, _arguments: &serde_json::Value) -> bool {
        self.spec().needs_approval
    }

    /// The tool this call really runs: the name RBAC decides on, approvals show, and events
    /// and the tool trace carry. A tool that stands for another one (MCP's `mcp_call_tool`
    /// meta tool) returns the external tool (`server__tool`) from its arguments; the default
    /// is the tool's own name. Called with arguments that passed schema validation.
    fn identity(&self, _arguments: &serde_json::Value) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(self.spec().name.as_str())
    }

    /// What the approval prompt shows for this call. The default names the call's
    /// [`Tool::identity`].
    fn approval_request(&self, call_id: &str, arguments: &serde_json::Value) -> crate::approval::ApprovalRequest {
        crate::approval::ApprovalRequest {
            call_id: call_id.to_owned(),
            tool_name: self.identity(arguments).into_owned(),
            arguments: arguments.clone(),
            metadata: serde_json::Map::new(),
        }
    }
}

#[async_trait]
impl<C: Send + Sync, T: Tool<C> + ?Sized> Tool<C> for Arc<T> {
    fn spec(&self) -> &ToolSpec {
        (**self).spec()
    }
    // Forwarded as it is: an `async fn` here would box the inner call's boxed future again,
    // one more allocation per tool call.
    fn call<'life0, 'life1, 'async_trait>(
        &'life0 self,
        ctx: &'life1 RunContext<C>,
        arguments: serde_json::Value,
    ) -> BoxFuture<'async_trait, Result<serde_json::Value, ToolError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        (**self).call(ctx, arguments)
    }
    fn is_enabled(&self, ctx: &RunContext<C>) -> bool {
        (**self).is_enabled(ctx)
    }
    fn needs_approval(&self, ctx: &RunContext<C>, arguments: &serde_json::Value) -> bool {
        (**self).needs_approval(ctx, arguments)
    }
    fn identity(&self, arguments: &serde_json::Value) -> std::borrow::Cow<'_, str> {
        (**self).identity(arguments)
    }
    fn approval_request(&self, call_id: &str, arguments: &serde_json::Value) -> crate::approval::ApprovalRequest {
        (**self).approval_request(call_id, arguments)
    }
}

type Handler<C> = Arc<
    dyn Fn(RunContext<C>, serde_json::Value) -> BoxFuture<'static, Result<serde_json::Value, ToolError>> + Send + Sync,
>;
type EnabledFn<C> = Arc<dyn Fn(&RunContext<C>) -> bool + Send + Sync>;
type ApprovalFn<C> = Arc<dyn Fn(&RunContext<C>, &serde_json::Value) -> bool + Send + Sync>;

/// A tool made of a closure.
///
/// ```
/// use modu_core::{FunctionTool, ToolSpec};
/// use serde_json::json;
///
/// let echo = FunctionTool::<()>::new(
///     ToolSpec::new("echo", "Echo the text", json!({"type":"object","properties":{"text":{"type":"string"}}})),
///     |_ctx, args| async move { Ok(args["text"].clone()) },
/// );
/// # let _ = echo;
/// ```
pub struct FunctionTool<C> {
    spec: ToolSpec,
    handler: Handler<C>,
    enabled: Option<EnabledFn<C>>,
    approval: Option<ApprovalFn<C>>,
}

impl<C> Clone for FunctionTool<C> {
    fn clone(&self) -> Self {
        FunctionTool {
            spec: self.spec.clone(),
            handler: Arc::clone(&self.handler),
            enabled: self.enabled.clone(),
            approval: self.approval.clone(),
        }
    }
}

impl<C: Send + Sync + 'static> FunctionTool<C> {
    /// An async tool.
    pub fn new<F, Fut>(spec: ToolSpec, f: F) -> Self
    where
        F: Fn(RunContext<C>, serde_json::Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<serde_json::Value, ToolError>> + Send + 'static,
    {
        FunctionTool {
            spec,
            handler: Arc::new(move |ctx, args| Box::pin(f(ctx, args))),
            enabled: None,
            approval: None,
        }
    }

    /// A synchronous tool, run on the blocking thread pool (the spec is marked `blocking`).
    pub fn blocking<F>(spec: ToolSpec, f: F) -> Self
    where
        F: Fn(RunContext<C>, serde_json::Value) -> Result<serde_json::Value, ToolError> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        FunctionTool {
            spec: spec.blocking(true),
            handler: Arc::new(move |ctx, args| {
                let f = Arc::clone(&f);
                Box::pin(run_blocking(move || f(ctx, args)))
            }),
            enabled: None,
            approval: None,
        }
    }

    /// A typed async tool: arguments are deserialised into `A` (its schema is the tool's
    /// parameter schema) and the result `R` serialised.
    pub fn typed<A, R, F, Fut>(name: impl Into<String>, description: impl Into<String>, f: F) -> Self
    where
        A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
        R: Serialize,
        F: Fn(RunContext<C>, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
    {
        let f = Arc::new(f);
        Self::new(ToolSpec::for_args::<A>(name, description), move |ctx, args| {
            let f = Arc::clone(&f);
            async move {
                let args: A = parse_arguments(args)?;
                let out = f(ctx, args).await?;
                to_result_value(&out)
            }
        })
    }

    /// Sets an `is_enabled` predicate.
    pub fn enabled_when<P>(mut self, predicate: P) -> Self
    where
        P: Fn(&RunContext<C>) -> bool + Send + Sync + 'static,
    {
        self.enabled = Some(Arc::new(predicate));
        self
    }

    /// Requires approval for calls this predicate picks (from the context and arguments).
    ///
    /// The predicate is evaluated when a call reaches the tool gate — after its arguments
    /// passed schema validation, before RBAC — each time an undecided call does so: on the
    /// first run and again on every resume while the call has no decision. Once a person's
    /// decision (approve, approve_always, reject) is recorded for a call, that decision binds
    /// the call and the predicate is not asked again for it: a rejected call never runs, even
    /// when the resuming agent's predicate would now return `false`.
    pub fn needs_approval_when<P>(mut self, predicate: P) -> Self
    where
        P: Fn(&RunContext<C>, &serde_json::Value) -> bool + Send + Sync + 'static,
    {
        self.approval = Some(Arc::new(predicate));
        self
    }

    /// Changes the spec (to set flags after construction).
    pub fn map_spec(mut self, f: impl FnOnce(ToolSpec) -> ToolSpec) -> Self {
        self.spec = f(self.spec);
        self
    }
}

#[async_trait]
impl<C: Send + Sync + 'static> Tool<C> for FunctionTool<C> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    // The handler's future is returned as it is (it owns what it needs): an `async fn` here
    // would box it again, one more allocation per call.
    fn call<'life0, 'life1, 'async_trait>(
        &'life0 self,
        ctx: &'life1 RunContext<C>,
        arguments: serde_json::Value,
    ) -> BoxFuture<'async_trait, Result<serde_json::Value, ToolError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        (self.handler)(ctx.clone(), arguments)
    }
    fn is_enabled(&self, ctx: &RunContext<C>) -> bool {
        self.enabled.as_ref().is_none_or(|p| p(ctx))
    }
    fn needs_approval(&self, ctx: &RunContext<C>, arguments: &serde_json::Value) -> bool {
        match &self.approval {
            Some(p) => p(ctx, arguments),
            None => self.spec.needs_approval,
        }
    }
}

/// Deserialises validated arguments into a typed value; a mismatch is a validation error whose
/// message tells the model what was wrong.
pub fn parse_arguments<A: serde::de::DeserializeOwned>(args: serde_json::Value) -> Result<A, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::validation("invalid_arguments", e.to_string()))
}

/// Serialises a tool's output into the JSON value the run loop sends back.
pub fn to_result_value<R: Serialize + ?Sized>(out: &R) -> Result<serde_json::Value, ToolError> {
    serde_json::to_value(out).map_err(|_| ToolError::execution("unserializable_result"))
}

/// Runs a synchronous function on the blocking pool. A panic becomes an execution error.
pub async fn run_blocking<T, F>(f: F) -> Result<T, ToolError>
where
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(_) => Err(ToolError::execution("tool_panicked")),
    }
}

/// Cuts a tool result to at most `max` bytes on a character boundary, appending a visible
/// marker that says how much was kept.
pub fn truncate_result(text: String, max: Option<usize>) -> String {
    let Some(max) = max else { return text };
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while cut > 0 && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let total = text.len();
    let mut out = String::with_capacity(cut + 64);
    out.push_str(&text[..cut]);
    out.push_str(&format!("\n…[truncated: {cut} of {total} bytes shown]"));
    out
}

/// Helpers the `#[tool]` macro expands to. Not a stable API.
#[doc(hidden)]
pub mod __macro_support {
    use super::*;

    /// What a `#[tool]` function may return: a serialisable value, or a `Result` of one.
    pub trait IntoToolOutput {
        /// Converts into the tool result.
        fn into_tool_output(self, mapper: Option<&ErrorMapper>) -> Result<serde_json::Value, ToolError>;
    }

    /// Wraps an infallible return value.
    pub struct Plain<T>(pub T);
    /// Wraps a `Result` return value.
    pub struct Fallible<T, E>(pub Result<T, E>);

    impl<T: Serialize> IntoToolOutput for Plain<T> {
        fn into_tool_output(self, _mapper: Option<&ErrorMapper>) -> Result<serde_json::Value, ToolError> {
            to_result_value(&self.0)
        }
    }

    impl<T: Serialize, E: Into<BoxError>> IntoToolOutput for Fallible<T, E> {
        fn into_tool_output(self, mapper: Option<&ErrorMapper>) -> Result<serde_json::Value, ToolError> {
            match self.0 {
                Ok(v) => to_result_value(&v),
                Err(e) => Err(map_tool_error(e.into(), mapper)),
            }
        }
    }

    /// Builds an error mapper from a plain function.
    pub fn mapper_from_fn(f: fn(&(dyn std::error::Error + Send + Sync + 'static)) -> Option<ToolError>) -> ErrorMapper {
        Arc::new(f)
    }
}

/// A compiled JSON schema that checks tool arguments and says what is wrong in words a model
/// can act on (`/a: "one" is not of type "integer"`). The run loop checks every call with
/// one; connectors that validate before sending (MCP) use the same.
pub struct ArgumentValidator {
    inner: jsonschema::Validator,
}

impl std::fmt::Debug for ArgumentValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgumentValidator").finish_non_exhaustive()
    }
}

impl ArgumentValidator {
    /// Compiles a schema; the error says why it is not a valid schema.
    pub fn new(schema: &serde_json::Value) -> Result<Self, String> {
        jsonschema::validator_for(schema)
            .map(|inner| ArgumentValidator { inner })
            .map_err(|e| e.to_string())
    }

    /// What is wrong with `arguments` (at most 8 problems, each with its JSON pointer); empty
    /// when they fit.
    pub fn problems(&self, arguments: &serde_json::Value) -> Vec<String> {
        if self.inner.is_valid(arguments) {
            return Vec::new();
        }
        self.inner
            .iter_errors(arguments)
            .take(8)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect()
    }

    /// Whether `arguments` fit, without collecting the problems.
    pub fn is_valid(&self, arguments: &serde_json::Value) -> bool {
        self.inner.is_valid(arguments)
    }

    /// `Ok` when `arguments` fit, else the problems joined with `"; "`.
    pub fn check(&self, arguments: &serde_json::Value) -> Result<(), String> {
        let problems = self.problems(arguments);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Replaces every character that is not a letter, digit, `_` or `-` (names of schemas and tools).
#[doc(hidden)]
pub fn sanitize_name(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
