//! One run path: the chat stack carries a call's deltas in the request (so layers that move the
//! inner call to another task still stream), retries are one layer, and runs nobody streams
//! ask for whole answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use modu_agent::middleware::{ChatService, into_model_error};
use modu_agent::{Agent, RetryConfig, StreamItem};
use modu_core::{AgentError, AgentEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError};
use modu_testing::ScriptedModel;
use tower::{Layer, Service};

/// A chat layer that runs its inner call on a spawned task.
#[derive(Clone)]
struct SpawnLayer;

impl Layer<ChatService> for SpawnLayer {
    type Service = Spawned;
    fn layer(&self, inner: ChatService) -> Spawned {
        Spawned { inner }
    }
}

#[derive(Clone)]
struct Spawned {
    inner: ChatService,
}

impl Service<ChatRequest> for Spawned {
    type Response = ChatResponse;
    type Error = ModelError;
    type Future = BoxFuture<'static, Result<ChatResponse, ModelError>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), ModelError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let fut = self.inner.call(request);
        Box::pin(async move {
            tokio::spawn(fut).await.map_err(|e| ModelError::Transport {
                message: e.to_string(),
                source: None,
            })?
        })
    }
}

async fn streamed_text(agent: &Agent<()>) -> (String, String) {
    let mut stream = agent.stream("q");
    let mut deltas = String::new();
    let mut output = String::new();
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::ModelDelta { text, .. }) => deltas.push_str(&text),
            StreamItem::Completed(result) => output = result.output.clone(),
            StreamItem::Failed(result) => panic!("{:?}", result.error),
            StreamItem::Paused(p) => panic!("paused: {:?}", p.approvals),
            StreamItem::Event(_) => {}
        }
    }
    (deltas, output)
}

#[tokio::test]
async fn a_chat_layer_that_spawns_its_inner_call_still_streams_deltas() {
    let model = ScriptedModel::new().text_deltas(["he", "ll", "o"]);
    let agent = Agent::builder(model).chat_layer(SpawnLayer).build().unwrap();
    assert_eq!(streamed_text(&agent).await, ("hello".to_owned(), "hello".to_owned()));
}

#[tokio::test]
async fn a_chat_layer_behind_tower_buffer_still_streams_deltas() {
    let model = ScriptedModel::new().text_deltas(["bu", "ff", "er"]);
    let agent = Agent::builder(model)
        .chat_layer(
            tower::ServiceBuilder::new()
                .map_err(into_model_error)
                .buffer(8)
                .into_inner(),
        )
        .build()
        .unwrap();
    assert_eq!(streamed_text(&agent).await, ("buffer".to_owned(), "buffer".to_owned()));
}

/// Counts which of the model's two methods a run used.
struct Counting {
    inner: ScriptedModel,
    streamed: AtomicUsize,
    completed: AtomicUsize,
}

#[async_trait]
impl ChatModel for Counting {
    fn model_name(&self) -> &str {
        "counting"
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        self.streamed.fetch_add(1, Ordering::SeqCst);
        self.inner.stream(request).await
    }
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        self.completed.fetch_add(1, Ordering::SeqCst);
        self.inner.complete(request).await
    }
}

fn counting(model: ScriptedModel) -> Arc<Counting> {
    Arc::new(Counting {
        inner: model,
        streamed: AtomicUsize::new(0),
        completed: AtomicUsize::new(0),
    })
}

#[tokio::test]
async fn a_run_nobody_streams_asks_for_whole_answers_and_a_streamed_run_streams() {
    let model = counting(ScriptedModel::new().text("one").text("two"));
    let agent = Agent::builder(Arc::clone(&model)).build().unwrap();
    assert_eq!(agent.run("q").await.output().map(String::as_str), Some("one"));
    assert_eq!(
        (
            model.completed.load(Ordering::SeqCst),
            model.streamed.load(Ordering::SeqCst)
        ),
        (1, 0)
    );
    let (deltas, output) = streamed_text(&agent).await;
    assert_eq!((deltas.as_str(), output.as_str()), ("two", "two"));
    assert_eq!(
        (
            model.completed.load(Ordering::SeqCst),
            model.streamed.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
}

#[tokio::test]
async fn a_sink_that_wants_deltas_gets_them_from_a_run_and_one_that_does_not_gets_whole_answers() {
    struct NoDeltas(modu_core::CollectingEventSink);
    #[async_trait]
    impl modu_core::EventSink for NoDeltas {
        async fn publish(&self, event: &AgentEvent) -> Result<(), modu_core::SinkError> {
            self.0.publish(event).await
        }
        fn wants_deltas(&self) -> bool {
            false
        }
    }
    let model = counting(ScriptedModel::new().text_deltas(["a", "b"]).text("c"));
    let sink = Arc::new(modu_core::CollectingEventSink::new());
    let agent = Agent::builder(Arc::clone(&model))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    assert_eq!(agent.run("q").await.output().map(String::as_str), Some("ab"));
    let deltas: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ModelDelta { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["a", "b"]);
    assert_eq!(model.streamed.load(Ordering::SeqCst), 1);

    let quiet = Arc::new(NoDeltas(modu_core::CollectingEventSink::new()));
    let agent = Agent::builder(Arc::clone(&model))
        .event_sink(quiet.clone())
        .build()
        .unwrap();
    assert_eq!(agent.run("q").await.output().map(String::as_str), Some("c"));
    assert_eq!(model.completed.load(Ordering::SeqCst), 1);
    assert!(
        quiet
            .0
            .events()
            .iter()
            .any(|e| matches!(e, AgentEvent::ModelCallFinished { .. }))
    );
}

/// The logging and audit sinks want deltas only when told to log or write them; otherwise a
/// run with only them asks for whole answers (they streamed every request before).
#[tokio::test]
async fn the_logging_and_audit_sinks_leave_runs_unstreamed_unless_they_keep_deltas() {
    use modu_agent::sinks::{AuditEventSink, LoggingEventSink};
    let model = counting(ScriptedModel::new().text("a").text("b").text("c").text("d"));
    let run_with = |sink: Arc<dyn modu_core::EventSink>| {
        let agent = Agent::builder(Arc::clone(&model)).event_sink(sink).build().unwrap();
        async move { assert!(agent.run("q").await.is_completed()) }
    };
    run_with(Arc::new(LoggingEventSink::new())).await;
    run_with(Arc::new(AuditEventSink::new(Vec::<u8>::new()))).await;
    assert_eq!(
        (
            model.completed.load(Ordering::SeqCst),
            model.streamed.load(Ordering::SeqCst)
        ),
        (2, 0)
    );
    run_with(Arc::new(LoggingEventSink::new().with_deltas(true))).await;
    run_with(Arc::new(AuditEventSink::new(Vec::<u8>::new()).with_deltas(true))).await;
    assert_eq!(
        (
            model.completed.load(Ordering::SeqCst),
            model.streamed.load(Ordering::SeqCst)
        ),
        (2, 2)
    );
}

fn transient() -> ModelError {
    ModelError::Transport {
        message: "reset".into(),
        source: None,
    }
}

/// Retries a retryable error up to `left` more times.
#[derive(Clone)]
struct RetryN {
    left: usize,
}

impl tower::retry::Policy<ChatRequest, ChatResponse, ModelError> for RetryN {
    type Future = std::future::Ready<()>;
    fn retry(&mut self, _req: &mut ChatRequest, result: &mut Result<ChatResponse, ModelError>) -> Option<Self::Future> {
        match result {
            Err(e) if e.is_retryable() && self.left > 0 => {
                self.left -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }
    fn clone_request(&mut self, req: &ChatRequest) -> Option<ChatRequest> {
        Some(req.clone())
    }
}

#[tokio::test]
async fn with_retry_off_a_user_retry_layer_alone_decides_the_attempts() {
    // Four failures, a layer that retries twice: three attempts, then the error.
    let model = ScriptedModel::new()
        .error(transient)
        .error(transient)
        .error(transient)
        .error(transient)
        .text("never");
    let agent = Agent::builder(model.clone())
        .retry(RetryConfig::none())
        .chat_layer(tower::retry::RetryLayer::new(RetryN { left: 2 }))
        .build()
        .unwrap();
    let result = agent.run("q").await;
    assert!(
        matches!(result.error(), Some(AgentError::Model { .. })),
        "{:?}",
        result.error()
    );
    assert_eq!(model.requests().len(), 3);
    assert_eq!(result.usage().requests, 3);
}

#[tokio::test]
async fn the_default_retry_makes_exactly_max_attempts_attempts() {
    tokio::time::pause();
    let model = ScriptedModel::new()
        .error(transient)
        .error(transient)
        .error(transient)
        .error(transient)
        .text("never");
    let sink = Arc::new(modu_core::CollectingEventSink::new());
    let agent = Agent::builder(model.clone()).event_sink(sink.clone()).build().unwrap();
    let result = agent.run("q").await;
    assert!(
        matches!(result.error(), Some(AgentError::Model { .. })),
        "{:?}",
        result.error()
    );
    let attempts = RetryConfig::default().max_attempts as usize;
    assert_eq!(model.requests().len(), attempts);
    let failed: Vec<bool> = sink
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ModelCallFailed { will_retry, .. } => Some(*will_retry),
            _ => None,
        })
        .collect();
    let mut expected = vec![true; attempts - 1];
    expected.push(false);
    assert_eq!(failed, expected);

    // A recovering model: one failure, then the answer, within the same run.
    let model = ScriptedModel::new().error(transient).text("ok");
    let agent = Agent::builder(model.clone())
        .retry(RetryConfig::new(2).with_backoff(Duration::from_millis(1), Duration::from_millis(1)))
        .build()
        .unwrap();
    assert_eq!(agent.run("q").await.output().map(String::as_str), Some("ok"));
    assert_eq!(model.requests().len(), 2);
}

#[test]
fn retry_jitter_only_shortens_a_wait() {
    let config = RetryConfig::new(5).with_backoff(Duration::from_millis(100), Duration::from_secs(1));
    assert_eq!(config.backoff(1), Duration::from_millis(100));
    assert_eq!(config.backoff(2), Duration::from_millis(200));
    let waits: Vec<Duration> = (0..200).map(|_| config.wait(2)).collect();
    assert!(
        waits
            .iter()
            .all(|w| *w <= Duration::from_millis(200) && *w >= Duration::from_millis(160))
    );
    assert!(waits.iter().any(|w| *w != waits[0]), "the waits are not random");
    assert_eq!(config.with_jitter(0.0).wait(3), Duration::from_millis(400));
}

/// The run id and whether it was a resume, for every run an agent layer saw.
type Seen = Arc<std::sync::Mutex<Vec<(Option<String>, bool)>>>;

/// An agent layer that records, for every run it sees, the run id and whether it is a resume.
#[derive(Clone)]
struct SeeRuns {
    seen: Seen,
}

impl<S> Layer<S> for SeeRuns {
    type Service = SeeRunsService<S>;
    fn layer(&self, inner: S) -> SeeRunsService<S> {
        SeeRunsService {
            inner,
            seen: Arc::clone(&self.seen),
        }
    }
}

#[derive(Clone)]
struct SeeRunsService<S> {
    inner: S,
    seen: Seen,
}

impl<S> Service<modu_agent::AgentRequest<()>> for SeeRunsService<S>
where
    S: Service<modu_agent::AgentRequest<()>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, request: modu_agent::AgentRequest<()>) -> S::Future {
        self.seen
            .lock()
            .unwrap()
            .push((request.run_id.clone(), request.is_resume()));
        self.inner.call(request)
    }
}

#[tokio::test]
async fn an_agent_layer_sees_resumed_runs_too() {
    use modu_core::{FunctionTool, InMemoryCheckpointStore, ToolSpec};
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let store = Arc::new(InMemoryCheckpointStore::new());
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let transfer = FunctionTool::new(
        ToolSpec::new("transfer", "Move money", serde_json::json!({"type": "object"})).needs_approval(true),
        move |_ctx, _args| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(serde_json::json!("moved")) }
        },
    );
    let model = ScriptedModel::new()
        .tool_call("transfer", serde_json::json!({}))
        .text("done");
    let agent = Agent::builder(model)
        .tool(transfer)
        .checkpoint_store(store)
        .agent_layer(SeeRuns {
            seen: Arc::clone(&seen),
        })
        .build()
        .unwrap();
    let paused = agent.run("pay").await;
    assert_eq!(paused.approvals().len(), 1);
    agent
        .approve(paused.run_id(), &paused.approvals()[0].call_id)
        .await
        .unwrap();
    let resumed = agent.resume(paused.run_id(), ()).await;
    assert_eq!(
        resumed.output().map(String::as_str),
        Some("done"),
        "{:?}",
        resumed.error()
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![(None, false), (Some(paused.run_id().to_owned()), true)]);
}

/// A function layer that counts the invocations it sees.
#[derive(Clone)]
struct CountCalls(Arc<AtomicUsize>);

impl<S> Layer<S> for CountCalls {
    type Service = CountCallsService<S>;
    fn layer(&self, inner: S) -> CountCallsService<S> {
        CountCallsService(inner, Arc::clone(&self.0))
    }
}

#[derive(Clone)]
struct CountCallsService<S>(S, Arc<AtomicUsize>);

impl<S, Req> Service<Req> for CountCallsService<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, request: Req) -> S::Future {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.call(request)
    }
}

#[tokio::test]
async fn function_layers_see_one_invocation_and_the_retry_below_them_repeats_the_tool() {
    use modu_core::{FunctionTool, ToolError, ToolSpec};
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let flaky = FunctionTool::new(
        ToolSpec::new("flaky", "Fails twice", serde_json::json!({"type": "object"})).idempotent(true),
        move |_ctx, _args| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err(ToolError::execution("busy").retryable(true))
                } else {
                    Ok(serde_json::json!("ok"))
                }
            }
        },
    );
    let seen = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("flaky", serde_json::json!({}))
        .text("done");
    let agent = Agent::builder(model.clone())
        .tool(flaky)
        .retry(RetryConfig::new(3).with_backoff(Duration::from_millis(1), Duration::from_millis(1)))
        .function_layer(CountCalls(Arc::clone(&seen)))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("done"),
        "{:?}",
        result.error()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    // The model saw the result of the third attempt.
    let tool_message = &model.requests()[1].messages;
    assert!(tool_message.iter().any(|m| m.text() == "ok"), "{tool_message:?}");
}

/// A sink given directly to the builder that fails or panics on some events is logged, and
/// the run goes on to its answer (and its later events still reach the sink).
#[tokio::test]
async fn a_failing_or_panicking_sink_does_not_stop_the_run() {
    struct Unruly(modu_core::CollectingEventSink);
    #[async_trait]
    impl modu_core::EventSink for Unruly {
        async fn publish(&self, event: &AgentEvent) -> Result<(), modu_core::SinkError> {
            match event {
                AgentEvent::RunStarted { .. } => panic!("a sink bug"),
                AgentEvent::ModelCallStarted { .. } => Err(modu_core::SinkError::new("down")),
                _ => self.0.publish(event).await,
            }
        }
    }
    let sink = Arc::new(Unruly(modu_core::CollectingEventSink::new()));
    let agent = Agent::builder(ScriptedModel::new().text("fine"))
        .event_sink(Arc::clone(&sink))
        .build()
        .unwrap();
    let done = agent.run("q").await;
    assert_eq!(done.output().map(String::as_str), Some("fine"), "{:?}", done.error());
    assert!(sink.0.events().iter().any(|e| e.kind() == "run_completed"));
}
