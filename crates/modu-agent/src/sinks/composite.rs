//! [`CompositeEventSink`]: fan-out to several sinks, each isolated behind its own queue.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::event::{AgentEvent, EventSink, SinkError};

/// The default queue capacity per sink.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;
/// The default time one `publish` of a wrapped sink may take before it is abandoned.
pub const DEFAULT_PUBLISH_TIMEOUT: Duration = Duration::from_secs(30);

enum Msg {
    Event(Arc<AgentEvent>),
    Flush(oneshot::Sender<()>),
    Stop,
}

#[derive(Debug, Default)]
struct Counters {
    delivered: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    panicked: AtomicU64,
    timed_out: AtomicU64,
}

/// Counters of one sink inside a [`CompositeEventSink`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkStats {
    /// The sink's name (given to [`CompositeEventSinkBuilder::sink`]).
    pub name: String,
    /// Events the sink handled without error.
    pub delivered: u64,
    /// Events never handed to the sink: its queue was full, or it was shut down.
    pub dropped: u64,
    /// Events for which the sink returned an error.
    pub failed: u64,
    /// Events during which the sink panicked.
    pub panicked: u64,
    /// Events the sink did not handle within the publish timeout (abandoned).
    pub timed_out: u64,
}

impl SinkStats {
    /// Events lost or not handled successfully (dropped + failed + panicked + timed out).
    pub fn lost(&self) -> u64 {
        self.dropped + self.failed + self.panicked + self.timed_out
    }
}

struct Slot {
    name: String,
    sink: Arc<dyn EventSink>,
    tx: mpsc::Sender<Msg>,
    rx: Mutex<Option<mpsc::Receiver<Msg>>>,
    counters: Arc<Counters>,
}

struct Inner {
    slots: Vec<Slot>,
    publish_timeout: Option<Duration>,
    workers: OnceLock<Mutex<Vec<JoinHandle<()>>>>,
    closed: AtomicBool,
}

/// Sends every event to several sinks without ever waiting for them.
///
/// # Mechanism
///
/// Each wrapped sink gets a **bounded queue** (capacity [`DEFAULT_QUEUE_CAPACITY`] unless
/// [`CompositeEventSinkBuilder::capacity`] says otherwise) and **its own tokio task** that drains
/// it, calling the sink's `publish` for one event at a time, in order.
///
/// [`publish`](EventSink::publish) on the composite wraps the event in an `Arc` once and
/// `try_send`s it to every queue. It never awaits a sink: its cost is a clone of the event and
/// one channel operation per sink, whatever the sinks do. So the run loop may keep awaiting
/// `publish` inline.
///
/// * A **slow** sink only fills its own queue; when the queue is full, further events for that
///   sink are **dropped and counted** ([`SinkStats::dropped`]). Other sinks are unaffected.
/// * A sink that returns an **error** is counted ([`SinkStats::failed`]); a sink that
///   **panics** is caught (`catch_unwind`) and counted ([`SinkStats::panicked`]); a sink whose
///   `publish` takes longer than the publish timeout ([`DEFAULT_PUBLISH_TIMEOUT`], see
///   [`CompositeEventSinkBuilder::publish_timeout`]) is abandoned for that event and counted
///   ([`SinkStats::timed_out`]). Its task goes on with the next event.
/// * Failures are reported through `tracing::warn!` (target `modu::sinks`): the first three
///   of each kind per sink, then at every power of two, so a broken sink cannot flood the log.
///
/// The composite itself never fails: `publish` always returns `Ok`.
///
/// The drain tasks start on the first `publish` (on the tokio runtime running it), so a
/// composite can be built outside a runtime. They end when the composite is dropped (after
/// draining what is queued) or on [`shutdown`](Self::shutdown). Call
/// [`flush`](Self::flush) (tests, before reading a sink's output) or
/// [`shutdown`](Self::shutdown) (process exit) to wait, with a bound, for queued events.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use modu_agent::sinks::CompositeEventSink;
/// use modu_core::{AgentEvent, CollectingEventSink, EventSink};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let collected = Arc::new(CollectingEventSink::new());
/// let sink = CompositeEventSink::builder()
///     .sink("collect", collected.clone())
///     .capacity(256)
///     .build();
/// sink.publish(&AgentEvent::CheckpointSaved { run_id: "r1".into() }).await.unwrap();
/// assert!(sink.flush(Duration::from_secs(1)).await);
/// assert_eq!(collected.events().len(), 1);
/// assert_eq!(sink.stats()[0].delivered, 1);
/// # }
/// ```
#[derive(Clone)]
pub struct CompositeEventSink {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CompositeEventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeEventSink")
            .field(
                "sinks",
                &self.inner.slots.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            )
            .field("publish_timeout", &self.inner.publish_timeout)
            .finish_non_exhaustive()
    }
}

/// Builds a [`CompositeEventSink`].
pub struct CompositeEventSinkBuilder {
    sinks: Vec<(String, Arc<dyn EventSink>, Option<usize>)>,
    capacity: usize,
    publish_timeout: Option<Duration>,
}

impl std::fmt::Debug for CompositeEventSinkBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeEventSinkBuilder")
            .field(
                "sinks",
                &self.sinks.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>(),
            )
            .field("capacity", &self.capacity)
            .field("publish_timeout", &self.publish_timeout)
            .finish()
    }
}

impl CompositeEventSinkBuilder {
    /// Adds a sink under a name (used in stats and warnings).
    pub fn sink(mut self, name: impl Into<String>, sink: Arc<dyn EventSink>) -> Self {
        self.sinks.push((name.into(), sink, None));
        self
    }

    /// Adds a sink with its own queue capacity (instead of [`capacity`](Self::capacity)).
    pub fn sink_with_capacity(mut self, name: impl Into<String>, sink: Arc<dyn EventSink>, capacity: usize) -> Self {
        self.sinks.push((name.into(), sink, Some(capacity.max(1))));
        self
    }

    /// The queue capacity of every sink added without its own (at least 1).
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// How long one `publish` of a wrapped sink may take; `None` waits for ever.
    pub fn publish_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.publish_timeout = timeout;
        self
    }

    /// Builds the composite. No runtime is needed yet: the drain tasks start on first use.
    pub fn build(self) -> CompositeEventSink {
        let slots = self
            .sinks
            .into_iter()
            .map(|(name, sink, capacity)| {
                let (tx, rx) = mpsc::channel(capacity.unwrap_or(self.capacity));
                Slot {
                    name,
                    sink,
                    tx,
                    rx: Mutex::new(Some(rx)),
                    counters: Arc::new(Counters::default()),
                }
            })
            .collect();
        CompositeEventSink {
            inner: Arc::new(Inner {
                slots,
                publish_timeout: self.publish_timeout,
                workers: OnceLock::new(),
                closed: AtomicBool::new(false),
            }),
        }
    }
}

fn should_warn(count: u64) -> bool {
    count <= 3 || count.is_power_of_two()
}

async fn with_timeout<F: Future>(timeout: Option<Duration>, f: F) -> Option<F::Output> {
    match timeout {
        Some(t) => tokio::time::timeout(t, f).await.ok(),
        None => Some(f.await),
    }
}

async fn drain(
    name: String,
    sink: Arc<dyn EventSink>,
    mut rx: mpsc::Receiver<Msg>,
    counters: Arc<Counters>,
    timeout: Option<Duration>,
) {
    while let Some(msg) = rx.recv().await {
        let event = match msg {
            Msg::Event(e) => e,
            Msg::Flush(ack) => {
                let _ = ack.send(());
                continue;
            }
            Msg::Stop => break,
        };
        let call = AssertUnwindSafe(sink.publish(&event)).catch_unwind();
        match with_timeout(timeout, call).await {
            Some(Ok(Ok(()))) => {
                counters.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Some(Ok(Err(err))) => {
                let n = counters.failed.fetch_add(1, Ordering::Relaxed) + 1;
                if should_warn(n) {
                    tracing::warn!(target: "modu::sinks", sink = %name, event = event.kind(), error = %err, failures = n, "event sink failed");
                }
            }
            Some(Err(panic)) => {
                let n = counters.panicked.fetch_add(1, Ordering::Relaxed) + 1;
                if should_warn(n) {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "non-string panic payload".to_owned());
                    tracing::warn!(target: "modu::sinks", sink = %name, event = event.kind(), panic = %what, panics = n, "event sink panicked");
                }
            }
            None => {
                let n = counters.timed_out.fetch_add(1, Ordering::Relaxed) + 1;
                if should_warn(n) {
                    tracing::warn!(target: "modu::sinks", sink = %name, event = event.kind(), timeouts = n, "event sink timed out; event abandoned");
                }
            }
        }
    }
}

impl CompositeEventSink {
    /// Starts building a composite.
    pub fn builder() -> CompositeEventSinkBuilder {
        CompositeEventSinkBuilder {
            sinks: Vec::new(),
            capacity: DEFAULT_QUEUE_CAPACITY,
            publish_timeout: Some(DEFAULT_PUBLISH_TIMEOUT),
        }
    }

    /// One sink behind a queue: shields the run loop from any sink (slow, failing, panicking).
    pub fn isolate(name: impl Into<String>, sink: Arc<dyn EventSink>) -> Self {
        Self::builder().sink(name, sink).build()
    }

    /// Spawns the drain tasks once, on the current runtime. `false` without a runtime.
    fn ensure_started(&self) -> bool {
        if self.inner.workers.get().is_some() {
            return true;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return false;
        }
        self.inner.workers.get_or_init(|| {
            let handles = self
                .inner
                .slots
                .iter()
                .filter_map(|slot| {
                    let rx = slot.rx.lock().unwrap_or_else(PoisonError::into_inner).take()?;
                    Some(tokio::spawn(drain(
                        slot.name.clone(),
                        Arc::clone(&slot.sink),
                        rx,
                        Arc::clone(&slot.counters),
                        self.inner.publish_timeout,
                    )))
                })
                .collect();
            Mutex::new(handles)
        });
        true
    }

    /// The counters of every sink, in the order they were added.
    pub fn stats(&self) -> Vec<SinkStats> {
        self.inner
            .slots
            .iter()
            .map(|s| SinkStats {
                name: s.name.clone(),
                delivered: s.counters.delivered.load(Ordering::Relaxed),
                dropped: s.counters.dropped.load(Ordering::Relaxed),
                failed: s.counters.failed.load(Ordering::Relaxed),
                panicked: s.counters.panicked.load(Ordering::Relaxed),
                timed_out: s.counters.timed_out.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Sends the event to every queue without waiting; full queues drop it (counted).
    pub fn publish_now(&self, event: &AgentEvent) {
        if self.inner.slots.is_empty() {
            return;
        }
        let started = !self.inner.closed.load(Ordering::Acquire) && self.ensure_started();
        let event = Arc::new(event.clone());
        for slot in &self.inner.slots {
            let sent = started && slot.tx.try_send(Msg::Event(Arc::clone(&event))).is_ok();
            if !sent {
                let n = slot.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if should_warn(n) {
                    tracing::warn!(target: "modu::sinks", sink = %slot.name, event = event.kind(), dropped = n, "event sink queue full or closed; event dropped");
                }
            }
        }
    }

    /// Waits until every sink has handled what was queued before this call, for at most
    /// `timeout`. Returns whether all sinks caught up in time (a hung sink makes it `false`;
    /// the events stay queued).
    pub async fn flush(&self, timeout: Duration) -> bool {
        if !self.ensure_started() {
            return self.inner.slots.is_empty();
        }
        // One marker per queue, concurrently: a stuck sink does not hold up the others' flush.
        let all = futures::future::join_all(self.inner.slots.iter().map(|slot| async move {
            let (tx, rx) = oneshot::channel();
            slot.tx.send(Msg::Flush(tx)).await.is_ok() && rx.await.is_ok()
        }));
        tokio::time::timeout(timeout, all)
            .await
            .is_ok_and(|oks| oks.into_iter().all(|ok| ok))
    }

    /// Drains the queues (at most `timeout`), then stops the drain tasks; tasks still busy
    /// after the timeout are aborted. Later events are dropped (counted). Returns whether
    /// everything queued was handled.
    pub async fn shutdown(&self, timeout: Duration) -> bool {
        if !self.ensure_started() {
            return self.inner.slots.is_empty();
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let drained = self.flush(timeout).await;
        self.inner.closed.store(true, Ordering::Release);
        for slot in &self.inner.slots {
            // A full queue belongs to a stuck sink: its task is aborted below.
            let _ = slot.tx.try_send(Msg::Stop);
        }
        // Caught-up tasks need a moment to see `Stop` even when the drain used the budget.
        let deadline = deadline.max(tokio::time::Instant::now() + Duration::from_millis(50));
        let handles: Vec<JoinHandle<()>> = match self.inner.workers.get() {
            Some(w) => std::mem::take(&mut *w.lock().unwrap_or_else(PoisonError::into_inner)),
            None => Vec::new(),
        };
        let mut stopped = true;
        for mut h in handles {
            if tokio::time::timeout_at(deadline, &mut h).await.is_err() {
                h.abort();
                stopped = false;
            }
        }
        drained && stopped
    }
}

#[async_trait]
impl EventSink for CompositeEventSink {
    /// Queues the event for every sink; never waits for a sink and never fails.
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        self.publish_now(event);
        Ok(())
    }

    /// Whether any of its sinks wants text deltas.
    fn wants_deltas(&self) -> bool {
        self.inner.slots.iter().any(|s| s.sink.wants_deltas())
    }
}
