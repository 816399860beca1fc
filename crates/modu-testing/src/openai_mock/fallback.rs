//! The deterministic fallback when the queue is empty: one call of the first offered tool, then
//! a text or schema-shaped answer; [`instance_of`] synthesises JSON instances of a schema.

use std::collections::VecDeque;

use serde_json::{Value, json};

use super::MockReply;

/// The deterministic fallback: call the first tool once, then answer.
pub(super) fn fallback_reply(request: &Value) -> MockReply {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let last_role = messages
        .last()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        .unwrap_or("user");
    let tools = request
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let text_of = |m: &Value| {
        m.get("content")
            .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_owned))
            .unwrap_or_default()
    };
    let question = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(text_of)
        .unwrap_or_default();
    let all_results: Vec<String> = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .map(text_of)
        .collect();
    if last_role != "tool"
        && all_results.is_empty()
        && let Some(tool) = tools.first()
    {
        let name = tool
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("tool")
            .to_owned();
        let params = tool.pointer("/function/parameters").cloned().unwrap_or(json!({}));
        // Numbers in the question fill the numeric arguments, in order.
        let mut hints = Hints::new(numbers_in(&question), question.clone());
        let args = hints.instance(&params, &params, 0);
        return MockReply::ToolCalls(vec![(name, args.to_string())]);
    }
    if let Some(schema) = request.pointer("/response_format/json_schema/schema") {
        // Numbers from the tool results fill numeric fields; text fields describe them.
        let joined = all_results.join(", ");
        let sentence = if joined.is_empty() {
            format!("Mock answer to: {question}")
        } else {
            format!("The tools answered {joined}.")
        };
        let mut hints = Hints::new(numbers_in(&joined), sentence);
        return MockReply::Text(hints.instance(schema, schema, 0).to_string());
    }
    let last_results: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .map(text_of)
        .collect();
    if !last_results.is_empty() {
        return MockReply::Text(format!("The tool answered: {}", last_results.join(", ")));
    }
    MockReply::Text(format!("You said: {question}"))
}

fn numbers_in(text: &str) -> Vec<f64> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter_map(|t| t.trim_matches('.').parse::<f64>().ok())
        .collect()
}

/// Values to put into a synthesised instance: numbers for numeric fields, in order, and one
/// text for string fields.
struct Hints {
    numbers: VecDeque<f64>,
    text: String,
}

impl Hints {
    fn new(numbers: Vec<f64>, text: String) -> Self {
        Hints {
            numbers: numbers.into(),
            text,
        }
    }

    fn instance(&mut self, schema: &Value, root: &Value, depth: usize) -> Value {
        let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
        if depth > 8 || schema.get("$ref").is_some() || schema.get("enum").is_some() {
            return instance_of(schema, root, depth);
        }
        match ty {
            "object" => {
                let mut obj = serde_json::Map::new();
                if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                    for (k, v) in props {
                        obj.insert(k.clone(), self.instance(v, root, depth + 1));
                    }
                }
                Value::Object(obj)
            }
            "integer" => match self.numbers.pop_front() {
                Some(n) => json!(n as i64),
                None => instance_of(schema, root, depth),
            },
            "number" => match self.numbers.pop_front() {
                Some(n) => json!(n),
                None => instance_of(schema, root, depth),
            },
            "string" if !self.text.is_empty() => json!(self.text),
            _ => instance_of(schema, root, depth),
        }
    }
}

/// A JSON value fitting (simple) JSON schemas: objects with required properties, arrays,
/// strings, numbers, integers, booleans, enums, `$ref` to `$defs`.
pub fn instance_of(schema: &Value, root: &Value, depth: usize) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = r
            .strip_prefix('#')
            .and_then(|p| root.pointer(p))
            .unwrap_or(&Value::Null);
        return instance_of(target, root, depth + 1);
    }
    if let Some(v) = schema.get("const") {
        return v.clone();
    }
    if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = schema.get(key).and_then(Value::as_array).and_then(|a| a.first()) {
            return instance_of(first, root, depth + 1);
        }
    }
    let ty = match schema.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null")
            .to_owned(),
        _ => {
            if schema.get("properties").is_some() {
                "object".into()
            } else {
                "string".into()
            }
        }
    };
    match ty.as_str() {
        "object" => {
            let mut obj = serde_json::Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, v) in props {
                    obj.insert(k.clone(), instance_of(v, root, depth + 1));
                }
            }
            Value::Object(obj)
        }
        "array" => {
            let item = schema.get("items").map(|i| instance_of(i, root, depth + 1));
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(1).max(1);
            match item {
                Some(i) => Value::Array((0..min).map(|_| i.clone()).collect()),
                None => Value::Array(Vec::new()),
            }
        }
        "integer" => json!(schema.get("minimum").and_then(Value::as_i64).unwrap_or(2)),
        "number" => json!(schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.5)),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("mock"),
    }
}
