//! The run's `tracing` spans, named and fielded as the OpenTelemetry GenAI semantic
//! conventions name them, so that a `tracing-opentelemetry` user gets a trace of every run
//! without modu-otel:
//!
//! - `invoke_agent` (one per run, resumed or fresh): `gen_ai.operation.name`,
//!   `gen_ai.agent.name`, `gen_ai.conversation.id` (the session), `modu.run_id`,
//!   `modu.resumed`, and at its end `gen_ai.usage.input_tokens` / `output_tokens`;
//! - `chat` (one per model attempt, a child of the run's span even when a chat layer calls its
//!   inner service on another task): `gen_ai.request.model`, and at its end
//!   `gen_ai.response.model`, the usage and, for a failed attempt, `error.type`;
//! - `execute_tool` (one per tool call that runs): `gen_ai.tool.name`, `gen_ai.tool.call.id`,
//!   and `error.type` when the call failed;
//! - `modu.store` (one per store operation of the run): `modu.store.operation`
//!   (`conversation.load`, `conversation.append`, `checkpoint.save`, `checkpoint.delete`).
//!
//! Each span also sets `otel.name` to the convention's span name (`invoke_agent {agent}`,
//! `chat {model}`, `execute_tool {tool}`), which tracing-opentelemetry uses as the span's name.
//! No argument, result, message or secret goes into a span. Without a subscriber that wants
//! them, a span is a disabled handle and costs a branch.

use tracing::Span;
use tracing::field::Empty;

use crate::message::Usage;
use crate::tool::ToolError;

/// The run's span.
pub(crate) fn run(agent: &str, run_id: &str, session: Option<&str>, resumed: bool) -> Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = format_args!("invoke_agent {agent}"),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = session,
        modu.run_id = run_id,
        modu.resumed = resumed,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        "error.type" = Empty,
    )
}

/// One model attempt's span, under the run's.
pub(crate) fn chat(parent: &Span, model: &str) -> Span {
    tracing::info_span!(
        parent: parent,
        "chat",
        otel.name = format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        "error.type" = Empty,
    )
}

/// One tool call's span (under the current span: the run's).
pub(crate) fn tool(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = format_args!("execute_tool {name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        "error.type" = Empty,
    )
}

/// A tool call's future in its span; a failed call records its kind (`error.type`; a call
/// the run's deadline cut is a `timeout`). A combinator: an `async fn` would hold the call twice.
pub(crate) fn tool_call<T, E>(
    span: Span,
    call: impl Future<Output = Result<Result<T, ToolError>, E>>,
) -> impl Future<Output = Result<Result<T, ToolError>, E>> {
    use futures::FutureExt;
    let recorded = span.clone();
    tracing::Instrument::instrument(call, span).map(move |outcome| {
        match &outcome {
            Ok(Err(e)) => record_error(&recorded, e.kind.as_str()),
            Err(_) => record_error(&recorded, "timeout"),
            Ok(Ok(_)) => {}
        }
        outcome
    })
}

/// One store operation's span (under the current span: the run's).
pub(crate) fn store(operation: &'static str) -> Span {
    tracing::info_span!("modu.store", modu.store.operation = operation, "error.type" = Empty)
}

/// Records a usage on a run or chat span.
pub(crate) fn record_usage(span: &Span, usage: Usage) {
    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
}

/// Records a failure's kind (`error.type`) on a span.
pub(crate) fn record_error(span: &Span, kind: &str) {
    span.record("error.type", kind);
}
