//! Same-session serialization with `SessionQueue`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use modu_agent::{Agent, AgentRequest, SessionQueue};
use modu_core::{ConversationStore, InMemoryConversationStore};
use modu_testing::ScriptedModel;

#[tokio::test]
async fn runs_of_one_session_take_turns_and_sessions_run_in_parallel() {
    let store = Arc::new(InMemoryConversationStore::new());
    let model = ScriptedModel::new()
        .delayed_text(Duration::from_millis(150), "first")
        .delayed_text(Duration::from_millis(150), "second");
    let agent = Agent::builder(model.clone())
        .conversation_store(store.clone())
        .build()
        .unwrap();
    let runtime = Arc::new(SessionQueue::new());
    let (a, b) = tokio::join!(runtime.run(&agent, AgentRequest::new((), "one").session("s")), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        runtime.run(&agent, AgentRequest::new((), "two").session("s")).await
    });
    assert!(a.is_completed() && b.is_completed());
    // The second run saw the whole first turn.
    let requests = model.requests();
    assert_eq!(requests[1].messages.len(), 3, "{:?}", requests[1].messages);
    assert_eq!(store.load("s").await.unwrap().len(), 4);

    // Different sessions are not serialised.
    let model = ScriptedModel::new()
        .delayed_text(Duration::from_millis(200), "x")
        .delayed_text(Duration::from_millis(200), "y");
    let agent = Agent::builder(model).conversation_store(store).build().unwrap();
    let started = Instant::now();
    let (x, y) = tokio::join!(
        runtime.run(&agent, AgentRequest::new((), "1").session("p")),
        runtime.run(&agent, AgentRequest::new((), "2").session("q")),
    );
    assert!(x.is_completed() && y.is_completed());
    assert!(
        started.elapsed() < Duration::from_millis(380),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(runtime.active_sessions(), 0);
}
