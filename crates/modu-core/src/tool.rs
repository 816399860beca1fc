//! Tools: [`Tool`], its [`ToolSpec`], the typed [`ToolError`], and [`FunctionTool`] for tools
//! written as closures. The `#[tool]` attribute in `modu-macros` builds tools from functions.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::context::RunContext;

mod error;
mod function;
mod spec;
mod validator;

/// Everything the run loop needs to know about a tool besides how to call it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model calls it by (letters, digits, `_`, `-`).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON schema of its arguments; the run loop validates arguments against it. Shared
    /// with every [`ToolDefinition`](crate::model::ToolDefinition) the spec makes.
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

    /// What a run's checkpoint depends on in this tool beyond its spec, for a tool that keeps
    /// state of its own in the checkpoint: an agent used as a tool returns the nested agent's
    /// fingerprint. The fingerprint of an agent offering the tool changes with it, so a
    /// checkpoint taken with another version fails to resume (`ResumeIncompatible`) instead of
    /// going on with a different tool. The default, `None`, says the spec is all that counts.
    fn fingerprint(&self) -> Option<&str> {
        None
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
    fn fingerprint(&self) -> Option<&str> {
        (**self).fingerprint()
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
