//! Usage details: cached and reasoning tokens, streamed and not, added up over a run.

use modu_agent::Agent;
use modu_core::ChatModel;
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

use crate::support::{chunk, client, hi, sse, stream_fold};

/// OpenAI's usage with details, as a reasoning model with a warm prompt cache reports it.
fn detailed_usage() -> Value {
    json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
           "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 192, "audio_tokens": 0,
               "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})
}

#[tokio::test]
async fn cached_and_reasoning_tokens_are_read_streamed_and_not() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(sse(vec![
        chunk(json!({"role": "assistant", "content": "ok"}), None),
        chunk(json!({}), Some("stop")),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
               "usage": detailed_usage()})
        .to_string(),
        "[DONE]".into(),
    ]));
    let (_, streamed) = stream_fold(&client(&server), hi()).await;
    let streamed = streamed.unwrap().usage;
    assert_eq!(
        (streamed.input_tokens, streamed.output_tokens, streamed.total_tokens),
        (2006, 300, 2306)
    );
    assert_eq!((streamed.cached_input_tokens, streamed.reasoning_tokens), (1920, 192));

    server.push(MockReply::RawJson(json!({
        "id": "chatcmpl-2", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": detailed_usage()})));
    let whole = client(&server).complete(hi()).await.unwrap().usage;
    assert_eq!((whole.cached_input_tokens, whole.reasoning_tokens), (1920, 192));

    // vLLM sends `null` details when prefix caching is off; a bare usage has no details.
    server.push(MockReply::RawJson(json!({
        "id": "chatcmpl-3", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, "prompt_tokens_details": null}})));
    let plain = client(&server).complete(hi()).await.unwrap().usage;
    assert_eq!(
        (plain.input_tokens, plain.cached_input_tokens, plain.reasoning_tokens),
        (5, 0, 0)
    );
}

#[tokio::test]
async fn a_run_adds_up_cached_tokens_over_its_requests() {
    let server = MockOpenAiServer::start().await.unwrap();
    let answer = |content: &str| {
        MockReply::RawJson(json!({
            "id": "chatcmpl-r", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": detailed_usage()}))
    };
    server.push(answer("one"));
    server.push(answer("two"));
    let agent = Agent::builder(client(&server)).build().unwrap();
    let first = agent.run("a").await;
    let second = agent.run("b").await;
    assert_eq!(first.usage().cached_input_tokens, 1920);
    assert_eq!((*first.usage() + *second.usage()).cached_input_tokens, 3840);
    assert_eq!(second.usage().reasoning_tokens, 192);
}
