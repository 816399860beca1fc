//! Conversation memory policies: what part of a session's history the model sees.
//!
//! A policy shapes only the model's view. The stored conversation and `RunReport::messages`
//! stay whole. History is handled in *turns* — a user message and everything up to the next
//! user message (the assistant's tool calls, their results, the answer) — so a policy never
//! separates a tool call from its result.
//!
//! - [`KeepAll`]: the whole history (the default).
//! - [`RecentTurns`]: the last N complete turns.
//! - [`TokenBudgetPolicy`]: the newest turns that fit a token budget; system instructions and
//!   the current run always stay, and if they alone do not fit the run fails with
//!   [`AgentError::MemoryOverflow`] before any model call.
//! - [`SummarizingPolicy`]: recent turns verbatim, older turns replaced by a summary that a
//!   model writes, cached in a [`MemoryStateStore`] and extended incrementally; when the
//!   summarizer fails the policy falls back to the token budget and the run goes on.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::AgentError;
use crate::message::{Message, Role, Usage};
use crate::model::{ChatModel, ChatRequest, ModelError, ToolDefinition};
use crate::store::MemoryStateStore;
use crate::tokens::TokenCounter;

/// What a policy gets to decide on.
#[derive(Debug)]
#[non_exhaustive]
pub struct MemoryInput<'a> {
    /// The session, when the run belongs to one.
    pub session_id: Option<&'a str>,
    /// The system instructions of the request.
    pub instructions: &'a [String],
    /// The session's stored history, oldest first.
    pub history: &'a [Message],
    /// The current run's messages (always kept).
    pub current: &'a [Message],
    /// The tools of the request.
    pub tools: &'a [ToolDefinition],
}

/// What the model will see of the history.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct MemoryView {
    /// The history messages to send, oldest first (a summary comes first, as a system message).
    pub messages: Vec<Message>,
    /// Complete turns kept verbatim.
    pub kept_turns: usize,
    /// Turns left out.
    pub dropped_turns: usize,
    /// Turns replaced by the summary.
    pub summarized_turns: usize,
    /// Whether the summary came from the cache unchanged.
    pub summary_cached: bool,
    /// Whether a summarizer failure made the policy fall back to the token budget.
    pub summary_failed: bool,
    /// Usage of model calls the policy made (summaries); it counts in the run's usage.
    pub usage: Usage,
}

/// Chooses the model's view of a session's history.
#[async_trait]
pub trait ConversationMemoryPolicy: Send + Sync {
    /// A short name for events (`"recent_turns"`, …).
    fn name(&self) -> &str;

    /// The view for the next request.
    async fn select(&self, input: MemoryInput<'_>) -> Result<MemoryView, AgentError>;
}

#[async_trait]
impl<T: ConversationMemoryPolicy + ?Sized> ConversationMemoryPolicy for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn select(&self, input: MemoryInput<'_>) -> Result<MemoryView, AgentError> {
        (**self).select(input).await
    }
}

/// Splits messages into turns: each user message starts a turn. Messages before the first user
/// message form a turn of their own.
pub fn split_turns(messages: &[Message]) -> Vec<&[Message]> {
    let mut turns = Vec::new();
    let mut start = 0;
    for (i, m) in messages.iter().enumerate() {
        if m.role == Role::User && i > start {
            turns.push(&messages[start..i]);
            start = i;
        }
    }
    if start < messages.len() {
        turns.push(&messages[start..]);
    }
    turns
}

fn view_of(turns: &[&[Message]], dropped: usize) -> MemoryView {
    MemoryView {
        messages: turns.iter().flat_map(|t| t.iter().cloned()).collect(),
        kept_turns: turns.len(),
        dropped_turns: dropped,
        ..MemoryView::default()
    }
}

/// The whole history.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepAll;

#[async_trait]
impl ConversationMemoryPolicy for KeepAll {
    fn name(&self) -> &str {
        "keep_all"
    }
    async fn select(&self, input: MemoryInput<'_>) -> Result<MemoryView, AgentError> {
        let turns = split_turns(input.history);
        Ok(view_of(&turns, 0))
    }
}

/// The last `max_turns` complete turns of history (plus, always, the current run).
#[derive(Clone, Copy, Debug)]
pub struct RecentTurns {
    /// Turns of history to keep.
    pub max_turns: usize,
}

impl RecentTurns {
    /// Keeps the last `max_turns` turns.
    pub fn new(max_turns: usize) -> Self {
        RecentTurns { max_turns }
    }
}

#[async_trait]
impl ConversationMemoryPolicy for RecentTurns {
    fn name(&self) -> &str {
        "recent_turns"
    }
    async fn select(&self, input: MemoryInput<'_>) -> Result<MemoryView, AgentError> {
        let turns = split_turns(input.history);
        let skip = turns.len().saturating_sub(self.max_turns);
        Ok(view_of(&turns[skip..], skip))
    }
}

/// A model's context window, split into what the request may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenBudget {
    /// The model's context window.
    pub context_window_tokens: u64,
    /// Tokens kept free for the answer.
    pub reserved_output_tokens: u64,
    /// A margin for counting errors (larger with an approximate counter).
    pub safety_margin_tokens: u64,
}

impl TokenBudget {
    /// A budget.
    pub fn new(context_window_tokens: u64, reserved_output_tokens: u64, safety_margin_tokens: u64) -> Self {
        TokenBudget {
            context_window_tokens,
            reserved_output_tokens,
            safety_margin_tokens,
        }
    }

    /// What the request's input may take: window − reserved output − margin.
    pub fn input_budget(&self) -> u64 {
        self.context_window_tokens
            .saturating_sub(self.reserved_output_tokens)
            .saturating_sub(self.safety_margin_tokens)
    }
}

async fn count(counter: &dyn TokenCounter, messages: &[Message], tools: &[ToolDefinition]) -> Result<u64, AgentError> {
    counter
        .count_tokens(messages, tools)
        .await
        .map_err(|e| AgentError::from_model(&e))
}

/// Tokens of the parts that always stay: instructions, the current run, the tools.
async fn required_tokens(counter: &dyn TokenCounter, input: &MemoryInput<'_>) -> Result<u64, AgentError> {
    let mut required: Vec<Message> = Vec::with_capacity(1 + input.current.len());
    if !input.instructions.is_empty() {
        required.push(Message::system(input.instructions.join("\n\n")));
    }
    required.extend(input.current.iter().cloned());
    count(counter, &required, input.tools).await
}

/// Tokens of the parts that always stay, or [`AgentError::MemoryOverflow`] when they alone
/// exceed the budget (checked before any model call).
async fn required_within_budget(
    counter: &dyn TokenCounter,
    input: &MemoryInput<'_>,
    budget: &TokenBudget,
) -> Result<u64, AgentError> {
    let required = required_tokens(counter, input).await?;
    let available = budget.input_budget();
    if required > available {
        return Err(AgentError::MemoryOverflow {
            message: format!(
                "the instructions, tools and current run need {required} tokens but the input budget is {available}"
            ),
        });
    }
    Ok(required)
}

/// Keeps the newest turns (at most `max_history_turns`) whose tokens fit the budget.
#[derive(Clone)]
pub struct TokenBudgetPolicy {
    /// The budget.
    pub budget: TokenBudget,
    /// How tokens are counted.
    pub counter: Arc<dyn TokenCounter>,
    /// At most this many turns of history, whatever the budget.
    pub max_history_turns: Option<usize>,
}

impl TokenBudgetPolicy {
    /// A token-budget policy.
    pub fn new(budget: TokenBudget, counter: Arc<dyn TokenCounter>) -> Self {
        TokenBudgetPolicy {
            budget,
            counter,
            max_history_turns: None,
        }
    }

    /// Limits the turns of history too.
    pub fn max_history_turns(mut self, n: usize) -> Self {
        self.max_history_turns = Some(n);
        self
    }

    /// The newest turns that fit what is left of the budget after `used` tokens.
    async fn fit(&self, turns: &[&[Message]], used: u64) -> Result<(usize, u64), AgentError> {
        let budget = self.budget.input_budget();
        let mut total = used;
        let mut kept = 0;
        for turn in turns.iter().rev() {
            let t = count(self.counter.as_ref(), turn, &[]).await?;
            if total + t > budget {
                break;
            }
            total += t;
            kept += 1;
        }
        Ok((kept, total))
    }
}

#[async_trait]
impl ConversationMemoryPolicy for TokenBudgetPolicy {
    fn name(&self) -> &str {
        "token_budget"
    }
    async fn select(&self, input: MemoryInput<'_>) -> Result<MemoryView, AgentError> {
        let required = required_within_budget(self.counter.as_ref(), &input, &self.budget).await?;
        let turns = split_turns(input.history);
        let limit = self.max_history_turns.unwrap_or(usize::MAX);
        let candidates = &turns[turns.len().saturating_sub(limit)..];
        let (kept, _) = self.fit(candidates, required).await?;
        let start = turns.len() - kept;
        Ok(view_of(&turns[start..], start))
    }
}

/// Writes summaries of conversation turns.
#[async_trait]
pub trait ConversationSummarizer: Send + Sync {
    /// A summary of `messages`, extending `previous` (a summary of what came before them).
    async fn summarize(&self, previous: Option<&str>, messages: &[Message]) -> Result<(String, Usage), ModelError>;
}

/// A summarizer that asks a model, in bounded requests: messages are fed in chunks of at most
/// `max_input_tokens`, a message larger than that is cut into pieces, and each request extends
/// the summary so far.
pub struct ModelConversationSummarizer {
    model: Arc<dyn ChatModel>,
    counter: Arc<dyn TokenCounter>,
    max_input_tokens: u64,
    max_output_tokens: u32,
}

impl ModelConversationSummarizer {
    /// A summarizer.
    pub fn new(
        model: Arc<dyn ChatModel>,
        counter: Arc<dyn TokenCounter>,
        max_input_tokens: u64,
        max_output_tokens: u32,
    ) -> Self {
        ModelConversationSummarizer {
            model,
            counter,
            max_input_tokens: max_input_tokens.max(64),
            max_output_tokens,
        }
    }

    fn render(m: &Message) -> String {
        let mut s = format!("{}: {}", m.role.as_str(), m.text());
        for call in &m.tool_calls {
            s.push_str(&format!("\n[calls {}({})]", call.name, call.arguments));
        }
        s
    }

    /// Cuts `text` into pieces whose token count is within `limit`.
    async fn pieces(&self, text: &str, limit: u64) -> Result<Vec<String>, ModelError> {
        let whole = self.counter.count_tokens(&[Message::user(text)], &[]).await?;
        if whole <= limit {
            return Ok(vec![text.to_owned()]);
        }
        let chars: Vec<char> = text.chars().collect();
        let parts = whole.div_ceil(limit.max(1)) as usize + 1;
        let size = chars.len().div_ceil(parts).max(1);
        Ok(chars.chunks(size).map(|c| c.iter().collect()).collect())
    }
}

#[async_trait]
impl ConversationSummarizer for ModelConversationSummarizer {
    async fn summarize(&self, previous: Option<&str>, messages: &[Message]) -> Result<(String, Usage), ModelError> {
        // Budget for the transcript in one request: leave room for the prompt and the summary so far.
        let overhead = 64 + u64::from(self.max_output_tokens);
        let limit = self.max_input_tokens.saturating_sub(overhead).max(32);
        let mut chunks: Vec<String> = Vec::new();
        let mut current = String::new();
        for m in messages {
            for piece in self.pieces(&Self::render(m), limit).await? {
                let candidate = if current.is_empty() {
                    piece.clone()
                } else {
                    format!("{current}\n{piece}")
                };
                let n = self
                    .counter
                    .count_tokens(&[Message::user(candidate.as_str())], &[])
                    .await?;
                if n > limit && !current.is_empty() {
                    chunks.push(std::mem::take(&mut current));
                    current = piece;
                } else {
                    current = candidate;
                }
            }
        }
        if !current.is_empty() {
            chunks.push(current);
        }
        let mut summary = previous.map(str::to_owned);
        let mut usage = Usage::default();
        for chunk in chunks {
            let prompt = match &summary {
                Some(s) => format!("Summary of the conversation so far:\n{s}\n\nMore of the conversation:\n{chunk}"),
                None => format!("Conversation:\n{chunk}"),
            };
            let request = ChatRequest::new(vec![
                Message::system(
                    "Summarise the conversation for an assistant that continues it: keep facts, names, numbers, \
                     decisions and open questions; drop chit-chat. Answer with the summary only.",
                ),
                Message::user(prompt),
            ])
            .with_max_tokens(self.max_output_tokens);
            let response = self.model.complete(request).await?;
            usage += response.usage;
            summary = Some(response.message.text());
        }
        Ok((summary.unwrap_or_default(), usage))
    }
}

#[derive(Serialize, Deserialize)]
struct CachedSummary {
    /// How many history messages the summary covers.
    covered: usize,
    /// FNV-1a of those messages' JSON.
    hash: String,
    summary: String,
}

fn hash_messages(messages: &[Message]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for m in messages {
        let json = serde_json::to_string(m).unwrap_or_default();
        for b in json.as_bytes() {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Recent turns verbatim, older turns summarised (see the module docs).
#[derive(Clone)]
pub struct SummarizingPolicy {
    /// The budget.
    pub budget: TokenBudget,
    /// How tokens are counted.
    pub counter: Arc<dyn TokenCounter>,
    /// Who writes summaries.
    pub summarizer: Arc<dyn ConversationSummarizer>,
    /// Where summaries are cached (key `modu:summary:<session>`).
    pub state_store: Arc<dyn MemoryStateStore>,
    /// Turns kept verbatim at most; older ones are summarised.
    pub max_history_turns: usize,
}

impl SummarizingPolicy {
    /// A summarizing policy: history beyond the last `max_history_turns` turns, or beyond the
    /// budget, is summarised by `summarizer`, and summaries are cached in `state_store`.
    pub fn new(
        budget: TokenBudget,
        counter: Arc<dyn TokenCounter>,
        summarizer: Arc<dyn ConversationSummarizer>,
        state_store: Arc<dyn MemoryStateStore>,
        max_history_turns: usize,
    ) -> Self {
        SummarizingPolicy {
            budget,
            counter,
            summarizer,
            state_store,
            max_history_turns,
        }
    }

    fn fallback(&self) -> TokenBudgetPolicy {
        TokenBudgetPolicy {
            budget: self.budget,
            counter: Arc::clone(&self.counter),
            max_history_turns: Some(self.max_history_turns),
        }
    }

    /// The summary of `prefix` (the first messages of the history), from the cache when it
    /// covers exactly this prefix, extended incrementally when it covers the start of it.
    async fn summary_of(&self, session: &str, prefix: &[Message]) -> Result<(String, Usage, bool), AgentError> {
        let key = format!("modu:summary:{session}");
        let cached: Option<CachedSummary> = match self.state_store.get(&key).await {
            Ok(Some(raw)) => serde_json::from_str(&raw).ok(),
            Ok(None) => None,
            Err(e) => return Err(AgentError::from_store("memory_state.get", &e)),
        };
        let target_hash = hash_messages(prefix);
        if let Some(c) = &cached
            && c.covered == prefix.len()
            && c.hash == target_hash
        {
            return Ok((c.summary.clone(), Usage::default(), true));
        }
        let (previous, rest) = match &cached {
            Some(c) if c.covered < prefix.len() && hash_messages(&prefix[..c.covered]) == c.hash => {
                (Some(c.summary.as_str()), &prefix[c.covered..])
            }
            _ => (None, prefix),
        };
        let (summary, usage) = self
            .summarizer
            .summarize(previous, rest)
            .await
            .map_err(|e| AgentError::from_model(&e))?;
        let record = CachedSummary {
            covered: prefix.len(),
            hash: target_hash,
            summary: summary.clone(),
        };
        if let Ok(json) = serde_json::to_string(&record) {
            self.state_store
                .put(&key, &json)
                .await
                .map_err(|e| AgentError::from_store("memory_state.put", &e))?;
        }
        Ok((summary, usage, false))
    }
}

#[async_trait]
impl ConversationMemoryPolicy for SummarizingPolicy {
    fn name(&self) -> &str {
        "summarizing"
    }

    async fn select(&self, input: MemoryInput<'_>) -> Result<MemoryView, AgentError> {
        let required = required_within_budget(self.counter.as_ref(), &input, &self.budget).await?;
        let budget = self.budget.input_budget();
        let turns = split_turns(input.history);
        let Some(session) = input.session_id else {
            return self.fallback().select(input).await;
        };
        // Recent turns verbatim, as many as fit beside a summary (estimated at a quarter of the budget).
        let recent_limit = self.max_history_turns.min(turns.len());
        let candidates = &turns[turns.len() - recent_limit..];
        let summary_reserve = budget / 4;
        let fallback = self.fallback();
        let (kept, _) = fallback.fit(candidates, required + summary_reserve).await?;
        let split = turns.len() - kept;
        if split == 0 {
            return Ok(view_of(&turns, 0));
        }
        let prefix_len: usize = turns[..split].iter().map(|t| t.len()).sum();
        match self.summary_of(session, &input.history[..prefix_len]).await {
            Ok((summary, usage, cached)) => {
                let mut messages = vec![Message::system(format!(
                    "Summary of the earlier conversation:\n{summary}"
                ))];
                messages.extend(turns[split..].iter().flat_map(|t| t.iter().cloned()));
                Ok(MemoryView {
                    messages,
                    kept_turns: kept,
                    dropped_turns: 0,
                    summarized_turns: split,
                    summary_cached: cached,
                    summary_failed: false,
                    usage,
                })
            }
            Err(AgentError::Store { .. }) | Err(AgentError::Model { .. }) => {
                tracing::warn!(session, "summarizer failed; falling back to the token budget");
                let mut view = fallback.select(input).await?;
                view.summary_failed = true;
                Ok(view)
            }
            Err(other) => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    #[test]
    fn turns_keep_tool_calls_with_their_results() {
        let history = vec![
            Message::user("a"),
            Message::assistant_tool_calls("", vec![ToolCall::new("1", "t", "{}")]),
            Message::tool_result("1", "t", "r", false),
            Message::assistant("A"),
            Message::user("b"),
            Message::assistant("B"),
        ];
        let turns = split_turns(&history);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].len(), 4);
        assert_eq!(turns[1].len(), 2);
        assert_eq!(TokenBudget::new(100, 20, 10).input_budget(), 70);
    }
}
