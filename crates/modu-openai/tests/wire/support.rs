//! Helpers the wire tests share: a client for the mock server, hand-built chunks and SSE
//! replies, a one-line request, and a stream folded into its events and response.

use futures::StreamExt;
use modu_core::{ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, Message, ModelError};
use modu_openai::OpenAiClient;
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

pub(crate) fn client(server: &MockOpenAiServer) -> OpenAiClient {
    OpenAiClient::new(server.base_url(), "mock-model").unwrap()
}

pub(crate) fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

pub(crate) fn usage_chunk(prompt: u64, completion: u64) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
    .to_string()
}

pub(crate) fn sse(events: Vec<String>) -> MockReply {
    MockReply::RawSse {
        events,
        drop_after: None,
    }
}

/// Streams a request and folds the events, returning them too.
pub(crate) async fn stream_fold(
    model: &OpenAiClient,
    request: ChatRequest,
) -> (Vec<ChatEvent>, Result<ChatResponse, ModelError>) {
    let mut stream = match model.stream(request).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Err(e)),
    };
    let mut events = Vec::new();
    let mut builder = ChatResponseBuilder::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                events.push(ev.clone());
                builder.push(ev);
            }
            Err(e) => return (events, Err(e)),
        }
    }
    (events, builder.finish())
}

pub(crate) fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}
