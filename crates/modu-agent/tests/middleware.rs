//! The three middleware layers and the context-provider chain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use modu_agent::middleware::{AgentService, ChatService, FunctionService, ToolInvocation, into_model_error};
use modu_agent::{Agent, AgentRequest, RetryConfig};
use modu_core::{
    AgentError, ChatRequest, ChatResponse, CompletedRun, ContextProvider, ContextProviderError, FunctionTool, Message,
    ModelContext, ModelError, RunContext, RunOutcome, RunReport, Stage, ToolError, ToolSpec, Usage,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceBuilder};

type Log = Arc<Mutex<Vec<String>>>;

/// A layer that logs `label:in` before and `label:out` after the inner service.
#[derive(Clone)]
struct Record {
    label: &'static str,
    log: Log,
}

impl<S> Layer<S> for Record {
    type Service = Recorded<S>;
    fn layer(&self, inner: S) -> Recorded<S> {
        Recorded {
            inner,
            label: self.label,
            log: Arc::clone(&self.log),
        }
    }
}

#[derive(Clone)]
struct Recorded<S> {
    inner: S,
    label: &'static str,
    log: Log,
}

impl<S, R> Service<R> for Recorded<S>
where
    S: Service<R>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, req: R) -> Self::Future {
        self.log.lock().unwrap().push(format!("{}:in", self.label));
        let fut = self.inner.call(req);
        let (log, label) = (Arc::clone(&self.log), self.label);
        Box::pin(async move {
            let out = fut.await;
            log.lock().unwrap().push(format!("{label}:out"));
            out
        })
    }
}

fn record(label: &'static str, log: &Log) -> Record {
    Record {
        label,
        log: Arc::clone(log),
    }
}

fn counted_tool(calls: Arc<AtomicUsize>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("ping", "Ping", json!({"type": "object"})),
        move |_c, _a| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!("pong")) }
        },
    )
}

#[tokio::test]
async fn layers_run_in_documented_order_outer_first() {
    let log: Log = Arc::default();
    let model = ScriptedModel::new().tool_call("ping", json!({})).text("done");
    let agent = Agent::builder(model)
        .tool(counted_tool(Arc::default()))
        .agent_layer(record("agent1", &log))
        .agent_layer(record("agent2", &log))
        .chat_layer(record("chat1", &log))
        .chat_layer(record("chat2", &log))
        .function_layer(record("fn1", &log))
        .function_layer(record("fn2", &log))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(result.output().map(String::as_str), Some("done"));
    let expected = [
        "agent1:in",
        "agent2:in", //
        "chat1:in",
        "chat2:in",
        "chat2:out",
        "chat1:out", // the first model call
        "fn1:in",
        "fn2:in",
        "fn2:out",
        "fn1:out", // the tool call
        "chat1:in",
        "chat2:in",
        "chat2:out",
        "chat1:out", // the second model call
        "agent2:out",
        "agent1:out",
    ];
    assert_eq!(*log.lock().unwrap(), expected);
}

/// An agent guard that answers without running the agent.
#[derive(Clone)]
struct Refuse;
impl Layer<AgentService<(), String>> for Refuse {
    type Service = RefuseService;
    fn layer(&self, _inner: AgentService<(), String>) -> RefuseService {
        RefuseService
    }
}
#[derive(Clone)]
struct RefuseService;
impl Service<AgentRequest<()>> for RefuseService {
    type Response = RunOutcome<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<RunOutcome<String>, Infallible>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: AgentRequest<()>) -> Self::Future {
        std::future::ready(Ok(RunOutcome::Completed(CompletedRun::new(
            format!("refused {} message(s)", req.input.len()),
            RunReport::new("guarded", "guard"),
        ))))
    }
}

/// A chat guard answering from a cache.
#[derive(Clone)]
struct Cached;
impl Layer<ChatService> for Cached {
    type Service = CachedService;
    fn layer(&self, _inner: ChatService) -> CachedService {
        CachedService
    }
}
#[derive(Clone)]
struct CachedService;
impl Service<ChatRequest> for CachedService {
    type Response = ChatResponse;
    type Error = ModelError;
    type Future = std::future::Ready<Result<ChatResponse, ModelError>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ModelError>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _req: ChatRequest) -> Self::Future {
        std::future::ready(Ok(ChatResponse::new(
            Message::assistant("from the cache"),
            Usage::default(),
            None,
        )))
    }
}

/// A function guard that blocks `ping` and rewrites arguments of everything else.
#[derive(Clone)]
struct Block;
impl Layer<FunctionService<()>> for Block {
    type Service = BlockService;
    fn layer(&self, inner: FunctionService<()>) -> BlockService {
        BlockService { inner }
    }
}
#[derive(Clone)]
struct BlockService {
    inner: FunctionService<()>,
}
impl Service<ToolInvocation<()>> for BlockService {
    type Response = Value;
    type Error = ToolError;
    type Future = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, mut inv: ToolInvocation<()>) -> Self::Future {
        if inv.tool_name == "ping" {
            return Box::pin(async { Ok(json!("blocked by policy")) });
        }
        inv.arguments = json!({"text": "rewritten"});
        Box::pin(self.inner.call(inv))
    }
}

#[tokio::test]
async fn each_layer_can_short_circuit() {
    // Agent layer: the model is never asked.
    let model = ScriptedModel::new().text("never");
    let agent = Agent::builder(model.clone()).agent_layer(Refuse).build().unwrap();
    assert_eq!(
        agent.run("hi").await.output().map(String::as_str),
        Some("refused 1 message(s)")
    );
    assert!(model.requests().is_empty());

    // Chat layer: the answer comes from the cache, the model is never asked.
    let model = ScriptedModel::new().text("never");
    let agent = Agent::builder(model.clone()).chat_layer(Cached).build().unwrap();
    assert_eq!(
        agent.run("hi").await.output().map(String::as_str),
        Some("from the cache")
    );
    assert!(model.requests().is_empty());

    // Function layer: ping is blocked (never runs); echo runs with rewritten arguments.
    let calls = Arc::new(AtomicUsize::new(0));
    let echo = FunctionTool::<()>::new(
        ToolSpec::new(
            "echo",
            "Echo",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        ),
        |_c, a| async move { Ok(a["text"].clone()) },
    );
    let model = ScriptedModel::new()
        .tool_calls([("ping", json!({})), ("echo", json!({"text": "original"}))])
        .text("ok");
    let agent = Agent::builder(model)
        .tool(counted_tool(Arc::clone(&calls)))
        .tool(echo)
        .function_layer(Block)
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let tools: Vec<String> = result
        .messages()
        .iter()
        .filter(|m| m.tool_call_id.is_some())
        .map(|m| m.text())
        .collect();
    assert_eq!(tools, vec!["blocked by policy", "rewritten"]);
}

/// Retry a model call once on a retryable error (tower's retry policy).
#[derive(Clone)]
struct RetryOnce {
    left: usize,
}

impl tower::retry::Policy<ChatRequest, ChatResponse, ModelError> for RetryOnce {
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
async fn tower_retry_and_timeout_work_as_chat_middleware() {
    // Retry: the agent's own retry is off; tower's RetryLayer recovers the transient error.
    let model = ScriptedModel::new()
        .error(|| ModelError::Transport {
            message: "reset".into(),
            source: None,
        })
        .text("second time lucky");
    let agent = Agent::builder(model.clone())
        .retry(RetryConfig::none())
        .chat_layer(tower::retry::RetryLayer::new(RetryOnce { left: 1 }))
        .build()
        .unwrap();
    assert_eq!(
        agent.run("q").await.output().map(String::as_str),
        Some("second time lucky")
    );
    assert_eq!(model.requests().len(), 2);

    // Timeout: tower's TimeoutLayer, mapped back to a typed ModelError right outside it.
    let model = ScriptedModel::new().delayed_text(Duration::from_secs(5), "too late");
    let agent = Agent::builder(model)
        .retry(RetryConfig::none())
        .chat_layer(
            ServiceBuilder::new()
                .map_err(into_model_error)
                .timeout(Duration::from_millis(50))
                .into_inner(),
        )
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let result = agent.run("q").await;
    assert!(started.elapsed() < Duration::from_secs(2));
    match result.error() {
        Some(AgentError::Model { kind, retryable, .. }) => {
            assert_eq!(kind, "timeout");
            assert!(retryable);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn streaming_deltas_pass_through_chat_middleware() {
    use futures::StreamExt;
    let log: Log = Arc::default();
    let model = ScriptedModel::new().text_deltas(["a", "b", "c"]);
    let agent = Agent::builder(model).chat_layer(record("chat", &log)).build().unwrap();
    let mut deltas = String::new();
    let mut stream = agent.stream("q");
    while let Some(item) = stream.next().await {
        if let modu_agent::StreamItem::Event(modu_core::AgentEvent::ModelDelta { text, .. }) = item {
            deltas.push_str(&text);
        }
    }
    assert_eq!(deltas, "abc");
    assert_eq!(*log.lock().unwrap(), ["chat:in", "chat:out"]);
}

/// A provider that logs, adds an instruction and records what it saw.
struct Noting {
    name: &'static str,
    log: Log,
    seen: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl ContextProvider<()> for Noting {
    fn name(&self) -> &str {
        self.name
    }
    async fn invoking(&self, _ctx: &RunContext<()>, context: &mut ModelContext) -> Result<(), ContextProviderError> {
        self.log.lock().unwrap().push(format!(
            "{}:invoking:{:?}",
            self.name,
            context.stage.unwrap_or(Stage::Act)
        ));
        self.seen.lock().unwrap().push(context.instructions.clone());
        context.instructions.push(format!("from {}", self.name));
        Ok(())
    }
    async fn invoked(&self, _ctx: &RunContext<()>, new: &[Message]) -> Result<(), ContextProviderError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}:invoked:{}", self.name, new[0].text()));
        Ok(())
    }
    async fn run_finished(&self, _ctx: &RunContext<()>) {
        self.log.lock().unwrap().push(format!("{}:finished", self.name));
    }
}

#[tokio::test]
async fn context_providers_chain_in_order_and_hear_about_new_messages() {
    let log: Log = Arc::default();
    let first = Arc::new(Noting {
        name: "first",
        log: Arc::clone(&log),
        seen: Mutex::default(),
    });
    let second = Arc::new(Noting {
        name: "second",
        log: Arc::clone(&log),
        seen: Mutex::default(),
    });
    let model = ScriptedModel::new().text("answer");
    let agent = Agent::builder(model.clone())
        .instructions("base")
        .context_provider(first.clone())
        .context_provider(second.clone())
        .build()
        .unwrap();
    assert!(agent.run("q").await.is_completed());
    assert_eq!(
        *log.lock().unwrap(),
        [
            "first:invoking:Act",
            "second:invoking:Act",
            "first:invoked:answer",
            "second:invoked:answer",
            "first:finished",
            "second:finished",
        ]
    );
    // Each provider received the previous one's output.
    assert_eq!(first.seen.lock().unwrap()[0], vec!["base"]);
    assert_eq!(second.seen.lock().unwrap()[0], vec!["base", "from first"]);
    assert_eq!(
        model.requests()[0].messages[0].text(),
        "base\n\nfrom first\n\nfrom second"
    );
}

/// A context provider that hangs before the request (`invoking`) or after the answer (`invoked`).
struct Hanging {
    before: bool,
}

#[async_trait]
impl ContextProvider<()> for Hanging {
    fn name(&self) -> &str {
        "hanging"
    }
    async fn invoking(&self, _ctx: &RunContext<()>, _context: &mut ModelContext) -> Result<(), ContextProviderError> {
        if self.before {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Ok(())
    }
    async fn invoked(&self, _ctx: &RunContext<()>, _new: &[Message]) -> Result<(), ContextProviderError> {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(())
    }
}

#[tokio::test]
async fn a_hanging_context_provider_ends_with_the_runs_timeout() {
    for before in [true, false] {
        let agent = Agent::builder(ScriptedModel::new().text("answer"))
            .limits(modu_agent::RunLimits::default().timeout(Duration::from_millis(100)))
            .context_provider(Hanging { before })
            .build()
            .unwrap();
        let started = std::time::Instant::now();
        let outcome = agent.run("hi").await;
        assert!(
            matches!(outcome.error(), Some(AgentError::Timeout { after_ms: 100 })),
            "before: {before}: {:?}",
            outcome.error()
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
