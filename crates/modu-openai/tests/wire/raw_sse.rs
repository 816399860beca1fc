//! Streams whose bytes the mock cannot shape (it writes `data:` events only): a server that
//! answers every chat request with one fixed `text/event-stream` body.

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::post;
use modu_core::ModelError;
use modu_openai::OpenAiClient;
use serde_json::json;

use super::support::{chunk, hi, stream_fold};

/// A server answering `POST /v1/chat/completions` with `body` as an event stream.
async fn raw_sse_server(body: String) -> OpenAiClient {
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let body = body.clone();
            async move { ([(CONTENT_TYPE, "text/event-stream")], body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    OpenAiClient::new(url, "m").unwrap()
}

/// llama.cpp's server before it moved errors into `data:` (releases of early 2025) reports a
/// failure mid-answer as an `error:` field, then ends the stream with `data: [DONE]` as usual:
/// the answer so far is cut, and the stream must fail with the server's message, not end as a
/// complete answer.
#[tokio::test]
async fn llama_cpp_error_field_mid_stream_fails_the_answer() {
    let body = format!(
        "data: {}\n\nerror: {}\n\ndata: [DONE]\n\n",
        chunk(json!({"content": "The capital of"}), None),
        json!({"code": 500, "message": "Input prompt is too big compared to KV size.", "type": "server_error"}),
    );
    let model = raw_sse_server(body).await;
    let (events, r) = stream_fold(&model, hi()).await;
    assert_eq!(events.len(), 1, "the text before the error was delivered: {events:?}");
    let err = r.expect_err("a stream that reported an error is not a complete answer");
    match &err {
        ModelError::Status { status: 500, body, .. } => {
            assert!(body.contains("Input prompt is too big"), "{body}")
        }
        other => panic!("{other:?}"),
    }
    assert!(err.is_retryable());

    // The context-size error of those releases is typed as such.
    let body = format!(
        "error: {}\n\ndata: [DONE]\n\n",
        json!({"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error"}),
    );
    let (_, r) = stream_fold(&raw_sse_server(body).await, hi()).await;
    assert!(matches!(r, Err(ModelError::ContextLengthExceeded { .. })), "{r:?}");

    // A value that is not JSON is the message.
    let body = "error: slot unavailable\n\ndata: [DONE]\n\n".to_owned();
    let (_, r) = stream_fold(&raw_sse_server(body).await, hi()).await;
    let err = r.unwrap_err();
    assert!(err.to_string().contains("slot unavailable"), "{err}");
}
