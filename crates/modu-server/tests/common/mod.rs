//! Shared test fixtures: an agent on a scripted model with one tool, a server on 127.0.0.1,
//! and an SSE reader.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::Agent;
use modu_core::{
    ChatEvent, ChatRequest, FinishReason, FunctionTool, ModelError, RbacToolAuthorizer, Role, ToolSpec, Usage,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

/// A model that calls `get_weather` for a user message and answers with the tool's result
/// (in two deltas) once it has one. Each answer reports 10 tokens in, 5 out.
pub fn weather_model() -> ScriptedModel {
    let calls = Arc::new(AtomicUsize::new(0));
    ScriptedModel::new()
        .respond(move |request: &ChatRequest| {
            let usage = ChatEvent::Usage {
                usage: Usage::new(10, 5),
            };
            let last = request.messages.last();
            if let Some(result) = last.filter(|m| m.role == Role::Tool) {
                vec![
                    ChatEvent::TextDelta {
                        text: "Forecast: ".into(),
                    },
                    ChatEvent::TextDelta { text: result.text() },
                    usage,
                    ChatEvent::Finish {
                        reason: FinishReason::Stop,
                    },
                ]
            } else {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                vec![
                    ChatEvent::ToolCallDelta {
                        index: 0,
                        id: Some(format!("call_{n}")),
                        name: Some("get_weather".into()),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                    usage,
                    ChatEvent::Finish {
                        reason: FinishReason::ToolCalls,
                    },
                ]
            }
        })
        .cycle()
}

/// The tool: what it was called with and what the run tells it about its caller.
pub fn weather_tool(runs: Arc<AtomicUsize>, needs_approval: bool) -> FunctionTool<()> {
    let spec = ToolSpec::new(
        "get_weather",
        "The weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
    .needs_approval(needs_approval);
    FunctionTool::new(spec, move |ctx: modu_core::RunContext<()>, args: Value| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move {
            Ok(json!({
                "city": args["city"],
                "forecast": "sunny",
                "user": ctx.user().user_id,
                "roles": ctx.user().roles,
                "session": ctx.session_id(),
                "mcp": ctx.metadata().get("mcp"),
            }))
        }
    })
}

/// `get_weather`, counting its calls in `runs` and holding every call until `gate` has a
/// permit (so a test can act while a run is in its tool).
pub fn gated_weather_tool(
    runs: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::Semaphore>,
    needs_approval: bool,
) -> FunctionTool<()> {
    let spec = ToolSpec::new(
        "get_weather",
        "The weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
    .needs_approval(needs_approval);
    FunctionTool::new(spec, move |_ctx, args: Value| {
        runs.fetch_add(1, Ordering::SeqCst);
        let gate = Arc::clone(&gate);
        async move {
            let _open = gate.acquire().await.unwrap();
            Ok(json!({"city": args["city"], "forecast": "sunny"}))
        }
    })
}

/// The weather agent on [`weather_model`], with RBAC: only the role `weather` may call the tool.
pub fn weather_agent(runs: Arc<AtomicUsize>) -> Agent {
    Agent::builder(weather_model())
        .name("weather")
        .tool(weather_tool(runs, false))
        .authorizer(Arc::new(RbacToolAuthorizer::new().allow("weather", ["get_weather"])))
        .build()
        .unwrap()
}

/// A reasoning model: it thinks in two deltas, then streams its `get_weather` call's arguments
/// in three fragments (id and name on the first only, as OpenAI servers do); with the tool's
/// result it thinks again and answers.
pub fn thinking_model() -> ScriptedModel {
    ScriptedModel::new()
        .respond(|request: &ChatRequest| {
            let think = |t: &str| ChatEvent::ReasoningDelta { text: t.into() };
            if request.messages.last().is_some_and(|m| m.role == Role::Tool) {
                vec![
                    think("The tool answered."),
                    ChatEvent::TextDelta { text: "Sunny.".into() },
                    ChatEvent::Finish {
                        reason: FinishReason::Stop,
                    },
                ]
            } else {
                let fragment = |id: Option<&str>, name: Option<&str>, arguments: &str| ChatEvent::ToolCallDelta {
                    index: 0,
                    id: id.map(Into::into),
                    name: name.map(Into::into),
                    arguments: arguments.into(),
                };
                vec![
                    think("The user wants "),
                    think("the weather."),
                    fragment(Some("call_think"), Some("get_weather"), ""),
                    fragment(None, None, r#"{"city":"#),
                    fragment(None, None, r#""Paris"}"#),
                    ChatEvent::Finish {
                        reason: FinishReason::ToolCalls,
                    },
                ]
            }
        })
        .cycle()
}

/// The weather tool on [`thinking_model`].
pub fn thinking_agent() -> Agent {
    Agent::builder(thinking_model())
        .name("thinker")
        .tool(weather_tool(Arc::default(), false))
        .build()
        .unwrap()
}

/// An agent whose model fails with an error whose text must not reach a client.
pub fn failing_agent() -> Agent {
    let model = ScriptedModel::new()
        .error(|| ModelError::Authentication {
            status: 401,
            message: "key sk-leaked-secret-123 was refused".into(),
        })
        .cycle();
    Agent::builder(model).name("broken").build().unwrap()
}

/// Serves `router` on a free port of 127.0.0.1; returns `http://127.0.0.1:<port>`.
pub async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|frame| {
            let data: Vec<&str> = frame
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

/// The JSON events of an SSE body (every `data:` payload that is JSON).
pub fn sse_json(body: &str) -> Vec<Value> {
    sse_data(body)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// POSTs JSON and returns the status and the body text.
pub async fn post(url: &str, token: Option<&str>, body: &Value) -> (u16, String, reqwest::header::HeaderMap) {
    let mut request = reqwest::Client::new().post(url).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, response.text().await.unwrap(), headers)
}

/// A chat completion request for `model` (a system message, a user message in content parts;
/// `user` set, which the server does not read), streamed with usage or not.
pub fn chat(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}
        ],
        "stream": stream,
        "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
        "user": "mallory",
    })
}
