//! Media on the Chat Completions wire: the exact JSON of user parts and of tool results with
//! media, the checks before a request (declared modalities, the inline size limit), and
//! servers' refusals of media (the mock, and a real llama.cpp with a text-only model).

use std::time::Duration;

use modu_core::{ChatModel, ChatRequest, ContentPart, InputModalities, Message, Modality, ModelError, ToolCall};
use modu_openai::OpenAiClient;
use modu_testing::{MockOpenAiServer, MockReply, service_env};
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A 1x1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";

fn client(server: &MockOpenAiServer) -> Result<OpenAiClient, modu_openai::OpenAiConfigError> {
    OpenAiClient::new(server.base_url(), "mock-model")
}

async fn sent_messages(messages: Vec<Message>) -> Result<Value, Box<dyn std::error::Error>> {
    let server = MockOpenAiServer::start().await?;
    server.push(MockReply::Text("ok".into()));
    client(&server)?.complete(ChatRequest::new(messages)).await?;
    let request = server.requests().pop().ok_or("no request")?;
    Ok(request["messages"].clone())
}

#[tokio::test]
async fn user_parts_go_as_openai_content_parts() -> TestResult {
    let messages = sent_messages(vec![
        Message::system("be brief"),
        Message::user_parts(vec![
            ContentPart::text("what is this?"),
            ContentPart::image_url("https://example.com/cat.png"),
            ContentPart::image_base64("image/png", PNG),
            ContentPart::audio_base64("audio/wav", "UklGRg=="),
            ContentPart::audio_base64("audio/mpeg", "SUQz"),
            ContentPart::file_base64("application/pdf", "JVBERi0=", Some("a.pdf".into())),
        ]),
    ])
    .await?;
    assert_eq!(
        messages,
        json!([
            // Text-only messages keep their plain string content.
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
            ]},
        ])
    );
    Ok(())
}

#[tokio::test]
async fn tool_result_media_follow_the_tool_messages_in_a_user_message() -> TestResult {
    let messages = sent_messages(vec![
        Message::user("look at both"),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new("c1", "snap", "{}"), ToolCall::new("c2", "snap", "{}")],
        ),
        Message::tool_result_parts(
            "c1",
            "snap",
            vec![ContentPart::text("a dot"), ContentPart::image_base64("image/png", PNG)],
            false,
        ),
        Message::tool_result_parts("c2", "snap", vec![ContentPart::image_url("https://x/b.png")], false),
        Message::assistant("two dots"),
    ])
    .await?;
    assert_eq!(
        messages,
        json!([
            {"role": "user", "content": "look at both"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "snap", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "snap", "arguments": "{}"}},
            ]},
            // Tool messages take only text: the text stays, the media follow after the batch.
            {"role": "tool", "content": "a dot", "tool_call_id": "c1"},
            {"role": "tool", "content": "(the result is attached in the next message)", "tool_call_id": "c2"},
            {"role": "user", "content": [
                {"type": "text", "text": "Attachments of the result of tool call c1 (snap):"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}},
                {"type": "text", "text": "Attachments of the result of tool call c2 (snap):"},
                {"type": "image_url", "image_url": {"url": "https://x/b.png"}},
            ]},
            {"role": "assistant", "content": "two dots"},
        ])
    );
    Ok(())
}

#[tokio::test]
async fn a_text_only_model_refuses_media_before_any_request() -> TestResult {
    let server = MockOpenAiServer::start().await?;
    server.push(MockReply::Text("never".into()));
    let model = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("mock-model")
        .text_only()
        .build()?;
    assert_eq!(model.input_modalities(), InputModalities::text_only());
    let request = ChatRequest::new(vec![Message::user_parts(vec![
        ContentPart::text("what is this?"),
        ContentPart::image_url("https://example.com/cat.png"),
    ])]);
    for result in [
        model.complete(request.clone()).await.err(),
        model.stream(request).await.err(),
    ] {
        match result {
            Some(e @ ModelError::UnsupportedContent { .. }) => {
                assert_eq!(e.kind(), "unsupported_content");
                assert!(!e.is_retryable());
                assert!(matches!(
                    e,
                    ModelError::UnsupportedContent {
                        modality: Some(Modality::Image),
                        ..
                    }
                ));
            }
            other => return Err(format!("expected UnsupportedContent, got {other:?}").into()),
        }
    }
    assert!(server.requests().is_empty(), "nothing was sent");
    // Text still goes.
    model.complete(ChatRequest::new(vec![Message::user("hi")])).await?;
    assert_eq!(server.requests().len(), 1);
    Ok(())
}

#[tokio::test]
async fn inline_media_over_the_limit_fail_before_any_request() -> TestResult {
    let server = MockOpenAiServer::start().await?;
    let model = OpenAiClient::builder()
        .base_url(server.base_url())
        .model("mock-model")
        .max_inline_media_bytes(16)
        .build()?;
    let request = ChatRequest::new(vec![Message::user_parts(vec![ContentPart::image_base64(
        "image/png",
        PNG,
    )])]);
    let e = model.complete(request).await.err();
    assert!(
        matches!(&e, Some(ModelError::UnsupportedContent { message, .. }) if message.contains("over the limit of 16")),
        "{e:?}"
    );
    // A URL is a reference: it has no size.
    server.push(MockReply::Text("ok".into()));
    let url = ChatRequest::new(vec![Message::user_parts(vec![ContentPart::image_url(
        "https://x/a.png",
    )])]);
    model.complete(url).await?;
    assert_eq!(server.requests().len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_servers_refusal_of_an_image_is_unsupported_content_not_a_retryable_500() -> TestResult {
    let server = MockOpenAiServer::start().await?;
    // llama.cpp's answer (verbatim) when the model has no vision projector.
    server.push(MockReply::Error {
        status: 500,
        body: json!({"error": {"code": 500, "message": "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj", "type": "server_error"}}),
        headers: Vec::new(),
    });
    let request = ChatRequest::new(vec![Message::user_parts(vec![ContentPart::image_base64(
        "image/png",
        PNG,
    )])]);
    let e = client(&server)?.complete(request).await.err();
    assert!(
        matches!(&e, Some(ModelError::UnsupportedContent { modality: Some(Modality::Image), model, .. }) if model == "mock-model"),
        "{e:?}"
    );
    assert!(e.is_some_and(|e| !e.is_retryable()));
    Ok(())
}

/// Against a real llama.cpp server with a text-only model (`cargo xtask services`): an image
/// part is refused, and the refusal is the typed error.
#[tokio::test]
async fn live_llama_cpp_refuses_an_image_with_unsupported_content() -> TestResult {
    let Some(url) = service_env("MODU_LIVE_OPENAI_URL") else {
        return Ok(());
    };
    let model = OpenAiClient::builder()
        .base_url(url)
        .model("smollm2")
        .request_timeout(Some(Duration::from_secs(120)))
        .build()?;
    let request = ChatRequest::new(vec![Message::user_parts(vec![
        ContentPart::text("What is in this picture?"),
        ContentPart::image_base64("image/png", PNG),
    ])])
    .with_max_tokens(4);
    for result in [
        model.complete(request.clone()).await.err(),
        model.stream(request).await.err(),
    ] {
        match result {
            Some(ModelError::UnsupportedContent {
                modality: Some(Modality::Image),
                message,
                ..
            }) => assert!(message.contains("not supported"), "{message}"),
            other => return Err(format!("expected UnsupportedContent for an image, got {other:?}").into()),
        }
    }
    Ok(())
}
