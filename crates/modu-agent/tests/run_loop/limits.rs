//! Run limits (tool calls, turns, the run timeout) and retries of model errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modu_agent::{Agent, RunLimits};
use modu_core::{AgentError, FunctionTool, ModelError, Role, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{add_tool, fast_retry};

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
async fn a_retry_that_would_wait_past_the_deadline_is_not_made() {
    // The server asks for 30 s; the run has 2 s. Waiting could only end in the timeout, so the
    // run ends now with the model's error, which says what happened and stays resumable.
    let model = ScriptedModel::new()
        .error(|| ModelError::RateLimited {
            retry_after: Some(Duration::from_secs(30)),
        })
        .text("never");
    let agent = Agent::builder(model.clone())
        .retry(fast_retry(3))
        .limits(RunLimits::default().timeout(Some(Duration::from_secs(2))))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let result = agent.run("q").await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the run waited {:?} for a retry it could not make",
        started.elapsed()
    );
    assert!(
        matches!(result.error(), Some(AgentError::Model { kind, retryable: true, .. }) if kind == "rate_limited"),
        "{:?}",
        result.error()
    );
    assert!(result.error().is_some_and(AgentError::is_resumable));
    assert_eq!(model.remaining(), 1, "no second attempt");

    // A wait that ends before the deadline is still made.
    let model = ScriptedModel::new()
        .error(|| ModelError::RateLimited {
            retry_after: Some(Duration::from_millis(50)),
        })
        .text("ok");
    let agent = Agent::builder(model)
        .retry(fast_retry(3))
        .limits(RunLimits::default().timeout(Some(Duration::from_secs(2))))
        .build()
        .unwrap();
    assert_eq!(agent.run("q").await.output().map(String::as_str), Some("ok"));
}

#[tokio::test]
async fn a_tools_retry_that_would_wait_past_the_deadline_goes_to_the_model_as_an_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let busy = FunctionTool::<()>::new(
        ToolSpec::new("busy", "Always busy", json!({"type": "object"})).idempotent(true),
        move |_c, _a| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err(modu_core::ToolError::execution("backend_busy").retryable(true)) }
        },
    );
    let model = ScriptedModel::new().tool_call("busy", json!({})).text("told the user");
    let agent = Agent::builder(model)
        .tool(busy)
        // The first backoff (10 s) is longer than the run (2 s).
        .retry(modu_agent::RetryConfig::new(3).with_backoff(Duration::from_secs(10), Duration::from_secs(10)))
        .limits(RunLimits::default().timeout(Some(Duration::from_secs(2))))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let result = agent.run("go").await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(result.output().map(String::as_str), Some("told the user"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let tool = result.messages().iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(tool.is_error);
    assert!(tool.text().contains("backend_busy"), "{}", tool.text());
}
