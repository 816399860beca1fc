//! A run's `tracing` spans, as a `tracing-subscriber` layer sees them: `invoke_agent` at the
//! root, with a `chat` span per model attempt and an `execute_tool` span per tool call under it,
//! named and fielded by the OpenTelemetry GenAI conventions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use modu_agent::Agent;
use modu_core::{FunctionTool, InMemoryConversationStore, ModelError};
use modu_testing::ScriptedModel;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One span as recorded: its name, its parent's name and every field it got.
#[derive(Clone, Debug)]
struct Seen {
    name: String,
    parent: Option<String>,
    fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<Vec<(u64, Seen)>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> tracing_subscriber::Layer<S> for Recorder
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map(|parent| parent.name().to_owned());
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let seen = Seen {
            name: attrs.metadata().name().to_owned(),
            parent,
            fields,
        };
        self.spans.lock().unwrap().push((id.into_u64(), seen));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, seen)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

impl Recorder {
    fn seen(&self) -> Vec<Seen> {
        self.spans.lock().unwrap().iter().map(|(_, s)| s.clone()).collect()
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

fn add() -> FunctionTool<()> {
    FunctionTool::typed(
        "add",
        "Add two integers",
        |_ctx, a: AddArgs| async move { Ok(a.a + a.b) },
    )
}

fn names(spans: &[Seen]) -> Vec<(&str, Option<&str>)> {
    spans.iter().map(|s| (s.name.as_str(), s.parent.as_deref())).collect()
}

#[tokio::test]
async fn a_run_emits_invoke_agent_with_chat_and_execute_tool_children() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    let model = ScriptedModel::new().tool_call("add", json!({"a": 2, "b": 3})).text("5");
    let agent = Agent::builder(model).name("calculator").tool(add()).build().unwrap();
    let result = agent.run("What is 2 + 3?").await;
    assert!(result.is_completed(), "{:?}", result.error());

    let spans = recorder.seen();
    assert_eq!(
        names(&spans),
        [
            ("invoke_agent", None),
            ("chat", Some("invoke_agent")),
            ("execute_tool", Some("invoke_agent")),
            ("chat", Some("invoke_agent")),
        ]
    );
    let run = &spans[0].fields;
    assert_eq!(run["otel.name"], "invoke_agent calculator");
    assert_eq!(run["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(run["gen_ai.agent.name"], "calculator");
    assert_eq!(run["modu.run_id"], result.run_id());
    assert_eq!(run["modu.resumed"], "false");
    assert_eq!(
        run["gen_ai.usage.input_tokens"],
        result.usage().input_tokens.to_string()
    );
    assert_eq!(
        run["gen_ai.usage.output_tokens"],
        result.usage().output_tokens.to_string()
    );
    assert!(!run.contains_key("error.type"), "{run:?}");

    let chat = &spans[1].fields;
    assert_eq!(chat["otel.name"], "chat scripted");
    assert_eq!(chat["gen_ai.operation.name"], "chat");
    assert_eq!(chat["gen_ai.request.model"], "scripted");
    assert!(chat.contains_key("gen_ai.usage.input_tokens"), "{chat:?}");

    let tool = &spans[2].fields;
    assert_eq!(tool["otel.name"], "execute_tool add");
    assert_eq!(tool["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool["gen_ai.tool.name"], "add");
    let call_id = &result.messages()[1].tool_calls[0].id;
    assert_eq!(&tool["gen_ai.tool.call.id"], call_id);
    // Nothing of the call's arguments or result is in any span.
    for span in &spans {
        assert!(span.fields.values().all(|v| !v.contains("\"a\"")), "{span:?}");
    }
}

#[tokio::test]
async fn store_operations_and_failures_are_spans_too() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    let model = ScriptedModel::new()
        .error(|| ModelError::Authentication {
            status: 401,
            message: "bad key".into(),
        })
        .text("unused");
    let agent = Agent::builder(model)
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .build()
        .unwrap();
    let result = agent.run(modu_agent::AgentRequest::new((), "hi").session("s-1")).await;
    assert!(result.error().is_some());

    let spans = recorder.seen();
    assert_eq!(
        names(&spans),
        [
            ("invoke_agent", None),
            ("modu.store", Some("invoke_agent")),
            ("chat", Some("invoke_agent")),
        ]
    );
    assert_eq!(spans[0].fields["gen_ai.conversation.id"], "s-1");
    assert_eq!(spans[0].fields["error.type"], "model");
    assert_eq!(spans[1].fields["modu.store.operation"], "conversation.load");
    assert_eq!(spans[2].fields["error.type"], "authentication");
}

/// A chat layer that makes the whole inner call (`call` and its future) on a spawned task,
/// where no span is current.
#[derive(Clone)]
struct SpawnCallLayer;

impl tower::Layer<modu_agent::middleware::ChatService> for SpawnCallLayer {
    type Service = SpawnCall;
    fn layer(&self, inner: modu_agent::middleware::ChatService) -> SpawnCall {
        SpawnCall { inner }
    }
}

#[derive(Clone)]
struct SpawnCall {
    inner: modu_agent::middleware::ChatService,
}

impl tower::Service<modu_core::ChatRequest> for SpawnCall {
    type Response = modu_core::ChatResponse;
    type Error = ModelError;
    type Future = futures::future::BoxFuture<'static, Result<modu_core::ChatResponse, ModelError>>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), ModelError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: modu_core::ChatRequest) -> Self::Future {
        let inner = self.inner.clone();
        let task = tracing::Instrument::instrument(
            async move { tower::ServiceExt::oneshot(inner, request).await },
            tracing::Span::none(),
        );
        Box::pin(async move {
            tokio::spawn(task).await.map_err(|e| ModelError::Transport {
                message: e.to_string(),
                source: None,
            })?
        })
    }
}

#[tokio::test]
async fn the_chat_span_stays_under_the_run_when_a_layer_calls_on_another_task() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    let model = ScriptedModel::new().text("spawned");
    let agent = Agent::builder(model).chat_layer(SpawnCallLayer).build().unwrap();
    let result = agent.run("q").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let spans = recorder.seen();
    assert_eq!(names(&spans), [("invoke_agent", None), ("chat", Some("invoke_agent"))]);
}

#[tokio::test]
async fn the_chat_span_stays_under_the_run_behind_tower_buffer() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    let model = ScriptedModel::new().text("buffered");
    let agent = Agent::builder(model)
        .chat_layer(
            tower::ServiceBuilder::new()
                .map_err(|e: tower::BoxError| match e.downcast::<ModelError>() {
                    Ok(e) => *e,
                    Err(e) => ModelError::Transport {
                        message: e.to_string(),
                        source: None,
                    },
                })
                .buffer(8)
                .into_inner(),
        )
        .build()
        .unwrap();
    let result = agent.run("q").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let spans = recorder.seen();
    let chat: Vec<_> = spans.iter().filter(|s| s.name == "chat").collect();
    assert_eq!(chat.len(), 1, "{spans:?}");
    assert_eq!(chat[0].parent.as_deref(), Some("invoke_agent"));
}
