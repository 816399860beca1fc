//! The chat completion fields that shape a run, beyond its messages: what the server honours
//! (as the run's own [`ModelSettings`], over the agent's), what it refuses with 400 and what
//! leaves the agent's own settings in place.
//!
//! - Honoured, for every model call of the run (kept in its checkpoint, so a resume uses them
//!   too): `temperature`, `top_p`, `frequency_penalty`, `presence_penalty`,
//!   `max_completion_tokens` (or `max_tokens`; at most the agent's own limit when it sets one:
//!   a request may lower it, never raise it), `seed`, `stop`, `parallel_tool_calls`,
//!   `reasoning_effort`, and `tool_choice` `"none"` (a standard run's model is asked not to
//!   call tools). `tool_choice` `"auto"` and, for a text agent, `response_format` `{"type": "text"}` ask
//!   for what the agent does anyway; so do, for an agent with structured output
//!   (`AgentBuilder::output`), `response_format` `json_object` and `json_schema` with the
//!   agent's own schema or its strict form as `/v1/models` publishes it (compared without
//!   `title`, `description` and `$schema` annotations; the name and `strict` are not read). A request cannot loosen the
//!   agent's own limits: its output limit is at most the agent's; `tool_choice: "none"` leaves
//!   an agent that must call a tool (`required` or a named tool) as it is; and
//!   `parallel_tool_calls: true` leaves an agent set to `false` as it is (the model is still
//!   asked for one call per answer; a model server may ignore that, and the calls of one
//!   answer run concurrently). `reasoning_effort` replaces the agent's (an operator
//!   who must pin it wraps the model in a chat layer that sets it).
//! - Refused (400, `param` naming the field): a `tool_choice` (or legacy `function_call`) that
//!   forces a tool (`"required"`, a named function: the agent's tools are its own),
//!   `response_format` `json_object` / `json_schema` for a text agent, and `text` or a
//!   `json_schema` with another schema for a structured one (the agent's answer format is its
//!   own; the message names the agent's schema),
//!   `logprobs` / `top_logprobs` (the server returns none), legacy `functions`, and values out
//!   of range (a `temperature` outside 0–2, a `top_p` outside 0–1, a penalty outside −2–2, a
//!   token limit of 0, an unknown `reasoning_effort`), as is a value of the wrong type (a string
//!   `temperature`, a negative `max_tokens`: `invalid_value`, `param` naming the field as
//!   the body has it, `messages[1].role` for one in a message).
//! - Not read: `logit_bias`, `user`,
//!   `metadata`, `store`, `service_tier` and any other field: the agent's own settings apply.

use modu_agent::ModelSettings;
use modu_core::{ReasoningEffort, ResponseFormat, ToolChoice};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ServerError;

/// The fields of a chat completion request that shape its run (flattened into the request).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunOptions {
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    frequency_penalty: Option<f32>,
    #[serde(default)]
    presence_penalty: Option<f32>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    reasoning_effort: Option<String>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    function_call: Option<Value>,
    #[serde(default)]
    functions: Option<Vec<Value>>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    logprobs: Option<bool>,
    #[serde(default)]
    top_logprobs: Option<u32>,
}

/// `stop`: one sequence or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

fn refused(param: &'static str, code: &'static str, message: impl Into<String>) -> ServerError {
    ServerError::InvalidParameter {
        param: param.to_owned(),
        code,
        message: message.into(),
    }
}

/// The run's tool choice a `tool_choice` (or `function_call`) value asks for: `None` for
/// `"auto"` (the agent decides, as without the field).
fn tool_choice(param: &'static str, value: &Value) -> Result<Option<ToolChoice>, ServerError> {
    match value.as_str() {
        Some("auto") => Ok(None),
        Some("none") => Ok(Some(ToolChoice::None)),
        Some("required") | None if !value.is_null() => Err(refused(
            param,
            "unsupported_value",
            format!(
                "{param} cannot force a tool call: the agent's tools are its own and run on the server (\"auto\" or \"none\" are taken)"
            ),
        )),
        None => Ok(None),
        Some(other) => Err(refused(
            param,
            "invalid_value",
            format!("{param} {other:?} is not a tool choice (\"auto\" or \"none\" are taken)"),
        )),
    }
}

fn reasoning_effort(value: &str) -> Result<ReasoningEffort, ServerError> {
    Ok(match value {
        "none" => ReasoningEffort::None,
        "minimal" => ReasoningEffort::Minimal,
        "low" => ReasoningEffort::Low,
        "medium" => ReasoningEffort::Medium,
        "high" => ReasoningEffort::High,
        other => {
            return Err(refused(
                "reasoning_effort",
                "unsupported_value",
                format!("reasoning_effort {other:?} is not supported (none, minimal, low, medium or high)"),
            ));
        }
    })
}

/// Checks a request's `response_format` against the format the agent answers in: `text` is
/// taken for a text agent (a structured one answers JSON, so it refuses `text`), `json_object` for a structured one, `json_schema` for a structured
/// one when its schema is the agent's (annotations such as `title`, `description`
/// and `$schema` aside); anything else is refused.
fn response_format(format: &Value, agent: Option<&ResponseFormat>) -> Result<(), ServerError> {
    let unsupported = |message: String| refused("response_format", "unsupported_value", message);
    match (format.get("type").and_then(Value::as_str), agent) {
        (Some("text"), None) | (Some("json_object"), Some(_)) => Ok(()),
        (Some("text"), Some(agent)) => Err(unsupported(format!(
            "response_format \"text\" is not supported: this agent answers in JSON with its output schema ({:?}); send json_object, json_schema with that schema, or no response_format",
            agent.name
        ))),
        (Some(kind @ ("json_object" | "json_schema")), None) => Err(unsupported(format!(
            "response_format {kind:?} is not supported: this agent answers in free text, not chosen per request (only \"text\" is taken)"
        ))),
        (Some("json_schema"), Some(agent)) => {
            let schema = format.get("json_schema").and_then(|s| s.get("schema"));
            // The agent's schema, or its strict form as `/v1/models` publishes it.
            let (published, _) = agent.wire_schema();
            if schema.is_some_and(|schema| same_schema(schema, &agent.schema) || same_schema(schema, &published)) {
                Ok(())
            } else {
                Err(unsupported(format!(
                    "response_format json_schema must be the agent's own output schema ({:?}): the agent's answer format is its own, not chosen per request",
                    agent.name
                )))
            }
        }
        _ => Err(refused(
            "response_format",
            "invalid_value",
            "response_format must be an object with a type (\"text\", \"json_object\" or \"json_schema\")",
        )),
    }
}

/// Whether two JSON schemas say the same, their annotations aside.
fn same_schema(a: &Value, b: &Value) -> bool {
    without_annotations(a) == without_annotations(b)
}

/// A schema without its annotation keywords (`$schema`, `title`, `description`), which say
/// nothing of the shape; property names and literal values (`enum`, `const`, `default`,
/// `examples`) are kept as they are.
fn without_annotations(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !matches!(key.as_str(), "$schema" | "title" | "description"))
                .map(|(key, value)| {
                    let value = match (key.as_str(), value) {
                        ("enum" | "const" | "default" | "examples", _) => value.clone(),
                        ("properties" | "patternProperties" | "$defs" | "definitions", Value::Object(named)) => {
                            Value::Object(named.iter().map(|(k, v)| (k.clone(), without_annotations(v))).collect())
                        }
                        _ => without_annotations(value),
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_annotations).collect()),
        other => other.clone(),
    }
}

impl RunOptions {
    /// The run's own model settings (`None` when the request sets none), or the 400 for a
    /// field the server cannot honour.
    /// `agent_format` is the format the agent answers in (`None`: free text).
    pub(crate) fn settings(self, agent_format: Option<&ResponseFormat>) -> Result<Option<ModelSettings>, ServerError> {
        if self.functions.as_ref().is_some_and(|f| !f.is_empty()) {
            return Err(refused(
                "functions",
                "unsupported_parameter",
                "functions (client-side functions) are not supported: the agent's own tools run on the server",
            ));
        }
        if self.logprobs == Some(true) {
            return Err(refused(
                "logprobs",
                "unsupported_parameter",
                "logprobs is not supported: this server returns no log probabilities",
            ));
        }
        if self.top_logprobs.is_some_and(|n| n > 0) {
            return Err(refused(
                "top_logprobs",
                "unsupported_parameter",
                "top_logprobs is not supported: this server returns no log probabilities",
            ));
        }
        if let Some(format) = self.response_format.as_ref().filter(|f| !f.is_null()) {
            response_format(format, agent_format)?;
        }
        let mut settings = ModelSettings::new();
        let mut set = false;
        let choice = match (&self.tool_choice, &self.function_call) {
            (Some(value), _) if !value.is_null() => tool_choice("tool_choice", value)?,
            (_, Some(value)) => tool_choice("function_call", value)?,
            _ => None,
        };
        if let Some(choice) = choice {
            settings = settings.tool_choice(choice);
            set = true;
        }
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(refused(
                    "temperature",
                    "invalid_value",
                    "temperature must be between 0 and 2",
                ));
            }
            settings = settings.temperature(t);
            set = true;
        }
        if let Some(p) = self.top_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(refused("top_p", "invalid_value", "top_p must be between 0 and 1"));
            }
            settings = settings.top_p(p);
            set = true;
        }
        type Setter = fn(ModelSettings, f32) -> ModelSettings;
        let penalties: [(&'static str, Option<f32>, Setter); 2] = [
            (
                "frequency_penalty",
                self.frequency_penalty,
                ModelSettings::frequency_penalty,
            ),
            (
                "presence_penalty",
                self.presence_penalty,
                ModelSettings::presence_penalty,
            ),
        ];
        for (param, penalty, apply) in penalties {
            let Some(penalty) = penalty else { continue };
            if !(-2.0..=2.0).contains(&penalty) {
                return Err(refused(
                    param,
                    "invalid_value",
                    format!("{param} must be between -2 and 2"),
                ));
            }
            settings = apply(settings, penalty);
            set = true;
        }
        let (param, limit) = match self.max_completion_tokens {
            Some(n) => ("max_completion_tokens", Some(n)),
            None => ("max_tokens", self.max_tokens),
        };
        if let Some(n) = limit {
            if n == 0 {
                return Err(refused(param, "invalid_value", format!("{param} must be at least 1")));
            }
            settings = settings.max_tokens(n);
            set = true;
        }
        if let Some(seed) = self.seed {
            settings = settings.seed(seed);
            set = true;
        }
        let stop = match self.stop {
            Some(Stop::One(s)) => vec![s],
            Some(Stop::Many(v)) => v,
            None => Vec::new(),
        };
        if !stop.is_empty() {
            settings = settings.stop(stop);
            set = true;
        }
        if let Some(parallel) = self.parallel_tool_calls {
            settings = settings.parallel_tool_calls(parallel);
            set = true;
        }
        if let Some(effort) = self.reasoning_effort.as_deref() {
            settings = settings.reasoning_effort(reasoning_effort(effort)?);
            set = true;
        }
        Ok(set.then_some(settings))
    }
}
