//! `MockOllamaServer` features the client relies on in tests: large request bodies, and tool
//! calls with scripted ids (duplicate, missing) that reach the client as parsed `ToolCall`s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use modu_core::{ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, Message, ModelError, ToolCall};
use modu_ollama::OllamaClient;
use modu_testing::{MockOllamaServer, OllamaReply};
use serde_json::{Value, json};

fn client(server: &MockOllamaServer) -> OllamaClient {
    OllamaClient::new(server.base_url(), "llama3.2").unwrap()
}

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

async fn streamed(model: &OllamaClient, request: ChatRequest) -> Result<ChatResponse, ModelError> {
    let mut stream = model.stream(request).await?;
    let mut builder = ChatResponseBuilder::default();
    while let Some(ev) = stream.next().await {
        builder.push(ev?);
    }
    builder.finish()
}

async fn answer(server: &MockOllamaServer, reply: OllamaReply, stream: bool) -> ChatResponse {
    server.push(reply);
    let model = client(server);
    if stream {
        streamed(&model, hi()).await.unwrap()
    } else {
        model.complete(hi()).await.unwrap()
    }
}

#[tokio::test]
async fn a_10_mb_tool_argument_is_accepted() {
    const { assert!(MockOllamaServer::DEFAULT_BODY_LIMIT >= 16 * 1024 * 1024) };
    let server = MockOllamaServer::start().await.unwrap();
    let data: String = "abc\"defgh\"".repeat(1024 * 1024);
    let args = json!({ "data": data }).to_string();
    assert!(args.len() > 10 * 1024 * 1024);
    let request = ChatRequest::new(vec![
        Message::user("store this"),
        Message::assistant_tool_calls("", vec![ToolCall::new("call_1", "store", args)]),
        Message::tool_result("call_1", "store", "stored", false),
    ]);
    let response = client(&server).complete(request).await.unwrap();
    assert_eq!(response.message.text(), "The tool answered: stored");
    let received = server.requests();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].pointer("/messages/1/tool_calls/0/function/arguments/data"),
        Some(&Value::String(data))
    );
}

#[tokio::test]
async fn a_body_over_the_configured_limit_is_answered_413() {
    let server = MockOllamaServer::start().await.unwrap();
    server.body_limit(64 * 1024);
    let big = ChatRequest::new(vec![Message::user("x".repeat(100 * 1024))]);
    let err = client(&server).complete(big.clone()).await.unwrap_err();
    assert!(matches!(err, ModelError::Status { status: 413, .. }), "{err:?}");
    assert!(server.requests().is_empty(), "a refused body is not recorded");
    assert_eq!(
        client(&server).complete(hi()).await.unwrap().message.text(),
        "You said: hi"
    );
    server.body_limit(1024 * 1024);
    assert!(client(&server).complete(big).await.is_ok());
}

#[tokio::test]
async fn duplicate_ids_reach_the_client_unchanged() {
    let server = MockOllamaServer::start().await.unwrap();
    for stream in [false, true] {
        let reply = OllamaReply::ToolCallsWithIds(vec![
            (Some("dup".into()), "add".into(), json!({"a": 1})),
            (Some("dup".into()), "mul".into(), json!({"x": 3})),
        ]);
        let r = answer(&server, reply, stream).await;
        assert_eq!(
            r.message.tool_calls,
            vec![
                ToolCall::new("dup", "add", r#"{"a":1}"#),
                ToolCall::new("dup", "mul", r#"{"x":3}"#),
            ],
            "stream: {stream}"
        );
    }
}

#[tokio::test]
async fn missing_ids_reach_the_client_as_distinct_ids_it_makes() {
    let server = MockOllamaServer::start().await.unwrap();
    for stream in [false, true] {
        let reply = || {
            OllamaReply::ToolCallsWithIds(vec![
                (None, "a".into(), json!({})),
                (None, "b".into(), json!({"k": "v"})),
                (Some("given".into()), "c".into(), json!({})),
            ])
        };
        let first = answer(&server, reply(), stream).await.message.tool_calls;
        let second = answer(&server, reply(), stream).await.message.tool_calls;
        let names: Vec<&str> = first.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(first[1].arguments, r#"{"k":"v"}"#);
        assert_eq!(first[2].id, "given");
        let mut made: Vec<&str> = first[..2].iter().chain(&second[..2]).map(|c| c.id.as_str()).collect();
        assert!(made.iter().all(|id| !id.is_empty() && *id != "given"), "{made:?}");
        made.sort_unstable();
        made.dedup();
        assert_eq!(
            made.len(),
            4,
            "made ids are unique, across answers too (stream: {stream})"
        );
    }
    // The classic variant (Ollama's documented shape, no ids) gets ids from the client too.
    let r = answer(
        &server,
        OllamaReply::ToolCalls(vec![("a".into(), json!({})), ("b".into(), json!({}))]),
        true,
    )
    .await;
    let ids: Vec<&str> = r.message.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert!(ids.len() == 2 && ids[0] != ids[1] && !ids[0].is_empty(), "{ids:?}");
}

#[tokio::test]
async fn the_wire_has_ids_only_where_scripted() {
    let server = MockOllamaServer::start().await.unwrap();
    let post = |stream: bool| {
        let body = json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
        modu_ollama::reqwest::Client::new()
            .post(format!("{}/api/chat", server.base_url()))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    server.push(OllamaReply::ToolCalls(vec![("a".into(), json!({}))]));
    let text = post(true).await.unwrap().text().await.unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let call = first.pointer("/message/tool_calls/0").unwrap();
    assert!(call.get("id").is_none(), "Ollama's documented shape has no id: {call}");
    assert_eq!(call.pointer("/function/name"), Some(&json!("a")));

    server.push(OllamaReply::ToolCallsWithIds(vec![
        (Some("call_x".into()), "a".into(), json!({})),
        (None, "b".into(), json!({})),
    ]));
    let v: Value = serde_json::from_str(&post(false).await.unwrap().text().await.unwrap()).unwrap();
    let calls = v.pointer("/message/tool_calls").unwrap();
    assert_eq!(calls[0]["id"], "call_x");
    assert_eq!(calls[0].pointer("/function/index"), Some(&json!(0)));
    assert!(calls[1].get("id").is_none(), "{calls}");
    assert_eq!(calls[1].pointer("/function/index"), Some(&json!(1)));
}

#[tokio::test]
async fn complete_sends_stream_false_by_default_and_stream_true_with_always_stream() {
    let server = MockOllamaServer::start().await.unwrap();
    server.push(OllamaReply::Text("plain answer".into()));
    let plain = client(&server).complete(hi()).await.unwrap();
    let streaming = OllamaClient::builder()
        .base_url(server.base_url())
        .model("llama3.2")
        .always_stream(true)
        .build()
        .unwrap();
    server.push(OllamaReply::Text("folded answer, in several lines".into()));
    let folded = streaming.complete(hi()).await.unwrap();
    assert_eq!(plain.message.text(), "plain answer");
    assert_eq!(folded.message.text(), "folded answer, in several lines");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["stream"], json!(false));
    assert_eq!(requests[1]["stream"], json!(true));
}
