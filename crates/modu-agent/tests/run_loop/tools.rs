//! Tool calls: parallel batches, timeouts, retries, bad arguments, authorization and build checks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modu_agent::{Agent, AgentRequest};
use modu_core::{
    AgentError, AgentEvent, CollectingEventSink, FunctionTool, Message, RbacToolAuthorizer, Role, ToolError,
    ToolErrorKind, ToolSpec, UserContext,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

use crate::support::{add_tool, fast_retry};

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
