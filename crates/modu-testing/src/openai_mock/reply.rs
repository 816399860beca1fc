//! Turns a [`MockReply`] into the HTTP response: a `chat.completion` body, or with `"stream":
//! true` its SSE chunks; error, raw and delayed replies as scripted.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::MockReply;
use super::wire::{chunk, completion_id, short_id, split_text, sse_response, usage_chunk, usage_for};

pub(super) fn respond(request: &Value, reply: MockReply) -> futures::future::BoxFuture<'_, Response> {
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
