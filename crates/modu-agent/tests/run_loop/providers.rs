//! Tool providers' sessions and the run's deadline: refreshing a session's tools counts against
//! it, closing the sessions does not.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use modu_agent::{Agent, AgentRequest, RunLimits};
use modu_core::{
    AgentError, ConversationStore, InMemoryConversationStore, Message, RunContext, SessionSummary, StoreError, Tool,
    ToolProvider, ToolProviderError, ToolSession, async_trait,
};
use modu_testing::ScriptedModel;

/// A provider whose session takes `refresh` to list its tools and `close` to end.
struct Slow {
    refresh: Duration,
    close: Duration,
    closed: Arc<AtomicBool>,
}

struct SlowSession {
    refresh: Duration,
    close: Duration,
    closed: Arc<AtomicBool>,
}

#[async_trait]
impl ToolProvider<()> for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    async fn open(&self, _ctx: &RunContext<()>) -> Result<Box<dyn ToolSession<()>>, ToolProviderError> {
        Ok(Box::new(SlowSession {
            refresh: self.refresh,
            close: self.close,
            closed: Arc::clone(&self.closed),
        }))
    }
}

#[async_trait]
impl ToolSession<()> for SlowSession {
    fn tools(&self) -> Vec<Arc<dyn Tool<()>>> {
        Vec::new()
    }
    async fn refresh(&self) -> bool {
        tokio::time::sleep(self.refresh).await;
        false
    }
    async fn close(self: Box<Self>) {
        tokio::time::sleep(self.close).await;
        self.closed.store(true, Ordering::SeqCst);
    }
}

/// A conversation store a network away: every operation takes 20 ms.
struct Remote(InMemoryConversationStore);

#[async_trait]
impl ConversationStore for Remote {
    async fn append(&self, session_id: &str, messages: &[Message]) -> Result<(), StoreError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.0.append(session_id, messages).await
    }
    async fn load(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.0.load(session_id).await
    }
    async fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        self.0.delete(session_id).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        self.0.list_sessions().await
    }
}

#[tokio::test]
async fn a_session_that_never_lists_its_tools_ends_the_run_at_its_deadline() {
    let provider = Slow {
        refresh: Duration::from_secs(20),
        close: Duration::ZERO,
        closed: Arc::default(),
    };
    let agent = Agent::builder(ScriptedModel::new().text("never"))
        .tool_provider(provider)
        .limits(RunLimits::default().timeout(Duration::from_millis(500)))
        .build()
        .unwrap();
    let started = Instant::now();
    let result = agent.run("go").await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(result.error(), Some(&AgentError::Timeout { after_ms: 500 }));
}

#[tokio::test]
async fn a_session_slow_to_close_does_not_cost_the_run_its_answer() {
    let closed = Arc::new(AtomicBool::new(false));
    let provider = Slow {
        refresh: Duration::ZERO,
        close: Duration::from_millis(1500),
        closed: Arc::clone(&closed),
    };
    let store = Arc::new(Remote(InMemoryConversationStore::new()));
    let agent = Agent::builder(ScriptedModel::new().text("the answer"))
        .tool_provider(provider)
        .conversation_store(store.clone())
        .limits(RunLimits::default().timeout(Duration::from_secs(1)))
        .build()
        .unwrap();
    let result = agent.run(AgentRequest::new((), "go").session("s1")).await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("the answer"),
        "{:?}",
        result.error()
    );
    assert_eq!(store.load("s1").await.unwrap().len(), 2, "the turn is stored");
    assert!(
        closed.load(Ordering::SeqCst),
        "the session was closed before the run returned"
    );
}
