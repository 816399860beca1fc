//! `tool_arguments`: a model calls a tool with fuzzed argument text; the run loop parses and
//! validates it against the tool's schema (one of a small set) before the tool runs.

use std::sync::{Arc, Mutex, OnceLock};

use modu_core::tool::ArgumentValidator;
use modu_agent::Agent;
use modu_core::{ChatEvent, ChatRequest, FinishReason, FunctionTool, Role, ToolCall, ToolSpec, Usage};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

/// The schemas the fuzzer picks from (byte 0 of the input, mod the count).
pub fn schemas() -> Vec<Value> {
    vec![
        json!({"type": "object"}),
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": -5, "maximum": 100},
                "b": {"type": "number", "multipleOf": 0.5, "exclusiveMaximum": 1e300}
            },
            "required": ["a"],
            "additionalProperties": false
        }),
        json!({
            "type": "object",
            "properties": {
                "s": {"type": "string", "pattern": "^[a-z]+(-[a-z0-9]+)*$", "minLength": 1, "maxLength": 32},
                "e": {"enum": ["x", "y", 1, null, {"k": [1, 2]}]},
                "c": {"const": 1.0},
                "f": {"type": "string", "format": "date-time"}
            },
            "required": ["s"],
            "dependentRequired": {"e": ["c"]}
        }),
        json!({
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}},
                    "required": ["v"]
                }
            },
            "type": "object",
            "properties": {
                "root": {"$ref": "#/$defs/node"},
                "u": {"oneOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "boolean"}, "uniqueItems": true, "maxItems": 4}
                ]},
                "w": {"anyOf": [{"type": "null"}, {"allOf": [{"minimum": 0}, {"maximum": 9}]}]},
                "m": {
                    "type": "object",
                    "patternProperties": {"^x-": {"type": "string"}},
                    "propertyNames": {"maxLength": 8},
                    "minProperties": 1
                }
            },
            "not": {"required": ["forbidden"]}
        }),
        modu_core::tool::schema_for::<Typed>(),
    ]
}

/// The arguments of the typed tool (schema by schemars, deserialised by serde).
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
pub struct Typed {
    query: String,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    tags: Vec<String>,
    mode: Mode,
    #[serde(default)]
    inner: Option<Inner>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum Mode {
    Fast,
    Exact { digits: u8 },
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Inner {
    #[serde(default = "ten")]
    size: i16,
    ratio: f32,
}

fn ten() -> i16 {
    10
}

/// The call the model makes next: (tool name, raw arguments).
type Slot = Arc<Mutex<(String, String)>>;
/// The arguments each tool received in the current run.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

struct Fixture {
    agent: Agent<()>,
    next: Slot,
    seen: Seen,
    validators: Vec<ArgumentValidator>,
}

fn tool_name(i: usize) -> String {
    format!("tool_{i}")
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let next: Slot = Arc::new(Mutex::new((String::new(), String::new())));
        let seen: Seen = Arc::new(Mutex::new(Vec::new()));
        let slot = Arc::clone(&next);
        // One tool call, then (once a tool result came back) a text answer.
        let model = ScriptedModel::new()
            .respond(move |request: &ChatRequest| {
                let answered = request.messages.last().is_some_and(|m| m.role == Role::Tool);
                let usage = ChatEvent::Usage {
                    usage: Usage::new(1, 1),
                };
                if answered {
                    return vec![
                        ChatEvent::TextDelta { text: "done".into() },
                        usage,
                        ChatEvent::Finish {
                            reason: FinishReason::Stop,
                        },
                    ];
                }
                let (name, arguments) = slot.lock().unwrap().clone();
                vec![
                    ChatEvent::ToolCallDelta {
                        index: 0,
                        id: Some("call_1".into()),
                        name: Some(name),
                        arguments,
                    },
                    usage,
                    ChatEvent::Finish {
                        reason: FinishReason::ToolCalls,
                    },
                ]
            })
            .cycle()
            .without_recording();
        let mut builder = Agent::builder(model).fix_types().name("tool_arguments");
        let schemas = schemas();
        let typed = schemas.len() - 1;
        for (i, schema) in schemas.iter().enumerate() {
            let seen = Arc::clone(&seen);
            let name = tool_name(i);
            let record = name.clone();
            let tool = if i == typed {
                FunctionTool::typed(name, "typed", move |_ctx, _a: Typed| {
                    let seen = Arc::clone(&seen);
                    let record = record.clone();
                    async move {
                        seen.lock().unwrap().push((record, Value::Null));
                        Ok("typed ok")
                    }
                })
            } else {
                FunctionTool::new(ToolSpec::new(name, "echo", schema.clone()), move |_ctx, args: Value| {
                    let seen = Arc::clone(&seen);
                    let record = record.clone();
                    async move {
                        seen.lock().unwrap().push((record, args.clone()));
                        Ok(args)
                    }
                })
            };
            builder = builder.tool(tool);
        }
        let agent = builder.build().expect("the tool_arguments agent builds");
        let validators = schemas
            .iter()
            .map(|s| ArgumentValidator::new(s).expect("the fuzz schemas compile"))
            .collect();
        Fixture {
            agent,
            next,
            seen,
            validators,
        }
    })
}

/// Byte 0 picks the tool (one more than the tools: an unknown tool); the rest, as UTF-8 (lossy,
/// as a server's text would arrive), is the argument text.
///
/// Properties: no panic; the run ends without an error (bad arguments are fed back to the
/// model, never a failure of the run); no tool runs for an unknown name or for arguments that
/// do not parse or fit its schema; an untyped tool runs once when they fit, with exactly the
/// parsed arguments.
pub fn tool_arguments(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let f = fixture();
    let count = f.validators.len();
    let index = usize::from(pick) % (count + 1);
    let name = if index == count {
        "no_such_tool".to_owned()
    } else {
        tool_name(index)
    };
    let arguments = String::from_utf8_lossy(rest).into_owned();
    *f.next.lock().unwrap() = (name.clone(), arguments.clone());
    f.seen.lock().unwrap().clear();

    let result = crate::block_on(f.agent.run("call the tool"));
    assert!(result.error().is_none(), "the run failed: {:?}", result.error());
    assert_eq!(result.output().map(String::as_str), Some("done"));

    let seen = std::mem::take(&mut *f.seen.lock().unwrap());
    let parsed = ToolCall::new("c", name.as_str(), arguments.as_str())
        .parse_arguments()
        .ok();
    let fits = index < count
        && parsed
            .as_ref()
            .is_some_and(|v| f.validators[index].problems(v).is_empty());
    if !fits {
        assert!(seen.is_empty(), "a tool ran with arguments that do not fit: {seen:?}");
        return;
    }
    if index == count - 1 {
        // The typed tool may still refuse what serde does not read (its schema is schemars').
        assert!(seen.len() <= 1);
        return;
    }
    assert_eq!(seen.len(), 1, "the tool did not run once for fitting arguments");
    assert_eq!(seen[0].0, name);
    assert_eq!(
        Some(&seen[0].1),
        parsed.as_ref(),
        "the tool got other arguments than the model sent"
    );
}
