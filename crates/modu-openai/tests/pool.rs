//! Connection reuse of streamed requests: a stream read to its `[DONE]` gives its connection
//! back to the pool, also when the end of the body arrives after `[DONE]`; and a server that
//! keeps the body open after `[DONE]` does not hold the stream open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use modu_core::{ChatEvent, ChatModel, ChatRequest, ChatResponseBuilder, Message};
use modu_openai::OpenAiClient;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// When the server ends a response's chunked body after its `[DONE]` event.
#[derive(Clone, Copy)]
enum BodyEnd {
    /// This long after `[DONE]`, in a write of its own.
    After(Duration),
    /// Never (the connection stays open).
    Never,
}

/// An HTTP/1.1 keep-alive server that answers every request with a short SSE stream. Returns
/// its base URL and the number of connections it accepted.
async fn sse_server(end: BodyEnd) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve_connection(sock, end));
        }
    });
    (url, accepted)
}

async fn serve_connection(mut sock: tokio::net::TcpStream, end: BodyEnd) {
    let mut got: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        // One request: its head, then Content-Length bytes of body.
        let request_len = loop {
            if let Some(head_end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if got.len() >= head_end + 4 + len {
                    break head_end + 4 + len;
                }
            }
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        };
        got.drain(..request_len);
        let chunk = |delta: serde_json::Value, finish: Option<&str>| {
            json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string()
        };
        let mut body =
            String::from("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
        for data in [
            chunk(json!({"content": "hello"}), None),
            chunk(json!({}), Some("stop")),
            "[DONE]".into(),
        ] {
            let event = format!("data: {data}\n\n");
            body.push_str(&format!("{:x}\r\n{event}\r\n", event.len()));
        }
        if sock.write_all(body.as_bytes()).await.is_err() {
            return;
        }
        match end {
            BodyEnd::After(wait) => {
                tokio::time::sleep(wait).await;
                if sock.write_all(b"0\r\n\r\n").await.is_err() {
                    return;
                }
            }
            BodyEnd::Never => {
                // Hold the connection until the client closes it.
                while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
                return;
            }
        }
    }
}

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

/// Streams one request to its end; returns the answer's text.
async fn stream_text(model: &OpenAiClient) -> String {
    let mut stream = model.stream(hi()).await.unwrap();
    let mut builder = ChatResponseBuilder::default();
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        assert!(!matches!(event, ChatEvent::Usage { .. }));
        builder.push(event);
    }
    builder.finish().unwrap().message.text()
}

#[tokio::test]
async fn streamed_requests_reuse_their_connection_when_the_body_ends_after_done() {
    let (url, accepted) = sse_server(BodyEnd::After(Duration::from_millis(30))).await;
    // Its own pool (the shared one is per process and other tests use it).
    let http = modu_openai::reqwest::Client::builder().build().unwrap();
    let model = OpenAiClient::builder()
        .base_url(url)
        .model("m")
        .http_client(http)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(stream_text(&model).await, "hello");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "every streamed request after the first reuses the pooled connection"
    );
}

#[tokio::test]
async fn a_body_kept_open_after_done_does_not_hold_the_stream() {
    let (url, _) = sse_server(BodyEnd::Never).await;
    let model = OpenAiClient::new(url, "m").unwrap();
    let started = Instant::now();
    let text = tokio::time::timeout(Duration::from_secs(5), stream_text(&model))
        .await
        .expect("the stream ends soon after [DONE]");
    assert_eq!(text, "hello");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}
