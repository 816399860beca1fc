//! [`MockOllamaServer`]: Ollama's native API on 127.0.0.1 for tests.
//!
//! The shapes follow Ollama's API documentation (`docs/api.md`, and the May 2025 "streaming
//! responses with tool calling" examples): `POST /api/chat` answers NDJSON, one JSON object per
//! line (`stream` defaults to `true`), each line a `message` delta with `done: false`; the last
//! line has `done: true`, `done_reason`, and the counters `prompt_eval_count` / `eval_count`
//! with durations in nanoseconds. Tool calls arrive whole, in one line, with `arguments` as a
//! JSON object. Errors are `{"error": "..."}` with an HTTP status, or an `{"error": ...}` line
//! in the middle of a stream. `GET /api/tags` lists the models.
//!
//! Replies come from a queue ([`OllamaReply`]); when it is empty a deterministic fallback
//! behaves like [`MockOpenAiServer`](crate::MockOpenAiServer)'s: call the first tool once,
//! then answer (a JSON instance of `format` when the request has a schema).
//!
//! Tool-call ids: Ollama's documented `/api/chat` tool calls have none
//! (`{"function": {"name", "arguments"}}`), and that is what [`OllamaReply::ToolCalls`] sends.
//! Newer Ollama builds add an optional `id` (`api.ToolCall.ID`, `json:"id,omitempty"`) and a
//! `function.index`; [`OllamaReply::ToolCallsWithIds`] sends those, with the ids given (the
//! same id twice, or none), to script a server that gets them wrong.
//!
//! Request bodies up to [`MockOllamaServer::DEFAULT_BODY_LIMIT`] (32 MiB) are accepted; a larger
//! one is answered with `413` and `{"error": "..."}`. [`MockOllamaServer::body_limit`] changes
//! the limit.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::openai_mock::instance_of;

/// One scripted reply of the mock Ollama server.
#[derive(Clone, Debug)]
pub enum OllamaReply {
    /// A text answer (streamed in pieces when the request streams).
    Text(String),
    /// Tool calls: `(name, arguments object)`, sent in one line as Ollama does, without ids
    /// (Ollama's documented shape).
    ToolCalls(Vec<(String, Value)>),
    /// Tool calls as newer Ollama builds send them: `(id, name, arguments object)`, each with
    /// `function.index`, and `id` unless it is `None` (the same id may be given twice).
    ToolCallsWithIds(Vec<(Option<String>, String, Value)>),
    /// An error status with a JSON body (Ollama's is `{"error": "..."}`).
    Error {
        /// The HTTP status.
        status: u16,
        /// The body.
        body: Value,
    },
    /// Raw NDJSON lines, sent in order (each followed by `\n`). With `drop_after`, the
    /// connection is cut after that many lines.
    RawNdjson {
        /// The lines.
        lines: Vec<String>,
        /// Cut the connection after this many lines.
        drop_after: Option<usize>,
    },
    /// Wait, then answer with the inner reply.
    Delayed(Duration, Box<OllamaReply>),
}

struct OllamaState {
    queue: Mutex<VecDeque<OllamaReply>>,
    requests: Mutex<Vec<Value>>,
    body_limit: AtomicUsize,
}

impl Default for OllamaState {
    fn default() -> Self {
        OllamaState {
            queue: Mutex::default(),
            requests: Mutex::default(),
            body_limit: AtomicUsize::new(MockOllamaServer::DEFAULT_BODY_LIMIT),
        }
    }
}

/// A mock Ollama server running on 127.0.0.1 until dropped.
///
/// It accepts request bodies up to [`MockOllamaServer::DEFAULT_BODY_LIMIT`] bytes (32 MiB, set
/// another limit with [`MockOllamaServer::body_limit`]) and answers a larger one with `413`.
pub struct MockOllamaServer {
    addr: SocketAddr,
    state: Arc<OllamaState>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl MockOllamaServer {
    /// The request body limit a new server has: 32 MiB (axum's own default, 2 MB, does not
    /// apply).
    pub const DEFAULT_BODY_LIMIT: usize = 32 * 1024 * 1024;

    /// Starts a server on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(OllamaState::default());
        let app = Router::new()
            .route("/api/chat", post(chat))
            .route("/api/tags", get(tags))
            .route("/api/version", get(|| async { Json(json!({"version": "0.12.6"})) }))
            .with_state(Arc::clone(&state));
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(MockOllamaServer {
            addr,
            state,
            shutdown: Some(tx),
        })
    }

    /// `http://127.0.0.1:PORT`, the base URL an Ollama client is given.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a reply.
    pub fn push(&self, reply: OllamaReply) -> &Self {
        self.state
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(reply);
        self
    }

    /// Sets the largest request body accepted, in bytes (default
    /// [`MockOllamaServer::DEFAULT_BODY_LIMIT`]); a larger one is answered with `413`.
    pub fn body_limit(&self, bytes: usize) -> &Self {
        self.state.body_limit.store(bytes, Ordering::Relaxed);
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
}

impl Drop for MockOllamaServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

async fn tags() -> Json<Value> {
    Json(json!({"models": [{
        "name": "llama3.2:latest", "model": "llama3.2:latest",
        "modified_at": "2025-05-04T17:37:44.706015396-07:00", "size": 2019393189,
        "digest": "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
        "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                    "parameter_size": "3.2B", "quantization_level": "Q4_K_M"}
    }]}))
}

async fn chat(State(state): State<Arc<OllamaState>>, body: Body) -> Response {
    let limit = state.body_limit.load(Ordering::Relaxed);
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) => {
            let message = format!("request body larger than the limit of {limit} bytes, or unreadable ({e})");
            return (StatusCode::PAYLOAD_TOO_LARGE, Json(json!({"error": message}))).into_response();
        }
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"error": format!("invalid JSON: {e}")})),
            )
                .into_response();
        }
    };
    state
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(request.clone());
    let reply = state
        .queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop_front()
        .unwrap_or_else(|| fallback(&request));
    respond(&request, reply).await
}

fn respond(request: &Value, reply: OllamaReply) -> futures::future::BoxFuture<'_, Response> {
    Box::pin(async move {
        let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(true);
        let model = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("llama3.2")
            .to_owned();
        let prompt_eval_count = prompt_tokens(request);
        match reply {
            OllamaReply::Delayed(d, inner) => {
                tokio::time::sleep(d).await;
                respond(request, *inner).await
            }
            OllamaReply::Error { status, body } => (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                Json(body),
            )
                .into_response(),
            OllamaReply::RawNdjson { lines, drop_after } => ndjson(lines, drop_after),
            OllamaReply::Text(text) => {
                let eval_count = (text.len() as u64 / 4).max(1);
                if stream {
                    let mut lines: Vec<String> = split(&text)
                        .into_iter()
                        .map(|piece| delta_line(&model, json!({"role": "assistant", "content": piece})))
                        .collect();
                    lines.push(done_line(&model, "stop", prompt_eval_count, eval_count));
                    ndjson(lines, None)
                } else {
                    let mut v: Value = serde_json::from_str(&done_line(&model, "stop", prompt_eval_count, eval_count))
                        .unwrap_or_default();
                    v["message"] = json!({"role": "assistant", "content": text});
                    Json(v).into_response()
                }
            }
            OllamaReply::ToolCalls(calls) => {
                let tool_calls = calls
                    .iter()
                    .map(|(name, args)| json!({"function": {"name": name, "arguments": args}}))
                    .collect();
                tool_calls_response(&model, stream, prompt_eval_count, tool_calls)
            }
            OllamaReply::ToolCallsWithIds(calls) => {
                let tool_calls = calls
                    .iter()
                    .enumerate()
                    .map(|(index, (id, name, args))| {
                        let mut call = json!({"function": {"index": index, "name": name, "arguments": args}});
                        if let Some(id) = id {
                            call["id"] = json!(id);
                        }
                        call
                    })
                    .collect();
                tool_calls_response(&model, stream, prompt_eval_count, tool_calls)
            }
        }
    })
}

/// Tool calls arrive whole, in one line, followed by the `done` line.
fn tool_calls_response(model: &str, stream: bool, prompt_eval_count: u64, tool_calls: Vec<Value>) -> Response {
    let message = json!({"role": "assistant", "content": "", "tool_calls": tool_calls});
    if stream {
        let lines = vec![
            delta_line(model, message),
            done_line(model, "stop", prompt_eval_count, 20),
        ];
        ndjson(lines, None)
    } else {
        let mut v: Value = serde_json::from_str(&done_line(model, "stop", prompt_eval_count, 20)).unwrap_or_default();
        v["message"] = message;
        Json(v).into_response()
    }
}

/// A streamed delta line (`done: false`).
fn delta_line(model: &str, message: Value) -> String {
    json!({"model": model, "created_at": "2025-05-27T22:54:57.641643Z", "message": message, "done": false}).to_string()
}

/// The final line: `done: true`, `done_reason`, counters and durations (nanoseconds).
fn done_line(model: &str, reason: &str, prompt_eval_count: u64, eval_count: u64) -> String {
    json!({
        "model": model, "created_at": "2025-05-27T22:54:58.100509Z",
        "message": {"role": "assistant", "content": ""},
        "done_reason": reason, "done": true,
        "total_duration": 885_095_291u64, "load_duration": 3_753_500u64,
        "prompt_eval_count": prompt_eval_count, "prompt_eval_duration": 328_493_000u64,
        "eval_count": eval_count, "eval_duration": 552_222_000u64,
    })
    .to_string()
}

fn prompt_tokens(request: &Value) -> u64 {
    let chars: usize = request
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .map(|m| m.get("content").map_or(0, |c| c.to_string().len()))
                .sum()
        })
        .unwrap_or(0);
    (chars as u64 / 4).max(1)
}

fn split(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        current.push(c);
        if current.len() >= 12 {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    out
}

fn ndjson(lines: Vec<String>, drop_after: Option<usize>) -> Response {
    let stream = futures::stream::iter(lines.into_iter().enumerate().map(move |(i, line)| {
        if drop_after.is_some_and(|n| i >= n) {
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "mock: connection dropped",
            ))
        } else {
            Ok::<Bytes, std::io::Error>(Bytes::from(format!("{line}\n")))
        }
    }));
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    resp
}

fn fallback(request: &Value) -> OllamaReply {
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
    let first_tool = request.get("tools").and_then(Value::as_array).and_then(|t| t.first());
    if let Some(tool) = first_tool.filter(|_| last_role != "tool") {
        let name = tool.pointer("/function/name").and_then(Value::as_str).unwrap_or("tool");
        let params = tool.pointer("/function/parameters").cloned().unwrap_or(json!({}));
        return OllamaReply::ToolCalls(vec![(name.to_owned(), instance_of(&params, &params, 0))]);
    }
    if let Some(schema) = request.get("format").filter(|f| f.is_object()) {
        return OllamaReply::Text(instance_of(schema, schema, 0).to_string());
    }
    let tool_results: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|m| m.get("content").and_then(Value::as_str).map(str::to_owned))
        .collect();
    if !tool_results.is_empty() {
        return OllamaReply::Text(format!("The tool answered: {}", tool_results.join(", ")));
    }
    let question = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    OllamaReply::Text(format!("You said: {question}"))
}
