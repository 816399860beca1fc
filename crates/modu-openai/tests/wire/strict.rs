//! Structured output in OpenAI's strict mode: the schema a Rust type gives is sent in the
//! subset of JSON Schema `strict: true` takes (OpenAI answers 400 "Invalid schema for
//! response_format" otherwise), and one that has no such form is sent without `strict`.

use std::collections::HashMap;

use modu_agent::Agent;
use modu_core::{ChatModel, ChatRequest, JsonCodec, Message, OutputCodec, ResponseFormat};
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

use crate::support::client;

/// OpenAI's rules for a strict schema, checked over the whole schema: every object closed
/// with `additionalProperties: false` and all its properties required, no `oneOf`, `allOf`,
/// `default` or open schema, string formats only from OpenAI's list, `$ref` alone.
fn openai_strict_violations(schema: &Value, at: &str, found: &mut Vec<String>) {
    let Some(o) = schema.as_object() else {
        found.push(format!("{at}: a boolean schema"));
        return;
    };
    for key in ["oneOf", "allOf", "not", "default", "$schema", "prefixItems"] {
        if o.contains_key(key) {
            found.push(format!("{at}: '{key}' is not permitted"));
        }
    }
    if let Some(format) = o.get("format").and_then(Value::as_str)
        && ![
            "date-time",
            "time",
            "date",
            "duration",
            "email",
            "hostname",
            "ipv4",
            "ipv6",
            "uuid",
        ]
        .contains(&format)
    {
        found.push(format!("{at}: format '{format}' is not permitted"));
    }
    if o.contains_key("$ref") && o.len() > 1 {
        found.push(format!("{at}: $ref cannot have other keywords"));
    }
    if !["type", "anyOf", "$ref", "enum", "const"]
        .iter()
        .any(|k| o.contains_key(*k))
    {
        found.push(format!("{at}: schema must have a type"));
    }
    if let Some(properties) = o.get("properties").and_then(Value::as_object) {
        if o.get("additionalProperties") != Some(&Value::Bool(false)) {
            found.push(format!(
                "{at}: 'additionalProperties' is required to be supplied and to be false"
            ));
        }
        let required: Vec<&str> = o["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for name in properties.keys() {
            if !required.contains(&name.as_str()) {
                found.push(format!(
                    "{at}: 'required' is required to include every key, missing '{name}'"
                ));
            }
        }
        for (name, sub) in properties {
            openai_strict_violations(sub, &format!("{at}/properties/{name}"), found);
        }
    }
    for key in ["$defs", "definitions"] {
        for (name, sub) in o.get(key).and_then(Value::as_object).into_iter().flatten() {
            openai_strict_violations(sub, &format!("{at}/{key}/{name}"), found);
        }
    }
    for (i, sub) in o
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        openai_strict_violations(sub, &format!("{at}/anyOf/{i}"), found);
    }
    if let Some(items) = o.get("items") {
        openai_strict_violations(items, &format!("{at}/items"), found);
    }
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Address {
    city: String,
    /// The postcode, when there is one.
    postcode: Option<String>,
}

/// How sure the answer is.
#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
enum Confidence {
    /// Checked.
    High,
    /// A guess.
    Low,
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Report {
    total: u8,
    note: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    /// Where it was sent.
    address: Address,
    /// Earlier addresses.
    previous: Option<Vec<Address>>,
    confidence: Confidence,
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct SearchArgs {
    query: String,
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(tag = "kind")]
enum Action {
    Search(SearchArgs),
    Stop,
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Step {
    action: Action,
    letter: char,
    seen: std::collections::HashSet<String>,
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Op {
    Search { q: String },
    Stop {},
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Flattened {
    id: u32,
    #[serde(flatten)]
    op: Op,
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Counts {
    by_name: HashMap<String, u32>,
}

/// The `json_schema` of the last request the server received.
fn last_sent(server: &MockOpenAiServer) -> Value {
    let body = server.requests().pop().unwrap();
    assert_eq!(body["response_format"]["type"], "json_schema");
    body["response_format"]["json_schema"].clone()
}

/// Sends one request answering in `format`; the `json_schema` the server received.
async fn send(server: &MockOpenAiServer, format: ResponseFormat) -> Value {
    client(server)
        .complete(ChatRequest::new(vec![Message::user("answer")]).with_response_format(format))
        .await
        .unwrap();
    last_sent(server)
}

#[tokio::test]
async fn a_rust_types_schema_is_sent_in_openai_strict_form_and_its_answers_still_parse() {
    let server = MockOpenAiServer::start().await.unwrap();
    let codec = JsonCodec::<Report>::new();
    let format = codec.response_format().unwrap();
    // The type's own schema breaks OpenAI's rules (this is what was sent before).
    let mut before = Vec::new();
    openai_strict_violations(&format.schema, "", &mut before);
    assert!(!before.is_empty(), "{}", format.schema);

    let sent = send(&server, format.clone()).await;
    assert_eq!(sent["strict"], true, "{sent}");
    assert_eq!(sent["name"], "Report");
    let mut found = Vec::new();
    openai_strict_violations(&sent["schema"], "", &mut found);
    assert!(found.is_empty(), "{found:#?}\n{:#}", sent["schema"]);
    // Descriptions stay where the model reads them.
    assert_eq!(
        sent["schema"]["properties"]["address"]["description"],
        "Where it was sent."
    );

    // An answer to the strict schema (every property given, null where optional) parses.
    let answer = json!({"total": 3, "note": null, "tags": [], "previous": null, "confidence": "High",
                        "address": {"city": "Seoul", "postcode": null}});
    let parsed = codec.parse(&answer.to_string()).unwrap();
    assert_eq!(
        (parsed.total, parsed.note, parsed.confidence),
        (3, None, Confidence::High)
    );

    // Through an agent: the final request is strict, and the mock's answer parses.
    server.push(MockReply::Text(answer.to_string()));
    let agent = Agent::builder(client(&server)).output::<Report>().build().unwrap();
    let result = agent.run("report").await;
    assert_eq!(
        result.output().map(|r| r.address.city.as_str()),
        Some("Seoul"),
        "{:?}",
        result.error()
    );
    let sent = last_sent(&server);
    assert_eq!(sent["strict"], true);
    let mut found = Vec::new();
    openai_strict_violations(&sent["schema"], "", &mut found);
    assert!(found.is_empty(), "{found:#?}");
}

#[tokio::test]
async fn a_schema_strict_mode_cannot_take_is_sent_as_it_is_without_strict() {
    let server = MockOpenAiServer::start().await.unwrap();
    let format = JsonCodec::<Counts>::new().response_format().unwrap();
    let sent = send(&server, format.clone()).await;
    assert_eq!(sent["strict"], false, "a map has no strict form: {sent}");
    assert_eq!(sent["schema"], format.schema);

    // Asked without strict, the schema goes as it is.
    let sent = send(
        &server,
        JsonCodec::<Report>::new().response_format().unwrap().strict(false),
    )
    .await;
    assert_eq!(sent["strict"], false);
    assert_eq!(
        sent["schema"],
        JsonCodec::<Report>::new().response_format().unwrap().schema
    );
}

/// The rewritten schema still takes the answers the type parses: an internally tagged
/// variant keeps its fields (schemars puts the tag beside a `$ref` to them), and a shape with
/// no strict form (`#[serde(flatten)]` of an enum: alternatives beside the properties) goes
/// without `strict`.
#[tokio::test]
async fn the_strict_form_keeps_the_answers_the_type_takes() {
    let server = MockOpenAiServer::start().await.unwrap();
    let format = JsonCodec::<Step>::new().response_format().unwrap();
    let sent = send(&server, format.clone()).await;
    assert_eq!(sent["strict"], true, "{sent}");
    let mut found = Vec::new();
    openai_strict_violations(&sent["schema"], "", &mut found);
    assert!(found.is_empty(), "{found:#?}\n{:#}", sent["schema"]);
    let validator = modu_core::ArgumentValidator::new(&sent["schema"]).unwrap();
    for answer in [
        json!({"action": {"kind": "Search", "query": "rust"}, "letter": "x", "seen": ["a"]}),
        json!({"action": {"kind": "Stop"}, "letter": "y", "seen": []}),
    ] {
        validator
            .check(&answer)
            .unwrap_or_else(|e| panic!("{answer} refused: {e}\n{:#}", sent["schema"]));
        JsonCodec::<Step>::new().parse(&answer.to_string()).unwrap();
    }
    // A variant without its fields is refused by the schema, as serde refuses it.
    assert!(
        validator
            .check(&json!({"action": {"kind": "Search"}, "letter": "x", "seen": []}))
            .is_err()
    );

    let format = JsonCodec::<Flattened>::new().response_format().unwrap();
    let sent = send(&server, format.clone()).await;
    assert_eq!(sent["strict"], false, "{sent}");
    assert_eq!(sent["schema"], format.schema);
}

/// A verdict whose reasoning the model must write before its answer: OpenAI writes the keys of
/// a structured answer in the schema's order, so putting a field first is how a user gets it
/// generated first.
#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Verdict {
    reasoning: String,
    confidence: f64,
    answer: String,
}

/// A server that answers every chat request with one fixed completion and keeps the request
/// bodies as they came, byte for byte (the mock parses them into JSON values).
async fn recording_server(answer: &str) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::routing::post;
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&bodies);
    let completion = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": answer}}],
    });
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |body: String| {
            kept.lock().unwrap().push(body);
            let completion = completion.clone();
            async move { axum::Json(completion) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bodies)
}

#[tokio::test]
async fn an_output_types_fields_are_sent_in_their_declared_order() {
    let (url, bodies) = recording_server(r#"{"reasoning":"2 and 3 make 5","confidence":0.9,"answer":"5"}"#).await;
    let model = modu_openai::OpenAiClient::new(url, "m").unwrap();
    let agent = Agent::builder(model).output::<Verdict>().build().unwrap();
    let result = agent.run("What is 2 + 3?").await;
    assert_eq!(result.output().map(|v| v.answer.as_str()), Some("5"), "{result:?}");
    let body = bodies.lock().unwrap().pop().unwrap();
    let at = |key: &str| {
        body.find(&format!("\"{key}\":{{"))
            .unwrap_or_else(|| panic!("{key} not in {body}"))
    };
    assert!(
        at("reasoning") < at("confidence") && at("confidence") < at("answer"),
        "the schema's properties are not in the type's order: {body}"
    );
    // `required` lists them in the same order.
    assert!(
        body.contains(r#""required":["reasoning","confidence","answer"]"#),
        "{body}"
    );
}
