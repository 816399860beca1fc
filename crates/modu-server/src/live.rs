//! Runs in flight. Each run the server starts is registered here under its agent and the run
//! id its client sees, with its owner and a cancel token, and a streamed run with the bounded
//! log of the events it sent.
//!
//! - A streamed run is driven by its own task, not by the HTTP response: the response only
//!   follows the run's log, so a client that goes away does not end the run (unless
//!   [`ModuServer::cancel_on_disconnect`](crate::ModuServer::cancel_on_disconnect) is on: then
//!   the last client leaving cancels it).
//! - Every event gets an id (1, 2, ... per run, the SSE `id:` field). A client that reconnects
//!   with `Last-Event-ID` gets the events after that id, then the rest live. The log keeps the
//!   newest [`EVENT_BUFFER`] events of a run; a `Last-Event-ID` older than that is answered with
//!   410, and a client that falls that far behind is disconnected.
//! - A run stays here [`KEEP_FINISHED`] after it ended, so a late reconnect still reads its end.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::auth::Principal;

/// The most events kept per run for replay.
pub const EVENT_BUFFER: usize = 1024;

/// How long a run stays followable after its end.
pub const KEEP_FINISHED: Duration = Duration::from_secs(60);

/// The runs in flight of a server, by `(agent, run id)`.
#[derive(Default)]
pub(crate) struct LiveRuns {
    map: Mutex<HashMap<(String, String), Arc<LiveRun>>>,
}

/// One run in flight.
pub(crate) struct LiveRun {
    /// The user the run runs for (its owner).
    pub owner: Option<String>,
    /// Cancels the run at its next boundary.
    pub cancel: CancellationToken,
    cancel_on_disconnect: bool,
    log: Mutex<Log>,
    /// The newest event id, bumped on every event and at the end.
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct Log {
    events: VecDeque<(u64, Value)>,
    last_id: u64,
    done: bool,
    followers: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Why a run cannot be followed from an event id.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Evicted {
    /// The oldest event id the log still has.
    pub oldest: u64,
}

impl LiveRuns {
    /// Registers a run (in place of an ended one with the same id); `None` when a run with
    /// this id is in flight.
    pub(crate) fn start(
        &self,
        agent: &str,
        run_id: &str,
        principal: &Principal,
        cancel_on_disconnect: bool,
    ) -> Option<Arc<LiveRun>> {
        let mut map = lock(&self.map);
        let key = (agent.to_owned(), run_id.to_owned());
        if map.get(&key).is_some_and(|run| !run.is_done()) {
            return None;
        }
        let run = Arc::new(LiveRun {
            owner: principal.user.clone(),
            cancel: CancellationToken::new(),
            cancel_on_disconnect,
            log: Mutex::new(Log::default()),
            changed: watch::channel(0).0,
        });
        map.insert(key, Arc::clone(&run));
        Some(run)
    }

    /// The run, if it is in flight (or ended less than [`KEEP_FINISHED`] ago) and the caller's.
    pub(crate) fn get(&self, agent: &str, run_id: &str, principal: &Principal) -> Option<Arc<LiveRun>> {
        lock(&self.map)
            .get(&(agent.to_owned(), run_id.to_owned()))
            .filter(|run| run.owner == principal.user)
            .cloned()
    }

    /// Whether a run with this id is in flight (not ended), whoever's it is.
    pub(crate) fn running(&self, agent: &str, run_id: &str) -> bool {
        lock(&self.map)
            .get(&(agent.to_owned(), run_id.to_owned()))
            .is_some_and(|run| !run.is_done())
    }

    /// Forgets a run.
    pub(crate) fn remove(&self, agent: &str, run_id: &str, run: &Arc<LiveRun>) {
        let mut map = lock(&self.map);
        let key = (agent.to_owned(), run_id.to_owned());
        if map.get(&key).is_some_and(|r| Arc::ptr_eq(r, run)) {
            map.remove(&key);
        }
    }
}

impl LiveRun {
    /// Whether the run has ended.
    pub(crate) fn is_done(&self) -> bool {
        lock(&self.log).done
    }

    fn push(&self, event: Value) {
        let id = {
            let mut log = lock(&self.log);
            log.last_id += 1;
            let id = log.last_id;
            log.events.push_back((id, event));
            while log.events.len() > EVENT_BUFFER {
                log.events.pop_front();
            }
            id
        };
        self.changed.send_replace(id);
    }

    fn finish(&self) {
        let id = {
            let mut log = lock(&self.log);
            log.done = true;
            log.last_id
        };
        self.changed.send_replace(id);
    }

    /// The run's events after `after` (`None`: from the oldest the log holds), then the rest
    /// as they come, each with its id; the stream ends with the run. Fails when events after
    /// `after` were already dropped from the log.
    pub(crate) fn follow(self: &Arc<Self>, after: Option<u64>) -> Result<BoxStream<'static, (u64, Value)>, Evicted> {
        let after = {
            let mut log = lock(&self.log);
            let oldest = log.events.front().map_or(log.last_id + 1, |(id, _)| *id);
            let after = after.unwrap_or(oldest - 1);
            if after + 1 < oldest {
                return Err(Evicted { oldest });
            }
            log.followers += 1;
            after
        };
        let follower = Follower {
            run: Arc::clone(self),
            cursor: after,
            changed: self.changed.subscribe(),
        };
        Ok(futures::stream::unfold(follower, |mut f| async move {
            loop {
                f.changed.borrow_and_update();
                let next = {
                    let log = lock(&f.run.log);
                    match log.events.iter().find(|(id, _)| *id > f.cursor) {
                        // Fell behind by more than the log holds: disconnected.
                        Some((id, _)) if *id > f.cursor + 1 => return None,
                        Some((id, event)) => Some((*id, event.clone())),
                        None if log.done => return None,
                        None => None,
                    }
                };
                match next {
                    Some((id, event)) => {
                        f.cursor = id;
                        return Some(((id, event), f));
                    }
                    None => {
                        if f.changed.changed().await.is_err() {
                            return None;
                        }
                    }
                }
            }
        })
        .boxed())
    }
}

/// One client following a run; leaving may cancel the run.
struct Follower {
    run: Arc<LiveRun>,
    cursor: u64,
    changed: watch::Receiver<u64>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut log = lock(&self.run.log);
        log.followers = log.followers.saturating_sub(1);
        if log.followers == 0 && !log.done && self.run.cancel_on_disconnect {
            self.run.cancel.cancel();
        }
    }
}

/// Drives a streamed run on its own task: every event into the run's log; once the run has
/// ended it stays followable for [`KEEP_FINISHED`], then it is forgotten.
pub(crate) fn drive(
    runs: Arc<crate::AppState>,
    agent: String,
    run_id: String,
    run: Arc<LiveRun>,
    events: BoxStream<'static, Value>,
) {
    tokio::spawn(async move {
        let mut events = events;
        while let Some(event) = events.next().await {
            run.push(event);
        }
        drop(events);
        run.finish();
        tokio::time::sleep(KEEP_FINISHED).await;
        runs.live.remove(&agent, &run_id, &run);
    });
}

/// Runs `run` to its end on its own task (so a client that goes away does not end it), and
/// forgets the run once it has ended. With `cancel_on_disconnect`, a caller that goes away
/// cancels it.
pub(crate) async fn run_detached<T: Send + 'static>(
    state: Arc<crate::AppState>,
    agent: String,
    run_id: String,
    live: Arc<LiveRun>,
    run: futures::future::BoxFuture<'static, T>,
) -> Option<T> {
    struct OnDrop(Option<Arc<LiveRun>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            if let Some(run) = self.0.take()
                && run.cancel_on_disconnect
            {
                run.cancel.cancel();
            }
        }
    }
    let mut guard = OnDrop(Some(Arc::clone(&live)));
    let handle = tokio::spawn(async move {
        let out = run.await;
        live.finish();
        state.live.remove(&agent, &run_id, &live);
        out
    });
    let out = handle.await.ok();
    guard.0 = None;
    out
}
