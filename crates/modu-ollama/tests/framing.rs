//! NDJSON framing limits: a line longer than the cap fails the answer with a typed error
//! instead of being buffered without end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use modu_core::{ChatModel, ChatRequest, Message, ModelError};
use modu_ollama::OllamaClient;
use modu_testing::{MockOllamaServer, OllamaReply};
use serde_json::json;

#[tokio::test]
async fn a_line_over_16_mib_is_an_invalid_response() {
    let server = MockOllamaServer::start().await.unwrap();
    let text = json!({"message": {"role": "assistant", "content": "hello"}, "done": false}).to_string();
    let long = json!({"message": {"role": "assistant", "content": "x".repeat(16 << 20)}, "done": true}).to_string();
    server.push(OllamaReply::RawNdjson {
        lines: vec![text, long],
        drop_after: None,
    });
    let client = OllamaClient::new(server.base_url(), "llama3.2").unwrap();
    let mut stream = client
        .stream(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let mut error = None;
    while let Some(event) = stream.next().await {
        if let Err(e) = event {
            error = Some(e);
        }
    }
    let error = error.expect("the long line fails the answer");
    assert!(matches!(error, ModelError::InvalidResponse { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("an NDJSON line is longer than 16777216 bytes"),
        "{error}"
    );
}
