//! `FallbackModel` over real `OpenAiClient`s: a primary whose port refuses connections, and a
//! primary answering 503 with `Retry-After` while the circuit breaker is on. The secondary is a
//! `MockOpenAiServer`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use modu_agent::{Agent, CircuitBreaker, FallbackModel};
use modu_core::{AgentEvent, ChatEvent, ChatModel, ChatRequest, CollectingEventSink, Message};
use modu_openai::OpenAiClient;
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A base URL nothing listens on: a port bound, then released.
fn refused_url() -> Result<String, std::io::Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    drop(listener);
    Ok(format!("http://127.0.0.1:{port}/v1"))
}

/// `(model, answered_by)` of every `ModelCallFinished`.
fn finished(sink: &CollectingEventSink) -> Vec<(String, Option<String>)> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ModelCallFinished { model, answered_by, .. } => Some((model, answered_by)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_primary_that_refuses_connections_falls_back_to_the_secondary() -> TestResult {
    let secondary = MockOpenAiServer::start().await?;
    secondary.push(MockReply::Text("hello from the secondary".into()));
    secondary.push(MockReply::Text("streamed from the secondary".into()));
    let model = FallbackModel::new(OpenAiClient::new(refused_url()?, "primary-model")?)
        .with_fallback(OpenAiClient::new(secondary.base_url(), "secondary-model")?);
    let model: Arc<dyn ChatModel> = Arc::new(model);
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(Arc::clone(&model)).event_sink(sink.clone()).build()?;

    let result = agent.run("hi").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("hello from the secondary"),
        "{:?}",
        result.error()
    );
    assert_eq!(
        finished(&sink),
        vec![("primary-model".to_owned(), Some("secondary-model".to_owned()))]
    );
    let usage = result
        .report()
        .usage_by_model
        .get("secondary-model")
        .ok_or("no usage for the secondary")?;
    assert_eq!(usage.requests, 1);
    assert!(usage.input_tokens > 0, "{usage:?}");
    assert!(
        !result.report().usage_by_model.contains_key("primary-model"),
        "{:?}",
        result.report().usage_by_model
    );
    assert_eq!(secondary.requests().len(), 1);

    // Streamed: the answer starts by naming the secondary.
    let mut stream = model.stream(ChatRequest::new(vec![Message::user("hi")])).await?;
    let first = stream.next().await.ok_or("an empty stream")??;
    assert_eq!(
        first,
        ChatEvent::Model {
            name: "secondary-model".into()
        }
    );
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        if let ChatEvent::TextDelta { text: t } = event? {
            text.push_str(&t);
        }
    }
    assert_eq!(text, "streamed from the secondary");
    Ok(())
}

/// Deterministic time: the window is left by advancing tokio's clock (paused only between the
/// runs, so the sockets of the runs see real time).
#[tokio::test]
async fn a_503_with_retry_after_opens_the_circuit_for_that_long() -> TestResult {
    let primary = MockOpenAiServer::start().await?;
    primary.push(MockReply::Error {
        status: 503,
        body: json!({"error": {"message": "down for maintenance", "type": "server_error"}}),
        headers: vec![("Retry-After".into(), "30".into())],
    });
    primary.push(MockReply::Text("the primary is back".into()));
    let secondary = MockOpenAiServer::start().await?;
    secondary.push(MockReply::Text("secondary 1".into()));
    secondary.push(MockReply::Text("secondary 2".into()));
    let model = FallbackModel::new(OpenAiClient::new(primary.base_url(), "primary-model")?)
        .with_fallback(OpenAiClient::new(secondary.base_url(), "secondary-model")?)
        .with_circuit_breaker(CircuitBreaker::default());
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model).event_sink(sink.clone()).build()?;

    // Run 1: the primary answers 503 (Retry-After: 30 s), the secondary answers.
    let result = agent.run("one").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("secondary 1"),
        "{:?}",
        result.error()
    );
    assert_eq!(primary.requests().len(), 1);

    // Run 2, within the window: the primary is not asked at all.
    let result = agent.run("two").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("secondary 2"),
        "{:?}",
        result.error()
    );
    assert_eq!(primary.requests().len(), 1, "the primary is skipped during Retry-After");

    // After the window the primary is tried again, and answers.
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(31)).await;
    tokio::time::resume();
    let result = agent.run("three").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("the primary is back"),
        "{:?}",
        result.error()
    );
    assert_eq!(primary.requests().len(), 2);
    assert_eq!(secondary.requests().len(), 2);
    let answered: Vec<Option<String>> = finished(&sink).into_iter().map(|(_, by)| by).collect();
    let name = |s: &str| Some(s.to_owned());
    assert_eq!(
        answered,
        vec![name("secondary-model"), name("secondary-model"), name("primary-model")]
    );
    assert_eq!(
        result.report().usage_by_model.keys().collect::<Vec<_>>(),
        vec!["primary-model"]
    );
    Ok(())
}

#[tokio::test]
async fn a_text_only_primary_hands_an_image_to_the_vision_model_behind_it() -> TestResult {
    let primary = MockOpenAiServer::start().await?;
    let vision = MockOpenAiServer::start().await?;
    vision.push(MockReply::Text("a red square".into()));
    let text_only = OpenAiClient::builder()
        .base_url(primary.base_url())
        .model("text-model")
        .text_only()
        .build()?;
    let model = FallbackModel::new(text_only).with_fallback(OpenAiClient::new(vision.base_url(), "vision-model")?);
    // The chain takes what any of its models takes.
    assert!(model.input_modalities().accepts(modu_core::Modality::Image));
    let request = ChatRequest::new(vec![Message::user_parts(vec![
        modu_core::ContentPart::text("What is this?"),
        modu_core::ContentPart::image_url("https://example.com/square.png"),
    ])]);
    let answer = model.complete(request).await?;
    assert_eq!(answer.message.text(), "a red square");
    assert_eq!(answer.model.as_deref(), Some("vision-model"));
    assert!(
        primary.requests().is_empty(),
        "the text-only model refused before sending"
    );
    assert_eq!(vision.requests()[0]["messages"][0]["content"][1]["type"], "image_url");
    Ok(())
}

/// An exhausted quota (OpenAI's 429 `insufficient_quota`) is not retried on the primary, but
/// the next model is asked: another account or server may have credit.
#[tokio::test]
async fn an_exhausted_quota_on_the_primary_falls_back_to_the_secondary() -> TestResult {
    let primary = MockOpenAiServer::start().await?;
    primary.push(MockReply::Error {
        status: 429,
        body: json!({"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota",
                               "param": null, "code": "insufficient_quota"}}),
        headers: vec![],
    });
    let secondary = MockOpenAiServer::start().await?;
    secondary.push(MockReply::Text("hello from the secondary".into()));
    let model = FallbackModel::new(OpenAiClient::new(primary.base_url(), "primary-model")?)
        .with_fallback(OpenAiClient::new(secondary.base_url(), "secondary-model")?);
    let answer = model.complete(ChatRequest::new(vec![Message::user("hi")])).await?;
    assert_eq!(answer.message.text(), "hello from the secondary");
    assert_eq!(primary.requests().len(), 1);
    Ok(())
}
