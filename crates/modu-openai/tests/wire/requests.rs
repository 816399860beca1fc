//! What the client sends and reads back: request body shapes, the shared tool list, tool-call
//! turns with empty or null content, tools with structured output, `/v1/models`, and
//! configuration errors.

use futures::StreamExt;
use modu_agent::Agent;
use modu_core::{
    ChatEvent, ChatModel, ChatRequest, FunctionTool, Message, ResponseFormat, ToolCall, ToolChoice, ToolDefinition,
};
use modu_openai::{EmptyToolCallContent, OpenAiClient, OpenAiConfigError};
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

use crate::support::{chunk, client, hi, sse, stream_fold};

/// An agent offers one shared tool list (an `Arc`) in every request; the client serialises it
/// once. Every request, streamed or not, with extras or not, still carries the list as it is,
/// and a changed list is sent changed.
#[tokio::test]
async fn a_shared_tool_list_is_sent_whole_in_every_request() {
    let server = MockOpenAiServer::start().await.unwrap();
    let c = client(&server);
    let add = ToolDefinition::new(
        "add",
        "Add two integers",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
    );
    let sub = ToolDefinition::new("sub", "Subtract", json!({"type": "object"}));
    let wire = |tools: &[&ToolDefinition]| {
        tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect::<Vec<_>>()
    };
    let mut shared = std::sync::Arc::new(vec![add.clone(), sub.clone()]);
    let request = |tools: &std::sync::Arc<Vec<ToolDefinition>>| {
        let mut req = ChatRequest::new(vec![Message::user("2+3?")]);
        req.tools = std::sync::Arc::clone(tools);
        req
    };
    for round in 0..2 {
        server.push(MockReply::Text("ok".into()));
        c.complete(request(&shared)).await.unwrap();
        server.push(MockReply::Text("ok".into()));
        let mut events = c.stream(request(&shared)).await.unwrap();
        while let Some(event) = events.next().await {
            event.unwrap();
        }
        server.push(MockReply::Text("ok".into()));
        c.complete(request(&shared).with_extra("seed", json!(1))).await.unwrap();
        let bodies = server.requests();
        for body in &bodies[round * 3..] {
            assert_eq!(body["tools"], json!(wire(&[&add, &sub])), "round {round}: {body}");
        }
    }
    // The list changed through `Arc::make_mut` (nobody else holds it): the next request
    // carries the change.
    std::sync::Arc::make_mut(&mut shared).pop();
    server.push(MockReply::Text("ok".into()));
    c.complete(request(&shared)).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(body["tools"], json!(wire(&[&add])));
}

#[tokio::test]
async fn request_body_shapes() {
    let server = MockOpenAiServer::start().await.unwrap();
    let c = client(&server);
    let tool = ToolDefinition::new(
        "add",
        "Add two integers",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
    );
    let history = vec![
        Message::system("be brief"),
        Message::user("2+3?"),
        Message::assistant_tool_calls("", vec![ToolCall::new("call_1", "add", r#"{"a":2,"b":3}"#)]),
        Message::tool_result("call_1", "add", "5", false),
    ];
    for (choice, wire) in [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::Required, json!("required")),
        (ToolChoice::None, json!("none")),
        (
            ToolChoice::Named("add".into()),
            json!({"type": "function", "function": {"name": "add"}}),
        ),
    ] {
        server.push(MockReply::Text("ok".into()));
        let mut req = ChatRequest::new(history.clone())
            .with_tools(vec![tool.clone()])
            .with_tool_choice(choice)
            .with_temperature(0.0)
            .with_max_tokens(64)
            .with_seed(7)
            .with_top_p(0.5);
        req.frequency_penalty = Some(0.25);
        req.presence_penalty = Some(-0.5);
        req.parallel_tool_calls = Some(false);
        req.stop = vec!["</s>".into()];
        c.complete(req).await.unwrap();
        let body = server.requests().pop().unwrap();
        assert_eq!(body["tool_choice"], wire);
        assert_eq!(body["parallel_tool_calls"], false);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["top_p"], 0.5);
        assert_eq!(body["frequency_penalty"], 0.25);
        assert_eq!(body["presence_penalty"], -0.5);
        assert_eq!(body["stop"], json!(["</s>"]));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": tool.parameters}}])
        );
        assert!(body.get("response_format").is_none());
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "2+3?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "5"},
            ])
        );
    }

    // response_format json_schema, strict (the schema in strict mode's form: objects closed
    // with additionalProperties false, see tests/wire/strict.rs), and vLLM guided-decoding
    // extras merged in.
    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"], "additionalProperties": false});
    let req = ChatRequest::new(vec![Message::user("2+3?")])
        .with_response_format(ResponseFormat::new("Answer", schema.clone()))
        .with_extra("guided_decoding_backend", json!("xgrammar"))
        .with_extra("chat_template_kwargs", json!({"enable_thinking": false}))
        .with_extra("max_tokens", json!(5));
    c.complete(req).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "Answer", "schema": schema, "strict": true}})
    );
    assert_eq!(body["guided_decoding_backend"], "xgrammar");
    assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
    assert_eq!(body["max_tokens"], 5, "extras win over modu's own fields");
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());

    // `null` content on tool-call turns, when configured.
    let nulls = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .empty_tool_call_content(EmptyToolCallContent::Null)
        .build()
        .unwrap();
    nulls.complete(ChatRequest::new(history.clone())).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(body["messages"][2]["content"], Value::Null);
}

#[tokio::test]
async fn tool_call_turns_with_empty_or_null_content_are_read() {
    let server = MockOpenAiServer::start().await.unwrap();
    for content in [json!(""), Value::Null] {
        server.push(MockReply::RawJson(json!({
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": content,
                "tool_calls": [{"id": "3f1c0d2a9b8e4f7a6c5d4e3f2a1b0c9d", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
            "timings": {"prompt_n": 5}
        })));
        let r = client(&server).complete(hi()).await.unwrap();
        assert_eq!(r.message.text(), "");
        assert_eq!(r.message.tool_calls[0].id, "3f1c0d2a9b8e4f7a6c5d4e3f2a1b0c9d");
        assert_eq!(r.usage.total_tokens, 11);
    }
    // Streamed: llama.cpp's `content: ""` next to tool-call deltas, and `content: null`.
    server.push(sse(vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(
            json!({"content": null, "tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        "[DONE]".into(),
    ]));
    let (events, r) = stream_fold(&client(&server), hi()).await;
    assert!(!events.iter().any(|e| matches!(e, ChatEvent::TextDelta { .. })));
    assert_eq!(r.unwrap().message.tool_calls[0].name, "add");
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Sum {
    total: i64,
    explanation: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[tokio::test]
async fn agent_with_tools_and_structured_output_never_sends_both() {
    let server = MockOpenAiServer::start().await.unwrap();
    let add = FunctionTool::<()>::typed(
        "add",
        "Add two integers",
        |_ctx, a: AddArgs| async move { Ok(a.a + a.b) },
    );
    let agent = Agent::builder(client(&server))
        .output::<Sum>()
        .tool(add)
        .build()
        .unwrap();
    let result = agent.run("What is 2 + 3?").await;
    // The mock's answer fits the schema; serde parsed it into `Sum` (values are the mock's).
    let _sum: &Sum = result
        .output()
        .as_ref()
        .unwrap_or_else(|| panic!("{:?}", result.error()));
    let requests = server.requests();
    assert!(requests.len() >= 2, "{requests:?}");
    for body in &requests {
        let tools = body.get("tools").is_some();
        let format = body.get("response_format").is_some();
        assert!(tools != format, "exactly one of tools / response_format: {body}");
    }
    assert!(requests.last().unwrap()["response_format"]["json_schema"]["schema"].is_object());
    // The tool-call turn went back to the server in the wire shape.
    let second = &requests[1]["messages"];
    let assistant = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "add");
    let tool_msg = second.as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_msg["tool_call_id"], assistant["tool_calls"][0]["id"]);
}

#[tokio::test]
async fn list_models_reads_v1_models() {
    let server = MockOpenAiServer::start().await.unwrap();
    let models = client(&server).list_models().await.unwrap();
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].id, "mock-model");
    assert_eq!(models[0].owned_by.as_deref(), Some("modu-testing"));
}

#[test]
fn configuration_errors() {
    assert!(OpenAiClient::new("localhost:8000/v1", "m").is_err());
    assert!(OpenAiClient::new("http:///v1", "m").is_err());
    assert!(OpenAiClient::builder().model("m").build().is_err());
    assert!(
        OpenAiClient::builder()
            .base_url("http://h/v1")
            .model("m")
            .header("bad header", "x")
            .build()
            .is_err()
    );
    let c = OpenAiClient::new("http://127.0.0.1:8000/v1/", "m").unwrap();
    assert_eq!(c.base_url(), "http://127.0.0.1:8000/v1");
}

#[test]
fn a_base_url_with_a_query_is_refused_without_showing_it() {
    // The paths are appended to the base URL: with a query they would land inside it
    // (`/v1?api-version=1/chat/completions`) and every request would fail with a 404.
    for url in ["http://h/v1?api-version=1&key=sk-in-query", "http://h/v1#sk-in-query"] {
        let err = OpenAiClient::new(url, "m").unwrap_err();
        assert!(
            matches!(&err, OpenAiConfigError::InvalidBaseUrl { reason, .. } if reason.contains("query")),
            "{err:?}"
        );
        assert!(!err.to_string().contains("sk-in-query"), "{err}");
    }
    let err = OpenAiClient::new("http://", "m").unwrap_err();
    assert!(
        matches!(&err, OpenAiConfigError::InvalidBaseUrl { reason, .. } if reason == "has no host"),
        "{err:?}"
    );
}
