//! Compaction inside a run: a 60-turn tool loop whose results would overflow an 8k budget
//! stays within it in every request, a call is never separated from its result, and the run
//! keeps the originals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use modu_agent::compaction::RunCompaction;
use modu_agent::{Agent, ConversationSummarizer, RunLimits, TokenBudget};
use modu_core::{
    AgentEvent, ApproximateTokenCounter, CollectingEventSink, FunctionTool, InMemoryConversationStore, Message,
    ModelError, Role, TokenCounter, ToolSpec, Usage,
};
use modu_testing::ScriptedModel;
use serde_json::json;

const TURNS: usize = 60;
const RESULT_CHARS: usize = 1_200;

fn budget() -> TokenBudget {
    TokenBudget::new(8_192, 1_024, 256)
}

fn pages() -> FunctionTool<()> {
    pages_of("lorem ipsum ".repeat(RESULT_CHARS / 12))
}

/// `fetch_page`: each page is its number and `filler`.
fn pages_of(filler: String) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new(
            "fetch_page",
            "Fetch a page",
            json!({"type": "object", "properties": {"page": {"type": "integer"}}}),
        ),
        move |_ctx, args| {
            let page = args["page"].as_i64().unwrap_or_default();
            let text = format!("page {page}: {filler}");
            async move { Ok(json!(text)) }
        },
    )
}

fn long_loop() -> ScriptedModel {
    let mut model = ScriptedModel::new();
    for page in 0..TURNS {
        model = model.tool_call("fetch_page", json!({"page": page}));
    }
    model.text("read them all")
}

fn limits() -> RunLimits {
    let mut limits = RunLimits::default();
    limits.max_turns = 100;
    limits.max_tool_calls = 100;
    limits
}

struct CountingSummarizer {
    calls: AtomicUsize,
}

#[async_trait]
impl ConversationSummarizer for CountingSummarizer {
    async fn summarize(&self, previous: Option<&str>, messages: &[Message]) -> Result<(String, Usage), ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let results = messages.iter().filter(|m| m.role == Role::Tool).count();
        let text = format!(
            "{} +{results} pages read (summary #{n})",
            previous.unwrap_or("earlier:")
        );
        Ok((text, Usage::new(10, 5)))
    }
}

/// Asserts what must hold of every request: within the input budget, and every tool result
/// preceded by the assistant message that called it.
async fn check_requests(model: &ScriptedModel) {
    let counter = ApproximateTokenCounter::default();
    let requests = model.requests();
    assert_eq!(requests.len(), TURNS + 1);
    for (i, request) in requests.iter().enumerate() {
        let tokens = counter.count_tokens(&request.messages, &request.tools).await.unwrap();
        assert!(
            tokens <= budget().input_budget(),
            "request {i} takes {tokens} tokens, over {}",
            budget().input_budget()
        );
        let mut called = HashSet::new();
        for m in request.messages.iter() {
            called.extend(m.tool_calls.iter().map(|c| c.id.clone()));
            if m.role == Role::Tool {
                let id = m.tool_call_id.clone().unwrap();
                assert!(called.contains(&id), "request {i}: the result {id} is without its call");
            }
        }
        for m in request.messages.iter().filter(|m| m.has_tool_calls()) {
            for call in &m.tool_calls {
                assert!(
                    request
                        .messages
                        .iter()
                        .any(|r| r.tool_call_id.as_deref() == Some(&call.id)),
                    "request {i}: the call {} is without its result",
                    call.id
                );
            }
        }
    }
}

#[tokio::test]
async fn without_compaction_the_loop_overflows_the_budget() {
    let model = long_loop();
    let agent = Agent::builder(model.clone())
        .tool(pages())
        .limits(limits())
        .build()
        .unwrap();
    let result = agent.run("read every page").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let last = model.requests().pop().unwrap();
    let tokens = ApproximateTokenCounter::default()
        .count_tokens(&last.messages, &last.tools)
        .await
        .unwrap();
    assert!(tokens > 2 * budget().input_budget(), "the fixture overflows: {tokens}");
}

#[tokio::test]
async fn trimming_keeps_every_request_of_a_60_turn_loop_within_an_8k_budget() {
    let model = long_loop();
    let sink = Arc::new(CollectingEventSink::new());
    let store = Arc::new(InMemoryConversationStore::new());
    let agent = Agent::builder(model.clone())
        .tool(pages())
        .limits(limits())
        .run_compaction(RunCompaction::trim(
            budget(),
            Arc::new(ApproximateTokenCounter::default()),
        ))
        .conversation_store(store.clone())
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent
        .run(modu_agent::AgentRequest::new((), "read every page").session("s"))
        .await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("read them all"),
        "{:?}",
        result.error()
    );
    check_requests(&model).await;
    // The newest results reach the model whole; the originals stay in the run and the store.
    let last = model.requests().pop().unwrap();
    let newest = last.messages.iter().rev().find(|m| m.role == Role::Tool).unwrap();
    assert!(newest.text().starts_with("page 59: ") && !newest.text().contains("[cut from"));
    assert!(last.messages.iter().any(|m| m.text().contains("[cut from")));
    let full = |messages: &[Message]| {
        messages
            .iter()
            .filter(|m| m.role == Role::Tool && !m.text().contains("[cut from"))
            .count()
    };
    assert_eq!(full(result.messages()), TURNS, "the run keeps every result whole");
    let stored = modu_core::ConversationStore::load(store.as_ref(), "s").await.unwrap();
    assert_eq!(full(&stored), TURNS, "the store keeps every result whole");
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, AgentEvent::RunCompacted { trimmed, .. } if *trimmed > 0))
    );
}

#[tokio::test]
async fn summarizing_replaces_whole_old_rounds_incrementally_within_the_budget() {
    let model = long_loop();
    let summarizer = Arc::new(CountingSummarizer {
        calls: AtomicUsize::new(0),
    });
    let agent = Agent::builder(model.clone())
        .tool(pages())
        .limits(limits())
        .run_compaction(RunCompaction::summarize(
            budget(),
            Arc::new(ApproximateTokenCounter::default()),
            summarizer.clone(),
        ))
        .build()
        .unwrap();
    let result = agent.run("read every page").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("read them all"),
        "{:?}",
        result.error()
    );
    check_requests(&model).await;
    let last = model.requests().pop().unwrap();
    let summary = last
        .messages
        .iter()
        .find(|m| m.text().starts_with("Summary of this run's earlier tool calls"))
        .expect("a summary message");
    assert!(summary.text().contains("pages read"), "{}", summary.text());
    assert!(
        !last.messages.iter().any(|m| m.text().contains("[cut from")),
        "the summary alone made room"
    );
    let calls = summarizer.calls.load(Ordering::SeqCst);
    assert!(
        calls > 0 && calls < TURNS,
        "the summary is extended, not rewritten per request: {calls}"
    );
    assert!(
        result.usage().input_tokens >= 10 * calls as u64,
        "summary usage counts in the run"
    );
    assert_eq!(
        result.messages().iter().filter(|m| m.role == Role::Tool).count(),
        TURNS,
        "the run keeps the originals"
    );
}

/// A strict Plan-and-Execute step's tool results are the run's own too: they are trimmed in the
/// step's requests like a standard run's (a strict run's calls live in its step messages).
#[tokio::test]
async fn a_strict_steps_tool_results_are_trimmed_too() {
    let big = || {
        FunctionTool::<()>::new(
            ToolSpec::new("fetch", "Fetch", json!({"type": "object", "properties": {}})),
            |_ctx, _args| async { Ok(json!("w".repeat(12_000))) },
        )
    };
    let counter = Arc::new(ApproximateTokenCounter::default());
    let compaction = || RunCompaction::trim(TokenBudget::new(3_000, 400, 100), counter.clone()).keep_recent(0);
    let model = ScriptedModel::new()
        .text(json!({"steps": [{"description": "one", "allowed_tools": ["fetch"]}]}).to_string())
        .tool_call("fetch", json!({}))
        .text(json!({"status": "completed", "result": "one"}).to_string())
        .text("final");
    let agent = Agent::builder(model.clone())
        .tool(big())
        .decision_policy(modu_agent::plan::PlanAndExecutePolicy::new(
            modu_agent::plan::LlmPlanGenerator::agent_model(),
        ))
        .run_compaction(compaction())
        .build()
        .unwrap();
    let done = agent.run("go").await;
    assert!(done.is_completed(), "{:?}", done.error());
    let sent = model.requests();
    let biggest = sent
        .iter()
        .flat_map(|r| r.messages.iter())
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.text().len())
        .max()
        .unwrap_or(0);
    assert!(
        biggest < 12_000,
        "a step's tool result went out whole ({biggest} bytes)"
    );
}

/// The page a `fetch_page` result is of.
fn page_of(result: &str) -> String {
    let after = result.split("page ").nth(1).unwrap_or_default();
    after.chars().take_while(char::is_ascii_digit).collect()
}

/// Writes which pages the messages it is given read: "pages: 0 1 …".
struct PageSummarizer;

#[async_trait]
impl ConversationSummarizer for PageSummarizer {
    async fn summarize(&self, previous: Option<&str>, messages: &[Message]) -> Result<(String, Usage), ModelError> {
        let mut text = previous.unwrap_or("pages:").to_owned();
        for m in messages.iter().filter(|m| m.role == Role::Tool) {
            text.push(' ');
            text.push_str(&page_of(&m.text()));
        }
        Ok((text, Usage::default()))
    }
}

/// A strict Plan-and-Execute run's steps each have their own tool rounds: the summary of the
/// first step's rounds is not put in place of the second step's (which would lose what they
/// read and tell the model it read pages it did not see in that step).
#[tokio::test]
async fn a_strict_steps_rounds_are_summarised_as_its_own() {
    let page = || pages_of("w".repeat(4_000));
    let done_step = |result: &str| json!({"status": "completed", "result": result}).to_string();
    let mut limits = RunLimits::default();
    limits.max_step_attempts = 5;
    let mut model = ScriptedModel::new().text(
        json!({"steps": [
            {"description": "read the first pages", "allowed_tools": ["fetch_page"]},
            {"description": "read the next pages", "allowed_tools": ["fetch_page"]},
        ]})
        .to_string(),
    );
    // A step's rounds: each call's step result reports the step unfinished but the last.
    for pages in [[0, 1, 2], [10, 11, 12]] {
        for (n, p) in pages.into_iter().enumerate() {
            model = model.tool_call("fetch_page", json!({"page": p}));
            model = model.text(if n < 2 {
                json!({"status": "failed", "result": "more pages to read"}).to_string()
            } else {
                done_step("pages read")
            });
        }
    }
    let model = model.text("final");
    let compaction = RunCompaction::summarize(
        TokenBudget::new(3_000, 400, 100),
        Arc::new(ApproximateTokenCounter::default()),
        Arc::new(PageSummarizer),
    )
    .keep_recent(1);
    let agent = Agent::builder(model.clone())
        .tool(page())
        .limits(limits)
        .decision_policy(modu_agent::plan::PlanAndExecutePolicy::new(
            modu_agent::plan::LlmPlanGenerator::agent_model(),
        ))
        .run_compaction(compaction)
        .build()
        .unwrap();
    let done = agent.run("read the pages").await;
    assert!(done.is_completed(), "{:?}", done.error());
    let sent = model.requests();
    let mut summarised = 0;
    for (i, request) in sent.iter().enumerate() {
        let read: Vec<String> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| page_of(&m.text()))
            .collect();
        let Some(summary) = request
            .messages
            .iter()
            .find(|m| m.text().starts_with("Summary of this run's earlier tool calls"))
        else {
            continue;
        };
        summarised += 1;
        let text = summary.text();
        let named: Vec<&str> = text
            .rsplit("pages:")
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        // The summary and the results sent beside it are one step's: pages 0–2 or pages 10–12.
        let first_step = |p: &str| p.len() == 1;
        let all: Vec<&str> = named.iter().copied().chain(read.iter().map(String::as_str)).collect();
        assert!(
            all.iter().all(|p| first_step(p)) || all.iter().all(|p| !first_step(p)),
            "request {i} sends a summary of pages {named:?} beside the results of pages {read:?}"
        );
    }
    assert!(summarised >= 2, "both steps were summarised: {summarised}");
}
