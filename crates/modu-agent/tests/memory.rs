//! Conversation memory policies, driven through an agent with a session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use modu_agent::{
    Agent, AgentRequest, ConversationSummarizer, ModelConversationSummarizer, RecentTurns, SummarizingPolicy,
    TokenBudget, TokenBudgetPolicy,
};
use modu_core::{
    AgentError, AgentEvent, ApproximateTokenCounter, CollectingEventSink, ConversationStore, InMemoryConversationStore,
    InMemoryMemoryStateStore, Message, ModelError, Role, TokenCounter, ToolCall, Usage,
};
use modu_testing::ScriptedModel;

fn turn(i: usize) -> Vec<Message> {
    vec![
        Message::user(format!("question {i}")),
        Message::assistant_tool_calls("", vec![ToolCall::new(format!("c{i}"), "lookup", "{}")]),
        Message::tool_result(format!("c{i}"), "lookup", format!("fact {i}"), false),
        Message::assistant(format!("answer {i}")),
    ]
}

async fn seeded_store(turns: usize) -> Arc<InMemoryConversationStore> {
    let store = Arc::new(InMemoryConversationStore::new());
    for i in 0..turns {
        store.append("s", &turn(i)).await.unwrap();
    }
    store
}

#[tokio::test]
async fn recent_turns_keeps_whole_turns_and_the_store_stays_whole() {
    let store = seeded_store(5).await;
    let model = ScriptedModel::new().text("ok");
    let agent = Agent::builder(model.clone())
        .conversation_store(store.clone())
        .memory_policy(Arc::new(RecentTurns::new(2)))
        .build()
        .unwrap();
    let result = agent.run(AgentRequest::new((), "new question").session("s")).await;
    assert!(result.is_completed());
    let seen = &model.requests()[0].messages;
    // Two turns of four messages, plus the new question; no turn is cut in half.
    assert_eq!(seen.len(), 9);
    assert_eq!(seen[0].text(), "question 3");
    assert!(seen[1].has_tool_calls());
    assert_eq!(seen[2].role, Role::Tool);
    assert_eq!(seen[2].tool_call_id.as_deref(), Some("c3"));
    // The stored original is whole, and the result holds only this run's messages.
    assert_eq!(store.load("s").await.unwrap().len(), 22);
    assert_eq!(result.messages().len(), 2);
}

#[tokio::test]
async fn token_budget_drops_oldest_turns_and_overflows_before_any_model_call() {
    let store = seeded_store(6).await;
    let counter: Arc<dyn TokenCounter> = Arc::new(ApproximateTokenCounter::default());
    // Each turn costs ~26 approximate tokens; leave room for about two.
    let policy = TokenBudgetPolicy::new(TokenBudget::new(120, 40, 10), Arc::clone(&counter));
    let sink = Arc::new(CollectingEventSink::new());
    let model = ScriptedModel::new().text("ok");
    let agent = Agent::builder(model.clone())
        .instructions("Be brief.")
        .conversation_store(store.clone())
        .memory_policy(Arc::new(policy.clone()))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    assert!(agent.run(AgentRequest::new((), "q").session("s")).await.is_completed());
    let seen = &model.requests()[0].messages;
    let total = counter.count_tokens(seen, &[]).await.unwrap();
    assert!(total <= 70, "{total} tokens sent");
    assert!(seen.len() > 2 && seen.len() < 26);
    assert_eq!(seen[1].role, Role::User, "history starts at a turn boundary");
    assert_eq!(seen.last().unwrap().text(), "q");
    // The turns kept are the newest ones, whole and in order: question k..=5 for some k > 0.
    let questions: Vec<String> = seen[..seen.len() - 1]
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.text())
        .collect();
    let first = 6 - questions.len();
    assert!(first > 0, "nothing was dropped: {questions:?}");
    let expected: Vec<String> = (first..6).map(|i| format!("question {i}")).collect();
    assert_eq!(questions, expected, "the oldest turns go first");
    let calls: Vec<String> = seen
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    let expected_calls: Vec<String> = (first..6).map(|i| format!("c{i}")).collect();
    assert_eq!(calls, expected_calls, "each kept turn keeps its tool result");
    let dropped = sink.events().iter().find_map(|e| match e {
        AgentEvent::MemoryApplied { dropped_turns, .. } => Some(*dropped_turns),
        _ => None,
    });
    assert_eq!(dropped, Some(first), "MemoryApplied counts the dropped turns");

    // A current run that alone exceeds the budget fails before the model is called.
    let model = ScriptedModel::new().text("never");
    let agent = Agent::builder(model.clone())
        .conversation_store(store)
        .memory_policy(Arc::new(policy))
        .build()
        .unwrap();
    let result = agent.run(AgentRequest::new((), "x".repeat(2_000)).session("s")).await;
    assert!(
        matches!(result.error(), Some(AgentError::MemoryOverflow { .. })),
        "{:?}",
        result.error()
    );
    assert!(model.requests().is_empty(), "no model call was made");
}

/// A summarizer that counts its calls and can be told to fail.
struct CountingSummarizer {
    calls: AtomicUsize,
    fail: bool,
}

#[async_trait]
impl ConversationSummarizer for CountingSummarizer {
    async fn summarize(&self, previous: Option<&str>, messages: &[Message]) -> Result<(String, Usage), ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err(ModelError::Transport {
                message: "summarizer down".into(),
                source: None,
            });
        }
        Ok((
            format!("{}+{}msgs", previous.unwrap_or("S"), messages.len()),
            Usage::new(7, 3),
        ))
    }
}

fn summarizing(summarizer: Arc<CountingSummarizer>, state: Arc<InMemoryMemoryStateStore>) -> SummarizingPolicy {
    SummarizingPolicy {
        budget: TokenBudget::new(4_000, 500, 100),
        counter: Arc::new(ApproximateTokenCounter::default()),
        summarizer,
        state_store: state,
        max_history_turns: 2,
    }
}

#[tokio::test]
async fn summaries_are_cached_and_extended_incrementally() {
    let store = seeded_store(5).await;
    let state = Arc::new(InMemoryMemoryStateStore::new());
    let summarizer = Arc::new(CountingSummarizer {
        calls: AtomicUsize::new(0),
        fail: false,
    });
    let model = ScriptedModel::new().text("a").text("b").text("c");
    let agent = Agent::builder(model.clone())
        .conversation_store(store.clone())
        .memory_policy(Arc::new(summarizing(Arc::clone(&summarizer), state)))
        .build()
        .unwrap();
    let first = agent.run(AgentRequest::new((), "q1").session("s")).await;
    assert!(first.is_completed());
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 1);
    let seen = &model.requests()[0].messages;
    assert_eq!(seen[0].role, Role::System);
    assert_eq!(seen[0].text(), "Summary of the earlier conversation:\nS+12msgs");
    assert_eq!(seen[1].text(), "question 3", "the two most recent turns stay verbatim");
    // Summary calls count in the run's usage: 1 model call (10/5) + the summary (7/3).
    assert_eq!(first.usage().input_tokens, 17);

    // The next run has one more turn: only the turn that left the recent window is summarised,
    // on top of the cached summary.
    let second = agent.run(AgentRequest::new((), "q2").session("s")).await;
    assert!(second.is_completed());
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        model.requests()[1].messages[0].text(),
        "Summary of the earlier conversation:\nS+12msgs+4msgs"
    );

    // Unchanged prefix (same history, a policy instance sharing the state store): no call.
    let again = agent.run(AgentRequest::new((), "q3").session("s")).await;
    assert!(again.is_completed());
    assert_eq!(
        summarizer.calls.load(Ordering::SeqCst),
        3,
        "the window moved again by one turn"
    );
}

#[tokio::test]
async fn an_unchanged_prefix_is_not_summarised_again() {
    let store = seeded_store(4).await;
    let state = Arc::new(InMemoryMemoryStateStore::new());
    let summarizer = Arc::new(CountingSummarizer {
        calls: AtomicUsize::new(0),
        fail: false,
    });
    // No conversation store: the same history is loaded by two agents sharing the cache.
    for _ in 0..3 {
        let model = ScriptedModel::new().text("ok");
        let agent = Agent::builder(model)
            .conversation_store(Arc::new(InMemoryConversationStore::new()))
            .memory_policy(Arc::new(summarizing(Arc::clone(&summarizer), Arc::clone(&state))))
            .build()
            .unwrap();
        let history = store.load("s").await.unwrap();
        agent.conversation_store().unwrap().append("s", &history).await.unwrap();
        assert!(agent.run(AgentRequest::new((), "q").session("s")).await.is_completed());
    }
    assert_eq!(
        summarizer.calls.load(Ordering::SeqCst),
        1,
        "the cached summary was reused"
    );
}

#[tokio::test]
async fn a_failing_summarizer_falls_back_to_the_budget_and_the_run_goes_on() {
    let store = seeded_store(5).await;
    let summarizer = Arc::new(CountingSummarizer {
        calls: AtomicUsize::new(0),
        fail: true,
    });
    let sink = Arc::new(CollectingEventSink::new());
    let model = ScriptedModel::new().text("still answering");
    let agent = Agent::builder(model.clone())
        .conversation_store(store)
        .memory_policy(Arc::new(summarizing(
            summarizer,
            Arc::new(InMemoryMemoryStateStore::new()),
        )))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent.run(AgentRequest::new((), "q").session("s")).await;
    assert_eq!(result.output().map(String::as_str), Some("still answering"));
    let seen = &model.requests()[0].messages;
    assert!(seen.iter().all(|m| !m.text().starts_with("Summary")));
    assert_eq!(seen.len(), 9, "the budget policy kept the two most recent turns");
    assert!(sink.events().iter().any(|e| matches!(
        e,
        AgentEvent::MemoryApplied {
            summary_failed: true,
            ..
        }
    )));
}

#[tokio::test]
async fn one_huge_message_is_summarised_in_bounded_chunks() {
    let counter: Arc<dyn TokenCounter> = Arc::new(ApproximateTokenCounter::default());
    let model = ScriptedModel::new().respond(|_| {
        vec![modu_core::ChatEvent::TextDelta {
            text: "partial summary".into(),
        }]
    });
    // Answer every chunk with the same responder.
    let model = (0..40).fold(model, |m, _| {
        m.respond(|_| {
            vec![modu_core::ChatEvent::TextDelta {
                text: "partial summary".into(),
            }]
        })
    });
    let summarizer = ModelConversationSummarizer::new(Arc::new(model.clone()), Arc::clone(&counter), 600, 100);
    let huge = Message::user("word ".repeat(8_000)); // ~10,000 approximate tokens
    let (summary, usage) = summarizer.summarize(None, &[huge]).await.unwrap();
    assert_eq!(summary, "partial summary");
    let requests = model.requests();
    assert!(requests.len() >= 17, "{} requests", requests.len());
    assert_eq!(usage.requests as usize, requests.len());
    for r in &requests {
        let n = counter.count_tokens(&r.messages, &[]).await.unwrap();
        assert!(n <= 600, "a summary request took {n} tokens");
    }
    // Each request after the first carries the summary so far.
    assert!(
        requests[1].messages[1]
            .text()
            .contains("Summary of the conversation so far")
    );
}

/// A memory policy of the user's own that recalls something for every request, history or not.
struct Recall {
    calls: AtomicUsize,
}

#[async_trait]
impl modu_agent::ConversationMemoryPolicy for Recall {
    fn name(&self) -> &str {
        "recall"
    }
    async fn select(&self, input: modu_agent::MemoryInput<'_>) -> Result<modu_agent::MemoryView, AgentError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        assert!(input.history.is_empty());
        let mut view = modu_agent::MemoryView::default();
        view.messages.push(Message::user("recalled: the user likes tea"));
        Ok(view)
    }
}

#[tokio::test]
async fn a_policy_of_ones_own_is_asked_even_without_history() {
    let recall = Arc::new(Recall {
        calls: AtomicUsize::new(0),
    });
    let model = ScriptedModel::new().text("Tea, then.");
    let agent = Agent::builder(model.clone())
        .memory_policy(Arc::clone(&recall))
        .build()
        .unwrap();
    let result = agent.run("What should I drink?").await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert_eq!(recall.calls.load(Ordering::SeqCst), 1);
    let asked = &model.requests()[0].messages;
    assert_eq!(asked[0].text(), "recalled: the user likes tea");
    assert_eq!(asked[1].text(), "What should I drink?");
}
