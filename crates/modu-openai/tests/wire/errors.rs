//! Error answers and transport failures: rate limits and `Retry-After`, context-length errors
//! of vLLM and llama.cpp, authentication, unknown models, server errors, refused connections,
//! timeouts, and a dropped stream closing its connection.

use std::time::{Duration, Instant};

use futures::StreamExt;
use modu_agent::{Agent, RetryConfig};
use modu_core::{ChatEvent, ChatModel, ModelError};
use modu_openai::OpenAiClient;
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::json;

use crate::support::{chunk, client, hi};

#[tokio::test]
async fn rate_limit_with_retry_after_is_honoured_by_the_agent_retry() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 429,
        body: json!({"error": {"message": "slow down", "type": "rate_limit_error"}}),
        headers: vec![("Retry-After".into(), "1".into())],
    });
    // The fallback answers the retry.
    let agent: Agent = Agent::builder(client(&server))
        .retry(RetryConfig::new(3).with_backoff(Duration::from_millis(10), Duration::from_millis(20)))
        .build()
        .unwrap();
    let started = Instant::now();
    let result = agent.run("hello").await;
    let elapsed = started.elapsed();
    assert_eq!(
        result.output().map(String::as_str),
        Some("You said: hello"),
        "{:?}",
        result.error()
    );
    assert_eq!(server.requests().len(), 2, "one 429, one success");
    assert!(
        elapsed >= Duration::from_millis(950),
        "the retry waited Retry-After (1 s), not the 10 ms backoff: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(5));
}

#[tokio::test]
async fn rate_limit_maps_to_rate_limited_with_the_wait() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 429,
        body: json!({"error": {"message": "slow down"}}),
        headers: vec![("Retry-After".into(), "7".into())],
    });
    let err = client(&server).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::RateLimited { retry_after: Some(d) } if d == Duration::from_secs(7)));
    assert!(err.is_retryable());

    server.push(MockReply::Error {
        status: 408,
        body: json!({"error": {"message": "request timeout"}}),
        headers: vec![],
    });
    let err = client(&server).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Status { status: 408, .. }), "{err:?}");
    assert!(err.is_retryable());
}

/// OpenAI answers 429 when the account's credit or spending limit is used up too (code
/// `insufficient_quota`): waiting does not help, so it is not retried, and the message says
/// what to do.
#[tokio::test]
async fn an_exhausted_quota_is_not_retried_and_keeps_its_message() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 429,
        body: json!({"error": {
            "message": "You exceeded your current quota, please check your plan and billing details.",
            "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
        headers: vec![],
    });
    let agent: Agent = Agent::builder(client(&server))
        .retry(RetryConfig::new(3).with_backoff(Duration::from_millis(10), Duration::from_millis(20)))
        .build()
        .unwrap();
    let result = agent.run("hello").await;
    assert!(result.output().is_none(), "{:?}", result.output());
    assert_eq!(server.requests().len(), 1, "no retry of an exhausted quota");
    let err = result.error().map(ToString::to_string).unwrap_or_default();
    assert!(err.contains("exceeded your current quota"), "{err}");
}

#[tokio::test]
async fn context_length_errors_from_vllm_and_llama_cpp() {
    let server = MockOpenAiServer::start().await.unwrap();
    // vLLM (OpenAI-style error object at the top level).
    server.push(MockReply::Error {
        status: 400,
        body: json!({"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4900 in the messages, 100 in the completion). Please reduce the length of the messages or completion.", "type": "BadRequestError", "param": null, "code": 400}),
        headers: vec![],
    });
    // llama.cpp's server.
    server.push(MockReply::Error {
        status: 400,
        body: json!({"error": {"code": 400, "message": "request (6022 tokens) exceeds the available context size (4096 tokens), try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}),
        headers: vec![],
    });
    // Another 400 is not a context error.
    server.push(MockReply::Error {
        status: 400,
        body: json!({"error": {"message": "'messages' must not be empty", "type": "invalid_request_error"}}),
        headers: vec![],
    });
    let c = client(&server);
    for who in ["vllm", "llama.cpp"] {
        let err = c.stream(hi()).await.err().unwrap();
        match err {
            ModelError::ContextLengthExceeded { message } => assert!(!message.is_empty(), "{who}"),
            other => panic!("{who}: {other:?}"),
        }
    }
    let err = c.complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Status { status: 400, .. }), "{err:?}");
    assert!(!err.is_retryable());
}

/// LiteLLM's proxy names its context error by its exception class, whatever the provider
/// behind it said (Anthropic's "prompt is too long: N tokens > M maximum").
#[tokio::test]
async fn litellms_context_window_error_is_a_context_length_error() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 400,
        body: json!({"error": {"message": "litellm.ContextWindowExceededError: litellm.BadRequestError: AnthropicError - {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 209303 tokens > 200000 maximum\"}}\nReceived Model Group=claude-3-5-sonnet", "type": null, "param": null, "code": "400"}}),
        headers: vec![],
    });
    let err = client(&server).complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::ContextLengthExceeded { .. }), "{err:?}");
}

#[tokio::test]
async fn api_key_is_sent_and_a_missing_key_is_an_authentication_error() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.require_api_key("sk-test");
    let err = client(&server).stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Authentication { status: 401, .. }), "{err:?}");
    assert!(!err.is_retryable());
    let wrong = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .api_key("sk-wrong")
        .build()
        .unwrap();
    assert!(matches!(
        wrong.complete(hi()).await,
        Err(ModelError::Authentication { .. })
    ));
    let keyed = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .api_key("sk-test")
        .header("X-Route", "blue")
        .build()
        .unwrap();
    assert!(keyed.complete(hi()).await.is_ok());
    let headers = server.request_headers();
    let last = headers.last().unwrap();
    assert_eq!(last["authorization"], "Bearer sk-test");
    assert_eq!(last["x-route"], "blue");
    assert!(!format!("{keyed:?}").contains("sk-test"), "Debug never shows the key");
}

#[tokio::test]
async fn unknown_model_is_model_not_found() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 404,
        body: json!({"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError", "code": 404}}),
        headers: vec![],
    });
    let err = client(&server).with_model("nope").stream(hi()).await.err().unwrap();
    match err {
        ModelError::ModelNotFound { model, message } => {
            assert_eq!(model, "nope");
            assert!(message.contains("does not exist"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn server_errors_are_retryable_statuses() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 503,
        body: json!({"error": {"message": "overloaded"}}),
        headers: vec![("Retry-After".into(), "2".into())],
    });
    let err = client(&server).stream(hi()).await.err().unwrap();
    assert!(
        matches!(err, ModelError::Status { status: 503, retry_after: Some(d), .. } if d == Duration::from_secs(2)),
        "{err:?}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn connection_refused_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let c = OpenAiClient::new(format!("http://127.0.0.1:{port}/v1"), "m").unwrap();
    let err = c.stream(hi()).await.err().unwrap();
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(matches!(c.list_models().await, Err(ModelError::Transport { .. })));
}

#[tokio::test]
async fn a_request_timeout_is_a_timeout_error() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Delayed(
        Duration::from_secs(3),
        Box::new(MockReply::Text("late".into())),
    ));
    let c = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .request_timeout(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = c.complete(hi()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Timeout(d) if d == Duration::from_millis(200)),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_timeout_names_the_timeout_that_fired() {
    // The read timeout (a silence) fires long before the whole request's: the error says the
    // read timeout's 300 ms, not the request timeout's 30 s.
    let (url, _closed) = slow_sse_server().await;
    let c = OpenAiClient::builder()
        .base_url(url)
        .model("m")
        .read_timeout(Some(Duration::from_millis(300)))
        .request_timeout(Some(Duration::from_secs(30)))
        .build()
        .unwrap();
    let mut stream = c.stream(hi()).await.unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    let err = stream.next().await.unwrap().unwrap_err();
    assert!(
        matches!(err, ModelError::Timeout(d) if d == Duration::from_millis(300)),
        "{err:?}"
    );

    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Delayed(
        Duration::from_secs(3),
        Box::new(MockReply::Text("late".into())),
    ));
    let c = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("m")
        .read_timeout(Some(Duration::from_millis(200)))
        .request_timeout(Some(Duration::from_secs(30)))
        .build()
        .unwrap();
    let err = c.complete(hi()).await.unwrap_err();
    assert!(
        matches!(err, ModelError::Timeout(d) if d == Duration::from_millis(200)),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_404_that_names_no_model_is_a_wrong_endpoint_not_an_unknown_model() {
    // llama.cpp's answer to a path it does not serve (a base URL without its /v1, or with a
    // typo): the model is not the problem, and the error says which URL was not found.
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::Error {
        status: 404,
        body: json!({"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}}),
        headers: vec![],
    });
    let url = server.base_url().replace("http://", "http://user:pw-secret@");
    let c = OpenAiClient::new(url, "m").unwrap();
    let err = c.complete(hi()).await.unwrap_err();
    match &err {
        ModelError::Status { status: 404, body, .. } => {
            assert!(body.contains("File Not Found"), "{body}");
            assert!(body.contains("/v1/chat/completions"), "{body}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(!err.to_string().contains("pw-secret"), "{err}");
}

/// A server that sends one SSE event, then keeps the connection open and reports when the
/// client closes it.
async fn slow_sse_server() -> (String, tokio::sync::oneshot::Receiver<Duration>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        // Read the request head and body (Content-Length).
        loop {
            let n = sock.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some(head_end) = text.find("\r\n\r\n") {
                let len = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if got.len() >= head_end + 4 + len {
                    break;
                }
            }
        }
        let event = format!("data: {}\n\n", chunk(json!({"content": "first"}), None));
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        sock.write_all(head.as_bytes()).await.unwrap();
        sock.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
            .await
            .unwrap();
        sock.flush().await.unwrap();
        let sent = Instant::now();
        // Never send more; wait for the client to hang up.
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = tx.send(sent.elapsed());
    });
    (url, rx)
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let (url, closed) = slow_sse_server().await;
    let c = OpenAiClient::new(url, "m").unwrap();
    let mut stream = c.stream(hi()).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, ChatEvent::TextDelta { text: "first".into() });
    drop(stream);
    let after = tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the server saw the connection close")
        .unwrap();
    assert!(after < Duration::from_secs(5));
}
