//! Tool errors, results and secret arguments stay out of the plan report and the error.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use modu_agent::Agent;
use modu_agent::plan::{LlmPlanGenerator, RecoveryFallback, ToolFailureRecoveryConfig, ToolTraceMode};
use modu_core::{CollectingEventSink, FunctionTool, ToolError, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{
    SECRET_ARG, SECRET_MESSAGE, SECRET_RESULT, flaky, plan, plan_json, request_text, step_ok, strict,
};

#[tokio::test]
async fn tool_errors_results_and_secret_arguments_do_not_leak() {
    let spec = ToolSpec::new(
        "lookup",
        "Look up a customer",
        json!({"type": "object", "properties": {"customer": {"type": "string"}, "api_key": {"type": "string"}}}),
    );
    let n = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&n);
    let tool = FunctionTool::<()>::new(spec, move |_ctx, args| {
        let c = Arc::clone(&c);
        async move {
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(ToolError::execution("db_error").with_message(SECRET_MESSAGE))
            } else {
                Ok(json!({"customer": args["customer"], "note": SECRET_RESULT}))
            }
        }
    });
    let model = ScriptedModel::new()
        .text(plan(&[("Look up", &["lookup"])]))
        .tool_call("lookup", json!({"customer": "c1", "api_key": SECRET_ARG}))
        // REPLAN after the failure
        .text(plan(&[("Look up again", &["lookup"])]))
        .tool_call("lookup", json!({"customer": "c1", "api_key": SECRET_ARG}))
        .text(step_ok("customer c1 exists"))
        .text("c1 exists");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .tool(tool)
        .event_sink(sink.clone())
        .decision_policy(strict(LlmPlanGenerator::agent_model()).tool_trace_mode(ToolTraceMode::Arguments))
        .build()
        .unwrap();
    let result = agent.run("Does customer c1 exist?").await;
    assert_eq!(result.error(), None);
    // Model requests (type_only): never the error message.
    for r in model.requests() {
        assert!(!request_text(&r).contains("SECRET-IN-ERROR"));
    }
    // The result did reach the model (that is its job)…
    assert!(model.requests().iter().any(|r| request_text(r).contains(SECRET_RESULT)));
    // …but not the trace, the events or the metadata; secret arguments are masked.
    let trace = plan_json(&result)["tool_trace"].to_string();
    assert!(trace.contains("\"customer\":\"c1\""), "{trace}");
    let events = serde_json::to_string(&sink.events()).unwrap();
    let metadata = serde_json::to_string(result.report()).unwrap();
    for haystack in [&trace, &events, &metadata] {
        assert!(!haystack.contains("SECRET-IN-ERROR"));
        assert!(!haystack.contains(SECRET_RESULT));
        assert!(!haystack.contains(SECRET_ARG));
    }
}

#[tokio::test]
async fn a_failed_run_leaks_nothing_into_failure_metadata_or_the_error() {
    let tool = flaky(
        "search",
        9,
        ToolError::execution("db_error").with_message(SECRET_MESSAGE),
        Arc::default(),
    );
    let model = ScriptedModel::new()
        .text(plan(&[("Search", &["search"])]))
        .tool_call("search", json!({"query": "x", "api_key": SECRET_ARG}));
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .tool(tool)
        .event_sink(sink.clone())
        .decision_policy(
            strict(LlmPlanGenerator::agent_model())
                .tool_failure_recovery(ToolFailureRecoveryConfig::default().fallback(RecoveryFallback::Fail)),
        )
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert!(result.error().is_some());
    let all = format!(
        "{} {} {}",
        serde_json::to_string(result.report()).unwrap(),
        serde_json::to_string(&sink.events()).unwrap(),
        serde_json::to_string(&result.error()).unwrap()
    );
    assert!(!all.contains("SECRET-IN-ERROR"));
    assert!(!all.contains(SECRET_ARG));
}
