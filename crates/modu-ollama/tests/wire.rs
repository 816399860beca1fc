//! Wire tests: `OllamaClient` against `MockOllamaServer`, with NDJSON shapes taken from
//! Ollama's API documentation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use modu_agent::Agent;
use modu_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, FinishReason, FunctionTool, Message,
    ModelError, ResponseFormat, ToolCall, ToolDefinition,
};
use modu_ollama::OllamaClient;
use modu_testing::{MockOllamaServer, OllamaReply};
use serde_json::{Value, json};

fn client(server: &MockOllamaServer) -> OllamaClient {
    OllamaClient::new(server.base_url(), "llama3.2").unwrap()
}

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

fn lines(lines: &[Value]) -> OllamaReply {
    OllamaReply::RawNdjson {
        lines: lines.iter().map(Value::to_string).collect(),
        drop_after: None,
    }
}

async fn stream_fold(model: &OllamaClient, request: ChatRequest) -> (Vec<ChatEvent>, Result<ChatResponse, ModelError>) {
    let mut stream = match model.stream(request).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Err(e)),
    };
    let mut events = Vec::new();
    let mut builder = ChatResponseBuilder::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                events.push(ev.clone());
                builder.push(ev);
            }
            Err(e) => return (events, Err(e)),
        }
    }
    (events, builder.finish())
}

/// The final line of a documented answer.
fn done(reason: &str) -> Value {
    json!({"model": "llama3.2", "created_at": "2023-08-04T19:22:45.499127Z",
           "message": {"role": "assistant", "content": ""}, "done_reason": reason, "done": true,
           "total_duration": 4_883_583_458u64, "load_duration": 1_334_875, "prompt_eval_count": 26,
           "prompt_eval_duration": 342_546_000, "eval_count": 282, "eval_duration": 4_535_599_000u64})
}

fn delta(content: &str) -> Value {
    json!({"model": "llama3.2", "created_at": "2023-08-04T08:52:19.385406455-07:00",
           "message": {"role": "assistant", "content": content, "images": null}, "done": false})
}

#[tokio::test]
async fn streams_text_then_usage_and_done_reason() {
    let server = MockOllamaServer::start().await.unwrap();
    server.push(lines(&[delta("The"), delta(" sky"), delta(" is blue."), done("stop")]));
    let (events, r) = stream_fold(&client(&server), hi()).await;
    let r = r.unwrap();
    assert_eq!(r.message.text(), "The sky is blue.");
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        (r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens),
        (26, 282, 308)
    );
    assert!(matches!(events.last(), Some(ChatEvent::Finish { .. })));
    let body = &server.requests()[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "llama3.2");
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    assert!(body.get("options").is_none() && body.get("format").is_none() && body.get("tools").is_none());
}

#[tokio::test]
async fn complete_sends_stream_false() {
    let server = MockOllamaServer::start().await.unwrap();
    server.push(OllamaReply::Text("Hello from Ollama".into()));
    let r = client(&server).complete(hi()).await.unwrap();
    assert_eq!(r.message.text(), "Hello from Ollama");
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert!(r.usage.input_tokens > 0);
    assert_eq!(server.requests()[0]["stream"], false);
}

#[tokio::test]
async fn streamed_tool_calls_with_object_arguments() {
    // The shape of Ollama's "streaming responses with tool calling" example: thinking text,
    // then one line carrying the whole call with `arguments` as an object.
    let server = MockOllamaServer::start().await.unwrap();
    server.push(lines(&[
        json!({"model": "qwen3", "created_at": "2025-05-27T22:54:57.641643Z", "message": {"role": "assistant", "content": "celsius"}, "done": false}),
        json!({"model": "qwen3", "created_at": "2025-05-27T22:54:58.100509Z", "message": {"role": "assistant", "content": "",
            "tool_calls": [
                {"function": {"name": "get_current_weather", "arguments": {"format": "celsius", "location": "Toronto"}}},
                {"function": {"name": "get_current_weather", "arguments": {"format": "celsius", "location": "Paris, FR"}}}
            ]}, "done": false}),
        done("stop"),
    ]));
    let (events, r) = stream_fold(&client(&server), hi()).await;
    let r = r.unwrap();
    let calls = &r.message.tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].name, "get_current_weather");
    let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
    assert_eq!(args, json!({"format": "celsius", "location": "Toronto"}));
    let args: Value = serde_json::from_str(&calls[1].arguments).unwrap();
    assert_eq!(args["location"], "Paris, FR");
    assert_ne!(calls[0].id, calls[1].id, "ids are made up when Ollama sends none");
    assert_eq!(
        r.finish_reason,
        Some(FinishReason::ToolCalls),
        "done_reason stop after tool calls"
    );
    let indices: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolCallDelta { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(indices, vec![0, 1]);
}

#[tokio::test]
async fn tool_calls_in_separate_lines_and_newer_ids_and_indices() {
    let server = MockOllamaServer::start().await.unwrap();
    server.push(lines(&[
        json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [{"id": "call_x1", "function": {"index": 0, "name": "a", "arguments": {}}}]}, "done": false}),
        json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "b", "arguments": {"n": 1}}}]}, "done": false}),
        done("stop"),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    let calls = r.unwrap().message.tool_calls;
    assert_eq!(calls[0], ToolCall::new("call_x1", "a", "{}"));
    assert_eq!(calls[1].name, "b");
    assert_eq!(calls[1].arguments, r#"{"n":1}"#);
}

#[tokio::test]
async fn non_streaming_tool_call_answer() {
    let server = MockOllamaServer::start().await.unwrap();
    server.push(OllamaReply::ToolCalls(vec![(
        "get_current_weather".into(),
        json!({"format": "celsius", "location": "Paris, FR"}),
    )]));
    let r = client(&server).complete(hi()).await.unwrap();
    assert_eq!(r.message.tool_calls.len(), 1);
    let args: Value = serde_json::from_str(&r.message.tool_calls[0].arguments).unwrap();
    assert_eq!(args["location"], "Paris, FR");
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn length_done_reason() {
    let server = MockOllamaServer::start().await.unwrap();
    server.push(lines(&[delta("cut"), done("length")]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    assert_eq!(r.unwrap().finish_reason, Some(FinishReason::Length));
}

#[tokio::test]
async fn request_body_format_options_keep_alive_and_history() {
    let server = MockOllamaServer::start().await.unwrap();
    let c = OllamaClient::builder()
        .base_url(server.base_url())
        .model("llama3.2")
        .num_ctx(8192)
        .option("top_k", json!(20))
        .keep_alive("10m")
        .build()
        .unwrap();
    let schema = json!({"type": "object", "properties": {"age": {"type": "integer"}, "available": {"type": "boolean"}}, "required": ["age", "available"]});
    let tool = ToolDefinition::new(
        "get_current_weather",
        "Get the current weather for a location",
        json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
    );
    let history = vec![
        Message::user("What is the weather today in Paris?"),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                "call_0",
                "get_current_weather",
                r#"{"location":"Paris, FR"}"#,
            )],
        ),
        Message::tool_result("call_0", "get_current_weather", "22 degrees celsius", false),
    ];
    let mut req = ChatRequest::new(history)
        .with_tools(vec![tool])
        .with_temperature(0.0)
        .with_seed(42)
        .with_max_tokens(100)
        .with_top_p(0.5)
        .with_extra("options", json!({"top_k": 5, "repeat_penalty": 1.1}))
        .with_extra("think", json!(false));
    req.stop = vec!["\n\n".into()];
    req.frequency_penalty = Some(0.25);
    req.presence_penalty = Some(-0.5);
    c.complete(req).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(
        body["options"],
        json!({"num_ctx": 8192, "top_k": 5, "temperature": 0.0, "seed": 42, "top_p": 0.5,
            "frequency_penalty": 0.25, "presence_penalty": -0.5, "num_predict": 100, "stop": ["\n\n"], "repeat_penalty": 1.1})
    );
    assert_eq!(body["keep_alive"], "10m");
    assert_eq!(body["think"], false);
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "get_current_weather");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "What is the weather today in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "function": {"name": "get_current_weather", "arguments": {"location": "Paris, FR"}}}]},
            {"role": "tool", "content": "22 degrees celsius", "tool_name": "get_current_weather", "tool_call_id": "call_0"},
        ])
    );

    let req = ChatRequest::new(vec![Message::user("Ollama is 22 years old and busy saving the world.")])
        .with_response_format(ResponseFormat::new("Person", schema.clone()));
    let r = c.complete(req).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(body["format"], schema);
    let parsed: Value = serde_json::from_str(&r.message.text()).unwrap();
    assert!(parsed["age"].is_i64() && parsed["available"].is_boolean());
}

#[tokio::test]
async fn http_errors_are_typed() {
    let server = MockOllamaServer::start().await.unwrap();
    let c = client(&server);
    server.push(OllamaReply::Error {
        status: 404,
        body: json!({"error": "model \"nope\" not found, try pulling it first"}),
    });
    match c.stream(hi()).await.err().unwrap() {
        ModelError::ModelNotFound { model, message } => {
            assert_eq!(model, "llama3.2");
            assert!(message.contains("not found"));
        }
        other => panic!("{other:?}"),
    }
    server.push(OllamaReply::Error {
        status: 401,
        body: json!({"error": "unauthorized"}),
    });
    assert!(matches!(
        c.complete(hi()).await,
        Err(ModelError::Authentication { status: 401, .. })
    ));
    server.push(OllamaReply::Error {
        status: 429,
        body: json!({"error": "too many requests"}),
    });
    assert!(matches!(c.complete(hi()).await, Err(ModelError::RateLimited { .. })));
    server.push(OllamaReply::Error {
        status: 500,
        body: json!({"error": "llama runner process has terminated: exit status 2"}),
    });
    let err = c.complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Status { status: 500, .. }), "{err:?}");
    assert!(err.is_retryable());
    server.push(OllamaReply::Error {
        status: 400,
        body: json!({"error": "invalid format: expected \"json\" or a JSON schema"}),
    });
    assert!(matches!(
        c.complete(hi()).await,
        Err(ModelError::Status { status: 400, .. })
    ));
}

#[tokio::test]
async fn stream_failures_are_typed() {
    let server = MockOllamaServer::start().await.unwrap();
    let c = client(&server);
    // An error line mid-stream.
    server.push(lines(&[
        delta("partial"),
        json!({"error": "an error was encountered while running the model"}),
    ]));
    let (events, r) = stream_fold(&c, hi()).await;
    assert_eq!(events.len(), 1);
    assert!(matches!(r, Err(ModelError::Status { status: 500, .. })), "{r:?}");
    // The body ends without the `done: true` line.
    server.push(lines(&[delta("no end")]));
    let (_, r) = stream_fold(&c, hi()).await;
    assert!(matches!(r, Err(ModelError::Transport { .. })), "{r:?}");
    // The connection drops.
    server.push(OllamaReply::RawNdjson {
        lines: [delta("a"), delta("b"), delta("c"), done("stop")]
            .iter()
            .map(Value::to_string)
            .collect(),
        drop_after: Some(2),
    });
    let (_, r) = stream_fold(&c, hi()).await;
    assert!(matches!(r, Err(ModelError::Transport { .. })), "{r:?}");
    // A line that is not JSON.
    server.push(OllamaReply::RawNdjson {
        lines: vec![delta("a").to_string(), "{not json".into(), done("stop").to_string()],
        drop_after: None,
    });
    let (_, r) = stream_fold(&c, hi()).await;
    assert!(matches!(r, Err(ModelError::InvalidResponse { .. })), "{r:?}");
}

#[tokio::test]
async fn connection_refused_is_transport() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = OllamaClient::new(format!("http://127.0.0.1:{port}"), "m").unwrap();
    let err = c.stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn tags_lists_pulled_models() {
    let server = MockOllamaServer::start().await.unwrap();
    let models = client(&server).list_models().await.unwrap();
    assert_eq!(models[0].name, "llama3.2:latest");
    assert_eq!(models[0].details.quantization_level, "Q4_K_M");
    assert_eq!(models[0].details.family, "llama");
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Report {
    city: String,
    celsius: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    location: String,
}

#[tokio::test]
async fn an_agent_runs_tools_then_structured_output_over_ollama() {
    let server = MockOllamaServer::start().await.unwrap();
    let weather = FunctionTool::<()>::typed(
        "get_current_weather",
        "Weather for a place",
        |_ctx, a: WeatherArgs| async move { Ok(json!({"location": a.location, "celsius": 22})) },
    );
    let agent = Agent::builder(client(&server))
        .output::<Report>()
        .tool(weather)
        .build()
        .unwrap();
    let result = agent.run("Weather in Toronto?").await;
    let report = result.output().unwrap_or_else(|| panic!("{:?}", result.error()));
    assert!(
        !report.city.is_empty(),
        "the mock's schema instance parsed into Report: {report:?}"
    );
    let requests = server.requests();
    assert!(requests.len() >= 2);
    for body in &requests {
        assert!(body.get("tools").is_some() != body.get("format").is_some(), "{body}");
    }
    let tool_turn = requests[1]["messages"].as_array().unwrap();
    let assistant = tool_turn.iter().find(|m| m["role"] == "assistant").unwrap();
    let arguments = &assistant["tool_calls"][0]["function"]["arguments"];
    assert!(
        arguments["location"].is_string(),
        "arguments go back as an object: {arguments}"
    );
    let tool = tool_turn.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["tool_name"], "get_current_weather");
}

#[test]
fn configuration() {
    assert!(OllamaClient::new("localhost:11434", "m").is_err());
    assert!(OllamaClient::builder().build().is_err(), "a model is required");
    let c = OllamaClient::builder().model("m").build().unwrap();
    assert_eq!(c.base_url(), "http://127.0.0.1:11434");
    assert_eq!(c.model_name(), "m");
}

/// A thinking model's stream (`"think": true`), in Ollama's documented shape: `thinking`
/// fragments first, then `content`.
#[tokio::test]
async fn thinking_is_read_as_reasoning_and_think_is_sent() {
    let server = MockOllamaServer::start().await.unwrap();
    let think = |t: &str| {
        json!({"model": "qwen3:14b", "created_at": "2025-05-29T09:35:56.836222Z",
               "message": {"role": "assistant", "content": "", "thinking": t}, "done": false})
    };
    server.push(lines(&[think("Count the "), think("r's."), delta("3"), done("stop")]));
    let request = hi().with_reasoning_effort(modu_core::ReasoningEffort::High);
    let (events, response) = stream_fold(&client(&server), request).await;
    let response = response.unwrap();
    assert_eq!(
        events[..2],
        [
            ChatEvent::ReasoningDelta {
                text: "Count the ".into()
            },
            ChatEvent::ReasoningDelta { text: "r's.".into() }
        ]
    );
    assert_eq!(response.message.reasoning().as_deref(), Some("Count the r's."));
    assert_eq!(response.message.text(), "3");
    assert_eq!(server.requests()[0]["think"], true);

    // Thinking off, and the earlier thinking is not sent back by default.
    server.push(OllamaReply::Text("ok".into()));
    let follow_up = ChatRequest::new(vec![
        Message::user("hi"),
        response.message.clone(),
        Message::user("again"),
    ])
    .with_reasoning_effort(modu_core::ReasoningEffort::None);
    client(&server).complete(follow_up).await.unwrap();
    let sent = &server.requests()[1];
    assert_eq!(sent["think"], false);
    assert!(sent["messages"][1].get("thinking").is_none(), "{sent}");
    assert_eq!(sent["messages"][1]["content"], "3");

    // Replayed when configured.
    server.push(OllamaReply::Text("ok".into()));
    let replaying = OllamaClient::builder()
        .base_url(server.base_url())
        .model("qwen3:14b")
        .reasoning_replay(modu_ollama::ReasoningReplay::Always)
        .build()
        .unwrap();
    replaying
        .complete(ChatRequest::new(vec![
            Message::user("hi"),
            response.message,
            Message::user("again"),
        ]))
        .await
        .unwrap();
    let sent = &server.requests()[2];
    assert_eq!(sent["messages"][1]["thinking"], "Count the r's.");
    assert!(sent.get("think").is_none(), "no effort set: the model's default");
}

#[tokio::test]
async fn a_gpt_oss_model_gets_the_reasoning_effort_as_its_think_level() {
    // `think: true` is "medium" on gpt-oss whatever effort was asked; any other model gets a
    // boolean, since many Ollama releases refuse a level for it (HTTP 400).
    use modu_core::ReasoningEffort as E;
    let server = MockOllamaServer::start().await.unwrap();
    let cases = [
        ("gpt-oss:20b", E::None, json!(false)),
        ("gpt-oss:20b", E::Minimal, json!("low")),
        ("gpt-oss:120b-cloud", E::Low, json!("low")),
        ("hf.co/unsloth/GPT-OSS-20b-GGUF", E::Medium, json!("medium")),
        ("gpt-oss:20b", E::High, json!("high")),
        ("qwen3:8b", E::High, json!(true)),
        ("qwen3:8b", E::Low, json!(true)),
        ("deepseek-r1", E::None, json!(false)),
    ];
    for (i, (model, effort, think)) in cases.into_iter().enumerate() {
        server.push(OllamaReply::Text("ok".into()));
        OllamaClient::new(server.base_url(), model)
            .unwrap()
            .complete(hi().with_reasoning_effort(effort))
            .await
            .unwrap();
        assert_eq!(server.requests()[i]["think"], think, "{model} {effort:?}");
    }
}

#[tokio::test]
async fn tool_choice_narrows_the_offered_tools() {
    // Ollama's /api/chat has no tool_choice: `none` sends no tools, a named tool goes alone,
    // and the field itself is never sent.
    let server = MockOllamaServer::start().await.unwrap();
    let c = client(&server);
    let tool = |name: &str| ToolDefinition::new(name, "a tool", json!({"type": "object", "properties": {}}));
    let tools = vec![tool("add"), tool("weather")];
    let cases = [
        (modu_core::ToolChoice::Auto, json!(["add", "weather"])),
        (modu_core::ToolChoice::Required, json!(["add", "weather"])),
        (modu_core::ToolChoice::None, json!(null)),
        (modu_core::ToolChoice::Named("weather".into()), json!(["weather"])),
        (
            modu_core::ToolChoice::Named("missing".into()),
            json!(["add", "weather"]),
        ),
    ];
    for (choice, names) in cases {
        server.push(OllamaReply::Text("ok".into()));
        c.complete(hi().with_tools(tools.clone()).with_tool_choice(choice.clone()))
            .await
            .unwrap();
        let body = server.requests().pop().unwrap();
        let sent: Value = body
            .get("tools")
            .and_then(Value::as_array)
            .map(|t| t.iter().map(|t| t["function"]["name"].clone()).collect())
            .unwrap_or(Value::Null);
        assert_eq!(sent, names, "{choice:?}");
        assert!(body.get("tool_choice").is_none());
    }
}

#[tokio::test]
async fn a_shared_tool_list_is_sent_whole_in_every_request() {
    // An agent offers one shared list in every request; the client encodes it once and must
    // still send all of it each time, in every request shape, and send a changed list changed.
    let server = MockOllamaServer::start().await.unwrap();
    let c = client(&server);
    let tool = |name: &str| ToolDefinition::new(name, "a tool", json!({"type": "object", "properties": {}}));
    let mut tools = std::sync::Arc::new(vec![tool("add"), tool("weather")]);
    let request = |tools: &std::sync::Arc<Vec<ToolDefinition>>| {
        let mut r = hi();
        r.tools = std::sync::Arc::clone(tools);
        r
    };
    let names = |body: &Value| -> Value {
        body.get("tools")
            .and_then(Value::as_array)
            .map(|t| t.iter().map(|t| t["function"]["name"].clone()).collect())
            .unwrap_or(Value::Null)
    };
    for _round in 0..2 {
        server.push(OllamaReply::Text("ok".into()));
        c.complete(request(&tools)).await.unwrap();
        server.push(OllamaReply::Text("ok".into()));
        let (_, folded) = stream_fold(&c, request(&tools)).await;
        folded.unwrap();
        server.push(OllamaReply::Text("ok".into()));
        let mut with_extras = request(&tools);
        with_extras.extras.insert("options".into(), json!({"num_ctx": 4096}));
        with_extras.extras.insert("keep_alive".into(), json!("5m"));
        c.complete(with_extras).await.unwrap();
        server.push(OllamaReply::Text("ok".into()));
        c.complete(request(&tools).with_tool_choice(modu_core::ToolChoice::Named("weather".into())))
            .await
            .unwrap();
        let sent = server.requests();
        let last = &sent[sent.len() - 4..];
        for body in &last[..3] {
            assert_eq!(names(body), json!(["add", "weather"]), "{body}");
            assert_eq!(body["tools"][0]["type"], "function");
            assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
        }
        assert_eq!(last[2]["options"]["num_ctx"], 4096);
        assert_eq!(last[2]["keep_alive"], "5m");
        assert_eq!(names(&last[3]), json!(["weather"]), "a named tool still goes alone");
    }
    std::sync::Arc::make_mut(&mut tools).push(tool("search"));
    server.push(OllamaReply::Text("ok".into()));
    c.complete(request(&tools)).await.unwrap();
    let body = server.requests().pop().unwrap();
    assert_eq!(
        names(&body),
        json!(["add", "weather", "search"]),
        "a changed list is sent changed"
    );
}
