//! Images on Ollama's `/api/chat`: inline images go as the message's `images` (base64), as
//! Ollama documents it; what Ollama cannot take (images by URL, audio, files) and what the
//! model is declared not to take fail before any request.

use modu_core::{ChatModel, ChatRequest, ContentPart, Message, Modality, ModelError};
use modu_ollama::OllamaClient;
use modu_testing::{MockOllamaServer, OllamaReply};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[tokio::test]
async fn inline_images_go_as_the_messages_images() -> TestResult {
    let server = MockOllamaServer::start().await?;
    server.push(OllamaReply::Text("a dot".into()));
    let model = OllamaClient::new(server.base_url(), "llava")?;
    model
        .complete(ChatRequest::new(vec![
            Message::user("hi"),
            Message::user_parts(vec![
                ContentPart::text("what is this?"),
                ContentPart::image_base64("image/png", "iVBORw0KGgo="),
                ContentPart::image_url("data:image/jpeg;base64,/9j/4AAQ"),
            ]),
        ]))
        .await?;
    let request = server.requests().pop().ok_or("no request")?;
    assert_eq!(
        request["messages"],
        json!([
            // A text-only message has no images field, as before.
            {"role": "user", "content": "hi"},
            {"role": "user", "content": "what is this?", "images": ["iVBORw0KGgo=", "/9j/4AAQ"]},
        ])
    );
    Ok(())
}

#[tokio::test]
async fn what_ollama_cannot_take_fails_before_any_request() -> TestResult {
    let server = MockOllamaServer::start().await?;
    let model = OllamaClient::new(server.base_url(), "llava")?;
    let cases = [
        (ContentPart::image_url("https://example.com/cat.png"), Modality::Image),
        (ContentPart::audio_base64("audio/wav", "UklGRg=="), Modality::Audio),
        (
            ContentPart::file_base64("application/pdf", "JVBERi0=", None),
            Modality::File,
        ),
    ];
    for (part, expected) in cases {
        let e = model
            .complete(ChatRequest::new(vec![Message::user_parts(vec![part])]))
            .await
            .err();
        assert!(
            matches!(&e, Some(ModelError::UnsupportedContent { modality: Some(m), .. }) if *m == expected),
            "{e:?}"
        );
    }
    let text_only = OllamaClient::builder()
        .base_url(server.base_url())
        .model("llama3.2")
        .text_only()
        .build()?;
    let image = ChatRequest::new(vec![Message::user_parts(vec![ContentPart::image_base64(
        "image/png",
        "AAAA",
    )])]);
    let e = text_only.stream(image.clone()).await.err();
    assert!(matches!(e, Some(ModelError::UnsupportedContent { .. })), "{e:?}");
    let small = OllamaClient::builder()
        .base_url(server.base_url())
        .model("llava")
        .max_inline_media_bytes(2)
        .build()?;
    assert!(matches!(
        small.complete(image).await.err(),
        Some(ModelError::UnsupportedContent { .. })
    ));
    assert!(server.requests().is_empty(), "nothing was sent");
    Ok(())
}
