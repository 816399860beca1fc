//! What a model request takes from its run: it borrows the run's messages (and the system
//! message of static instructions) instead of copying them — every request still sees the
//! whole run, and the run keeps every message, whether a layer keeps the request past the call
//! or the run abandons the call mid-flight — and it goes through the run's one clone of the
//! chat stack.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modu_agent::middleware::ChatService;
use modu_agent::{Agent, AgentRequest, RunLimits};
use modu_core::{
    AgentError, ChatRequest, ChatResponse, FunctionTool, InMemoryCheckpointStore, Message, ModelError, Role, ToolSpec,
};
use modu_testing::ScriptedModel;
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

/// A chat layer that runs `on_call` on every request before passing it on, and counts how
/// often its service is cloned. The tests' layers are this one with different `on_call`s.
#[derive(Clone)]
struct Tap {
    on_call: Arc<dyn Fn(&mut ChatRequest) + Send + Sync>,
    clones: Arc<AtomicUsize>,
}

impl Tap {
    fn new(on_call: impl Fn(&mut ChatRequest) + Send + Sync + 'static) -> Self {
        Tap {
            on_call: Arc::new(on_call),
            clones: Arc::default(),
        }
    }
}

struct Tapped {
    tap: Tap,
    inner: ChatService,
}

impl Clone for Tapped {
    fn clone(&self) -> Self {
        self.tap.clones.fetch_add(1, SeqCst);
        Tapped {
            tap: self.tap.clone(),
            inner: self.inner.clone(),
        }
    }
}

impl Layer<ChatService> for Tap {
    type Service = Tapped;
    fn layer(&self, inner: ChatService) -> Tapped {
        Tapped {
            tap: self.clone(),
            inner,
        }
    }
}

impl Service<ChatRequest> for Tapped {
    type Response = ChatResponse;
    type Error = ModelError;
    type Future = <ChatService as Service<ChatRequest>>::Future;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), ModelError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        (self.tap.on_call)(&mut request);
        self.inner.call(request)
    }
}

/// What every request asked (a copy of its messages), and, when told to keep them, the requests
/// themselves past the call (as a layer that logs or caches them would).
#[derive(Clone)]
struct Asked {
    asked: Arc<Mutex<Vec<Vec<Message>>>>,
    kept: Option<Arc<Mutex<Vec<ChatRequest>>>>,
}

impl Asked {
    fn new(keep: bool) -> Self {
        Asked {
            asked: Arc::default(),
            kept: keep.then(Arc::default),
        }
    }
    fn asked(&self) -> Vec<Vec<Message>> {
        self.asked.lock().unwrap().clone()
    }
    /// The layer that records.
    fn tap(&self) -> Tap {
        let seen = self.clone();
        Tap::new(move |request| {
            seen.asked.lock().unwrap().push(request.messages.to_vec());
            if let Some(kept) = &seen.kept {
                kept.lock().unwrap().push(request.clone());
            }
        })
    }
}

fn roles(messages: &[Message]) -> Vec<Role> {
    messages.iter().map(|m| m.role).collect()
}

/// A request carries the run's messages without the run giving them up: every request sees
/// the system message and all of the run so far, and the run ends with all of its messages,
/// whether or not a layer keeps the requests after the call.
#[tokio::test]
async fn every_request_sees_the_whole_run_and_the_run_keeps_its_messages() {
    for keep in [false, true] {
        let model = ScriptedModel::new()
            .tool_call("add", serde_json::json!({"a": 2, "b": 3}))
            .tool_call("add", serde_json::json!({"a": 5, "b": 1}))
            .text("6")
            .without_recording();
        let seen = Asked::new(keep);
        let agent = Agent::builder(model)
            .instructions("You add numbers.")
            .tool(FunctionTool::<()>::new(
                ToolSpec::new("add", "Add", serde_json::json!({"type": "object"})),
                |_c, a| async move {
                    Ok(serde_json::json!(
                        a["a"].as_i64().unwrap_or(0) + a["b"].as_i64().unwrap_or(0)
                    ))
                },
            ))
            .chat_layer(seen.tap())
            .build()
            .unwrap();
        let result = agent.run("What is 2 + 3 + 1?").await;
        assert_eq!(result.output().map(String::as_str), Some("6"), "{:?}", result.error());
        use Role::{Assistant, System, Tool, User};
        let run = [User, Assistant, Tool, Assistant, Tool, Assistant];
        assert_eq!(roles(result.messages()), run, "keep {keep}");
        assert_eq!(result.messages()[0].text(), "What is 2 + 3 + 1?");
        assert_eq!(result.messages()[2].text(), "5");
        let asked = seen.asked();
        assert_eq!(asked.len(), 3);
        for (i, messages) in asked.iter().enumerate() {
            assert_eq!(messages[0].role, System, "request {i}, keep {keep}");
            assert_eq!(messages[0].text(), "You add numbers.", "request {i}, keep {keep}");
            // The request's messages after the system one are the run's so far.
            assert_eq!(
                &messages[1..],
                &result.messages()[..1 + 2 * i],
                "request {i}, keep {keep}"
            );
        }
        if let Some(kept) = &seen.kept {
            assert_eq!(kept.lock().unwrap().len(), 3, "the layer kept every request");
        }
    }
}

/// A chat layer that edits the messages on their way to the model: it appends a note through
/// `Arc::make_mut` to the first request, and replaces the messages outright in the others.
fn rewrite() -> Tap {
    let seen = AtomicUsize::new(0);
    Tap::new(move |request| {
        if seen.fetch_add(1, SeqCst) == 0 {
            Arc::make_mut(&mut request.messages).push(Message::user("a note from a layer"));
        } else {
            let mut messages = request.messages.to_vec();
            messages.retain(|m| m.role != Role::System);
            messages.push(Message::user("another note"));
            request.messages = Arc::new(messages);
        }
    })
}

/// A layer's edits reach the model and stay out of the run: the run's messages, and what the
/// next request asks, are the run's own.
#[tokio::test]
async fn a_layer_that_edits_the_messages_edits_its_own_copy() {
    let model = ScriptedModel::new()
        .tool_call("add", serde_json::json!({"a": 2, "b": 3}))
        .text("5");
    let seen = Asked::new(false);
    let agent = Agent::builder(model.clone())
        .instructions("You add numbers.")
        .tool(FunctionTool::<()>::new(
            ToolSpec::new("add", "Add", serde_json::json!({"type": "object"})),
            |_c, _a| async move { Ok(serde_json::json!(5)) },
        ))
        .chat_layer(seen.tap())
        .chat_layer(rewrite())
        .build()
        .unwrap();
    let result = agent.run("2 + 3?").await;
    assert_eq!(result.output().map(String::as_str), Some("5"), "{:?}", result.error());
    use Role::{Assistant, System, Tool, User};
    assert_eq!(roles(result.messages()), [User, Assistant, Tool, Assistant]);
    assert!(result.messages().iter().all(|m| !m.text().contains("note")));
    // The outer layer saw the run's own messages; the model saw the edits.
    let asked = seen.asked();
    assert_eq!(roles(&asked[1]), [System, User, Assistant, Tool]);
    assert_eq!(&asked[1][1..], &result.messages()[..3]);
    let sent = model.requests();
    assert_eq!(sent[0].messages.last().unwrap().text(), "a note from a layer");
    assert_eq!(roles(&sent[1].messages), [User, Assistant, Tool, User]);
    assert_eq!(sent[1].messages[3].text(), "another note");
}

/// A model call the run abandons (its cancel token fired, or its timeout passed) does not
/// take the run's messages with it: the failed run reports them, and a resume asks with them.
#[tokio::test]
async fn a_model_call_abandoned_mid_flight_leaves_the_run_its_messages() {
    let model = ScriptedModel::new()
        .delayed_text(Duration::from_secs(30), "too late")
        .text("resumed answer")
        .without_recording();
    let seen = Asked::new(false);
    let agent: Agent<()> = Agent::builder(model)
        .instructions("Answer.")
        .chat_layer(seen.tap())
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()
        .unwrap();
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let result = agent
        .run(AgentRequest::new((), "hi").run_id("abandoned").cancel_token(token))
        .await;
    assert_eq!(result.error(), Some(&AgentError::Cancelled));
    assert_eq!(roles(result.messages()), [Role::User]);
    assert_eq!(result.messages()[0].text(), "hi");
    let resumed = agent.resume("abandoned", ()).await;
    assert_eq!(
        resumed.output().map(String::as_str),
        Some("resumed answer"),
        "{:?}",
        resumed.error()
    );
    let asked = seen.asked();
    assert_eq!(asked.len(), 2);
    assert_eq!(
        roles(&asked[1]),
        [Role::System, Role::User],
        "the resume asks with the run's message"
    );
    assert_eq!(asked[1][1].text(), "hi");

    let slow = ScriptedModel::new()
        .delayed_text(Duration::from_secs(30), "too late")
        .without_recording();
    let agent: Agent<()> = Agent::builder(slow)
        .limits(RunLimits::default().timeout(Some(Duration::from_millis(50))))
        .build()
        .unwrap();
    let result = agent.run("hello").await;
    assert!(
        matches!(result.error(), Some(AgentError::Timeout { .. })),
        "{:?}",
        result.error()
    );
    assert_eq!(roles(result.messages()), [Role::User]);
    assert_eq!(result.messages()[0].text(), "hello");
}

/// How often a chat layer's service was cloned and called.
#[derive(Clone)]
struct CountClones {
    clones: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

impl CountClones {
    /// The layer that counts.
    fn tap(&self) -> Tap {
        let calls = Arc::clone(&self.calls);
        let mut tap = Tap::new(move |_| {
            calls.fetch_add(1, SeqCst);
        });
        tap.clones = Arc::clone(&self.clones);
        tap
    }
}

/// As `AgentBuilder::chat_layer` says: a run clones the chat stack once and sends every one
/// of its requests through that clone.
#[tokio::test]
async fn a_run_sends_all_its_requests_through_one_clone_of_the_chat_stack() {
    let counts = CountClones {
        clones: Arc::default(),
        calls: Arc::default(),
    };
    let model = ScriptedModel::new()
        .tool_call("add", serde_json::json!({"a": 1, "b": 1}))
        .tool_call("add", serde_json::json!({"a": 2, "b": 2}))
        .text("done")
        .cycle()
        .without_recording();
    let agent = Agent::builder(model)
        .tool(FunctionTool::<()>::new(
            ToolSpec::new("add", "Add", serde_json::json!({"type": "object"})),
            |_c, _a| async move { Ok(serde_json::json!(0)) },
        ))
        .chat_layer(counts.tap())
        .build()
        .unwrap();
    let built = counts.clones.load(SeqCst);
    for run in 1..=2 {
        let result = agent.run("go").await;
        assert!(result.is_completed(), "{:?}", result.error());
        assert_eq!(counts.calls.load(SeqCst), 3 * run, "three requests per run");
        assert_eq!(counts.clones.load(SeqCst) - built, run, "one clone per run");
    }
}

/// Strict Plan-and-Execute asks with messages of its own (a step's) and without (the plan,
/// the final answer), through the planner's stack and the agent's: every request still starts
/// with the agent's instructions, and the run ends with its messages.
#[tokio::test]
async fn strict_steps_with_and_without_their_own_messages_keep_the_instructions() {
    use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
    let planner = ScriptedModel::new()
        .text(r#"{"steps": [{"description": "Add 2 and 3", "allowed_tools": ["add"]}]}"#)
        .without_recording();
    let model = ScriptedModel::new()
        .tool_call("add", serde_json::json!({"a": 2, "b": 3}))
        .text(r#"{"status": "completed", "result": "2 + 3 = 5"}"#)
        .text("5")
        .without_recording();
    let seen = Asked::new(false);
    let agent = Agent::builder(model)
        .instructions("Be exact.")
        .tool(FunctionTool::<()>::new(
            ToolSpec::new("add", "Add", serde_json::json!({"type": "object"})),
            |_c, _a| async move { Ok(serde_json::json!(5)) },
        ))
        .chat_layer(seen.tap())
        .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::new(planner)))
        .build()
        .unwrap();
    let result = agent.run("What is 2 + 3?").await;
    assert_eq!(result.output().map(String::as_str), Some("5"), "{:?}", result.error());
    assert_eq!(result.messages()[0].text(), "What is 2 + 3?");
    let asked = seen.asked();
    assert_eq!(asked.len(), 4, "plan, step tool call, step result, final answer");
    for (i, messages) in asked.iter().enumerate() {
        assert_eq!(messages[0].role, Role::System, "request {i}");
        assert!(
            messages[0].text().starts_with("Be exact."),
            "request {i}: {:?}",
            messages[0].text()
        );
        assert!(
            messages.iter().any(|m| m.text() == "What is 2 + 3?"),
            "request {i} asks about the run's input"
        );
    }
}
