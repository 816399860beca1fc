//! The wire encoding: completion ids, `chat.completion.chunk` and usage chunks, text split into
//! deltas, the usage estimate, and the `text/event-stream` response (`data: …` events).

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

pub(super) fn completion_id() -> String {
    format!("chatcmpl-{}", short_id())
}

pub(super) fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

pub(super) fn chunk(id: &str, model: &str, delta: Value, finish: Option<&str>) -> String {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
    .to_string()
}

pub(super) fn usage_chunk(id: &str, model: &str, usage: &Value) -> String {
    json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [], "usage": usage})
        .to_string()
}

/// Splits text into a few pieces on character boundaries (about 16 bytes each).
pub(super) fn split_text(text: &str) -> Vec<String> {
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

pub(super) fn usage_for(request: &Value, answer: &str) -> Value {
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

pub(super) fn sse_response(events: Vec<String>, drop_after: Option<usize>) -> Response {
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
