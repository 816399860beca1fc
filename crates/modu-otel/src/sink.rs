//! [`OtelEventSink`]: agent events as OpenTelemetry GenAI spans and metrics.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use modu_core::mask::SecretMasker;
use modu_core::{AgentEvent, EventSink, SinkError};
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::metrics::{Histogram, Meter};
use opentelemetry::trace::{Span, SpanContext, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};

use crate::semconv as sc;

/// Bucket boundaries advised by the GenAI conventions for `gen_ai.client.token.usage`.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];
/// Bucket boundaries advised by the GenAI conventions for `gen_ai.client.operation.duration`.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

struct Instruments {
    token_usage: Histogram<u64>,
    duration: Histogram<f64>,
}

struct ChatEntry {
    span: BoxedSpan,
    started: Instant,
    text: String,
}

struct ToolEntry {
    span: BoxedSpan,
    context: SpanContext,
}

struct RunEntry {
    span: BoxedSpan,
    context: SpanContext,
    chats: HashMap<u32, ChatEntry>,
    tools: HashMap<String, ToolEntry>,
    /// Open tool calls in start order (the last one parents a nested run).
    tool_order: Vec<String>,
}

#[derive(Default)]
struct State {
    runs: HashMap<String, RunEntry>,
}

impl State {
    /// The ending run's entry, its open child spans ended and its usage recorded; the caller
    /// adds how it ended and ends its span. `None` for a run this sink did not see start.
    fn close_run(&mut self, run_id: &str, usage: &modu_core::Usage) -> Option<RunEntry> {
        let mut run = self.runs.remove(run_id)?;
        end_children(&mut run);
        set_usage(&mut run.span, usage);
        Some(run)
    }
}

/// Turns [`AgentEvent`]s into OpenTelemetry spans and metrics following the semantic
/// conventions for generative AI.
///
/// # Spans
///
/// * `invoke_agent {agent}` (kind INTERNAL) per run, from `run_started` to `run_completed`,
///   `run_paused` or `run_failed`. Attributes: `gen_ai.operation.name`, `gen_ai.agent.name`,
///   `gen_ai.conversation.id` (session), `gen_ai.usage.*`, `modu.run_id`, `modu.parent_run_id`,
///   `modu.resumed`; on a pause `modu.run.paused` and `modu.run.pending` (status unset: a pause
///   is not an error); on failure `error.type` (the `AgentError` variant) and status ERROR.
///   A run whose `run_started` names a `parent_run_id` (agent-as-tool) is a child of the parent
///   run's most recently started open `execute_tool` span, or of the parent's `invoke_agent`
///   span when no tool call is open. Other runs are roots.
/// * `chat {model}` (kind CLIENT) per model call, child of its run. Attributes:
///   `gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.response.model` (the model that
///   answered: a `FallbackModel` chain's member, else the requested model),
///   `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`,
///   `gen_ai.usage.cache_read.input_tokens` and `gen_ai.usage.reasoning.output_tokens` (when not
///   0), `gen_ai.response.finish_reasons`, `modu.model.call`; on
///   failure `error.type` (the model error kind) and status ERROR.
/// * `execute_tool {tool}` (kind INTERNAL) per tool call, keyed by `call_id`, so concurrent
///   calls each get their own span under the run. Attributes: `gen_ai.operation.name`,
///   `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `modu.tool.attempts`; on
///   failure `error.type` (the `ToolErrorKind`) and status ERROR with the error's reason. A
///   call refused before running (no `tool_call_started`) still gets a (zero-length) span.
///
/// # Metrics
///
/// With a [`Meter`]: `gen_ai.client.token.usage` (histogram, `{token}`, `gen_ai.token.type`
/// = `input` / `output`) and `gen_ai.client.operation.duration` (histogram, seconds; `error.type`
/// on failed calls), both with `gen_ai.operation.name = chat` and `gen_ai.request.model` (and
/// `gen_ai.response.model` on answered calls), with the bucket boundaries the conventions
/// advise. Cached and reasoning tokens are span attributes only (`gen_ai.token.type` has no
/// value for them). A model call a tool makes on the run's behalf (MCP sampling served by
/// `RunContext::model`, reported as `ToolModelCall`) counts in the token usage too (it reports
/// no duration).
///
/// # Content
///
/// Message contents (model text, tool arguments, run output) are **not** recorded unless
/// [`OtelEventSinkBuilder::capture_content`] is on; then they are masked with the core
/// [`SecretMasker`] (model text as a whole, after the deltas are joined) and recorded as
/// `gen_ai.output.messages` / `gen_ai.tool.call.arguments`. Error descriptions are always
/// masked.
///
/// # Time
///
/// Events carry no timestamps: spans start and end when the sink **receives** the events.
/// Behind a `modu_agent::sinks::CompositeEventSink` that is shortly
/// after the run loop emitted them (queueing delay). Durations reported by the events
/// (`duration_ms`) are used for the duration metric.
pub struct OtelEventSink {
    tracer: BoxedTracer,
    instruments: Option<Instruments>,
    masker: SecretMasker,
    capture_content: bool,
    provider_name: Option<String>,
    state: Mutex<State>,
}

impl std::fmt::Debug for OtelEventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelEventSink")
            .field("metrics", &self.instruments.is_some())
            .field("capture_content", &self.capture_content)
            .field("provider_name", &self.provider_name)
            .finish_non_exhaustive()
    }
}

/// Builds an [`OtelEventSink`].
pub struct OtelEventSinkBuilder {
    tracer: BoxedTracer,
    meter: Option<Meter>,
    masker: SecretMasker,
    capture_content: bool,
    provider_name: Option<String>,
}

impl std::fmt::Debug for OtelEventSinkBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelEventSinkBuilder")
            .field("metrics", &self.meter.is_some())
            .field("capture_content", &self.capture_content)
            .finish_non_exhaustive()
    }
}

/// The instrumentation scope of the sink's tracer and meter.
pub fn instrumentation_scope() -> opentelemetry::InstrumentationScope {
    opentelemetry::InstrumentationScope::builder("modu-otel")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

impl OtelEventSinkBuilder {
    /// Records metrics with this meter.
    pub fn meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Records metrics with a meter from this provider (scope `modu-otel`).
    pub fn meter_provider(self, provider: &impl opentelemetry::metrics::MeterProvider) -> Self {
        self.meter(provider.meter_with_scope(instrumentation_scope()))
    }

    /// Records message contents (masked). Off by default. On, the sink asks runs for the
    /// model's text deltas, so their model requests are streamed (off, a run nobody else
    /// streams asks for whole answers).
    pub fn capture_content(mut self, yes: bool) -> Self {
        self.capture_content = yes;
        self
    }

    /// The masker for contents and error descriptions.
    pub fn masker(mut self, masker: SecretMasker) -> Self {
        self.masker = masker;
        self
    }

    /// Sets `gen_ai.provider.name` (`openai`, `ollama`, …) on chat spans and metrics.
    pub fn provider_name(mut self, name: impl Into<String>) -> Self {
        self.provider_name = Some(name.into());
        self
    }

    /// Builds the sink.
    pub fn build(self) -> OtelEventSink {
        let instruments = self.meter.map(|m| Instruments {
            token_usage: m
                .u64_histogram(sc::METRIC_TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            duration: m
                .f64_histogram(sc::METRIC_OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
        });
        OtelEventSink {
            tracer: self.tracer,
            instruments,
            masker: self.masker,
            capture_content: self.capture_content,
            provider_name: self.provider_name,
            state: Mutex::new(State::default()),
        }
    }
}

fn kv(key: &'static str, value: impl Into<Value>) -> KeyValue {
    KeyValue::new(key, value)
}

fn agent_error_type(error: &modu_core::AgentError) -> String {
    serde_json::to_value(error)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "_OTHER".to_owned())
}

/// `gen_ai.usage.*` of a span: input and output tokens, and the cached and reasoning parts of
/// them when the server reported any.
fn set_usage(span: &mut BoxedSpan, usage: &modu_core::Usage) {
    span.set_attribute(kv(sc::USAGE_INPUT_TOKENS, usage.input_tokens as i64));
    span.set_attribute(kv(sc::USAGE_OUTPUT_TOKENS, usage.output_tokens as i64));
    if usage.cached_input_tokens > 0 {
        span.set_attribute(kv(sc::USAGE_CACHE_READ_INPUT_TOKENS, usage.cached_input_tokens as i64));
    }
    if usage.reasoning_tokens > 0 {
        span.set_attribute(kv(sc::USAGE_REASONING_OUTPUT_TOKENS, usage.reasoning_tokens as i64));
    }
}

fn output_messages(content: String) -> String {
    serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": content}]}]).to_string()
}

impl OtelEventSink {
    /// Starts building a sink around a tracer (for example
    /// `provider.tracer_with_scope(modu_otel::instrumentation_scope())`).
    pub fn builder<T>(tracer: T) -> OtelEventSinkBuilder
    where
        T: Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        OtelEventSinkBuilder {
            tracer: BoxedTracer::new(Box::new(tracer)),
            meter: None,
            masker: SecretMasker::default(),
            capture_content: false,
            provider_name: None,
        }
    }

    /// A sink with a tracer and a meter from these providers (scope `modu-otel`), content
    /// capture off.
    pub fn new<P, M>(tracer_provider: &P, meter_provider: &M) -> Self
    where
        P: opentelemetry::trace::TracerProvider,
        P::Tracer: Send + Sync + 'static,
        <P::Tracer as Tracer>::Span: Send + Sync + 'static,
        M: opentelemetry::metrics::MeterProvider,
    {
        Self::builder(tracer_provider.tracer_with_scope(instrumentation_scope()))
            .meter_provider(meter_provider)
            .build()
    }

    /// How many runs have an open `invoke_agent` span.
    pub fn open_runs(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).runs.len()
    }

    fn start_span(
        &self,
        name: String,
        kind: SpanKind,
        parent: Option<&SpanContext>,
        attrs: Vec<KeyValue>,
    ) -> BoxedSpan {
        let cx = match parent {
            Some(p) => Context::new().with_remote_span_context(p.clone()),
            None => Context::new(),
        };
        let builder = self.tracer.span_builder(name).with_kind(kind).with_attributes(attrs);
        self.tracer.build_with_context(builder, &cx)
    }

    fn chat_metric_attrs(&self, model: &str) -> Vec<KeyValue> {
        let mut attrs = vec![kv(sc::OPERATION_NAME, "chat"), kv(sc::REQUEST_MODEL, model.to_owned())];
        if let Some(p) = &self.provider_name {
            attrs.push(kv(sc::PROVIDER_NAME, p.clone()));
        }
        attrs
    }

    /// Records a chat call's input and output tokens; the call's metric attributes.
    fn record_tokens(&self, m: &Instruments, model: &str, answered: &str, usage: &modu_core::Usage) -> Vec<KeyValue> {
        let mut attrs = self.chat_metric_attrs(model);
        attrs.push(kv(sc::RESPONSE_MODEL, answered.to_owned()));
        let mut input = attrs.clone();
        input.push(kv(sc::TOKEN_TYPE, "input"));
        let mut output = attrs.clone();
        output.push(kv(sc::TOKEN_TYPE, "output"));
        m.token_usage.record(usage.input_tokens, &input);
        m.token_usage.record(usage.output_tokens, &output);
        attrs
    }

    /// Handles one event (synchronously).
    pub fn handle(&self, event: &AgentEvent) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            AgentEvent::RunStarted {
                run_id,
                agent,
                session_id,
                parent_run_id,
                resumed,
            } => {
                let parent = parent_run_id.as_ref().and_then(|p| state.runs.get(p)).map(|p| {
                    p.tool_order
                        .last()
                        .and_then(|id| p.tools.get(id))
                        .map_or_else(|| p.context.clone(), |t| t.context.clone())
                });
                let mut attrs = vec![
                    kv(sc::OPERATION_NAME, "invoke_agent"),
                    kv(sc::AGENT_NAME, agent.clone()),
                    kv(sc::MODU_RUN_ID, run_id.clone()),
                    kv(sc::MODU_RESUMED, *resumed),
                ];
                if let Some(s) = session_id {
                    attrs.push(kv(sc::CONVERSATION_ID, s.clone()));
                }
                if let Some(p) = parent_run_id {
                    attrs.push(kv(sc::MODU_PARENT_RUN_ID, p.clone()));
                }
                let span = self.start_span(
                    format!("invoke_agent {agent}"),
                    SpanKind::Internal,
                    parent.as_ref(),
                    attrs,
                );
                let context = span.span_context().clone();
                if let Some(mut old) = state.runs.insert(
                    run_id.clone(),
                    RunEntry {
                        span,
                        context,
                        chats: HashMap::new(),
                        tools: HashMap::new(),
                        tool_order: Vec::new(),
                    },
                ) {
                    old.span.end();
                }
            }
            AgentEvent::ModelCallStarted {
                run_id, model, call, ..
            } => {
                let Some(run) = state.runs.get_mut(run_id) else { return };
                let mut attrs = self.chat_metric_attrs(model);
                attrs.push(kv(sc::MODU_MODEL_CALL, i64::from(*call)));
                let span = self.start_span(format!("chat {model}"), SpanKind::Client, Some(&run.context), attrs);
                if let Some(mut old) = run.chats.insert(
                    *call,
                    ChatEntry {
                        span,
                        started: Instant::now(),
                        text: String::new(),
                    },
                ) {
                    old.span.end();
                }
            }
            AgentEvent::ModelDelta { run_id, text } => {
                if !self.capture_content {
                    return;
                }
                let Some(run) = state.runs.get_mut(run_id) else { return };
                if let Some(chat) = run.chats.values_mut().max_by_key(|c| c.started) {
                    chat.text.push_str(text);
                }
            }
            AgentEvent::ModelCallFinished {
                run_id,
                model,
                call,
                usage,
                finish_reason,
                duration_ms,
                answered_by,
                ..
            } => {
                // The answering model (a fallback chain's member), else the one asked.
                let answered = answered_by.as_deref().unwrap_or(model);
                let Some(run) = state.runs.get_mut(run_id) else { return };
                if let Some(mut chat) = run.chats.remove(call) {
                    set_usage(&mut chat.span, usage);
                    chat.span.set_attribute(kv(sc::RESPONSE_MODEL, answered.to_owned()));
                    if let Some(reason) = finish_reason
                        .as_ref()
                        .and_then(|r| serde_json::to_value(r).ok())
                        .and_then(|v| v.as_str().map(str::to_owned))
                    {
                        chat.span.set_attribute(KeyValue::new(
                            sc::RESPONSE_FINISH_REASONS,
                            Value::Array(Array::String(vec![StringValue::from(reason)])),
                        ));
                    }
                    if self.capture_content && !chat.text.is_empty() {
                        let text = self.masker.mask_text(&chat.text);
                        chat.span.set_attribute(kv(sc::OUTPUT_MESSAGES, output_messages(text)));
                    }
                    chat.span.end();
                }
                if let Some(m) = &self.instruments {
                    let attrs = self.record_tokens(m, model, answered, usage);
                    m.duration.record(*duration_ms as f64 / 1000.0, &attrs);
                }
            }
            // A model call a tool made on the run's behalf (MCP sampling): its tokens are
            // spent like the run's own (it reports no duration).
            AgentEvent::ToolModelCall { model, usage, .. } => {
                if let Some(m) = &self.instruments {
                    self.record_tokens(m, model, model, usage);
                }
            }
            AgentEvent::ModelCallFailed {
                run_id,
                model,
                call,
                error_kind,
                ..
            } => {
                let Some(run) = state.runs.get_mut(run_id) else { return };
                let started = run.chats.get(call).map(|c| c.started);
                if let Some(mut chat) = run.chats.remove(call) {
                    chat.span.set_attribute(kv(sc::ERROR_TYPE, error_kind.to_string()));
                    chat.span
                        .set_status(Status::error(format!("model call failed: {error_kind}")));
                    chat.span.end();
                }
                if let (Some(m), Some(started)) = (&self.instruments, started) {
                    let mut attrs = self.chat_metric_attrs(model);
                    attrs.push(kv(sc::ERROR_TYPE, error_kind.to_string()));
                    m.duration.record(started.elapsed().as_secs_f64(), &attrs);
                }
            }
            AgentEvent::ToolCallStarted {
                run_id,
                call_id,
                tool,
                arguments,
            } => {
                let Some(run) = state.runs.get_mut(run_id) else { return };
                let span = self.tool_span(run, call_id, tool, Some(arguments));
                let context = span.span_context().clone();
                run.tool_order.push(call_id.clone());
                if let Some(mut old) = run.tools.insert(call_id.clone(), ToolEntry { span, context }) {
                    old.span.end();
                }
            }
            AgentEvent::ToolCallFinished {
                run_id,
                call_id,
                tool,
                ok,
                attempts,
                error,
                ..
            } => {
                let Some(run) = state.runs.get_mut(run_id) else { return };
                run.tool_order.retain(|id| id != call_id);
                let mut span = match run.tools.remove(call_id) {
                    Some(t) => t.span,
                    // Refused before running: no start event.
                    None => self.tool_span(run, call_id, tool, None),
                };
                span.set_attribute(kv(sc::MODU_TOOL_ATTEMPTS, i64::from(*attempts)));
                if !*ok {
                    let (kind, reason) = error.as_ref().map_or(("_OTHER", "error".to_owned()), |e| {
                        (e.kind.as_str(), self.masker.mask_text(&e.reason))
                    });
                    span.set_attribute(kv(sc::ERROR_TYPE, kind));
                    span.set_status(Status::error(format!("{kind}: {reason}")));
                }
                span.end();
            }
            AgentEvent::RunCompleted {
                run_id, usage, output, ..
            } => {
                let Some(mut run) = state.close_run(run_id, usage) else {
                    return;
                };
                if self.capture_content {
                    let content = match output {
                        serde_json::Value::String(s) => self.masker.mask_text(s),
                        other => self.masker.mask_value(other).to_string(),
                    };
                    run.span
                        .set_attribute(kv(sc::OUTPUT_MESSAGES, output_messages(content)));
                }
                run.span.end();
            }
            AgentEvent::RunPaused {
                run_id, usage, pending, ..
            } => {
                // A pause is not an error: the span ends with an unset status.
                let Some(mut run) = state.close_run(run_id, usage) else {
                    return;
                };
                run.span.set_attribute(kv(sc::MODU_RUN_PAUSED, true));
                run.span
                    .set_attribute(kv(sc::MODU_RUN_PENDING, i64::try_from(*pending).unwrap_or(i64::MAX)));
                run.span.end();
            }
            AgentEvent::RunFailed {
                run_id, usage, error, ..
            } => {
                let Some(mut run) = state.close_run(run_id, usage) else {
                    return;
                };
                run.span.set_attribute(kv(sc::ERROR_TYPE, agent_error_type(error)));
                run.span
                    .set_status(Status::error(self.masker.mask_text(&error.to_string())));
                run.span.end();
            }
            _ => {}
        }
    }

    fn tool_span(&self, run: &RunEntry, call_id: &str, tool: &str, arguments: Option<&serde_json::Value>) -> BoxedSpan {
        let mut attrs = vec![
            kv(sc::OPERATION_NAME, "execute_tool"),
            kv(sc::TOOL_NAME, tool.to_owned()),
            kv(sc::TOOL_CALL_ID, call_id.to_owned()),
            kv(sc::TOOL_TYPE, "function"),
        ];
        if let (true, Some(args)) = (self.capture_content, arguments) {
            attrs.push(kv(sc::TOOL_CALL_ARGUMENTS, self.masker.mask_value(args).to_string()));
        }
        self.start_span(
            format!("execute_tool {tool}"),
            SpanKind::Internal,
            Some(&run.context),
            attrs,
        )
    }
}

/// Ends spans a run left open (a cancelled run, lost events).
fn end_children(run: &mut RunEntry) {
    for (_, mut c) in run.chats.drain() {
        c.span.end();
    }
    for (_, mut t) in run.tools.drain() {
        t.span.end();
    }
    run.tool_order.clear();
}

#[async_trait]
impl EventSink for OtelEventSink {
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        self.handle(event);
        Ok(())
    }
    /// Only when content is captured (the model's text is joined from its deltas): a sink
    /// that wants deltas makes every run stream its model requests.
    fn wants_deltas(&self) -> bool {
        self.capture_content
    }
}
