//! [`SessionQueue`]: same-session serialization in one process.
//!
//! Two runs of one session at once would both load the same history and append in either
//! order, so the second run would not see the first. The queue takes runs by session id:
//! runs of one session take turns (in arrival order), runs of different sessions — and runs
//! without a session — proceed in parallel.
//!
//! What is **not** guaranteed: serialization across processes (two processes sharing a Redis
//! or SQLite store can still interleave runs of one session — give the agent session leases,
//! `AgentBuilder::session_leases`, for that), and exactly-once tool side effects (a resumed run does not re-run tool
//! calls whose results were checkpointed, but a crash between a tool's side effect and its
//! checkpoint re-runs it; write tools with their own idempotency keys).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::agent::{Agent, AgentRequest};
use crate::outcome::RunOutcome;

/// Queues runs by session id (see the module docs).
///
/// ```
/// use modu_agent::{Agent, AgentRequest, SessionQueue};
/// use modu_testing::ScriptedModel;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder(ScriptedModel::new().text("hi")).build()?;
/// let queue = SessionQueue::new();
/// let answer = queue.run(&agent, AgentRequest::new((), "hello").session("s1")).await.into_result()?;
/// assert_eq!(answer, "hi");
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct SessionQueue {
    sessions: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl SessionQueue {
    /// A queue with no runs.
    pub fn new() -> Self {
        Self::default()
    }

    fn session_lock(&self, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lock) = map.get(session).and_then(Weak::upgrade) {
            return lock;
        }
        // Forget sessions nobody runs any more, so the map does not grow without bound.
        map.retain(|_, w| w.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(session.to_owned(), Arc::downgrade(&lock));
        lock
    }

    /// Runs `agent`, after any earlier run of the same session has finished.
    pub async fn run<C, O>(&self, agent: &Agent<C, O>, request: impl Into<AgentRequest<C>>) -> RunOutcome<O>
    where
        C: Send + Sync + 'static,
        O: Send + 'static,
    {
        let request = request.into();
        match request.session_id.clone() {
            Some(session) => {
                let lock = self.session_lock(&session);
                let _turn = lock.lock().await;
                agent.run(request).await
            }
            None => agent.run(request).await,
        }
    }

    /// Resumes a run of `session_id` (the session it was started with), queued like a run.
    pub async fn resume<C, O>(
        &self,
        agent: &Agent<C, O>,
        run_id: &str,
        session_id: Option<&str>,
        context: C,
    ) -> RunOutcome<O>
    where
        C: Send + Sync + 'static,
        O: Send + 'static,
    {
        match session_id {
            Some(session) => {
                let lock = self.session_lock(session);
                let _turn = lock.lock().await;
                agent.resume(run_id, context).await
            }
            None => agent.resume(run_id, context).await,
        }
    }

    /// Sessions with a run in progress or queued.
    pub fn active_sessions(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}
