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
//!   410, and a client that falls that far behind is told so ([`Followed::Behind`]), then
//!   disconnected.
//! - A run stays here [`KEEP_FINISHED`] after it ended, so a late reconnect still reads its end.
//! - Every resume of a paused run claims the paused run's id here for as long as it runs, so a
//!   second resume of it (from whichever endpoint) is refused: run control and A2A resume under
//!   the paused id itself; an AG-UI resume runs under a new id and claims the paused one beside
//!   it (a claim: following the paused id, or cancelling it through run control, does not
//!   reach the resume; A2A's `CancelTask` of a task resumed so does).

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
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    /// The runs, by the id their clients see.
    runs: HashMap<(String, String), Arc<LiveRun>>,
    /// The paused runs being resumed under another id, by the paused run's id.
    resuming: HashMap<(String, String), Arc<LiveRun>>,
    /// How many decisions or answers are being recorded on each paused run: no run under its
    /// id nor resume of it starts meanwhile (its first save would write over them).
    deciding: HashMap<(String, String), usize>,
}

impl Registry {
    /// Whether a run with this id, or a resume of the paused run with this id, is in flight.
    fn in_flight(&self, key: &(String, String)) -> bool {
        let running = |map: &HashMap<(String, String), Arc<LiveRun>>| map.get(key).is_some_and(|run| !run.is_done());
        running(&self.runs) || running(&self.resuming)
    }
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
    /// The paused run this run resumes under a new id (and claims while it runs).
    resumes: Option<String>,
    /// Whether its events are kept for followers (an OpenAI run's are not: it is registered
    /// only so that it is not resumed or reused while it runs, and can be cancelled).
    followable: std::sync::atomic::AtomicBool,
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

/// A claim on a paused run while a decision or answer is recorded (see
/// [`LiveRuns::deciding`]); released when dropped.
pub(crate) struct Deciding<'a> {
    live: &'a LiveRuns,
    key: (String, String),
}

impl Drop for Deciding<'_> {
    fn drop(&mut self) {
        let mut registry = lock(&self.live.registry);
        if let Some(count) = registry.deciding.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                registry.deciding.remove(&self.key);
            }
        }
    }
}

/// Why a run cannot be followed from an event id.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unfollowable {
    /// The events after the id were dropped from the log; `oldest` is the oldest it still has.
    Evicted {
        /// The oldest event id the log still has.
        oldest: u64,
    },
    /// The run never sent an event with this id; `last` is the newest it sent.
    NotSent {
        /// The newest event id of the run.
        last: u64,
    },
}

impl LiveRuns {
    /// Registers a run (in place of an ended one with the same id); `None` when a run with
    /// this id is in flight. A run that resumes the paused run `paused` under a new id also
    /// claims the paused id while it runs, so that neither a run under that id nor another
    /// resume of the paused run starts meanwhile: `None` when either id is in flight (run or
    /// claimed).
    pub(crate) fn start(
        &self,
        agent: &str,
        run_id: &str,
        paused: Option<&str>,
        principal: &Principal,
        cancel_on_disconnect: bool,
    ) -> Option<Arc<LiveRun>> {
        let mut registry = lock(&self.registry);
        let key = (agent.to_owned(), run_id.to_owned());
        let paused_key = paused
            .filter(|paused| *paused != run_id)
            .map(|paused| (agent.to_owned(), paused.to_owned()));
        let busy = |key: &(String, String)| registry.in_flight(key) || registry.deciding.contains_key(key);
        if busy(&key) || paused_key.as_ref().is_some_and(busy) {
            return None;
        }
        let run = Arc::new(LiveRun {
            owner: principal.user.clone(),
            cancel: CancellationToken::new(),
            cancel_on_disconnect,
            log: Mutex::new(Log::default()),
            changed: watch::channel(0).0,
            resumes: paused_key.as_ref().map(|(_, paused)| paused.clone()),
            followable: std::sync::atomic::AtomicBool::new(true),
        });
        registry.runs.insert(key, Arc::clone(&run));
        if let Some(paused_key) = paused_key {
            registry.resuming.insert(paused_key, Arc::clone(&run));
        }
        Some(run)
    }

    /// The run, if it is in flight (or ended less than [`KEEP_FINISHED`] ago) and the caller's.
    pub(crate) fn get(&self, agent: &str, run_id: &str, principal: &Principal) -> Option<Arc<LiveRun>> {
        lock(&self.registry)
            .runs
            .get(&(agent.to_owned(), run_id.to_owned()))
            .filter(|run| run.owner == principal.user)
            .cloned()
    }

    /// The resume in flight of the caller's paused run `paused_id` that runs under another id
    /// (an AG-UI resume), if any.
    pub(crate) fn resuming(&self, agent: &str, paused_id: &str, principal: &Principal) -> Option<Arc<LiveRun>> {
        lock(&self.registry)
            .resuming
            .get(&(agent.to_owned(), paused_id.to_owned()))
            .filter(|run| run.owner == principal.user && !run.is_done())
            .cloned()
    }

    /// Claims the paused run `run_id` while a decision or answer is recorded on it: `None` when
    /// the caller's run with this id, or a resume of it, is in flight. While the claim is held
    /// no run under this id nor resume of it starts ([`LiveRuns::start`] answers `None`), so
    /// the resume's first save cannot write over what is being recorded.
    pub(crate) fn deciding(&self, agent: &str, run_id: &str, principal: &Principal) -> Option<Deciding<'_>> {
        let mut registry = lock(&self.registry);
        let key = (agent.to_owned(), run_id.to_owned());
        let mine = [&registry.runs, &registry.resuming]
            .into_iter()
            .filter_map(|map| map.get(&key))
            .any(|run| run.owner == principal.user && !run.is_done());
        if mine {
            return None;
        }
        *registry.deciding.entry(key.clone()).or_default() += 1;
        Some(Deciding { live: self, key })
    }

    /// Whether a run with this id is in flight (not ended), whoever's it is.
    pub(crate) fn running(&self, agent: &str, run_id: &str) -> bool {
        lock(&self.registry)
            .runs
            .get(&(agent.to_owned(), run_id.to_owned()))
            .is_some_and(|run| !run.is_done())
    }

    /// Whether a run with this id is kept: in flight, or ended less than [`KEEP_FINISHED`] ago
    /// (whoever's it is).
    pub(crate) fn kept(&self, agent: &str, run_id: &str) -> bool {
        lock(&self.registry)
            .runs
            .contains_key(&(agent.to_owned(), run_id.to_owned()))
    }

    /// Forgets a run (and its claim on the paused run it resumes).
    pub(crate) fn remove(&self, agent: &str, run_id: &str, run: &Arc<LiveRun>) {
        let mut registry = lock(&self.registry);
        let key = (agent.to_owned(), run_id.to_owned());
        if registry.runs.get(&key).is_some_and(|r| Arc::ptr_eq(r, run)) {
            registry.runs.remove(&key);
        }
        if let Some(paused) = &run.resumes {
            let key = (agent.to_owned(), paused.clone());
            if registry.resuming.get(&key).is_some_and(|r| Arc::ptr_eq(r, run)) {
                registry.resuming.remove(&key);
            }
        }
    }
}

impl LiveRun {
    /// Whether its events can be followed (`GET .../events`, `Last-Event-ID`).
    pub(crate) fn followable(&self) -> bool {
        self.followable.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Marks a run whose events are not kept (an OpenAI run): following it is 404 (410 with
    /// `Last-Event-ID`), as for a run the server does not have.
    pub(crate) fn not_followable(&self) {
        self.followable.store(false, std::sync::atomic::Ordering::SeqCst);
    }

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

    /// Waits until the run has ended.
    pub(crate) async fn ended(&self) {
        let mut changed = self.changed.subscribe();
        while !self.is_done() {
            // The sender lives as long as the run: an error cannot happen while it is held.
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// Marks the run ended (its followers' streams end).
    pub(crate) fn finish(&self) {
        let id = {
            let mut log = lock(&self.log);
            log.done = true;
            log.last_id
        };
        self.changed.send_replace(id);
    }

    /// The run's events after `after` (`None`: from the oldest the log holds), then the rest
    /// as they come, each with its id; the stream ends with the run. Fails when events after
    /// `after` were already dropped from the log, or when the run never sent `after` (an id
    /// the client cannot have seen, up to `u64::MAX`).
    pub(crate) fn follow(self: &Arc<Self>, after: Option<u64>) -> Result<BoxStream<'static, Followed>, Unfollowable> {
        let after = {
            let mut log = lock(&self.log);
            let oldest = log.events.front().map_or(log.last_id.saturating_add(1), |(id, _)| *id);
            let after = match after {
                None => oldest.saturating_sub(1),
                Some(after) if after > log.last_id => return Err(Unfollowable::NotSent { last: log.last_id }),
                Some(after) if after.saturating_add(1) < oldest => return Err(Unfollowable::Evicted { oldest }),
                Some(after) => after,
            };
            log.followers += 1;
            after
        };
        let follower = Follower {
            run: Arc::clone(self),
            cursor: after,
            changed: self.changed.subscribe(),
            behind: false,
        };
        Ok(futures::stream::unfold(follower, |mut f| async move {
            if f.behind {
                return None;
            }
            loop {
                f.changed.borrow_and_update();
                let next = {
                    let log = lock(&f.run.log);
                    match log.events.iter().find(|(id, _)| *id > f.cursor) {
                        // Fell behind by more than the log holds: told so, then disconnected.
                        Some((id, _)) if *id > f.cursor.saturating_add(1) => Err(()),
                        Some((id, event)) => Ok(Some((*id, event.clone()))),
                        None if log.done => return None,
                        None => Ok(None),
                    }
                };
                let Ok(next) = next else {
                    f.behind = true;
                    return Some((Followed::Behind, f));
                };
                match next {
                    Some((id, event)) => {
                        f.cursor = id;
                        return Some((Followed::Event(id, event), f));
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
    /// It fell behind the log and was told so: its stream ends.
    behind: bool,
}

/// What a client following a run gets next.
pub(crate) enum Followed {
    /// The run's event with this id.
    Event(u64, Value),
    /// The client fell more than [`EVENT_BUFFER`] events behind the run: the events it has not
    /// read yet are no longer kept, and its stream ends after this (the run goes on).
    Behind,
}

/// What a client that fell behind is told (see [`Followed::Behind`]).
pub(crate) const BEHIND: &str = "this client fell more than 1,024 events behind the run and was disconnected; the run goes on, but the events it missed are no longer kept";

impl Drop for Follower {
    fn drop(&mut self) {
        let mut log = lock(&self.run.log);
        log.followers = log.followers.saturating_sub(1);
        // A follower that fell behind was disconnected by the server, and told the run goes
        // on: its client did not go away, so it cancels nothing.
        if log.followers == 0 && !log.done && self.run.cancel_on_disconnect && !self.behind {
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

#[cfg(test)]
mod tests {
    /// What a client that fell behind is told names the log's size.
    #[test]
    fn the_behind_message_names_the_buffer() {
        let size = super::EVENT_BUFFER.to_string();
        let named = format!("{},{}", &size[..1], &size[1..]);
        assert!(super::BEHIND.contains(&named), "{}", super::BEHIND);
    }
}
