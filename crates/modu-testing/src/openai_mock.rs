//! [`MockOpenAiServer`]: an OpenAI Chat Completions server on 127.0.0.1 for tests, examples
//! and benchmarks.
//!
//! It speaks the exact wire format: `POST /v1/chat/completions` answers a JSON
//! `chat.completion`, or with `"stream": true` an SSE stream of `chat.completion.chunk`s ending
//! with `data: [DONE]` (and a usage-only chunk when `stream_options.include_usage` is set);
//! `GET /v1/models` lists the model. Replies come from a queue ([`MockReply`]); when the queue
//! is empty a deterministic fallback answers like a well-behaved model: it calls the first
//! offered tool once (arguments synthesised from its schema), then answers in text, or with a
//! JSON instance of the requested schema when the request has a `response_format`.
//!
//! Request bodies up to [`MockOpenAiServer::DEFAULT_BODY_LIMIT`] (32 MiB: room for a 10 MB tool
//! argument even when JSON escaping doubles it) are accepted; a larger one is answered with
//! `413` and an OpenAI error body. [`MockOpenAiServer::body_limit`] changes the limit.
//!
//! Tool-call ids: [`MockReply::ToolCalls`] gives every call a fresh `call_…` id;
//! [`MockReply::ToolCallsWithIds`] sends the ids given (the same id twice, or none at all) to
//! script servers that get them wrong. Streamed, a call's id travels on its first chunk only,
//! with its `type` and name, as OpenAI sends it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// One scripted reply of the mock server.
#[derive(Clone, Debug)]
pub enum MockReply {
    /// A text answer.
    Text(String),
    /// Tool calls: `(name, arguments JSON text)`, each with a fresh unique id.
    ToolCalls(Vec<(String, String)>),
    /// Tool calls with scripted ids: `(id, name, arguments JSON text)`. `None` sends the call
    /// without an `id` field; the same id may be given twice. Streamed, the id is on the first
    /// chunk of each call, as OpenAI sends it.
    ToolCallsWithIds(Vec<(Option<String>, String, String)>),
    /// An error status with a JSON body and extra headers (e.g. `Retry-After`).
    Error {
        /// The HTTP status.
        status: u16,
        /// The body.
        body: Value,
        /// Extra headers.
        headers: Vec<(String, String)>,
    },
    /// A raw SSE body: each entry is sent as `data: <entry>\n\n`, in order. Add `"[DONE]"`
    /// yourself when wanted. With `drop_after`, the connection is cut after that many events.
    RawSse {
        /// The data payloads.
        events: Vec<String>,
        /// Cut the connection after this many events.
        drop_after: Option<usize>,
    },
    /// A raw JSON body with status 200.
    RawJson(Value),
    /// Wait, then answer with the inner reply.
    Delayed(Duration, Box<MockReply>),
}

struct MockState {
    queue: Mutex<VecDeque<MockReply>>,
    requests: Mutex<Vec<Value>>,
    headers: Mutex<Vec<HeaderMap>>,
    api_key: Mutex<Option<String>>,
    model: Mutex<String>,
    record: std::sync::atomic::AtomicBool,
    body_limit: AtomicUsize,
    /// Microseconds every chat reply waits before its first byte.
    latency_us: AtomicU64,
}

impl Default for MockState {
    fn default() -> Self {
        MockState {
            queue: Mutex::default(),
            requests: Mutex::default(),
            headers: Mutex::default(),
            api_key: Mutex::default(),
            model: Mutex::new("mock-model".into()),
            record: std::sync::atomic::AtomicBool::new(true),
            body_limit: AtomicUsize::new(MockOpenAiServer::DEFAULT_BODY_LIMIT),
            latency_us: AtomicU64::new(0),
        }
    }
}

/// A mock OpenAI-compatible server running on 127.0.0.1 until dropped.
///
/// It accepts request bodies up to [`MockOpenAiServer::DEFAULT_BODY_LIMIT`] bytes (32 MiB, set
/// another limit with [`MockOpenAiServer::body_limit`]) and answers a larger one with `413` and
/// an OpenAI error body (`type: "invalid_request_error"`).
pub struct MockOpenAiServer {
    addr: SocketAddr,
    state: Arc<MockState>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl MockOpenAiServer {
    /// The request body limit a new server has: 32 MiB, room for a 10 MB tool argument even
    /// when its JSON escaping doubles it (axum's own default, 2 MB, does not apply).
    pub const DEFAULT_BODY_LIMIT: usize = 32 * 1024 * 1024;

    /// Starts a server on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        Self::serve(listener)
    }

    /// Starts a server on this port of 127.0.0.1.
    pub async fn start_on(port: u16) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        Self::serve(listener)
    }

    fn serve(listener: tokio::net::TcpListener) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let state = Arc::new(MockState::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/models", get(models))
            .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
            .with_state(Arc::clone(&state));
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(MockOpenAiServer {
            addr,
            state,
            shutdown: Some(tx),
        })
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL an OpenAI client is given.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply.
    pub fn push(&self, reply: MockReply) -> &Self {
        self.state
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(reply);
        self
    }

    /// Requires `Authorization: Bearer KEY` on every request (401 otherwise).
    pub fn require_api_key(&self, key: impl Into<String>) -> &Self {
        *self.state.api_key.lock().unwrap_or_else(PoisonError::into_inner) = Some(key.into());
        self
    }

    /// Sets the largest request body accepted, in bytes (default
    /// [`MockOpenAiServer::DEFAULT_BODY_LIMIT`]); a larger one is answered with `413`.
    pub fn body_limit(&self, bytes: usize) -> &Self {
        self.state.body_limit.store(bytes, Ordering::Relaxed);
        self
    }

    /// Delays every chat reply by `latency` before its first byte, as a model's time to first
    /// token does: queued replies (after their own [`MockReply::Delayed`] wait) and the fallback
    /// alike. Default: no delay. For load benchmarks.
    pub fn latency(&self, latency: Duration) -> &Self {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.state.latency_us.store(us, Ordering::Relaxed);
        self
    }

    /// Stops recording requests (for load benchmarks).
    pub fn without_recording(&self) -> &Self {
        self.state.record.store(false, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The JSON bodies of every chat request received.
    pub fn requests(&self) -> Vec<Value> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The headers of every chat request received.
    pub fn request_headers(&self) -> Vec<HeaderMap> {
        self.state
            .headers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for MockOpenAiServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

use axum::Json;

async fn models(State(state): State<Arc<MockState>>) -> Json<Value> {
    let model = state.model.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Json(
        json!({"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "modu-testing"}]}),
    )
}

fn error_body(status: u16, message: &str, kind: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "code": status}});
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Json(body),
    )
        .into_response()
}

async fn chat_completions(State(state): State<Arc<MockState>>, headers: HeaderMap, body: Body) -> Response {
    let expected = state.api_key.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(key) = expected {
        let ok = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == format!("Bearer {key}"));
        if !ok {
            return error_body(401, "Invalid API Key", "authentication_error");
        }
    }
    let limit = state.body_limit.load(Ordering::Relaxed);
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) => {
            let message = format!("request body larger than the limit of {limit} bytes, or unreadable ({e})");
            return error_body(413, &message, "invalid_request_error");
        }
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error_body(400, &format!("invalid JSON body: {e}"), "invalid_request_error"),
    };
    if state.record.load(std::sync::atomic::Ordering::Relaxed) {
        state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.clone());
        state
            .headers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(headers);
    }
    let reply = state
        .queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop_front()
        .unwrap_or_else(|| fallback_reply(&request));
    let latency = state.latency_us.load(Ordering::Relaxed);
    if latency > 0 {
        tokio::time::sleep(Duration::from_micros(latency)).await;
    }
    respond(&request, reply).await
}

fn respond(request: &Value, reply: MockReply) -> futures::future::BoxFuture<'_, Response> {
    Box::pin(async move {
        let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let include_usage = request
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let model = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("mock-model")
            .to_owned();
        match reply {
            MockReply::Delayed(d, inner) => {
                tokio::time::sleep(d).await;
                respond(request, *inner).await
            }
            MockReply::Error { status, body, headers } => {
                let mut resp = (
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    Json(body),
                )
                    .into_response();
                for (k, v) in headers {
                    if let (Ok(name), Ok(value)) = (header::HeaderName::try_from(k), HeaderValue::try_from(v)) {
                        resp.headers_mut().insert(name, value);
                    }
                }
                resp
            }
            MockReply::RawJson(v) => Json(v).into_response(),
            MockReply::RawSse { events, drop_after } => sse_response(events, drop_after),
            MockReply::Text(text) => {
                let usage = usage_for(request, &text);
                if stream {
                    let id = completion_id();
                    let mut events = vec![chunk(&id, &model, json!({"role": "assistant", "content": ""}), None)];
                    for piece in split_text(&text) {
                        events.push(chunk(&id, &model, json!({"content": piece}), None));
                    }
                    events.push(chunk(&id, &model, json!({}), Some("stop")));
                    if include_usage {
                        events.push(usage_chunk(&id, &model, &usage));
                    }
                    events.push("[DONE]".into());
                    sse_response(events, None)
                } else {
                    Json(json!({
                        "id": completion_id(), "object": "chat.completion", "created": 0, "model": model,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                        "usage": usage,
                    }))
                    .into_response()
                }
            }
            MockReply::ToolCalls(calls) => {
                let calls = calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, args))| (Some(format!("call_{}_{i}", short_id())), name, args))
                    .collect();
                tool_calls_response(request, &model, stream, include_usage, calls)
            }
            MockReply::ToolCallsWithIds(calls) => tool_calls_response(request, &model, stream, include_usage, calls),
        }
    })
}

/// A tool-call answer: `(id, name, arguments)`; a `None` id is left out of the call.
fn tool_calls_response(
    request: &Value,
    model: &str,
    stream: bool,
    include_usage: bool,
    calls: Vec<(Option<String>, String, String)>,
) -> Response {
    let usage = usage_for(request, "tool call");
    if stream {
        let id = completion_id();
        let mut events = vec![chunk(&id, model, json!({"role": "assistant", "content": null}), None)];
        for (i, (call_id, name, args)) in calls.iter().enumerate() {
            // The first chunk of a call carries its id, type and name; the rest only arguments.
            let mut first = json!({"index": i, "type": "function", "function": {"name": name, "arguments": ""}});
            if let Some(call_id) = call_id {
                first["id"] = json!(call_id);
            }
            events.push(chunk(&id, model, json!({"tool_calls": [first]}), None));
            for piece in split_text(args) {
                events.push(chunk(
                    &id,
                    model,
                    json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
        events.push(chunk(&id, model, json!({}), Some("tool_calls")));
        if include_usage {
            events.push(usage_chunk(&id, model, &usage));
        }
        events.push("[DONE]".into());
        sse_response(events, None)
    } else {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(call_id, name, args)| {
                let mut call = json!({"type": "function", "function": {"name": name, "arguments": args}});
                if let Some(call_id) = call_id {
                    call["id"] = json!(call_id);
                }
                call
            })
            .collect();
        Json(json!({
            "id": completion_id(), "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": tool_calls}, "finish_reason": "tool_calls"}],
            "usage": usage,
        }))
        .into_response()
    }
}

fn completion_id() -> String {
    format!("chatcmpl-{}", short_id())
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

fn chunk(id: &str, model: &str, delta: Value, finish: Option<&str>) -> String {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
    .to_string()
}

fn usage_chunk(id: &str, model: &str, usage: &Value) -> String {
    json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [], "usage": usage})
        .to_string()
}

/// Splits text into a few pieces on character boundaries (about 16 bytes each).
fn split_text(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        current.push(c);
        if current.len() >= 16 {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    out
}

fn usage_for(request: &Value, answer: &str) -> Value {
    let prompt_chars: usize = request
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .map(|m| m.get("content").map_or(0, |c| c.to_string().len()))
                .sum()
        })
        .unwrap_or(0);
    let prompt = (prompt_chars / 4).max(1) as u64;
    let completion = (answer.len() / 4).max(1) as u64;
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

fn sse_response(events: Vec<String>, drop_after: Option<usize>) -> Response {
    use futures::StreamExt;
    let stream = futures::stream::iter(events.into_iter().enumerate()).then(move |(i, e)| async move {
        if drop_after.is_some_and(|n| i >= n) {
            // Let the events before the cut reach the client first, as a real cut does.
            tokio::time::sleep(Duration::from_millis(50)).await;
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "mock: connection dropped",
            ))
        } else {
            Ok::<Bytes, std::io::Error>(Bytes::from(format!("data: {e}\n\n")))
        }
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// The deterministic fallback: call the first tool once, then answer.
fn fallback_reply(request: &Value) -> MockReply {
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
