//! Behaviour of the standard run loop, driven by `ScriptedModel`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use modu_agent::{Agent, AgentRequest, FinalizationMode, RetryConfig, RunLimits, StreamItem};
use modu_core::{
    AgentError, AgentEvent, CollectingEventSink, FunctionTool, InMemoryCheckpointStore, InMemoryConversationStore,
    Message, ModelError, RbacToolAuthorizer, Role, ToolError, ToolErrorKind, ToolSpec, UserContext,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

fn fast_retry(attempts: u32) -> RetryConfig {
    RetryConfig::new(attempts).with_backoff(Duration::from_millis(1), Duration::from_millis(5))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Sleep {
    label: String,
    ms: u64,
}

/// A tool that sleeps `ms` and echoes its label, recording the completion order.
fn sleeper(order: Arc<std::sync::Mutex<Vec<String>>>) -> FunctionTool<()> {
    FunctionTool::typed("sleep_echo", "Sleep, then echo the label", move |_ctx, a: Sleep| {
        let order = Arc::clone(&order);
        async move {
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            order.lock().unwrap().push(a.label.clone());
            Ok(a.label)
        }
    })
}

fn tool_results(messages: &[Message]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.clone().unwrap(), m.text()))
        .collect()
}

#[tokio::test]
async fn multi_turn_loop_runs_parallel_calls_and_keeps_call_order() {
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let model = ScriptedModel::new()
        .tool_calls([
            ("sleep_echo", json!({"label": "slow", "ms": 150})),
            ("sleep_echo", json!({"label": "fast", "ms": 10})),
        ])
        .tool_call("sleep_echo", json!({"label": "second turn", "ms": 1}))
        .text("done");
    let agent = Agent::builder(model.clone())
        .tool(sleeper(Arc::clone(&order)))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let result = agent.run("go").await;
    assert!(result.is_completed(), "{:?}", result.error());
    // The two calls ran concurrently: together they took about as long as the slower one.
    assert!(
        started.elapsed() < Duration::from_millis(150 + 120),
        "calls were not concurrent"
    );
    assert_eq!(*order.lock().unwrap(), vec!["fast", "slow", "second turn"]);
    // Results are in call order, not completion order, and answer the right ids.
    let results = tool_results(result.messages());
    assert_eq!(
        results,
        vec![
            ("call_0_0".to_string(), "slow".to_string()),
            ("call_0_1".to_string(), "fast".to_string()),
            ("call_1_0".to_string(), "second turn".to_string()),
        ]
    );
    // user, assistant(2 calls), 2 results, assistant(1 call), 1 result, final answer
    assert_eq!(result.messages().len(), 7);
    assert_eq!(result.output().map(String::as_str), Some("done"));
    // The second request carried both results, in call order, after the assistant's calls.
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let second = &requests[1].messages;
    let n = second.len();
    assert_eq!(second[n - 3].tool_calls.len(), 2);
    assert_eq!(second[n - 2].tool_call_id.as_deref(), Some("call_0_0"));
    assert_eq!(second[n - 1].tool_call_id.as_deref(), Some("call_0_1"));
    assert_eq!(result.usage().requests, 3);
    assert_eq!(result.usage().input_tokens, 30);
    assert_eq!(result.stats().tool_calls, 3);
}

#[tokio::test]
async fn tool_timeout_is_reported_to_the_model() {
    let slow = FunctionTool::<()>::new(
        ToolSpec::new("slow", "Never answers in time", json!({"type": "object"})).timeout(Duration::from_millis(50)),
        |_ctx, _args| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(json!("late"))
        },
    );
    let model = ScriptedModel::new().tool_call("slow", json!({})).text("gave up");
    let agent = Agent::builder(model.clone()).tool(slow).build().unwrap();
    let started = std::time::Instant::now();
    let result = agent.run("go").await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(result.output().map(String::as_str), Some("gave up"));
    let tool_msg = result.messages().iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(tool_msg.is_error);
    let content: Value = serde_json::from_str(&tool_msg.text()).unwrap();
    assert_eq!(content["error"]["type"], "timeout");
}

fn flaky(calls: Arc<AtomicUsize>, idempotent: bool) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new("flaky", "Fails once with a retryable error", json!({"type": "object"})).idempotent(idempotent),
        move |_ctx, _args| {
            let calls = Arc::clone(&calls);
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(ToolError::execution("backend_busy").retryable(true))
                } else {
                    Ok(json!("ok"))
                }
            }
        },
    )
}

#[tokio::test]
async fn idempotent_tool_is_retried_non_idempotent_is_not() {
    for (idempotent, expected_calls, expect_ok) in [(true, 2, true), (false, 1, false)] {
        let calls = Arc::new(AtomicUsize::new(0));
        let sink = Arc::new(CollectingEventSink::new());
        let model = ScriptedModel::new().tool_call("flaky", json!({})).text("end");
        let agent = Agent::builder(model)
            .tool(flaky(Arc::clone(&calls), idempotent))
            .retry(fast_retry(3))
            .event_sink(sink.clone())
            .build()
            .unwrap();
        let result = agent.run("go").await;
        assert!(result.is_completed());
        assert_eq!(calls.load(Ordering::SeqCst), expected_calls, "idempotent={idempotent}");
        let finished = sink
            .events()
            .into_iter()
            .find_map(|e| match e {
                AgentEvent::ToolCallFinished { ok, attempts, .. } => Some((ok, attempts)),
                _ => None,
            })
            .unwrap();
        assert_eq!(finished, (expect_ok, expected_calls as u32));
    }
}

#[tokio::test]
async fn sync_tool_timeout_is_not_retried_even_when_idempotent() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let blocking = FunctionTool::<()>::blocking(
        ToolSpec::new("blocking", "Blocks", json!({"type": "object"}))
            .idempotent(true)
            .timeout(Duration::from_millis(30)),
        move |_ctx, _args| {
            c.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(200));
            Ok(json!("late"))
        },
    );
    let model = ScriptedModel::new().tool_call("blocking", json!({})).text("end");
    let agent = Agent::builder(model)
        .tool(blocking)
        .retry(fast_retry(3))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert!(result.is_completed());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a timed-out blocking tool must not be re-run"
    );
    let tool_msg = result.messages().iter().find(|m| m.role == Role::Tool).unwrap();
    let content: Value = serde_json::from_str(&tool_msg.text()).unwrap();
    assert_eq!(content["error"]["type"], "timeout");
    assert!(content["error"].get("retryable").is_none());
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

fn add_tool(calls: Arc<AtomicUsize>) -> FunctionTool<()> {
    FunctionTool::typed("add", "Add two integers", move |_ctx, a: AddArgs| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok(a.a + a.b) }
    })
}

#[tokio::test]
async fn malformed_arguments_go_back_to_the_model_which_corrects_them() {
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .raw_tool_call("add", "{\"a\": 1, \"b\": ") // not JSON
        .tool_call("add", json!({"a": "one", "b": 2})) // wrong type
        .tool_call("add", json!({"a": 1, "b": 2}))
        .text("3");
    let agent = Agent::builder(model.clone())
        .tool(add_tool(Arc::clone(&calls)))
        .build()
        .unwrap();
    let result = agent.run("1 + 2?").await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the valid call ran");
    let results = tool_results(result.messages());
    let first: Value = serde_json::from_str(&results[0].1).unwrap();
    assert_eq!(first["error"]["type"], "validation");
    assert_eq!(first["error"]["reason"], "invalid_json");
    let second: Value = serde_json::from_str(&results[1].1).unwrap();
    assert_eq!(second["error"]["reason"], "invalid_arguments");
    assert!(second["error"]["message"].as_str().unwrap().contains("/a"), "{second}");
    assert_eq!(results[2].1, "3");
    // The model saw each error before its next attempt.
    let requests = model.requests();
    assert!(requests[1].messages.last().unwrap().text().contains("invalid_json"));
}

#[tokio::test]
async fn unknown_tool_is_refused_with_the_list_of_tools() {
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("delete_everything", json!({}))
        .text("sorry");
    let agent = Agent::builder(model).tool(add_tool(calls)).build().unwrap();
    let result = agent.run("go").await;
    assert!(result.is_completed());
    let content: Value = serde_json::from_str(&tool_results(result.messages())[0].1).unwrap();
    assert_eq!(content["error"]["type"], "not_found");
    assert!(content["error"]["message"].as_str().unwrap().contains("add"));
}

#[tokio::test]
async fn max_tool_calls_ends_the_run_with_a_typed_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("add", json!({"a": 1, "b": 1}))
        .tool_calls([("add", json!({"a": 1, "b": 1})), ("add", json!({"a": 2, "b": 2}))])
        .text("never");
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::clone(&calls)))
        .limits(RunLimits::default().max_tool_calls(2))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(result.error(), Some(&AgentError::MaxToolCallsExceeded { limit: 2 }));
    assert!(result.output().is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the batch over the limit did not run");
}

#[tokio::test]
async fn max_turns_ends_a_model_that_never_stops_calling_tools() {
    let model = ScriptedModel::new().tool_call("add", json!({"a": 1, "b": 1})).cycle();
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .limits(RunLimits::default().max_turns(3))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert_eq!(result.error(), Some(&AgentError::MaxTurnsExceeded { limit: 3 }));
}

#[tokio::test]
async fn one_timeout_is_shared_by_every_call_of_the_run() {
    // Each tool call alone fits in the timeout; together they do not.
    let slowish = FunctionTool::<()>::new(
        ToolSpec::new("wait", "Waits", json!({"type": "object"})),
        |_c, _a| async {
            tokio::time::sleep(Duration::from_millis(120)).await;
            Ok(json!("waited"))
        },
    );
    let model = ScriptedModel::new()
        .tool_call("wait", json!({}))
        .tool_call("wait", json!({}))
        .text("never");
    let agent = Agent::builder(model)
        .tool(slowish)
        .limits(RunLimits::default().timeout(Some(Duration::from_millis(200))))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let result = agent.run("go").await;
    assert_eq!(result.error(), Some(&AgentError::Timeout { after_ms: 200 }));
    assert!(started.elapsed() < Duration::from_millis(600));
    // The completed first call is kept in the result.
    assert!(result.messages().iter().any(|m| m.role == Role::Tool));
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Capital {
    country: String,
    city: String,
}

#[tokio::test]
async fn structured_output_without_tools_is_one_request_with_the_schema() {
    let model = ScriptedModel::new().text(r#"{"country": "Korea", "city": "Seoul"}"#);
    let agent = Agent::builder(model.clone()).output::<Capital>().build().unwrap();
    let result = agent.run("Capital of Korea?").await;
    assert_eq!(
        result.output(),
        Some(&Capital {
            country: "Korea".into(),
            city: "Seoul".into()
        })
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].tools.is_empty());
    let format = requests[0].response_format.as_ref().unwrap();
    assert_eq!(format.schema["properties"]["city"]["type"], "string");
    assert!(format.strict);
}

#[tokio::test]
async fn structured_output_with_tools_separates_tool_and_schema_requests() {
    let model = ScriptedModel::new()
        .tool_call("add", json!({"a": 1, "b": 2}))
        .text("The capital is Seoul.")
        .text(r#"{"country": "Korea", "city": "Seoul"}"#);
    let agent = Agent::builder(model.clone())
        .output::<Capital>()
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .build()
        .unwrap();
    let result = agent.run("Capital of Korea?").await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert_eq!(result.output().unwrap().city, "Seoul");
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    for act in &requests[..2] {
        assert!(!act.tools.is_empty(), "tool requests carry tools");
        assert!(
            act.response_format.is_none(),
            "tool requests never carry the output schema"
        );
    }
    let fin = &requests[2];
    assert!(fin.tools.is_empty(), "the finalization request carries no tools");
    assert!(
        fin.response_format.is_some(),
        "the finalization request carries the schema"
    );
    // The draft answer is context for the final request, and the stored answer is the JSON.
    assert!(fin.messages.iter().any(|m| m.text() == "The capital is Seoul."));
    assert!(result.messages().last().unwrap().text().contains("Seoul"));
    assert!(!result.messages().iter().any(|m| m.text() == "The capital is Seoul."));
}

#[tokio::test]
async fn finalization_modes_always_and_disabled() {
    // always: a text agent also gets a separate final request without tools.
    let model = ScriptedModel::new().text("draft").text("final");
    let agent = Agent::builder(model.clone())
        .finalization_mode(FinalizationMode::Always)
        .build()
        .unwrap();
    assert_eq!(agent.run("q").await.output().map(String::as_str), Some("final"));
    assert_eq!(model.requests().len(), 2);
    // disabled: structured output with tools parses the tool loop's last answer directly.
    let model = ScriptedModel::new().text(r#"{"country": "Korea", "city": "Seoul"}"#);
    let agent = Agent::builder(model.clone())
        .output::<Capital>()
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .finalization_mode(FinalizationMode::Disabled)
        .build()
        .unwrap();
    assert_eq!(agent.run("q").await.output().unwrap().city, "Seoul");
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].response_format.is_none() && !requests[0].tools.is_empty());
}

#[tokio::test]
async fn unparsable_output_gets_one_corrective_request_then_a_typed_error() {
    let model = ScriptedModel::new()
        .text("Seoul, I think")
        .text(r#"{"country":"Korea","city":"Seoul"}"#);
    let agent = Agent::builder(model.clone()).output::<Capital>().build().unwrap();
    let result = agent.run("q").await;
    assert_eq!(result.output().unwrap().city, "Seoul");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]
            .messages
            .last()
            .unwrap()
            .text()
            .contains("could not be parsed")
    );

    let model = ScriptedModel::new().text("no").text("still no");
    let agent = Agent::builder(model).output::<Capital>().build().unwrap();
    let result = agent.run("q").await;
    assert!(
        matches!(result.error(), Some(AgentError::Output { .. })),
        "{:?}",
        result.error()
    );
}

#[tokio::test]
async fn streaming_yields_events_in_order_and_the_result_last() {
    let model = ScriptedModel::new()
        .tool_call("add", json!({"a": 2, "b": 2}))
        .text_deltas(["2 + 2 ", "= 4"]);
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let mut stream = agent.stream("2 + 2?");
    let mut kinds = Vec::new();
    let mut deltas = String::new();
    let mut results = Vec::new();
    let mut last = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(e) => {
                if let AgentEvent::ModelDelta { text, .. } = &e {
                    deltas.push_str(text);
                }
                if let AgentEvent::ToolCallResult {
                    tool,
                    content,
                    is_error,
                    ..
                } = &e
                {
                    results.push((tool.clone(), content.clone(), *is_error));
                }
                kinds.push(e.kind());
            }
            StreamItem::Completed(r) => last = Some(r),
            StreamItem::Failed(r) => panic!("run failed: {:?}", r.error),
            StreamItem::Paused(p) => panic!("paused: {:?}", p.approvals),
        }
    }
    assert_eq!(
        kinds,
        vec![
            "run_started",
            "model_call_started",
            // The tool call as it streams in (the scripted model sends it in three fragments).
            "tool_call_delta",
            "tool_call_delta",
            "tool_call_delta",
            "model_call_finished",
            "tool_call_started",
            "tool_call_finished",
            // The result as the model reads it, before the next model call.
            "tool_call_result",
            "model_call_started",
            "model_delta",
            "model_delta",
            "model_call_finished",
        ]
    );
    assert_eq!(deltas, "2 + 2 = 4");
    assert_eq!(results, [("add".to_owned(), "4".to_owned(), false)]);
    assert_eq!(last.map(|r| r.output), Some("2 + 2 = 4".to_owned()));
    // The sink saw the same events but the raw tool-call fragments (no sink may see them:
    // masking needs whole JSON) and the tool's result, plus the terminal one.
    let sink_kinds: Vec<&str> = sink.events().iter().map(AgentEvent::kind).collect();
    let shown: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| *k != "tool_call_delta" && *k != "tool_call_result")
        .collect();
    assert_eq!(&sink_kinds[..shown.len()], &shown[..]);
    assert_eq!(sink_kinds.last(), Some(&"run_completed"));
}

struct Tenant {
    name: String,
}

#[tokio::test]
async fn instructions_are_computed_from_the_run_context() {
    let model = ScriptedModel::new().text("hi").text("hi");
    let agent = Agent::builder(model.clone())
        .context::<Tenant>()
        .instructions_fn(|ctx| {
            format!(
                "You serve {} (roles: {}).",
                ctx.context().name,
                ctx.user().roles.join(",")
            )
        })
        .build()
        .unwrap();
    for name in ["acme", "globex"] {
        let request = AgentRequest::new(Tenant { name: name.into() }, "hello").user(UserContext::with_roles(["admin"]));
        assert!(agent.run(request).await.is_completed());
    }
    let requests = model.requests();
    assert_eq!(requests[0].messages[0].role, Role::System);
    assert_eq!(requests[0].messages[0].text(), "You serve acme (roles: admin).");
    assert_eq!(requests[1].messages[0].text(), "You serve globex (roles: admin).");
}

#[tokio::test]
async fn transient_model_errors_are_retried_honouring_retry_after() {
    let model = ScriptedModel::new()
        .error(|| ModelError::RateLimited {
            retry_after: Some(Duration::from_millis(80)),
        })
        .text("ok");
    let agent = Agent::builder(model).retry(fast_retry(2)).build().unwrap();
    let started = std::time::Instant::now();
    let result = agent.run("q").await;
    assert_eq!(result.output().map(String::as_str), Some("ok"));
    assert!(
        started.elapsed() >= Duration::from_millis(80),
        "retry_after was not honoured"
    );
    // Permanent errors are not retried.
    let model = ScriptedModel::new()
        .error(|| ModelError::Authentication {
            status: 401,
            message: "bad key".into(),
        })
        .text("never");
    let agent = Agent::builder(model.clone()).retry(fast_retry(3)).build().unwrap();
    let result = agent.run("q").await;
    assert!(
        matches!(result.error(), Some(AgentError::Model { kind, retryable: false, .. }) if kind == "authentication")
    );
    assert_eq!(model.remaining(), 1);
}

#[tokio::test]
async fn results_over_max_result_bytes_are_cut_with_a_marker() {
    let big = FunctionTool::<()>::new(
        ToolSpec::new("big", "Big result", json!({"type": "object"})).max_result_bytes(100),
        |_c, _a| async { Ok(json!("x".repeat(10_000))) },
    );
    let model = ScriptedModel::new().tool_call("big", json!({})).text("ok");
    let agent = Agent::builder(model).tool(big).build().unwrap();
    let result = agent.run("q").await;
    let content = &tool_results(result.messages())[0].1;
    assert!(content.len() < 200);
    assert!(content.ends_with("[truncated: 100 of 10000 bytes shown]"), "{content}");
}

#[tokio::test]
async fn rbac_denies_before_execution_and_tells_the_model() {
    let calls = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("add", json!({"a": 1, "b": 1}))
        .text("denied");
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::clone(&calls)))
        .authorizer(Arc::new(RbacToolAuthorizer::new().allow("admin", ["*"])))
        .build()
        .unwrap();
    let result = agent
        .run(AgentRequest::new((), "go").user(UserContext::with_roles(["guest"])))
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let content: Value = serde_json::from_str(&tool_results(result.messages())[0].1).unwrap();
    assert_eq!(content["error"]["type"], ToolErrorKind::Authorization.as_str());
}

#[tokio::test]
async fn disabled_tools_are_hidden_and_refused() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let admin_only = FunctionTool::<()>::new(
        ToolSpec::new("purge", "Purge", json!({"type": "object"})),
        move |_c, _a| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!("purged")) }
        },
    )
    .enabled_when(|ctx| ctx.user().has_role("admin"));
    let model = ScriptedModel::new().tool_call("purge", json!({})).text("ok");
    let agent = Agent::builder(model.clone())
        .tool(admin_only)
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .build()
        .unwrap();
    let result = agent.run("purge it").await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let offered: Vec<String> = model.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(offered, vec!["add"]);
    let content: Value = serde_json::from_str(&tool_results(result.messages())[0].1).unwrap();
    assert_eq!(content["error"]["type"], "not_found");
}

#[tokio::test]
async fn sessions_continue_through_the_conversation_store() {
    let store = Arc::new(InMemoryConversationStore::new());
    let model = ScriptedModel::new()
        .text("Nice to meet you, Ada.")
        .text("Your name is Ada.");
    let agent = Agent::builder(model.clone())
        .conversation_store(store.clone())
        .build()
        .unwrap();
    assert!(
        agent
            .run(AgentRequest::new((), "I am Ada.").session("s1"))
            .await
            .is_completed()
    );
    let second = agent.run(AgentRequest::new((), "What is my name?").session("s1")).await;
    assert_eq!(second.output().map(String::as_str), Some("Your name is Ada."));
    // The second request saw the first turn; the result holds only the new turn.
    assert_eq!(model.requests()[1].messages.len(), 3);
    assert_eq!(second.messages().len(), 2);
    use modu_core::ConversationStore;
    assert_eq!(store.load("s1").await.unwrap().len(), 4);
}

#[tokio::test]
async fn resume_continues_after_a_transient_failure_without_rerunning_tools() {
    let calls = Arc::new(AtomicUsize::new(0));
    let checkpoints = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .tool_call("add", json!({"a": 20, "b": 22}))
        .error(|| ModelError::Transport {
            message: "connection reset".into(),
            source: None,
        })
        .text("42");
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::clone(&calls)))
        .retry(RetryConfig::none())
        .checkpoint_store(checkpoints.clone())
        .build()
        .unwrap();
    let failed = agent.run("20 + 22?").await;
    let error = failed.error().unwrap();
    assert!(error.is_resumable(), "{error:?}");
    assert!(agent.has_checkpoint(failed.run_id()).await.unwrap());
    let resumed = agent.resume(failed.run_id(), ()).await;
    assert_eq!(
        resumed.output().map(String::as_str),
        Some("42"),
        "{:?}",
        resumed.error()
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the completed tool call was not run again"
    );
    assert!(resumed.stats().resumed);
    assert_eq!(resumed.messages().len(), 4);
    // A completed run deletes its checkpoint; resuming again is a typed error.
    assert!(!agent.has_checkpoint(failed.run_id()).await.unwrap());
    let again = agent.resume(failed.run_id(), ()).await;
    assert!(matches!(again.error(), Some(AgentError::CheckpointNotFound { .. })));
}

#[tokio::test]
async fn resume_refuses_an_incompatible_agent_and_corrupted_checkpoints() {
    use modu_core::CheckpointStore;
    let checkpoints = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new().error(|| ModelError::Timeout(Duration::from_secs(1)));
    let agent = Agent::builder(model)
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .retry(RetryConfig::none())
        .checkpoint_store(checkpoints.clone())
        .build()
        .unwrap();
    let failed = agent.run("q").await;
    assert!(failed.error().unwrap().is_resumable());
    // Another agent: no tools.
    let other = Agent::builder(ScriptedModel::new().text("x"))
        .checkpoint_store(checkpoints.clone())
        .build()
        .unwrap();
    let r = other.resume(failed.run_id(), ()).await;
    assert!(
        matches!(r.error(), Some(AgentError::ResumeIncompatible { .. })),
        "{:?}",
        r.error()
    );
    // Corrupted bytes and an unknown schema version.
    checkpoints
        .save(
            "broken",
            &modu_core::CheckpointMeta::new("a", modu_core::CheckpointStatus::Failed),
            b"\x00\xffnot json",
        )
        .await
        .unwrap();
    let r = agent.resume("broken", ()).await;
    assert!(matches!(r.error(), Some(AgentError::CheckpointInvalid { .. })));
    checkpoints
        .save(
            "future",
            &modu_core::CheckpointMeta::new("a", modu_core::CheckpointStatus::Failed),
            br#"{"schema_version": 99, "run_id": "future"}"#,
        )
        .await
        .unwrap();
    let r = agent.resume("future", ()).await;
    match r.error() {
        Some(AgentError::CheckpointInvalid { message, .. }) => assert!(message.contains("99")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bad_tool_definitions_fail_at_build_time() {
    let bad = FunctionTool::<()>::new(
        ToolSpec::new("bad name!", "x", json!({"type": "object"})),
        |_c, _a| async { Ok(json!(1)) },
    );
    assert!(matches!(
        Agent::builder(ScriptedModel::new())
            .tool(bad)
            .build()
            .map_err(AgentError::from),
        Err(AgentError::Configuration { .. })
    ));
    let bad_schema = FunctionTool::<()>::new(
        ToolSpec::new("x", "x", json!({"type": "no-such-type"})),
        |_c, _a| async { Ok(json!(1)) },
    );
    assert!(Agent::builder(ScriptedModel::new()).tool(bad_schema).build().is_err());
}

#[tokio::test]
async fn a_tool_can_ask_the_runs_model_through_its_context() {
    // The model: a tool call, then the tool's own question, then the answer.
    let model = ScriptedModel::new()
        .named("house-model")
        .tool_call("ask_model", json!({}))
        .text("a haiku about rust")
        .text("done");
    let tool = FunctionTool::<()>::new(
        ToolSpec::new("ask_model", "Ask the run's model", json!({"type": "object"})),
        |ctx: modu_core::RunContext<()>, _args: Value| async move {
            let model = ctx.model().cloned().ok_or_else(|| ToolError::execution("no model"))?;
            let response = model
                .complete(modu_core::ChatRequest::new(vec![Message::user("write a haiku")]))
                .await
                .map_err(|e| ToolError::execution(e.to_string()))?;
            Ok(json!({"model": model.model_name(), "text": response.message.text()}))
        },
    );
    let agent: Agent = Agent::builder(model).tool(tool).build().unwrap();
    let result = agent.run("go").await;
    assert!(result.error().is_none(), "{:?}", result.error());
    let results = tool_results(result.messages());
    let value: Value = serde_json::from_str(&results[0].1).unwrap();
    assert_eq!(value, json!({"model": "house-model", "text": "a haiku about rust"}));

    // Outside a run there is none, unless given.
    let ctx = modu_core::RunContext::new(Arc::new(()), "r1");
    assert!(ctx.model().is_none());
    let given = ctx.with_model(Arc::new(ScriptedModel::new().named("given")));
    assert_eq!(given.model().map(|m| m.model_name()), Some("given"));
}

/// More events than a `RunStream` buffers (256), read by a consumer slower than the run: the
/// run waits for room instead of dropping any, and the deltas arrive whole and in order.
#[tokio::test]
async fn a_slow_stream_consumer_gets_every_event_in_order() {
    let deltas: Vec<String> = (0..600).map(|i| format!("{i} ")).collect();
    let model = ScriptedModel::new().text_deltas(deltas.clone());
    let agent = Agent::builder(model).build().unwrap();
    let mut stream = agent.stream("count");
    // Let the run fill the buffer before anything is read.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut received = Vec::new();
    let mut output = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::ModelDelta { text, .. }) => {
                received.push(text);
                if received.len() % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            StreamItem::Event(_) => {}
            StreamItem::Completed(c) => output = Some(c.output),
            other => panic!("unexpected end: {other:?}"),
        }
    }
    assert_eq!(received, deltas);
    assert_eq!(output.as_deref(), Some(deltas.concat().as_str()));
}
