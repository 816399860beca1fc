//! Errors that must name their cause: the timeout that fired, an endpoint that does not exist
//! (not an unknown model), and a base URL the paths cannot be appended to.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use modu_core::{ChatModel, ChatRequest, Message, ModelError};
use modu_ollama::{OllamaClient, OllamaConfigError};
use modu_testing::{MockOllamaServer, OllamaReply};
use serde_json::json;

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

#[tokio::test]
async fn a_timeout_names_the_timeout_that_fired() {
    // The read timeout (a silence) fires long before the whole request's: the error says the
    // read timeout's 200 ms, not the request timeout's 30 s.
    let server = MockOllamaServer::start().await.unwrap();
    let c = OllamaClient::builder()
        .base_url(server.base_url())
        .model("llama3")
        .read_timeout(Some(Duration::from_millis(200)))
        .request_timeout(Some(Duration::from_secs(30)))
        .build()
        .unwrap();
    for streamed in [false, true] {
        server.push(OllamaReply::Delayed(
            Duration::from_secs(3),
            Box::new(OllamaReply::Text("late".into())),
        ));
        let err = if streamed {
            c.stream(hi()).await.err().unwrap()
        } else {
            c.complete(hi()).await.unwrap_err()
        };
        assert!(
            matches!(err, ModelError::Timeout(d) if d == Duration::from_millis(200)),
            "streamed {streamed}: {err:?}"
        );
    }
}

#[tokio::test]
async fn a_404_that_names_no_model_is_a_wrong_endpoint_not_an_unknown_model() {
    let server = MockOllamaServer::start().await.unwrap();
    // A path the server does not serve (a base URL with a typo): an empty 404.
    let c = OllamaClient::builder()
        .base_url(format!("{}/typo", server.base_url()))
        .model("llama3")
        .build()
        .unwrap();
    let err = c.complete(hi()).await.unwrap_err();
    match &err {
        ModelError::Status { status: 404, body, .. } => assert!(body.contains("/typo/api/chat"), "{body}"),
        other => panic!("{other:?}"),
    }
    assert!(!err.is_retryable());
    // Ollama's own 404 for a model it has not pulled stays ModelNotFound.
    server.push(OllamaReply::Error {
        status: 404,
        body: json!({"error": "model \"llama3\" not found, try pulling it first"}),
    });
    let c = OllamaClient::builder()
        .base_url(server.base_url())
        .model("llama3")
        .build()
        .unwrap();
    let err = c.complete(hi()).await.unwrap_err();
    assert!(matches!(err, ModelError::ModelNotFound { .. }), "{err:?}");
}

#[test]
fn a_base_url_with_a_query_is_refused_without_showing_it() {
    // The paths are appended to the base URL: with a query they would land inside it and
    // every request would fail with a 404.
    for url in ["http://h:11434?key=sk-in-query", "http://h:11434/#sk-in-query"] {
        let err = OllamaClient::builder().base_url(url).model("m").build().unwrap_err();
        assert!(
            matches!(&err, OllamaConfigError::InvalidBaseUrl { reason, .. } if reason.contains("query")),
            "{err:?}"
        );
        assert!(!err.to_string().contains("sk-in-query"), "{err}");
    }
    let err = OllamaClient::builder()
        .base_url("http://")
        .model("m")
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, OllamaConfigError::InvalidBaseUrl { reason, .. } if reason == "has no host"),
        "{err:?}"
    );
}
