//! Compaction inside a run: what keeps a long tool loop within the model's context window.
//!
//! Memory policies shape only the session's history; the current run is sent whole. A
//! [`RunCompaction`] (set with [`AgentBuilder::run_compaction`](crate::AgentBuilder::run_compaction))
//! shapes the run's part of each request once the request would exceed its
//! [`TokenBudget`]'s input budget:
//!
//! - [`RunCompaction::trim`]: the oldest tool results of the run are cut to their first
//!   characters with a marker, oldest first, until the request fits;
//! - [`RunCompaction::summarize`]: the oldest complete tool rounds (an assistant message with
//!   its tool calls and all their results) are replaced by one summary message a
//!   [`ConversationSummarizer`] writes, extended incrementally as more rounds go; when the
//!   summarizer fails, trimming takes over.
//!
//! Either way a tool call is never separated from its result, the newest `keep_recent` tool
//! results (or rounds) are never touched, and only the request changes: the run's messages,
//! the checkpoint and the stored conversation keep the originals. A request that still does not
//! fit fails the run with [`AgentError::MemoryOverflow`] before it is sent. Each compaction is an
//! [`AgentEvent::RunCompacted`](crate::AgentEvent::RunCompacted) event.
//!
//! ```
//! use std::sync::Arc;
//! use modu_agent::compaction::RunCompaction;
//! use modu_agent::{Agent, TokenBudget};
//! use modu_core::ApproximateTokenCounter;
//! # use modu_testing::ScriptedModel;
//! let agent = Agent::builder(ScriptedModel::new().text("hi"))
//!     .run_compaction(RunCompaction::trim(TokenBudget::new(8_192, 1_024, 256), Arc::new(ApproximateTokenCounter::default())))
//!     .build()?;
//! # Ok::<(), modu_core::AgentError>(())
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::AgentError;
use crate::memory::{ConversationSummarizer, TokenBudget};
use crate::message::{Message, Role, Usage};
use crate::model::ToolDefinition;
use crate::tokens::TokenCounter;

/// How a run's messages are compacted to fit a token budget (see the module docs).
#[derive(Clone)]
pub struct RunCompaction {
    budget: TokenBudget,
    counter: Arc<dyn TokenCounter>,
    summarizer: Option<Arc<dyn ConversationSummarizer>>,
    keep_recent: usize,
    keep_chars: usize,
}

impl std::fmt::Debug for RunCompaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunCompaction")
            .field("budget", &self.budget)
            .field("summarize", &self.summarizer.is_some())
            .field("keep_recent", &self.keep_recent)
            .field("keep_chars", &self.keep_chars)
            .finish()
    }
}

impl RunCompaction {
    /// Trims the oldest tool results of the run to fit `budget`, counted with `counter`.
    pub fn trim(budget: TokenBudget, counter: Arc<dyn TokenCounter>) -> Self {
        RunCompaction {
            budget,
            counter,
            summarizer: None,
            keep_recent: 2,
            keep_chars: 200,
        }
    }

    /// Summarises the oldest tool rounds of the run to fit `budget` (trimming when the
    /// summarizer fails).
    pub fn summarize(
        budget: TokenBudget,
        counter: Arc<dyn TokenCounter>,
        summarizer: Arc<dyn ConversationSummarizer>,
    ) -> Self {
        RunCompaction {
            summarizer: Some(summarizer),
            ..Self::trim(budget, counter)
        }
    }

    /// How many of the newest tool results (trim) or rounds (summarize) are never compacted
    /// (default 2).
    pub fn keep_recent(mut self, n: usize) -> Self {
        self.keep_recent = n;
        self
    }

    /// How many characters of a trimmed result stay (default 200).
    pub fn keep_chars(mut self, n: usize) -> Self {
        self.keep_chars = n;
        self
    }

    /// The budget requests must fit.
    pub fn budget(&self) -> TokenBudget {
        self.budget
    }
}

/// A run's summary of its oldest rounds so far (kept for the run's life in this process).
#[derive(Debug, Default)]
pub(crate) struct RunSummary {
    /// Rounds the summary covers, counted from the first round of the requests it is for.
    rounds: usize,
    text: String,
    /// The first call id of each round it covers: a request whose first rounds are others (a
    /// strict run's next step, whose requests hold only that step's rounds) needs its own.
    calls: Vec<String>,
}

impl RunSummary {
    /// Whether the summary covers the first rounds of `messages` (`rounds` of them).
    fn covers(&self, messages: &[Message], rounds: &[(usize, usize)]) -> bool {
        self.calls.len() == self.rounds
            && rounds.len() >= self.rounds
            && self
                .calls
                .iter()
                .zip(rounds)
                .all(|(id, &(start, _))| first_call(&messages[start]) == Some(id.as_str()))
    }
}

/// The id of a round's first call.
fn first_call(message: &Message) -> Option<&str> {
    message.tool_calls.first().map(|c| c.id.as_str())
}

/// What a compaction did to one request.
#[derive(Debug, Default)]
pub(crate) struct Compacted {
    pub(crate) trimmed: usize,
    pub(crate) summarized_rounds: usize,
    pub(crate) tokens_before: u64,
    pub(crate) tokens_after: u64,
    pub(crate) usage: Usage,
}

async fn count(counter: &dyn TokenCounter, messages: &[Message], tools: &[ToolDefinition]) -> Result<u64, AgentError> {
    counter
        .count_tokens(messages, tools)
        .await
        .map_err(|e| AgentError::from_model(&e))
}

impl RunCompaction {
    /// Compacts `messages` (a whole request) in place so that it fits, touching only the
    /// messages of the run's tool calls (`run_calls`, by call id). `None` when it fit as it was.
    pub(crate) async fn apply(
        &self,
        messages: &mut Vec<Message>,
        tools: &[ToolDefinition],
        run_calls: &HashSet<&str>,
        summary: &mut RunSummary,
    ) -> Result<Option<Compacted>, AgentError> {
        let limit = self.budget.input_budget();
        let before = count(self.counter.as_ref(), messages, tools).await?;
        if before <= limit {
            return Ok(None);
        }
        let mut done = Compacted {
            tokens_before: before,
            ..Compacted::default()
        };
        if let Some(summarizer) = &self.summarizer {
            match self
                .summarize_rounds(messages, tools, run_calls, summary, summarizer)
                .await
            {
                Ok((rounds, usage)) => {
                    done.summarized_rounds = rounds;
                    done.usage = usage;
                }
                Err(e) => tracing::warn!(error = %e, "the run's summary failed; trimming instead"),
            }
        }
        let mut total = count(self.counter.as_ref(), messages, tools).await?;
        if total > limit {
            let results: Vec<usize> = messages
                .iter()
                .enumerate()
                .filter(|(_, m)| is_run_result(m, run_calls))
                .map(|(i, _)| i)
                .collect();
            let trimmable = results.len().saturating_sub(self.keep_recent);
            for &i in &results[..trimmable] {
                if total <= limit {
                    break;
                }
                if trim(&mut messages[i], self.keep_chars) {
                    done.trimmed += 1;
                    total = count(self.counter.as_ref(), messages, tools).await?;
                }
            }
        }
        if total > limit {
            return Err(AgentError::MemoryOverflow {
                message: format!(
                    "the request takes {total} tokens after compacting the run, over the input budget of {limit}"
                ),
            });
        }
        done.tokens_after = total;
        Ok(Some(done))
    }

    /// Replaces the oldest complete rounds (all but `keep_recent`) that need to go by the run's
    /// summary, extended to cover them. Returns how many rounds it covers and the usage.
    async fn summarize_rounds(
        &self,
        messages: &mut Vec<Message>,
        tools: &[ToolDefinition],
        run_calls: &HashSet<&str>,
        summary: &mut RunSummary,
        summarizer: &Arc<dyn ConversationSummarizer>,
    ) -> Result<(usize, Usage), AgentError> {
        let rounds = rounds(messages, run_calls);
        let eligible = rounds.len().saturating_sub(self.keep_recent);
        if eligible == 0 {
            return Ok((0, Usage::default()));
        }
        if !summary.covers(messages, &rounds) {
            *summary = RunSummary::default();
        }
        // The fewest rounds whose removal (with a summary about as long as the current one)
        // makes the request fit; all eligible ones if none does.
        let limit = self.budget.input_budget();
        let placeholder = Message::assistant(format!("{}{}", SUMMARY_HEADER, summary.text));
        let mut take = summary.rounds.clamp(1, eligible);
        while take < eligible {
            let candidate = replaced(messages, &rounds[..take], placeholder.clone());
            if count(self.counter.as_ref(), &candidate, tools).await? <= limit {
                break;
            }
            take += 1;
        }
        let mut usage = Usage::default();
        if take > summary.rounds {
            let start = rounds[summary.rounds.min(take)].0;
            let end = rounds[take - 1].1;
            let previous = (!summary.text.is_empty()).then_some(summary.text.as_str());
            let (text, used) = summarizer
                .summarize(previous, &messages[start..end])
                .await
                .map_err(|e| AgentError::from_model(&e))?;
            summary.text = text;
            summary.rounds = take;
            summary.calls = rounds[..take]
                .iter()
                .filter_map(|&(start, _)| first_call(&messages[start]).map(str::to_owned))
                .collect();
            usage = used;
        }
        let message = Message::assistant(format!("{}{}", SUMMARY_HEADER, summary.text));
        *messages = replaced(messages, &rounds[..take], message);
        Ok((take, usage))
    }
}

/// The first line of a run's summary message.
const SUMMARY_HEADER: &str = "Summary of this run's earlier tool calls and their results:\n";

fn is_run_result(message: &Message, run_calls: &HashSet<&str>) -> bool {
    message.role == Role::Tool && message.tool_call_id.as_deref().is_some_and(|id| run_calls.contains(id))
}

/// The run's complete tool rounds in `messages`, oldest first, as `(start, end)` index ranges:
/// an assistant message with tool calls of the run and the results right after it.
fn rounds(messages: &[Message], run_calls: &HashSet<&str>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        let ours = m.role == Role::Assistant
            && m.has_tool_calls()
            && m.tool_calls.iter().all(|c| run_calls.contains(c.id.as_str()));
        if !ours {
            i += 1;
            continue;
        }
        let mut end = i + 1;
        while end < messages.len() && is_run_result(&messages[end], run_calls) {
            end += 1;
        }
        // Complete only if every call has its result in the round.
        let answered = messages[i + 1..end]
            .iter()
            .filter_map(|r| r.tool_call_id.as_deref())
            .collect::<HashSet<_>>();
        if m.tool_calls.iter().all(|c| answered.contains(c.id.as_str())) {
            out.push((i, end));
        }
        i = end;
    }
    out
}

/// `messages` with the given rounds removed and `summary` where the first one was.
fn replaced(messages: &[Message], rounds: &[(usize, usize)], summary: Message) -> Vec<Message> {
    let Some(&(first, _)) = rounds.first() else {
        return messages.to_vec();
    };
    let mut out = Vec::with_capacity(messages.len());
    let mut skip = rounds.iter().peekable();
    let mut i = 0;
    while i < messages.len() {
        if i == first {
            out.push(summary.clone());
        }
        match skip.peek() {
            Some(&&(start, end)) if i == start => {
                skip.next();
                i = end;
            }
            _ => {
                out.push(messages[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// Cuts a tool result to its first `keep` characters with a marker; `false` when it is
/// already that short.
fn trim(message: &mut Message, keep: usize) -> bool {
    let text = message.text();
    let total = text.chars().count();
    if total <= keep {
        return false;
    }
    let head: String = text.chars().take(keep).collect();
    let marker = format!("{head}… [cut from {total} characters to fit the context window; the full result is kept]");
    if marker.chars().count() >= total {
        return false;
    }
    *message = Message::tool_result(
        message.tool_call_id.clone().unwrap_or_default(),
        message.name.clone().unwrap_or_default(),
        marker,
        message.is_error,
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    fn round(id: &str) -> Vec<Message> {
        vec![
            Message::assistant_tool_calls("", vec![ToolCall::new(id, "fetch", "{}")]),
            Message::tool_result(id, "fetch", "x".repeat(50), false),
        ]
    }

    #[test]
    fn rounds_are_whole_and_only_the_runs_own() {
        let mut messages = vec![Message::user("go")];
        messages.extend(round("a"));
        messages.extend(round("b"));
        messages.push(Message::assistant_tool_calls(
            "",
            vec![ToolCall::new("c", "fetch", "{}")],
        ));
        let ids: HashSet<&str> = ["a", "b", "c"].into_iter().collect();
        assert_eq!(
            rounds(&messages, &ids),
            [(1, 3), (3, 5)],
            "the unanswered round is not one"
        );
        let only_b: HashSet<&str> = ["b"].into_iter().collect();
        assert_eq!(rounds(&messages, &only_b), [(3, 5)]);
    }

    #[test]
    fn replacing_rounds_keeps_everything_else_in_order() {
        let mut messages = vec![Message::user("go")];
        messages.extend(round("a"));
        messages.extend(round("b"));
        messages.extend(round("c"));
        let out = replaced(&messages, &[(1, 3), (3, 5)], Message::assistant("summary"));
        let texts: Vec<String> = out.iter().map(Message::text).collect();
        assert_eq!(texts.len(), 4);
        assert_eq!(texts[1], "summary");
        assert_eq!(out[2].tool_calls[0].id, "c");
    }

    #[test]
    fn trimming_keeps_the_head_and_the_pairing() {
        let mut m = Message::tool_result("a", "fetch", "y".repeat(1_000), false);
        assert!(trim(&mut m, 10));
        assert_eq!(m.tool_call_id.as_deref(), Some("a"));
        assert!(m.text().starts_with("yyyyyyyyyy…"), "{}", m.text());
        assert!(!trim(&mut m, 10_000), "a short result stays");
    }
}
