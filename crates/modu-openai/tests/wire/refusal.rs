//! OpenAI's refusals: a model that declines (structured outputs) answers in `refusal`, with
//! `content` null.

use modu_core::{ChatModel, FinishReason};
use modu_testing::MockOpenAiServer;
use modu_testing::MockReply;
use serde_json::json;

use crate::support::{chunk, client, hi, sse, stream_fold};

const REFUSAL: &str = "I'm sorry, I cannot assist with that request.";

#[tokio::test]
async fn a_refusal_is_the_answers_text_whole_and_streamed() {
    let server = MockOpenAiServer::start().await.unwrap();
    server.push(MockReply::RawJson(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
                     "message": {"role": "assistant", "content": null, "refusal": REFUSAL}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 10, "total_tokens": 19}
    })));
    let r = client(&server).complete(hi()).await.unwrap();
    assert_eq!(r.message.text(), REFUSAL);
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));

    server.push(sse(vec![
        chunk(json!({"role": "assistant", "content": null, "refusal": ""}), None),
        chunk(json!({"refusal": "I'm sorry, "}), None),
        chunk(json!({"refusal": "I cannot assist with that request."}), None),
        chunk(json!({}), Some("stop")),
        "[DONE]".into(),
    ]));
    let (_, r) = stream_fold(&client(&server), hi()).await;
    assert_eq!(r.unwrap().message.text(), REFUSAL);
}
