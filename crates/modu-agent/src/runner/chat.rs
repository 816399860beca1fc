//! The chat stack of one model slot, built once when the agent is built:
//!
//! ```text
//! user chat layers → ModelRetryLayer → ModelCall (per-attempt events around the model) → ChatModel
//! ```
//!
//! What a call needs from its run rides in [`ChatRequest::extensions`], not in a task-local, so
//! a layer that moves the inner call to another task (tower `Buffer`, `tokio::spawn`) keeps
//! streaming. It sits in the extensions' own run slot ([`RunCall`], one shared allocation per
//! request, so the retry layer's copy of the request costs nothing): the [`DeltaSink`] (where
//! text deltas go; absent: nobody consumes them, and the model is asked for a whole answer), the
//! [`AttemptLog`] (the per-attempt events and the usage of failed attempts) and the attempt
//! counter. The run's deadline (the retry layer makes no retry whose wait would pass it) sits
//! beside it.

use std::any::Any;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, Either};
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;
use tower::{Layer, Service};

use super::emitter::Emitter;
use super::policy::DeltaRoute;
use crate::agent::RetryConfig;
use crate::error::AgentError;
use crate::event::AgentEvent;
use crate::message::Usage;
use crate::middleware::{ChatLayerFn, ChatService};
use crate::model::{ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, Extensions, ModelError};

/// Where a call's text deltas go, as events of its run.
#[derive(Clone)]
pub(crate) struct DeltaSink {
    pub(crate) emitter: Emitter,
    pub(crate) run_id: Arc<str>,
    pub(crate) route: DeltaRoute,
}

/// A retry's wait of `wait` from now, or `None` when it would end at or past the run's deadline
/// (model requests and tool invocations carry it in their extensions): that retry could never
/// be attempted, so the failure stands now instead of becoming the run's timeout later.
pub(crate) fn retry_wait(deadline: Option<Instant>, wait: Duration) -> Option<std::pin::Pin<Box<tokio::time::Sleep>>> {
    let until = Instant::now().checked_add(wait)?;
    match deadline {
        Some(deadline) if until >= deadline => None,
        _ => Some(Box::pin(tokio::time::sleep_until(until))),
    }
}

/// The run's side of one model request, in [`Extensions`]' run slot: where its deltas go, the
/// run's attempt log, and how many attempts the request has had.
pub(crate) struct RunCall {
    delta: Option<DeltaSink>,
    log: Arc<AttemptLog>,
    attempts: AtomicU32,
}

impl RunCall {
    /// The run slot's value for one request.
    pub(crate) fn slot(delta: Option<DeltaSink>, log: Arc<AttemptLog>) -> Arc<dyn Any + Send + Sync> {
        Arc::new(RunCall {
            delta,
            log,
            attempts: AtomicU32::new(0),
        })
    }

    fn of(extensions: &Extensions) -> Option<Arc<RunCall>> {
        Arc::clone(extensions.run.as_ref()?).downcast().ok()
    }
}

/// The run's side of its model calls: per-attempt events, the call counter that checkpoints
/// keep, and the usage of every attempt.
pub(crate) struct AttemptLog {
    emitter: Emitter,
    run_id: Arc<str>,
    /// The run's usage record (its total and its share by model).
    usage: Arc<Mutex<crate::context::RunUsage>>,
    calls: AtomicU32,
    /// The answering agent's `RetryConfig::max_attempts` (a handoff changes it).
    max_attempts: AtomicU32,
    /// The run's span: every attempt's `chat` span is its child, on whatever task it runs.
    span: tracing::Span,
}

impl AttemptLog {
    pub(crate) fn new(
        emitter: Emitter,
        run_id: Arc<str>,
        usage: Arc<Mutex<crate::context::RunUsage>>,
        calls_so_far: u32,
        max_attempts: u32,
        span: tracing::Span,
    ) -> Arc<Self> {
        Arc::new(AttemptLog {
            emitter,
            run_id,
            usage,
            calls: AtomicU32::new(calls_so_far),
            max_attempts: AtomicU32::new(max_attempts),
            span,
        })
    }

    /// Model requests made so far by the run (every attempt counts).
    pub(crate) fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The answering agent's attempts per request, for `ModelCallFailed::will_retry` (a
    /// handoff's target retries as its own `RetryConfig` says).
    pub(crate) fn set_max_attempts(&self, max_attempts: u32) {
        self.max_attempts.store(max_attempts, Ordering::Relaxed);
    }

    /// Adds an attempt's usage to the run's total and to `model`'s share.
    fn add_usage(&self, model: &str, usage: Usage) {
        crate::context::add_model_call(&self.usage, model, usage);
    }
}

/// Builds the chat stack of one model slot.
pub(crate) fn stack(model: Arc<dyn ChatModel>, user_layers: &[ChatLayerFn], retry: &RetryConfig) -> ChatService {
    let name = Arc::from(model.model_name());
    let service = ModelRetry::layer(retry.clone()).layer(ModelCall { model, name });
    crate::middleware::apply(ChatService::new(service), user_layers)
}

/// The model's answer to one attempt: streamed when the run's [`DeltaSink`] wants the deltas
/// (forwarding them as they arrive), otherwise asked whole. The model sees none of the run's
/// per-request data (a model that keeps its requests must not keep the run's event channel
/// open).
///
/// A whole answer's future stays small, so the attempt's future holds it in place; the
/// streaming one (the stream, a builder, the partial output) is boxed.
fn answer(
    model: Arc<dyn ChatModel>,
    mut request: ChatRequest,
    sink: Option<DeltaSink>,
) -> Either<impl Future<Output = Result<ChatResponse, ModelError>>, BoxFuture<'static, Result<ChatResponse, ModelError>>>
{
    request.extensions.deadline = None;
    request.extensions.run = None;
    match sink {
        None => Either::Left(async move { model.complete(request).await }),
        Some(sink) => Either::Right(Box::pin(answer_streamed(model, request, sink))),
    }
}

/// [`answer`], streamed: every delta goes to `sink` as it arrives.
///
/// An `async` block rather than an `async fn`, so its state keeps the model, the request and
/// the sink once (an `async fn` keeps its arguments and the locals they move into).
fn answer_streamed(
    model: Arc<dyn ChatModel>,
    request: ChatRequest,
    sink: DeltaSink,
) -> impl Future<Output = Result<ChatResponse, ModelError>> + Send + 'static {
    // The run's structured output, streamed: partial snapshots for the caller.
    let mut partial = (request.response_format.is_some()
        && matches!(sink.route, DeltaRoute::Answer | DeltaRoute::Final)
        && sink.emitter.has_stream())
    .then(PartialOutput::default);
    async move {
        let mut stream = model.stream(request).await?;
        let mut builder = ChatResponseBuilder::default();
        while let Some(event) = stream.next().await {
            let event = event?;
            // Folded first, so the delta itself moves into its event (no copy per delta).
            builder.push_ref(&event);
            match event {
                ChatEvent::TextDelta { text } if !text.is_empty() => {
                    let snapshot = partial.as_mut().and_then(|p| p.push(&text));
                    sink.emitter.emit(sink.route.event(&sink.run_id, text)).await;
                    if let Some(snapshot) = snapshot {
                        let event = AgentEvent::OutputPartial {
                            run_id: sink.run_id.to_string(),
                            snapshot,
                        };
                        sink.emitter.emit_to_stream(event).await;
                    }
                }
                ChatEvent::ReasoningDelta { text } if !text.is_empty() => {
                    sink.emitter.emit(sink.route.reasoning(&sink.run_id, text)).await;
                }
                ChatEvent::ToolCallDelta {
                    index,
                    id,
                    name,
                    arguments,
                } if matches!(sink.route, DeltaRoute::Answer) => {
                    let event = AgentEvent::ToolCallDelta {
                        run_id: sink.run_id.to_string(),
                        index,
                        id,
                        tool: name,
                        arguments,
                    };
                    sink.emitter.emit_to_stream(event).await;
                }
                _ => {}
            }
        }
        builder.finish()
    }
}

/// The structured answer's text so far, and the last snapshot sent. The snapshots are of its
/// JSON as the output codec finds it (after thinking, inside a code fence).
#[derive(Default)]
struct PartialOutput {
    text: String,
    sent: Option<serde_json::Value>,
}

impl PartialOutput {
    /// Adds a delta; the new snapshot when it differs from the last one sent.
    fn push(&mut self, delta: &str) -> Option<serde_json::Value> {
        self.text.push_str(delta);
        let snapshot = crate::partial::partial_json(crate::partial::answer_json(&self.text)?)?;
        if self.sent.as_ref() == Some(&snapshot) {
            return None;
        }
        self.sent = Some(snapshot.clone());
        Some(snapshot)
    }
}

/// The innermost chat service: one attempt of the model, with `ModelCallStarted` and
/// `ModelCallFinished` / `ModelCallFailed` around it and its usage recorded (a failed attempt
/// counts as a request). The events and the model's answer are one future (one allocation per
/// attempt).
#[derive(Clone)]
pub(crate) struct ModelCall {
    model: Arc<dyn ChatModel>,
    /// The slot's model name, as events carry it.
    name: Arc<str>,
}

impl Service<ChatRequest> for ModelCall {
    type Response = ChatResponse;
    type Error = ModelError;
    type Future = BoxFuture<'static, Result<ChatResponse, ModelError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ModelError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let Some(run) = RunCall::of(&request.extensions) else {
            return Box::pin(answer(Arc::clone(&self.model), request, None));
        };
        let attempt = run.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        let log = Arc::clone(&run.log);
        let sink = run.delta.clone();
        drop(run);
        let model = Arc::clone(&self.name);
        let span = super::spans::chat(&log.span, &model);
        let attempt = Attempt {
            call: log.calls.fetch_add(1, Ordering::Relaxed) + 1,
            attempt,
            tools: request.tools.len(),
            structured: request.response_format.is_some(),
            started: std::time::Instant::now(),
            active: log.emitter.active(),
            span: span.clone(),
            model,
            log,
        };
        let answer = answer(Arc::clone(&self.model), request, sink);
        // Three stages, each holding only what it needs: the answer's future is kept once
        // (an `async` block around it would keep it twice, and the result beside it).
        let attempt = attempt
            .begin()
            .then(move |attempt| answer.map(move |result| (attempt, result)))
            .then(|(attempt, result)| attempt.end(result));
        Box::pin(tracing::Instrument::instrument(attempt, span))
    }
}

/// One attempt of [`ModelCall`]: what its events and its usage record say about it.
struct Attempt {
    log: Arc<AttemptLog>,
    /// The slot's model name.
    model: Arc<str>,
    /// The attempt's `chat` span.
    span: tracing::Span,
    started: std::time::Instant,
    call: u32,
    attempt: u32,
    tools: usize,
    structured: bool,
    /// Whether anyone listens to the run's events.
    active: bool,
}

impl Attempt {
    /// Sends `ModelCallStarted`.
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep `self` twice")]
    fn begin(self) -> impl Future<Output = Self> + Send + 'static {
        async move {
            if self.active {
                let log = &self.log;
                log.emitter
                    .emit(AgentEvent::ModelCallStarted {
                        run_id: log.run_id.to_string(),
                        model: self.model.to_string(),
                        call: self.call,
                        tools: self.tools,
                        structured: self.structured,
                    })
                    .await;
            }
            self
        }
    }

    /// Records the answer (usage, span) and sends `ModelCallFinished` or `ModelCallFailed`.
    #[allow(clippy::manual_async_fn, reason = "an async fn would keep its arguments twice")]
    fn end(
        self,
        result: Result<ChatResponse, ModelError>,
    ) -> impl Future<Output = Result<ChatResponse, ModelError>> + Send + 'static {
        async move {
            let (log, model) = (&self.log, &self.model);
            match &result {
                Ok(response) => {
                    let answered = response.model.as_deref().unwrap_or(model);
                    self.span.record("gen_ai.response.model", answered);
                    super::spans::record_usage(&self.span, response.usage);
                    log.add_usage(answered, response.usage);
                    if self.active {
                        log.emitter
                            .emit(AgentEvent::ModelCallFinished {
                                run_id: log.run_id.to_string(),
                                model: model.to_string(),
                                call: self.call,
                                usage: response.usage,
                                finish_reason: response.finish_reason.clone(),
                                tool_calls: response.message.tool_calls.len(),
                                duration_ms: self.started.elapsed().as_millis() as u64,
                                answered_by: response.model.clone(),
                            })
                            .await;
                    }
                }
                Err(err) => {
                    super::spans::record_error(&self.span, err.kind().as_str());
                    let mut failed = Usage::default();
                    failed.requests = 1;
                    log.add_usage(model, failed);
                    if self.active {
                        log.emitter
                            .emit(AgentEvent::ModelCallFailed {
                                run_id: log.run_id.to_string(),
                                model: model.to_string(),
                                call: self.call,
                                error_kind: err.kind().to_owned(),
                                will_retry: err.is_retryable()
                                    && self.attempt < log.max_attempts.load(Ordering::Relaxed),
                            })
                            .await;
                    }
                }
            }
            result
        }
    }
}

/// The agent's model retry: [`RetryConfig`] as a [`tower::retry::Policy`] over [`ModelError`].
pub(crate) type ModelRetryLayer = tower::retry::RetryLayer<ModelRetry>;

/// Retries retryable errors up to `max_attempts` attempts in all, waiting the server's
/// `retry_after` or the configured backoff (with jitter). A retry whose wait would end at or
/// past the run's deadline is not made: the error stands (see [`retry_wait`]).
#[derive(Clone)]
pub(crate) struct ModelRetry {
    config: Arc<RetryConfig>,
    attempt: u32,
}

impl ModelRetry {
    fn layer(config: RetryConfig) -> ModelRetryLayer {
        tower::retry::RetryLayer::new(ModelRetry {
            config: Arc::new(config),
            attempt: 1,
        })
    }
}

impl tower::retry::Policy<ChatRequest, ChatResponse, ModelError> for ModelRetry {
    type Future = std::pin::Pin<Box<tokio::time::Sleep>>;

    fn retry(
        &mut self,
        request: &mut ChatRequest,
        result: &mut Result<ChatResponse, ModelError>,
    ) -> Option<Self::Future> {
        let err = result.as_ref().err()?;
        if !err.is_retryable() || self.attempt >= self.config.max_attempts {
            return None;
        }
        let wait = err.retry_after().unwrap_or_else(|| self.config.wait(self.attempt));
        let sleep = retry_wait(request.extensions.deadline, wait)?;
        self.attempt += 1;
        Some(sleep)
    }

    fn clone_request(&mut self, request: &ChatRequest) -> Option<ChatRequest> {
        // Cheap: the messages, the tools and the extensions are shared, not copied.
        (self.config.max_attempts > 1).then(|| request.clone())
    }
}

/// Awaits `fut` within the run's deadline; elapsing ends the run with [`AgentError::Timeout`].
///
/// A combinator, not an `async fn`: an `async fn` would hold `fut` twice in its state (as its
/// argument and as what it awaits), and this wraps the run's largest futures.
pub(crate) fn with_deadline<F: Future>(
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    fut: F,
) -> impl Future<Output = Result<F::Output, AgentError>> {
    use futures::FutureExt;
    match deadline {
        None => Either::Left(fut.map(Ok)),
        Some(d) => Either::Right(tokio::time::timeout_at(d, fut).map(move |r| {
            r.map_err(|_| AgentError::Timeout {
                after_ms: timeout.map_or(0, |t| t.as_millis() as u64),
            })
        })),
    }
}
