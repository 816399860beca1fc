//! The journal: the task that owns the Restate context turns each step a run asks for into one
//! `ctx.run` entry, and answers the step with the entry's (new or replayed) result.
//!
//! Every entry has the same name ([`STEP_NAME`]) and its result is an [`Envelope`] that carries
//! the step's key. So the entries need not be created in the same order on a replay as on the
//! first execution: when a replayed entry belongs to another step than the one it was created
//! for, its result is kept for the step it names (which has asked already, or will), and the
//! step that created it gets a new entry. Concurrent tool calls can thus run (and be journaled)
//! in whatever order they reach the journal, and still be replayed exactly.
//!
//! A step whose entry ends with Restate's cancellation (the invocation was cancelled) gets no
//! outcome: [`drive`] stops the run and returns the cancellation, for the handler to return.
//!
//! A step whose work panics (a tool, a model, a layer of the user's) is journaled as that panic,
//! and the run panics again with its message where it waits for the step: the agent ends the
//! run with `AgentError::Panicked`, as outside Restate. Unjournaled, the panic ended the
//! handler's attempt, and Restate retried it (and the call) again and again.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use restate_sdk::context::{ContextSideEffects, ObjectContext, RunFuture, RunRetryPolicy};
use restate_sdk::errors::{HandlerError, TerminalError};
use restate_sdk::serde::Json;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

/// The name of every journal entry modu writes (see the module docs for why it is one name).
pub const STEP_NAME: &str = "modu-step";

/// The code of the terminal error an entry ends with when the invocation is cancelled
/// (restate-sdk's `"cancelled"`, 409).
pub(crate) const CANCELLED: u16 = 409;

/// What a step produced, as it is journaled: a value or an error the run handles (a model or
/// tool error after the agent's own retries).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The step's result.
    Ok(serde_json::Value),
    /// The step failed; the run sees this error (typed again by the layer that asked).
    Err(serde_json::Value),
}

/// One journal entry's result: the step's key and its outcome.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// Which step this is (`model:<hash>#<n>`, `tool:<run id>/<call id>#<n>`).
    pub key: String,
    /// What it produced.
    pub outcome: Outcome,
}

/// How one attempt of a step ended inside `ctx.run`.
pub(crate) enum Attempt {
    /// Done: journal this outcome.
    Done(Outcome),
    /// A transient failure Restate should retry (only with Restate-side retries).
    Retry(String),
}

/// Runs one attempt of a step. Called again when the entry it fed was another step's.
pub(crate) type StepWork = Arc<dyn Fn() -> BoxFuture<'static, Attempt> + Send + Sync>;

/// A step a run asks the journal for.
pub(crate) struct StepRequest {
    /// The step's base key; the journal adds `#<n>`, the n-th step with this base.
    pub(crate) base: String,
    pub(crate) work: StepWork,
    /// With `Some`, transient failures are retried by Restate with this policy.
    pub(crate) retry: Option<RunRetryPolicy>,
    pub(crate) reply: oneshot::Sender<Result<Outcome, String>>,
}

/// The key of the journaled error of a step whose work panicked (`{"modu_panic": message}`).
const PANIC_KEY: &str = "modu_panic";

/// The outcome journaled for a work that panicked with `panic`.
fn panicked(panic: &(dyn std::any::Any + Send)) -> Outcome {
    Outcome::Err(serde_json::json!({ PANIC_KEY: modu_agent::panic_message(panic) }))
}

/// The message of a journaled panic, if `outcome` is one.
fn panic_of(outcome: &Outcome) -> Option<String> {
    let Outcome::Err(serde_json::Value::Object(map)) = outcome else {
        return None;
    };
    match (map.len(), map.get(PANIC_KEY)) {
        (1, Some(serde_json::Value::String(message))) => Some(message.clone()),
        _ => None,
    }
}

/// The handle the layers find in the task-local scope of a durable run.
#[derive(Clone)]
pub(crate) struct JournalHandle {
    tx: mpsc::UnboundedSender<StepRequest>,
}

tokio::task_local! {
    static JOURNAL: JournalHandle;
}

/// The journal of the durable run being polled, if any.
pub(crate) fn current() -> Option<JournalHandle> {
    JOURNAL.try_with(Clone::clone).ok()
}

impl JournalHandle {
    /// Asks the journal for a step and waits for its outcome (a step Restate gave up retrying
    /// ends with `Outcome::Err` holding the last attempt's message). `Err` when the journal is
    /// gone (the handler ended). A step whose work panicked panics again here, with the
    /// panic's message, for the agent's run to end with it.
    pub(crate) async fn step(
        &self,
        base: String,
        retry: Option<RunRetryPolicy>,
        work: StepWork,
    ) -> Result<Outcome, String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(StepRequest {
                base,
                work,
                retry,
                reply,
            })
            .map_err(|_| "the durable run's journal is closed".to_owned())?;
        let outcome = rx
            .await
            .map_err(|_| "the durable run's journal is closed".to_owned())??;
        if let Some(message) = panic_of(&outcome) {
            std::panic::resume_unwind(Box::new(message));
        }
        Ok(outcome)
    }
}

/// A step waiting for its outcome.
struct Waiting {
    work: StepWork,
    retry: Option<RunRetryPolicy>,
    reply: oneshot::Sender<Result<Outcome, String>>,
    /// Whether an entry is being written (or replayed) for it right now.
    assigned: bool,
}

/// Polls `run` (the agent's run) with the journal in its task-local scope, and writes the steps
/// it asks for into `ctx`'s journal. Returns `run`'s output.
///
/// When an entry ends with Restate's cancellation ([`CANCELLED`]: the invocation was
/// cancelled), the run is stopped where it is (dropped, its steps unanswered) and the
/// cancellation is returned: the run did not finish, so it has no outcome to store.
pub(crate) async fn drive<F>(ctx: &ObjectContext<'_>, run: F) -> Result<F::Output, TerminalError>
where
    F: Future,
{
    let (tx, mut rx) = mpsc::unbounded_channel();
    let run = JOURNAL.scope(JournalHandle { tx }, run);
    tokio::pin!(run);
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut waiting: HashMap<String, Waiting> = HashMap::new();
    // Keys in the order they asked (so entries are created in arrival order).
    let mut order: VecDeque<String> = VecDeque::new();
    // Replayed outcomes of steps that have not asked yet.
    let mut kept: HashMap<String, Outcome> = HashMap::new();
    let mut entries = FuturesUnordered::new();
    // One entry at a time proposes its result and waits for Restate to take it (see `entry`).
    let acks = Arc::new(Semaphore::new(1));
    loop {
        // Write (or replay) an entry for every step that has none.
        for key in &order {
            let Some(w) = waiting.get_mut(key) else { continue };
            if w.assigned {
                continue;
            }
            w.assigned = true;
            entries.push(entry(ctx, key.clone(), Arc::clone(&w.work), w.retry.clone(), &acks));
        }
        tokio::select! {
            out = &mut run => return Ok(out),
            Some(req) = rx.recv() => {
                let n = seen.entry(req.base.clone()).or_insert(0);
                let key = format!("{}#{n}", req.base);
                *n += 1;
                if let Some(outcome) = kept.remove(&key) {
                    let _ = req.reply.send(Ok(outcome));
                } else {
                    order.push_back(key.clone());
                    waiting.insert(key, Waiting { work: req.work, retry: req.retry, reply: req.reply, assigned: false });
                }
            }
            Some((created_for, result)) = entries.next(), if !entries.is_empty() => {
                match result {
                    Ok(envelope) => {
                        let owner = envelope.key;
                        if let Some(w) = waiting.remove(&owner) {
                            let _ = w.reply.send(Ok(envelope.outcome));
                        } else {
                            kept.insert(owner.clone(), envelope.outcome);
                        }
                        if owner != created_for && let Some(w) = waiting.get_mut(&created_for) {
                            // Its entry held another step's result: it needs one of its own.
                            w.assigned = false;
                        }
                    }
                    Err(error) if error.code() == CANCELLED => return Err(error),
                    Err(error) => {
                        // Restate gave up retrying: its terminal error carries the message of
                        // the last attempt, which names the step (`<key>\n<message>`).
                        let message = error.message().to_owned();
                        let (owner, message) = match message.split_once('\n') {
                            Some((owner, rest)) if owner.contains('#') => (owner.to_owned(), rest.to_owned()),
                            _ => (created_for.clone(), message),
                        };
                        let outcome = Outcome::Err(serde_json::Value::String(message));
                        if let Some(w) = waiting.remove(&owner) {
                            let _ = w.reply.send(Ok(outcome));
                        } else {
                            kept.insert(owner.clone(), outcome);
                        }
                        if owner != created_for && let Some(w) = waiting.get_mut(&created_for) {
                            w.assigned = false;
                        }
                    }
                }
                order.retain(|k| waiting.contains_key(k));
            }
        }
    }
}

/// One `ctx.run` entry for the step `key`: its result is replayed when the journal has it,
/// else `work` runs.
///
/// The works of concurrent entries (a turn's tool calls) run concurrently, but only one entry
/// at a time (holding the one permit of `acks`) goes on to propose its result and wait for
/// Restate's acknowledgement: restate-sdk 0.13's `ctx.run` futures each wait for the
/// invocation's input on one shared channel that wakes only the last of them, so a second
/// entry waiting at the same time could have its acknowledgement read by the other and wait
/// forever (the run hung with both results journaled).
fn entry<'ctx>(
    ctx: &ObjectContext<'ctx>,
    key: String,
    work: StepWork,
    retry: Option<RunRetryPolicy>,
    acks: &Arc<Semaphore>,
) -> BoxFuture<'ctx, (String, Result<Envelope, TerminalError>)> {
    let closure_key = key.clone();
    let restate_retries = retry.is_some();
    // The permit the work takes once it is done, released when the entry has its result.
    let held: Arc<std::sync::OnceLock<OwnedSemaphorePermit>> = Arc::default();
    let (acks, closure_held) = (Arc::clone(acks), Arc::clone(&held));
    let mut fut = ctx
        .run(move || async move {
            // A panic is the step's outcome (journaled, so the call is not made again).
            let attempt = match std::panic::AssertUnwindSafe(work()).catch_unwind().await {
                Ok(attempt) => attempt,
                Err(panic) => Attempt::Done(panicked(&*panic)),
            };
            // The semaphore is never closed; without a permit the entry would only risk the
            // wait this guards against.
            if let Ok(permit) = acks.acquire_owned().await {
                let _ = closure_held.set(permit);
            }
            match attempt {
                Attempt::Done(outcome) => Ok(Json(Envelope {
                    key: closure_key,
                    outcome,
                })),
                Attempt::Retry(message) if restate_retries => {
                    Err(HandlerError::from(format!("{closure_key}\n{message}")))
                }
                Attempt::Retry(message) => Ok(Json(Envelope {
                    key: closure_key,
                    outcome: Outcome::Err(serde_json::Value::String(message)),
                })),
            }
        })
        .name(STEP_NAME);
    if let Some(policy) = retry {
        fut = fut.retry_policy(policy);
    }
    Box::pin(async move {
        let result: Result<Json<Envelope>, TerminalError> = fut.await;
        // The work's future (with its clone) has ended: this releases the permit.
        drop(held);
        (key, result.map(|j| j.0))
    })
}
