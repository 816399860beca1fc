//! The client's credentials (API key, configured header values, base-URL user info) never show
//! in its `Debug`, in the `ModelError`s it returns, or in the `AgentError` of a run, even when
//! the server echoes them back in its error bodies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use modu_agent::{Agent, RetryConfig};
use modu_core::{ChatModel, ChatRequest, Message, ModelError};
use modu_openai::OpenAiClient;
use serde_json::json;

/// Every secret of the tests holds this word, so one search finds any of them (or a part).
const MARK: &str = "SECRET";
const KEY: &str = "sk-test-SECRET-KEY-0123456789";
const GATEWAY: &str = "Bearer gw-SECRET-TOKEN-42";
const ORG: &str = "org-SECRET-777";

/// What the echo server says about the credentials it received.
fn echo(headers: &HeaderMap) -> String {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    format!(
        "rejected: authorization={}; x-gateway-token={}; x-org={}",
        get("authorization"),
        get("x-gateway-token"),
        get("x-org")
    )
}

/// A server that echoes the credentials back. The first path segment picks the answer:
/// `/401/…` and `/500/…` an error status with an OpenAI error body, `/text500/…` a plain-text
/// 500, `/long/…` a 500 whose body is long enough that the key sits across the 2,000-byte cut,
/// `/sse/…` a 200 stream with an error event, `/badjson/…` a 200 stream with a chunk that is
/// not JSON.
async fn echo_server() -> String {
    async fn handle(uri: Uri, headers: HeaderMap) -> Response {
        let said = echo(&headers);
        let first = uri
            .path()
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let error = json!({"error": {"message": said, "type": "authentication_error", "code": 401}});
        match first.as_str() {
            "401" => (StatusCode::UNAUTHORIZED, axum::Json(error)).into_response(),
            "500" => (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error)).into_response(),
            "text500" => (StatusCode::INTERNAL_SERVER_ERROR, said).into_response(),
            "long" => {
                // The key starts 1,990 bytes in: a cut at 2,000 bytes would keep its first 10.
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
                let key = auth.strip_prefix("Bearer ").unwrap_or(auth);
                let body = format!("{}{key} and more", "x".repeat(1990));
                (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
            }
            "sse" | "badjson" => {
                let data = if first == "sse" {
                    json!({"error": {"message": said, "code": 500}}).to_string()
                } else {
                    format!("{{not json: {said}")
                };
                let mut resp = Response::new(Body::from(format!("data: {data}\n\n")));
                resp.headers_mut()
                    .insert(header::CONTENT_TYPE, "text/event-stream".parse().unwrap());
                resp
            }
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, Router::new().fallback(handle)).await.unwrap() });
    format!("http://{addr}")
}

fn client(root: &str, path: &str) -> OpenAiClient {
    OpenAiClient::builder()
        .base_url(format!("{root}/{path}/v1"))
        .model("m")
        .api_key(KEY)
        .header("X-Gateway-Token", GATEWAY)
        .header("X-Org", ORG)
        .build()
        .unwrap()
}

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

/// The error's Display and Debug hold no secret, and show the mask (so the server did echo).
fn assert_masked(err: &ModelError) {
    let display = err.to_string();
    let debug = format!("{err:?}");
    assert!(!display.contains(MARK), "Display leaks a secret: {display}");
    assert!(!debug.contains(MARK), "Debug leaks a secret: {debug}");
    assert!(display.contains("***"), "the echoed secrets are masked: {display}");
}

async fn stream_error(model: &OpenAiClient) -> ModelError {
    match model.stream(hi()).await {
        Err(e) => e,
        Ok(mut s) => loop {
            match s.next().await {
                Some(Err(e)) => break e,
                Some(Ok(_)) => {}
                None => panic!("the stream ended without an error"),
            }
        },
    }
}

#[test]
fn debug_of_builder_and_client_shows_no_credentials() {
    let builder = OpenAiClient::builder()
        .base_url("http://alice-SECRET:pa55-SECRET@127.0.0.1:9/v1")
        .model("m")
        .api_key(KEY)
        .header("X-Gateway-Token", GATEWAY)
        .header("X-Org", ORG);
    let shown = format!("{builder:?}");
    assert!(!shown.contains(MARK), "{shown}");
    assert!(shown.contains(r#"api_key: Some("***")"#), "{shown}");
    assert!(shown.contains(r#""X-Gateway-Token": "***""#), "{shown}");
    assert!(shown.contains(r#""X-Org": "***""#), "{shown}");
    assert!(shown.contains("http://***@127.0.0.1:9/v1"), "{shown}");

    let client = builder.build().unwrap();
    let shown = format!("{client:?}");
    assert!(!shown.contains(MARK), "{shown}");
    assert!(shown.contains(r#""authorization": "***""#), "{shown}");
    assert!(shown.contains(r#""x-gateway-token": "***""#), "{shown}");
    assert!(shown.contains(r#""x-org": "***""#), "{shown}");
    assert!(shown.contains("http://***@127.0.0.1:9/v1"), "{shown}");
    let pretty = format!("{client:#?}");
    assert!(!pretty.contains(MARK), "{pretty}");

    let counter = modu_openai::VllmTokenCounter::new(&client);
    let shown = format!("{counter:?}");
    assert!(!shown.contains(MARK), "{shown}");
}

#[tokio::test]
async fn a_401_echoing_the_credentials_is_masked_in_complete_stream_and_list_models() {
    let root = echo_server().await;
    let model = client(&root, "401");
    let expected = "rejected: authorization=Bearer ***; x-gateway-token=***; x-org=***";
    for err in [
        model.complete(hi()).await.unwrap_err(),
        stream_error(&model).await,
        model.list_models().await.unwrap_err(),
    ] {
        assert_masked(&err);
        match &err {
            ModelError::Authentication { status: 401, message } => assert_eq!(message, expected),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_500_echoing_the_credentials_is_masked_in_complete_stream_and_list_models() {
    let root = echo_server().await;
    for path in ["500", "text500"] {
        let model = client(&root, path);
        for err in [
            model.complete(hi()).await.unwrap_err(),
            stream_error(&model).await,
            model.list_models().await.unwrap_err(),
        ] {
            assert_masked(&err);
            match &err {
                ModelError::Status { status: 500, body, .. } => {
                    assert!(body.contains("x-org=***"), "{body}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn errors_inside_a_stream_are_masked() {
    let root = echo_server().await;
    let err = stream_error(&client(&root, "sse")).await;
    assert_masked(&err);
    assert!(matches!(err, ModelError::Status { status: 500, .. }), "{err:?}");
    let err = stream_error(&client(&root, "badjson")).await;
    assert_masked(&err);
    assert!(matches!(err, ModelError::InvalidResponse { .. }), "{err:?}");
}

#[tokio::test]
async fn a_key_across_the_body_cut_leaves_no_part_behind() {
    let root = echo_server().await;
    let model = client(&root, "long");
    let err = model.complete(hi()).await.unwrap_err();
    let ModelError::Status { body, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(body.starts_with("xxxx"), "{body}");
    assert!(body.contains("***"), "the key was echoed and masked: {body}");
    assert!(!body.contains("sk-test"), "no first part of the key: {body}");
}

#[tokio::test]
async fn agent_errors_of_a_run_hold_no_credentials() {
    let root = echo_server().await;
    for (path, kind) in [("401", "authentication"), ("500", "status")] {
        let agent: Agent = Agent::builder(client(&root, path))
            .retry(RetryConfig::new(2).with_backoff(Duration::from_millis(1), Duration::from_millis(2)))
            .build()
            .unwrap();
        let result = agent.run("hello").await;
        let err = result.error().expect("the run fails");
        let display = err.to_string();
        let json = serde_json::to_string(&err).unwrap();
        assert!(!display.contains(MARK), "{display}");
        assert!(!json.contains(MARK), "{json}");
        assert!(display.contains("x-org=***"), "{display}");
        assert!(json.contains(&format!(r#""kind":"{kind}""#)), "{json}");
        let debug = format!("{err:?}");
        assert!(!debug.contains(MARK), "{debug}");
    }
}

#[tokio::test]
async fn base_url_user_info_is_masked_in_errors_with_its_basic_form() {
    let root = echo_server().await;
    let with_userinfo = root.replacen("http://", "http://alice-SECRET:pa55-SECRET@", 1);
    let model = OpenAiClient::new(format!("{with_userinfo}/401/v1"), "m").unwrap();
    let err = model.complete(hi()).await.unwrap_err();
    assert_masked(&err);
    // reqwest sent the user info as `Basic base64(user:password)`; its echo is masked too.
    assert!(err.to_string().contains("authorization=Basic ***"), "{err}");

    // A refused connection names the URL: without the user info.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let model = OpenAiClient::new(format!("http://alice-SECRET:pa55-SECRET@127.0.0.1:{port}/v1"), "m").unwrap();
    let err = model.complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::Transport { .. }), "{err:?}");
    let (display, debug) = (err.to_string(), format!("{err:?}"));
    assert!(!display.contains(MARK) && !debug.contains(MARK), "{display} / {debug}");
    assert!(display.contains("http://***@127.0.0.1"), "{display}");

    let err = OpenAiClient::new("http://alice-SECRET:pa55-SECRET@", "m").unwrap_err();
    assert!(!err.to_string().contains(MARK), "{err}");
    // Without a scheme the URL is refused, and its error quotes it without the user info.
    let err = OpenAiClient::new("alice-SECRET:pa55-SECRET@localhost:8000/v1", "m").unwrap_err();
    let (display, debug) = (err.to_string(), format!("{err:?}"));
    assert!(!display.contains(MARK) && !debug.contains(MARK), "{display} / {debug}");
    assert!(display.contains("***@localhost:8000/v1"), "{display}");
    // A password with an unencoded `#` or `?` makes the URL unparsable; it is masked all the same.
    for url in [
        "http://alice-SECRET:pa#55-SECRET@127.0.0.1:8000/v1",
        "http://alice-SECRET:pa?55-SECRET@127.0.0.1:8000/v1",
    ] {
        let err = OpenAiClient::new(url, "m").unwrap_err();
        let (display, debug) = (err.to_string(), format!("{err:?}"));
        assert!(!display.contains(MARK) && !debug.contains(MARK), "{display} / {debug}");
        assert!(display.contains("http://***@127.0.0.1:8000/v1"), "{display}");
    }
}
