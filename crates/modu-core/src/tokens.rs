//! Token counting, for memory policies that keep a request within a context window.

use async_trait::async_trait;

use crate::message::{ContentPart, Message};
use crate::model::{ModelError, ToolDefinition};

/// Counts the tokens a request would take.
#[async_trait]
pub trait TokenCounter: Send + Sync {
    /// Tokens of these messages and tool definitions as the model would see them.
    async fn count_tokens(&self, messages: &[Message], tools: &[ToolDefinition]) -> Result<u64, ModelError>;
}

/// An estimate for servers that cannot count: about one token per `chars_per_token` characters
/// (default 4), plus a few tokens of overhead per message, and 765 tokens for each image, audio
/// or file part (a 1,024 × 1,024 image at OpenAI's high detail; a long PDF or recording takes
/// more, so count those with the server's own counter). It errs on the high side for English
/// and is rough for other scripts, so pair it with a generous safety margin.
#[derive(Clone, Copy, Debug)]
pub struct ApproximateTokenCounter {
    /// Characters per token.
    pub chars_per_token: f64,
    /// Tokens added per message (role markers, separators).
    pub per_message_overhead: u64,
}

impl Default for ApproximateTokenCounter {
    fn default() -> Self {
        ApproximateTokenCounter {
            chars_per_token: 4.0,
            per_message_overhead: 4,
        }
    }
}

impl ApproximateTokenCounter {
    /// The estimate for one text.
    pub fn estimate_text(&self, text: &str) -> u64 {
        let chars = text.chars().count() as f64;
        (chars / self.chars_per_token.max(0.5)).ceil() as u64
    }

    /// The estimate for messages and tools, without awaiting.
    pub fn estimate(&self, messages: &[Message], tools: &[ToolDefinition]) -> u64 {
        let mut total = 0u64;
        for m in messages {
            total += self.per_message_overhead;
            total += self.estimate_text(&m.text());
            let media = m.content.iter().filter(|p| is_media(p)).count() as u64;
            total += media * MEDIA_PART_TOKENS;
            if let Some(reasoning) = m.reasoning() {
                total += self.estimate_text(&reasoning);
            }
            for call in &m.tool_calls {
                total += self.estimate_text(&call.name) + self.estimate_text(&call.arguments) + 2;
            }
        }
        for t in tools {
            total += self.estimate_text(&t.name)
                + self.estimate_text(&t.description)
                + self.estimate_text(&t.parameters.to_string());
        }
        total
    }
}

#[async_trait]
impl TokenCounter for ApproximateTokenCounter {
    async fn count_tokens(&self, messages: &[Message], tools: &[ToolDefinition]) -> Result<u64, ModelError> {
        Ok(self.estimate(messages, tools))
    }
}

/// What [`ApproximateTokenCounter`] counts for one image, audio or file part.
const MEDIA_PART_TOKENS: u64 = 765;

fn is_media(part: &ContentPart) -> bool {
    matches!(
        part,
        ContentPart::Image { .. } | ContentPart::Audio { .. } | ContentPart::File { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Media parts count: a message of one image is not free in a memory budget (it counted
    /// 0 tokens, so compaction and memory policies let any number of images through).
    #[test]
    fn media_parts_count_toward_the_estimate() {
        let counter = ApproximateTokenCounter::default();
        let text = Message::user("look");
        let mut with_image = Message::user("look");
        with_image
            .content
            .push(ContentPart::image_url("https://example.com/cat.png"));
        let plain = counter.estimate(std::slice::from_ref(&text), &[]);
        let media = counter.estimate(std::slice::from_ref(&with_image), &[]);
        assert_eq!(media - plain, MEDIA_PART_TOKENS);
        with_image
            .content
            .push(ContentPart::image_url("https://example.com/dog.png"));
        assert_eq!(counter.estimate(&[with_image], &[]) - plain, 2 * MEDIA_PART_TOKENS);
    }
}
