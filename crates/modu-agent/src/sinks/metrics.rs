//! [`MetricsEventSink`]: counters and histograms through a [`MetricRecorder`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use crate::event::{AgentEvent, EventSink, SinkError};

/// The metric names [`MetricsEventSink`] records.
pub mod names {
    /// Counter: runs started. Labels: `agent`, `resumed` (`true`/`false`).
    pub const RUNS_STARTED: &str = "modu.runs.started";
    /// Counter: runs completed. Labels: `agent`.
    pub const RUNS_COMPLETED: &str = "modu.runs.completed";
    /// Counter: runs failed. Labels: `agent`, `error_type` (the `AgentError` variant).
    pub const RUNS_FAILED: &str = "modu.runs.failed";
    /// Counter: runs paused for a person (approvals, input). Labels: `agent`. A paused run is
    /// not a failed one.
    pub const RUNS_PAUSED: &str = "modu.runs.paused";
    /// Histogram: run duration in milliseconds. Labels: `agent`, `outcome` (`ok`/`paused`/`error`).
    pub const RUN_DURATION_MS: &str = "modu.run.duration_ms";
    /// Counter: model calls, the run's own and those its tools make on its behalf (MCP
    /// sampling). Labels: `model`, `outcome` (`ok` or the error kind).
    pub const MODEL_CALLS: &str = "modu.model.calls";
    /// Histogram: model call latency in milliseconds (successful calls). Labels: `model`.
    pub const MODEL_DURATION_MS: &str = "modu.model.duration_ms";
    /// Counter: input (prompt) tokens, of the run's model calls and its tools' ones. Labels: `model`.
    pub const TOKENS_INPUT: &str = "modu.tokens.input";
    /// Counter: output (completion) tokens, of the run's model calls and its tools' ones. Labels: `model`.
    pub const TOKENS_OUTPUT: &str = "modu.tokens.output";
    /// Counter: tool calls. Labels: `tool`, `outcome` (`ok` or the `ToolErrorKind`, e.g.
    /// `execution`, `timeout`, `validation`, `not_found`).
    pub const TOOL_CALLS: &str = "modu.tool.calls";
    /// Histogram: tool call latency in milliseconds. Labels: `tool`, `outcome`.
    pub const TOOL_DURATION_MS: &str = "modu.tool.duration_ms";
    /// Counter: store failures. Labels: `operation`.
    pub const STORE_FAILURES: &str = "modu.store.failures";
}

/// Where [`MetricsEventSink`] sends its measurements (Prometheus, StatsD, OpenTelemetry…).
///
/// Implementations must be cheap and must not block: they are called from the sink's
/// `publish`.
pub trait MetricRecorder: Send + Sync {
    /// Adds `value` to a counter.
    fn add_counter(&self, name: &str, value: u64, labels: &[(&str, &str)]);
    /// Records one observation in a histogram.
    fn record_histogram(&self, name: &str, value: f64, labels: &[(&str, &str)]);
}

/// A metric's identity: its name and sorted labels.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricKey {
    /// The metric's name.
    pub name: String,
    /// The labels, sorted by key.
    pub labels: Vec<(String, String)>,
}

impl MetricKey {
    fn new(name: &str, labels: &[(&str, &str)]) -> Self {
        let mut labels: Vec<(String, String)> =
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        labels.sort();
        MetricKey {
            name: name.to_owned(),
            labels,
        }
    }

    fn matches(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.name == name
            && labels
                .iter()
                .all(|(k, v)| self.labels.iter().any(|(lk, lv)| lk == k && lv == v))
    }
}

/// The observations of one histogram series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Every recorded value, in order.
    pub values: Vec<f64>,
}

impl HistogramSnapshot {
    /// How many values were recorded.
    pub fn count(&self) -> usize {
        self.values.len()
    }
    /// Their sum.
    pub fn sum(&self) -> f64 {
        self.values.iter().sum()
    }
}

/// A copy of everything an [`InMemoryMetricRecorder`] holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Counter values per series.
    pub counters: BTreeMap<MetricKey, u64>,
    /// Histogram observations per series.
    pub histograms: BTreeMap<MetricKey, HistogramSnapshot>,
}

impl MetricsSnapshot {
    /// The sum of the counter `name` over all series whose labels include `labels`
    /// (`&[]` sums all series).
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .iter()
            .filter(|(k, _)| k.matches(name, labels))
            .map(|(_, v)| *v)
            .sum()
    }

    /// The observations of the histogram `name` over all series whose labels include `labels`.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> HistogramSnapshot {
        let mut out = HistogramSnapshot::default();
        for (k, h) in &self.histograms {
            if k.matches(name, labels) {
                out.values.extend_from_slice(&h.values);
            }
        }
        out
    }
}

/// A [`MetricRecorder`] keeping everything in memory (tests, debugging, a `/metrics` page of
/// your own). Clones share the data.
#[derive(Clone, Debug, Default)]
pub struct InMemoryMetricRecorder {
    data: Arc<Mutex<MetricsSnapshot>>,
}

impl InMemoryMetricRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the current values.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.data.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Forgets everything.
    pub fn reset(&self) {
        *self.data.lock().unwrap_or_else(PoisonError::into_inner) = MetricsSnapshot::default();
    }
}

impl MetricRecorder for InMemoryMetricRecorder {
    fn add_counter(&self, name: &str, value: u64, labels: &[(&str, &str)]) {
        let mut d = self.data.lock().unwrap_or_else(PoisonError::into_inner);
        *d.counters.entry(MetricKey::new(name, labels)).or_insert(0) += value;
    }

    fn record_histogram(&self, name: &str, value: f64, labels: &[(&str, &str)]) {
        let mut d = self.data.lock().unwrap_or_else(PoisonError::into_inner);
        d.histograms
            .entry(MetricKey::new(name, labels))
            .or_default()
            .values
            .push(value);
    }
}

/// Turns events into metrics (see [`names`] for what is recorded and with which labels).
///
/// ```
/// use std::sync::Arc;
/// use modu_agent::sinks::{InMemoryMetricRecorder, MetricsEventSink, metric_names};
/// use modu_core::{AgentEvent, EventSink, Usage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let recorder = InMemoryMetricRecorder::new();
/// let sink = MetricsEventSink::new(Arc::new(recorder.clone()));
/// sink.publish(&AgentEvent::ModelCallFinished {
///     run_id: "r1".into(), model: "m".into(), call: 1, usage: Usage::new(12, 3),
///     finish_reason: None, tool_calls: 0, duration_ms: 40, answered_by: None,
/// }).await.unwrap();
/// let snap = recorder.snapshot();
/// assert_eq!(snap.counter(metric_names::TOKENS_INPUT, &[("model", "m")]), 12);
/// assert_eq!(snap.histogram(metric_names::MODEL_DURATION_MS, &[]).sum(), 40.0);
/// # }
/// ```
#[derive(Clone)]
pub struct MetricsEventSink {
    recorder: Arc<dyn MetricRecorder>,
}

impl std::fmt::Debug for MetricsEventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsEventSink").finish_non_exhaustive()
    }
}

fn agent_error_type(error: &crate::error::AgentError) -> String {
    error.type_tag().unwrap_or_else(|| "unknown".to_owned())
}

impl MetricsEventSink {
    /// A sink recording into `recorder`.
    pub fn new(recorder: Arc<dyn MetricRecorder>) -> Self {
        MetricsEventSink { recorder }
    }

    /// Records one event (synchronously).
    pub fn record(&self, event: &AgentEvent) {
        let r = &*self.recorder;
        match event {
            AgentEvent::RunStarted { agent, resumed, .. } => r.add_counter(
                names::RUNS_STARTED,
                1,
                &[("agent", agent), ("resumed", if *resumed { "true" } else { "false" })],
            ),
            AgentEvent::RunCompleted { agent, duration_ms, .. } => {
                r.add_counter(names::RUNS_COMPLETED, 1, &[("agent", agent)]);
                r.record_histogram(
                    names::RUN_DURATION_MS,
                    *duration_ms as f64,
                    &[("agent", agent), ("outcome", "ok")],
                );
            }
            AgentEvent::RunPaused { agent, duration_ms, .. } => {
                r.add_counter(names::RUNS_PAUSED, 1, &[("agent", agent)]);
                r.record_histogram(
                    names::RUN_DURATION_MS,
                    *duration_ms as f64,
                    &[("agent", agent), ("outcome", "paused")],
                );
            }
            AgentEvent::RunFailed {
                agent,
                error,
                duration_ms,
                ..
            } => {
                let ty = agent_error_type(error);
                r.add_counter(names::RUNS_FAILED, 1, &[("agent", agent), ("error_type", &ty)]);
                r.record_histogram(
                    names::RUN_DURATION_MS,
                    *duration_ms as f64,
                    &[("agent", agent), ("outcome", "error")],
                );
            }
            AgentEvent::ModelCallFinished {
                model,
                usage,
                duration_ms,
                answered_by,
                ..
            } => {
                // Tokens count for the model that answered (a fallback chain's member).
                let model = answered_by.as_ref().unwrap_or(model);
                answered_call(r, model, usage);
                r.record_histogram(names::MODEL_DURATION_MS, *duration_ms as f64, &[("model", model)]);
            }
            // A model call a tool made on the run's behalf (MCP sampling): its tokens are
            // spent like the run's own (it reports no duration).
            AgentEvent::ToolModelCall { model, usage, .. } => answered_call(r, model, usage),
            AgentEvent::ModelCallFailed { model, error_kind, .. } => {
                r.add_counter(
                    names::MODEL_CALLS,
                    1,
                    &[("model", model), ("outcome", error_kind.as_str())],
                );
            }
            AgentEvent::ToolCallFinished {
                tool,
                ok,
                duration_ms,
                error,
                ..
            } => {
                let outcome = if *ok {
                    "ok"
                } else {
                    error.as_ref().map_or("error", |e| e.kind.as_str())
                };
                r.add_counter(names::TOOL_CALLS, 1, &[("tool", tool), ("outcome", outcome)]);
                r.record_histogram(
                    names::TOOL_DURATION_MS,
                    *duration_ms as f64,
                    &[("tool", tool), ("outcome", outcome)],
                );
            }
            AgentEvent::StoreFailed { operation, .. } => {
                r.add_counter(names::STORE_FAILURES, 1, &[("operation", operation)]);
            }
            _ => {}
        }
    }
}

/// Counts an answered model call of `model` and the tokens it used.
fn answered_call(r: &dyn MetricRecorder, model: &str, usage: &crate::message::Usage) {
    r.add_counter(names::MODEL_CALLS, 1, &[("model", model), ("outcome", "ok")]);
    r.add_counter(names::TOKENS_INPUT, usage.input_tokens, &[("model", model)]);
    r.add_counter(names::TOKENS_OUTPUT, usage.output_tokens, &[("model", model)]);
}

#[async_trait]
impl EventSink for MetricsEventSink {
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        self.record(event);
        Ok(())
    }

    /// Metrics count calls, not text.
    fn wants_deltas(&self) -> bool {
        false
    }
}
