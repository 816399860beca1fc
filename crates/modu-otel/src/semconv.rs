//! Attribute, span and metric names: the OpenTelemetry semantic conventions for generative AI,
//! plus a few `modu.*` attributes.
//!
//! The names follow the GenAI attribute registry (status: development) of
//! open-telemetry/semantic-conventions as of v1.41 (the GenAI docs of v1.41.0, and the incubating
//! exports of `@opentelemetry/semantic-conventions`), including
//! `gen_ai.usage.cache_read.input_tokens` and `gen_ai.usage.reasoning.output_tokens` (added by
//! semantic-conventions PR #3383). Both count a part of `gen_ai.usage.input_tokens` /
//! `gen_ai.usage.output_tokens`, which still hold the whole.

/// `gen_ai.operation.name`: `invoke_agent`, `chat` or `execute_tool`.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.agent.name`.
pub const AGENT_NAME: &str = "gen_ai.agent.name";
/// `gen_ai.conversation.id` (the run's session).
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.provider.name` (set when configured on the sink).
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.request.model`.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.response.finish_reasons`.
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.usage.input_tokens`.
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`.
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.usage.cache_read.input_tokens`: of the input tokens, those served from the
/// provider's prompt cache (set when not 0).
pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// `gen_ai.usage.reasoning.output_tokens`: of the output tokens, those spent reasoning (set
/// when not 0).
pub const USAGE_REASONING_OUTPUT_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
/// `gen_ai.response.model`: the model that answered (a fallback chain's member, else the
/// requested model).
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.tool.name`.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.call.id`.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.type` (always `function`).
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// `gen_ai.tool.call.arguments` (opt-in content, masked).
pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// `gen_ai.output.messages` (opt-in content, masked).
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// `gen_ai.token.type` (`input` / `output`), on the token usage metric.
pub const TOKEN_TYPE: &str = "gen_ai.token.type";
/// `error.type`.
pub const ERROR_TYPE: &str = "error.type";
/// `modu.run_id`.
pub const MODU_RUN_ID: &str = "modu.run_id";
/// `modu.parent_run_id`.
pub const MODU_PARENT_RUN_ID: &str = "modu.parent_run_id";
/// `modu.resumed`.
pub const MODU_RESUMED: &str = "modu.resumed";
/// `modu.model.call`: the number of the model call in the run.
pub const MODU_MODEL_CALL: &str = "modu.model.call";
/// `modu.run.paused`: the run paused for a person (approvals, input); not an error.
pub const MODU_RUN_PAUSED: &str = "modu.run.paused";
/// `modu.run.pending`: how many calls of a paused run wait for a person.
pub const MODU_RUN_PENDING: &str = "modu.run.pending";
/// `modu.tool.attempts`.
pub const MODU_TOOL_ATTEMPTS: &str = "modu.tool.attempts";
/// Metric: `gen_ai.client.token.usage` (histogram, `{token}`).
pub const METRIC_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// Metric: `gen_ai.client.operation.duration` (histogram, seconds).
pub const METRIC_OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
