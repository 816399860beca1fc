//! Ask-the-user interrupts: a tool asks a person for typed input, the run pauses, the answer
//! is validated against the schema and the waiting tool runs again with it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use modu_agent::Agent;
use modu_core::{
    AgentError, AgentEvent, CollectingEventSink, FunctionTool, InMemoryCheckpointStore, InputRequest, Role, RunContext,
    ToolSpec,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Seat {
    seat: String,
}

/// A tool that asks for a seat (typed), then books it: the booking is the side effect.
fn book(executions: Arc<AtomicUsize>, booked: Arc<Mutex<Vec<String>>>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("book", "Book a seat", json!({"type": "object"})),
        move |ctx: RunContext<()>, _args| {
            executions.fetch_add(1, Ordering::SeqCst);
            let booked = Arc::clone(&booked);
            async move {
                let answer: Seat = ctx.ask_user_as("Which seat?")?;
                booked.lock().unwrap().push(answer.seat.clone());
                Ok(json!(format!("booked {}", answer.seat)))
            }
        },
    )
}

/// A tool that asks twice (a name, then a confirmation) before it acts.
fn two_questions(done: Arc<Mutex<Vec<Value>>>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("signup", "Sign up", json!({"type": "object"})),
        move |ctx: RunContext<()>, _args| {
            let done = Arc::clone(&done);
            async move {
                let name = ctx.ask_user("Your name?", json!({"type": "string"}))?;
                let sure = ctx.ask_user(format!("Sign up {name}?"), json!({"type": "boolean"}))?;
                done.lock().unwrap().push(json!([name, sure]));
                Ok(json!("signed up"))
            }
        },
    )
}

fn tool_result(messages: &[modu_core::Message]) -> String {
    messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_tool_asks_the_run_pauses_and_the_answer_reaches_the_tool_on_resume() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let executions = Arc::new(AtomicUsize::new(0));
    let booked = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::new(CollectingEventSink::new());
    let model = ScriptedModel::new()
        .tool_call("book", json!({}))
        .text("Your seat is booked.");
    let agent = Agent::builder(model.clone())
        .tool(book(Arc::clone(&executions), Arc::clone(&booked)))
        .checkpoint_store(store)
        .event_sink(sink.clone())
        .build()
        .unwrap();

    let paused = agent.run("book me a seat").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    assert!(
        paused.is_paused() && paused.error().is_none(),
        "a paused run is not a failure"
    );
    assert!(paused.approvals().is_empty(), "no approval is asked");
    let request: &InputRequest = &paused.inputs()[0];
    assert_eq!(request.tool_name, "book");
    assert_eq!(request.prompt, "Which seat?");
    assert_eq!(request.index, 0);
    assert_eq!(request.schema["properties"]["seat"]["type"], "string");
    assert!(booked.lock().unwrap().is_empty(), "nothing booked before the answer");
    assert_eq!(model.requests().len(), 1, "the model is not asked while the run waits");
    assert_eq!(agent.pending_inputs(paused.run_id()).await.unwrap(), paused.inputs());
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, AgentEvent::InputRequested { request: r, .. } if r.call_id == request.call_id))
    );

    // An answer that does not fit the schema is refused, and nothing is recorded.
    let wrong = agent
        .answer(paused.run_id(), &request.call_id, json!({"seat": 7}))
        .await;
    assert!(matches!(wrong, Err(AgentError::InvalidInput { .. })), "{wrong:?}");
    assert_eq!(agent.pending_inputs(paused.run_id()).await.unwrap().len(), 1);
    let unknown = agent
        .answer(paused.run_id(), "no_such_call", json!({"seat": "1A"}))
        .await;
    assert!(matches!(unknown, Err(AgentError::UnknownInput { .. })), "{unknown:?}");

    agent
        .answer(paused.run_id(), &request.call_id, json!({"seat": "12A"}))
        .await
        .unwrap();
    assert!(agent.pending_inputs(paused.run_id()).await.unwrap().is_empty());
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("Your seat is booked."),
        "{:?}",
        done.error()
    );
    assert!(!done.is_paused());
    assert_eq!(*booked.lock().unwrap(), ["12A"], "booked once, with the answer");
    assert_eq!(
        executions.load(Ordering::SeqCst),
        2,
        "the waiting tool ran again on resume"
    );
    assert_eq!(tool_result(done.messages()), "booked 12A");
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(e, AgentEvent::InputAnswered { answered: true, .. }))
    );
}

#[tokio::test]
async fn a_declined_ask_is_a_tool_error_the_model_sees() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let booked = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new().tool_call("book", json!({})).text("Not booked.");
    let agent = Agent::builder(model.clone())
        .tool(book(Arc::new(AtomicUsize::new(0)), Arc::clone(&booked)))
        .checkpoint_store(store)
        .build()
        .unwrap();
    let paused = agent.run("book").await;
    let call_id = paused.inputs()[0].call_id.clone();
    agent
        .decline(paused.run_id(), &call_id, Some("I changed my mind".into()))
        .await
        .unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("Not booked."),
        "{:?}",
        done.error()
    );
    assert!(booked.lock().unwrap().is_empty());
    let seen = tool_result(done.messages());
    assert!(
        seen.contains("input_declined") && seen.contains("I changed my mind"),
        "{seen}"
    );
}

#[tokio::test]
async fn a_call_that_asks_twice_pauses_twice_and_gets_both_answers_in_order() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let done = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(ScriptedModel::new().tool_call("signup", json!({})).text("Welcome."))
        .tool(two_questions(Arc::clone(&done)))
        .checkpoint_store(store)
        .build()
        .unwrap();
    let first = agent.run("sign me up").await;
    let ask = &first.inputs()[0];
    assert_eq!((ask.prompt.as_str(), ask.index), ("Your name?", 0));
    agent.answer(first.run_id(), &ask.call_id, json!("Ada")).await.unwrap();

    let second = agent.resume(first.run_id(), ()).await;
    assert!(second.is_paused(), "{:?}", second.error());
    let ask = &second.inputs()[0];
    assert_eq!((ask.prompt.as_str(), ask.index), ("Sign up \"Ada\"?", 1));
    assert!(done.lock().unwrap().is_empty());
    agent.answer(first.run_id(), &ask.call_id, json!(true)).await.unwrap();

    let finished = agent.resume(first.run_id(), ()).await;
    assert_eq!(
        finished.output().map(String::as_str),
        Some("Welcome."),
        "{:?}",
        finished.error()
    );
    assert_eq!(*done.lock().unwrap(), [json!(["Ada", true])]);
}

#[tokio::test]
async fn other_calls_of_the_batch_finish_and_are_not_run_again() {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let reads = Arc::new(AtomicUsize::new(0));
    let read = {
        let reads = Arc::clone(&reads);
        FunctionTool::<()>::new(
            ToolSpec::new("balance", "Read the balance", json!({"type": "object"})),
            move |_c, _a| {
                reads.fetch_add(1, Ordering::SeqCst);
                async { Ok(json!(100)) }
            },
        )
    };
    let booked = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(
        ScriptedModel::new()
            .tool_calls([("balance", json!({})), ("book", json!({}))])
            .text("ok"),
    )
    .tool(read)
    .tool(book(Arc::new(AtomicUsize::new(0)), Arc::clone(&booked)))
    .checkpoint_store(store)
    .build()
    .unwrap();
    let paused = agent.run("go").await;
    assert_eq!(paused.inputs().len(), 1);
    let call_id = paused.inputs()[0].call_id.clone();
    agent
        .answer(paused.run_id(), &call_id, json!({"seat": "3C"}))
        .await
        .unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert_eq!(reads.load(Ordering::SeqCst), 1, "the finished call kept its result");
    assert_eq!(*booked.lock().unwrap(), ["3C"]);
}

#[tokio::test]
async fn an_ask_outside_a_tool_call_is_refused() {
    let ctx = RunContext::new(Arc::new(()), "run");
    let refused = ctx.ask_user("anything?", json!({"type": "string"})).unwrap_err();
    assert_eq!(refused.reason, "input_outside_call");
    assert!(ctx.request_input(modu_core::InputSpec::new("x", json!({}))).is_none());
}
