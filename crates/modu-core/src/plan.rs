//! Plan-and-Execute: the strict decision policy (seed 002, "Plan-and-Execute" and "Tool 실패 복구").
//!
//! A strict run is an explicit state machine over a serialisable state:
//!
//! ```text
//! PLAN → ACT_TOOL → STEP_RESULT → STEP_VALIDATE/COMMIT → (next step: ACT_TOOL) … → VERIFY → FINALIZE → DONE
//!                         ↑ repair / retry          │ replan (tool failure fallback)
//! ```
//!
//! - **PLAN**: the [`LlmPlanGenerator`] asks a model for the steps, each with the tools it may
//!   use (structured output, no tools in the request).
//! - **ACT_TOOL**: requests carry only the current step's allowed tool schemas. Once a batch of
//!   calls ran, STEP_RESULT follows; calls refused before running (unknown tool, invalid
//!   arguments) are fed back and the model acts again; a plain answer is kept as a draft.
//! - **STEP_RESULT**: no tools, only the internal [`StepResult`] schema. A plain ACT answer never
//!   completes a step: only a step result that validates and is committed does.
//! - **VERIFY**: a runtime check (no model call) that every step of the plan is committed.
//! - **FINALIZE**: no tools, and either no schema (text) or the agent's output schema. Its tokens
//!   stream as [`AgentEvent::FinalDelta`](crate::AgentEvent::FinalDelta); everything before it
//!   streams only to [`Agent::stream_all`](crate::Agent::stream_all) and event sinks.
//! - **DONE** with `final_emitted`: the state stays in the checkpoint store, so resuming the same
//!   run returns the stored answer instead of finalizing twice (give the store a TTL).
//!
//! Tool failures are recovered as [`ToolFailureRecoveryConfig`] says: `retry_call` (same call,
//! same arguments; idempotent tools with a retryable error while [`RetryConfig`] attempts remain;
//! a timed-out blocking tool only when `timeout_retry_safe`), `repair_call` (the model calls the
//! same `repair_safe` tool exactly once more with a new call id and different effective
//! arguments), `replan` (the unfinished part of the plan is revised) and `fail`.
//! What reaches the model, the [`tool_trace`](ToolTraceEntry), events and the
//! [`failure`](PlanFailure) metadata of a failed tool is its error type and reason (plus its
//! sanitised message in [`FeedbackMode::SafeMessage`]) — never a raw error, never a result.
//!
//! ```
//! use modu_core::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
//! use modu_core::{Agent, FunctionTool, RunLimits};
//! use modu_testing::ScriptedModel;
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct AddArgs { a: i64, b: i64 }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let add = FunctionTool::<()>::typed("add", "Add two integers", |_ctx, a: AddArgs| async move { Ok(a.a + a.b) });
//! let model = ScriptedModel::new()
//!     // PLAN
//!     .text(json!({"steps": [{"description": "Add 2 and 3", "allowed_tools": ["add"]}]}).to_string())
//!     // ACT_TOOL: only the step's tools are offered
//!     .tool_call("add", json!({"a": 2, "b": 3}))
//!     // STEP_RESULT: no tools, the step-result schema
//!     .text(json!({"status": "completed", "result": "2 + 3 = 5"}).to_string())
//!     // FINALIZE
//!     .text("2 + 3 = 5");
//! let agent = Agent::<()>::builder(model)
//!     .tool(add)
//!     .limits(RunLimits::default().max_steps(4))
//!     .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
//!     .build()
//!     .unwrap();
//! let result = agent.run("What is 2 + 3?").await;
//! assert_eq!(result.output.as_deref(), Some("2 + 3 = 5"));
//! assert_eq!(result.metadata["plan"]["steps"][0]["status"], "completed");
//! assert_eq!(result.metadata["tool_trace"][0]["tool_name"], "add");
//! # }
//! ```
//!
//! [`RetryConfig`]: crate::RetryConfig

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::ChatModel;
use crate::sinks::SecretMasker;

/// How an agent decides what to do next.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum DecisionPolicy {
    /// Ask the model, run the tools it calls, repeat, then finalize (the default).
    #[default]
    Standard,
    /// Strict Plan-and-Execute.
    PlanAndExecute(Arc<PlanAndExecutePolicy>),
}

impl std::fmt::Debug for DecisionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecisionPolicy::Standard => f.write_str("Standard"),
            DecisionPolicy::PlanAndExecute(p) => f.debug_tuple("PlanAndExecute").field(p).finish(),
        }
    }
}

impl From<PlanAndExecutePolicy> for DecisionPolicy {
    fn from(policy: PlanAndExecutePolicy) -> Self {
        DecisionPolicy::PlanAndExecute(Arc::new(policy))
    }
}

/// The strict Plan-and-Execute policy: a plan from a [`LlmPlanGenerator`], steps completed only
/// by committed [`StepResult`]s, tool failures recovered per [`ToolFailureRecoveryConfig`].
///
/// The run limits that apply are [`RunLimits`](crate::RunLimits)' `max_steps` (plan steps, not
/// model calls), `max_step_attempts`, `max_replans`, `max_tool_calls`,
/// `max_tool_repair_attempts`, `max_turns` (ACT answers that call tools) and the one `timeout`.
#[derive(Clone, Debug)]
pub struct PlanAndExecutePolicy {
    pub(crate) generator: LlmPlanGenerator,
    pub(crate) recovery: ToolFailureRecoveryConfig,
    pub(crate) trace_mode: ToolTraceMode,
}

impl PlanAndExecutePolicy {
    /// A strict policy planning with `generator`, default recovery and a summary tool trace.
    pub fn new(generator: LlmPlanGenerator) -> Self {
        PlanAndExecutePolicy {
            generator,
            recovery: ToolFailureRecoveryConfig::default(),
            trace_mode: ToolTraceMode::default(),
        }
    }

    /// How tool failures are recovered.
    pub fn tool_failure_recovery(mut self, config: ToolFailureRecoveryConfig) -> Self {
        self.recovery = config;
        self
    }

    /// What `result.metadata["tool_trace"]` records.
    pub fn tool_trace_mode(mut self, mode: ToolTraceMode) -> Self {
        self.trace_mode = mode;
        self
    }

    pub(crate) fn fingerprint_tag(&self) -> &'static str {
        "strict/1"
    }
}

/// Produces plans (and revisions) with a model, as structured output without tools.
#[derive(Clone)]
pub struct LlmPlanGenerator {
    pub(crate) model: Option<Arc<dyn ChatModel>>,
    pub(crate) max_steps: u32,
    pub(crate) instructions: Option<String>,
}

impl std::fmt::Debug for LlmPlanGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmPlanGenerator")
            .field(
                "model",
                &self.model.as_ref().map_or("<the agent's model>", |m| m.model_name()),
            )
            .field("max_steps", &self.max_steps)
            .finish_non_exhaustive()
    }
}

impl LlmPlanGenerator {
    /// Plans with this model (which may differ from the agent's; chat middleware does not apply
    /// to it).
    pub fn new(model: impl ChatModel + 'static) -> Self {
        Self::from_arc(Arc::new(model))
    }

    /// Plans with this shared model.
    pub fn from_arc(model: Arc<dyn ChatModel>) -> Self {
        LlmPlanGenerator {
            model: Some(model),
            max_steps: 8,
            instructions: None,
        }
    }

    /// Plans with the agent's own model (through its chat middleware).
    pub fn agent_model() -> Self {
        LlmPlanGenerator {
            model: None,
            max_steps: 8,
            instructions: None,
        }
    }

    /// The most steps a plan may have (default 8; `RunLimits::max_steps` also applies).
    pub fn max_steps(mut self, n: u32) -> Self {
        self.max_steps = n;
        self
    }

    /// Extra planning instructions, added to the planner's prompt.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }
}

/// What to do when a tool failure cannot be retried or repaired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryFallback {
    /// Revise the unfinished plan (while `max_replans` allows).
    #[default]
    Replan,
    /// End the run.
    Fail,
}

/// What the model is told about a failed tool call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackMode {
    /// The error's type and reason only.
    #[default]
    TypeOnly,
    /// Also [`ToolError::message`](crate::ToolError::message), which the tool's author vouches is
    /// safe to show a model, with control characters removed and its length capped. This does
    /// not detect or redact secrets.
    SafeMessage,
}

/// Tool failure recovery for the strict policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolFailureRecoveryConfig {
    /// What happens when neither retry nor repair applies.
    pub fallback: RecoveryFallback,
    /// Repair only tools that declare `repair_safe` (default `true`).
    pub require_repair_safe: bool,
    /// What the model sees of a failed call.
    pub feedback_mode: FeedbackMode,
}

impl Default for ToolFailureRecoveryConfig {
    fn default() -> Self {
        ToolFailureRecoveryConfig {
            fallback: RecoveryFallback::Replan,
            require_repair_safe: true,
            feedback_mode: FeedbackMode::TypeOnly,
        }
    }
}

impl ToolFailureRecoveryConfig {
    /// Sets `fallback`.
    pub fn fallback(mut self, fallback: RecoveryFallback) -> Self {
        self.fallback = fallback;
        self
    }
    /// Sets `require_repair_safe`.
    pub fn require_repair_safe(mut self, yes: bool) -> Self {
        self.require_repair_safe = yes;
        self
    }
    /// Sets `feedback_mode`.
    pub fn feedback_mode(mut self, mode: FeedbackMode) -> Self {
        self.feedback_mode = mode;
        self
    }
}

/// What `result.metadata["tool_trace"]` records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolTraceMode {
    /// No trace.
    Off,
    /// Step, call id, tool, ok, attempts, duration and the sanitised error (the default).
    #[default]
    Summary,
    /// The summary plus the call's arguments with secret keys masked.
    Arguments,
}

/// A step's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Being worked on (also after a resumable interruption).
    InProgress,
    /// Its step result was validated and committed.
    Completed,
    /// The policy ended the run in this step.
    Failed,
    /// A replan replaced it.
    Superseded,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    /// Its id (`s1`, `s2`, …; stable across replans).
    pub id: String,
    /// What to do.
    pub description: String,
    /// The tools the step may call (what it could use, not what it called: see the tool trace).
    pub allowed_tools: Vec<String>,
    /// Its state.
    pub status: StepStatus,
    /// The committed result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Step-result attempts made.
    #[serde(default)]
    pub attempts: u32,
}

/// A plan: its steps and how often it was revised.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The steps, in order (superseded steps stay, for the record).
    pub steps: Vec<PlanStep>,
    /// 0 for the first plan, +1 per replan.
    pub revision: u32,
}

/// What the planner answers (internal schema).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanDraft {
    /// The steps, in order.
    pub(crate) steps: Vec<PlanDraftStep>,
}

/// One planned step (internal schema).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanDraftStep {
    /// What to do in this step.
    pub(crate) description: String,
    /// Names of the tools this step may call (empty: no tools).
    pub(crate) allowed_tools: Vec<String>,
}

/// The planner's response format for one run: at most `max_steps` steps whose tools are
/// limited to `tools` (an `enum`), so servers with constrained decoding (vLLM, llama.cpp,
/// OpenAI strict mode) can only produce plans that validate.
pub(crate) fn plan_format(max_steps: usize, tools: &[String]) -> crate::model::ResponseFormat {
    let tool_items = if tools.is_empty() {
        serde_json::json!({"type": "array", "items": {"type": "string"}, "maxItems": 0})
    } else {
        // maxItems: a tool is named once per step (small models otherwise repeat names).
        serde_json::json!({"type": "array", "items": {"type": "string", "enum": tools}, "maxItems": tools.len()})
    };
    crate::model::ResponseFormat {
        name: "PlanDraft".into(),
        schema: serde_json::json!({
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": max_steps,
                    "items": {
                        "type": "object",
                        "properties": {
                            "description": {"type": "string", "description": "What to do in this step."},
                            "allowed_tools": tool_items
                        },
                        "required": ["description", "allowed_tools"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["steps"],
            "additionalProperties": false
        }),
        strict: true,
    }
}

/// The outcome of a step, as the model reports it in STEP_RESULT.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepResult {
    /// `completed` when the step's goal was reached, `failed` otherwise.
    pub status: StepOutcome,
    /// The step's result: the facts later steps and the final answer may use.
    pub result: String,
}

/// A step result's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// The step's goal was reached.
    Completed,
    /// It was not.
    Failed,
}

/// The sanitised error of a traced call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceError {
    /// The error type (`execution`, `timeout`, `validation`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether the error was retryable.
    pub retryable: bool,
    /// The machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The recovery action taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
}

/// Where a traced call's arguments come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgumentsSource {
    /// The arguments the tool ran with (validated, defaults applied).
    Validated,
    /// The arguments the model sent (the call was refused before it ran).
    Requested,
}

/// One tool call attempt of a strict run (`result.metadata["tool_trace"][i]`). Never holds a
/// tool's result or raw error message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolTraceEntry {
    /// The step.
    pub step_id: String,
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub tool_name: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// How often it ran (0: refused before running).
    pub attempts: u32,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// The sanitised error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TraceError>,
    /// The call this one repairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_of_call_id: Option<String>,
    /// The arguments with secret keys masked ([`ToolTraceMode::Arguments`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// Where `arguments` come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_source: Option<ArgumentsSource>,
}

/// Why a strict run failed (`result.metadata["failure"]`): sanitised, length-capped identifiers
/// and classifications only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanFailure {
    /// The step it failed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// The tool involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// The call involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The error class (a tool error type, `step_result`, `plan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    /// The tool error's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the run ended: `tool_failed` (fallback `fail`), `tool_requested_fail`,
    /// `uncancellable_timeout`, `partial_batch_failure`, `replan_limit`, `repair_not_safe`,
    /// `repair_limit`, `repair_declined`, `repair_same_arguments`,
    /// `repair_same_effective_arguments`, `repair_other_tool`, `repair_not_single_call`,
    /// `repair_same_call_id`, `repair_invalid_arguments`, `step_attempts_exhausted`,
    /// `plan_invalid`, `max_steps`, `verify_failed`, or a limit (`max_tool_calls`, `max_turns`).
    pub cause: String,
}

/// The most characters of an identifier kept in the trace and failure metadata.
pub(crate) const MAX_ID_CHARS: usize = 64;
/// The most characters of a safe message shown to the model.
pub(crate) const MAX_SAFE_MESSAGE_CHARS: usize = 300;
/// The most trace entries kept (later ones are counted, not kept).
pub(crate) const MAX_TRACE_ENTRIES: usize = 256;

/// The most bytes of one trace entry's arguments (as JSON); longer ones are cut with the same
/// marker as tool results, so one large argument cannot make a large trace and checkpoint.
pub(crate) const MAX_TRACE_ARGUMENT_BYTES: usize = 2048;

/// A call's arguments as the tool trace keeps them: secret keys masked, at most
/// [`MAX_TRACE_ARGUMENT_BYTES`] of JSON (then a string ending in a `…[truncated: …]` marker).
pub(crate) fn trace_arguments(value: &serde_json::Value) -> serde_json::Value {
    let masked = mask_arguments(value);
    let text = masked.to_string();
    if text.len() <= MAX_TRACE_ARGUMENT_BYTES {
        masked
    } else {
        serde_json::Value::String(crate::tool::truncate_result(text, Some(MAX_TRACE_ARGUMENT_BYTES)))
    }
}

/// An identifier fit for metadata: letters, digits and `_-.:/` only, at most [`MAX_ID_CHARS`].
pub(crate) fn sanitize_id(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/'))
        .take(MAX_ID_CHARS)
        .collect()
}

/// Whether `c` is a Unicode format character (general category Cf: bidirectional overrides
/// and isolates such as U+202E, zero-width characters, the BOM, tag characters, …).
pub(crate) fn is_format_char(c: char) -> bool {
    matches!(c as u32,
        0x00AD
        | 0x0600..=0x0605
        | 0x061C
        | 0x06DD
        | 0x070F
        | 0x0890..=0x0891
        | 0x08E2
        | 0x180E
        | 0x200B..=0x200F
        | 0x202A..=0x202E
        | 0x2060..=0x2064
        | 0x2066..=0x206F
        | 0xFEFF
        | 0xFFF9..=0xFFFB
        | 0x110BD
        | 0x110CD
        | 0x13430..=0x1343F
        | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A
        | 0xE0001
        | 0xE0020..=0xE007F)
}

/// A message without control or format characters (see [`is_format_char`]), at most
/// [`MAX_SAFE_MESSAGE_CHARS`].
pub(crate) fn sanitize_message(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if c.is_control() || is_format_char(c) { ' ' } else { c })
        .take(MAX_SAFE_MESSAGE_CHARS + 1)
        .collect();
    if cleaned.chars().count() > MAX_SAFE_MESSAGE_CHARS {
        let mut cut: String = cleaned.chars().take(MAX_SAFE_MESSAGE_CHARS).collect();
        cut.push('…');
        cut
    } else {
        cleaned
    }
}

/// Canonical JSON: object keys sorted, numbers spelled one way (an integral number as an
/// integer, so `1`, `1.0` and `1e0` agree), no whitespace.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => out.push_str(&value.to_string()),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else if let Some(f) = n.as_f64() {
                if f == 0.0 {
                    // 0.0 and -0.0 are the integer 0.
                    out.push('0');
                } else if f.is_finite() && f.fract() == 0.0 {
                    // An integral float of any magnitude, spelled as the exact integer it is
                    // (what an integer literal of the same value gives above).
                    out.push_str(&format!("{f:.0}"));
                } else {
                    out.push_str(&serde_json::Value::from(f).to_string());
                }
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
    }
}

/// The arguments a tool effectively runs with: `args` with the `default`s of its JSON schema
/// filled in for absent properties (recursively through nested objects, following local
/// `$ref`s and `anyOf`/`oneOf` branches), and `null` members dropped (serde reads an absent
/// `Option` and a `null` one alike).
pub fn effective_arguments(schema: &serde_json::Value, args: &serde_json::Value) -> serde_json::Value {
    let mut out = args.clone();
    apply_defaults(schema, schema, &mut out, 0);
    drop_nulls(&mut out);
    out
}

/// `schema` with local `$ref`s (`#/$defs/…`, `#/definitions/…`) followed.
fn resolve<'a>(mut schema: &'a serde_json::Value, root: &'a serde_json::Value) -> &'a serde_json::Value {
    for _ in 0..8 {
        match schema.get("$ref").and_then(|r| r.as_str()) {
            Some(reference) => match reference.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(target) => schema = target,
                None => break,
            },
            None => break,
        }
    }
    schema
}

fn apply_defaults(schema: &serde_json::Value, root: &serde_json::Value, value: &mut serde_json::Value, depth: usize) {
    if depth > 32 {
        return;
    }
    let schema = resolve(schema, root);
    if let Some(props) = schema.get("properties").and_then(|p| p.as_object())
        && let Some(obj) = value.as_object_mut()
    {
        for (name, prop) in props {
            match obj.get_mut(name) {
                Some(inner) => apply_defaults(prop, root, inner, depth + 1),
                None => {
                    if let Some(default) = resolve(prop, root).get("default").or_else(|| prop.get("default")) {
                        obj.insert(name.clone(), default.clone());
                    }
                }
            }
        }
        return;
    }
    // Option<Struct> and unions: the first branch with properties describes an object value.
    if value.is_object() {
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(branches) = schema.get(key).and_then(|b| b.as_array())
                && let Some(branch) = branches.iter().find(|b| resolve(b, root).get("properties").is_some())
            {
                apply_defaults(branch, root, value, depth + 1);
                return;
            }
        }
    }
}

fn drop_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// A stable hash of canonical JSON (stable across processes and versions).
pub(crate) fn json_hash(value: &serde_json::Value) -> String {
    crate::agent::stable_hash(&canonical_json(value))
}

/// Masks secret keys of arguments shown in traces and events (one masker per process).
pub(crate) fn mask_arguments(value: &serde_json::Value) -> serde_json::Value {
    static MASKER: std::sync::OnceLock<SecretMasker> = std::sync::OnceLock::new();
    MASKER.get_or_init(SecretMasker::default).mask_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_ignores_key_order_and_number_spelling() -> Result<(), serde_json::Error> {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": {"y": 2.0, "x": [1e0, "s"]}}"#)?;
        let b: serde_json::Value = serde_json::from_str(r#"{"a": {"x": [1, "s"], "y": 2}, "b": 1.0}"#)?;
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":{"x":[1,"s"],"y":2},"b":1}"#);
        assert_ne!(canonical_json(&json!({"a": 1.5})), canonical_json(&json!({"a": 1})));
        assert_ne!(canonical_json(&json!({"a": "1"})), canonical_json(&json!({"a": 1})));
        Ok(())
    }

    #[test]
    fn effective_arguments_fill_schema_defaults() {
        let schema = json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "default": 100},
                "opts": {"type": "object", "properties": {"exact": {"type": "boolean", "default": false}}}
            }
        });
        let short = effective_arguments(&schema, &json!({"query": "x", "opts": {}}));
        let long = effective_arguments(&schema, &json!({"query": "x", "limit": 100, "opts": {"exact": false}}));
        assert_eq!(json_hash(&short), json_hash(&long));
        assert_ne!(
            json_hash(&short),
            json_hash(&effective_arguments(&schema, &json!({"query": "x", "limit": 5})))
        );
    }

    #[test]
    fn effective_arguments_follow_refs_and_ignore_nulls() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Inner {
            #[serde(default = "ten")]
            size: u32,
        }
        fn ten() -> u32 {
            10
        }
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Args {
            query: String,
            inner: Inner,
            note: Option<String>,
        }
        let schema = crate::tool::schema_for::<Args>();
        let a = effective_arguments(&schema, &json!({"query": "x", "inner": {}, "note": null}));
        let b = effective_arguments(&schema, &json!({"query": "x", "inner": {"size": 10}}));
        assert_eq!(json_hash(&a), json_hash(&b), "{a} vs {b}");
        let c = effective_arguments(&schema, &json!({"query": "x", "inner": {"size": 11}}));
        assert_ne!(json_hash(&a), json_hash(&c));
    }

    #[test]
    fn sanitizers_cap_and_clean() {
        assert_eq!(sanitize_id("step 1\n<script>"), "step1script");
        assert_eq!(sanitize_id(&"a".repeat(200)).len(), MAX_ID_CHARS);
        let m = sanitize_message(&format!("bad\u{7}\nthing{}", "x".repeat(1000)));
        assert!(m.starts_with("bad  thing"));
        assert_eq!(m.chars().count(), MAX_SAFE_MESSAGE_CHARS + 1);
    }

    #[test]
    fn safe_messages_strip_format_characters() {
        // A right-to-left override would make "txt.exe" read as "exe.txt".
        let m = sanitize_message(
            "file \u{202E}txt.exe\u{202C} zero\u{200B}width \u{FEFF}bom \u{2066}iso\u{2069} tag\u{E0041}",
        );
        for c in [
            '\u{202E}',
            '\u{202C}',
            '\u{200B}',
            '\u{FEFF}',
            '\u{2066}',
            '\u{2069}',
            '\u{E0041}',
        ] {
            assert!(!m.contains(c), "{:?} left in {m:?}", c);
        }
        assert!(m.contains("txt.exe"));
        // Letters, marks and emoji stay.
        assert_eq!(sanitize_message("안녕 café 🦀"), "안녕 café 🦀");
    }
}
