//! The server: [`MockOpenAiServer`] and its state, the routes, and the chat handler that checks
//! the API key and body limit, records the request and answers with the next reply.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::MockReply;
use super::fallback::fallback_reply;
use super::reply::respond;

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
