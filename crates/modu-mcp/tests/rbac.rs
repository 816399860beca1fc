//! RBAC decides on the external tool a meta-tool call runs: a role allowed exactly one tool of
//! server-everything can call it through `mcp_call_tool` and is refused for every other one;
//! a role allowed `mcp_call_tool` itself can call nothing. Skills' `allowed-tools`-style
//! narrowing by identity keeps the meta tool offered and admits only the listed tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use modu_agent::{Agent, AgentRequest};
use modu_core::{AgentEvent, CollectingEventSink, Message, RbacToolAuthorizer, Role, UserContext};
use modu_mcp::{McpConfig, McpConnector, McpToolProvider};
use modu_testing::ScriptedModel;
use serde_json::json;

fn results(messages: &[Message]) -> Vec<(bool, String)> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.is_error, m.text()))
        .collect()
}

fn calls() -> ScriptedModel {
    ScriptedModel::new()
        .tool_calls([
            (
                "mcp_call_tool",
                json!({"tool_name": "everything__echo", "arguments": {"message": "hi"}}),
            ),
            (
                "mcp_call_tool",
                json!({"tool_name": "everything__get-sum", "arguments": {"a": 1, "b": 2}}),
            ),
            (
                "mcp_call_tool",
                json!({"tool_name": "everything__get-env", "arguments": {}}),
            ),
        ])
        .text("done")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_allowed_one_external_tool_calls_only_that_tool_through_the_meta_tool() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("rbac");
    let connector = Arc::new(
        McpConnector::new(McpConfig::new(vec![support::everything_stdio("everything", &script, &marker)]).unwrap())
            .unwrap(),
    );
    let sink = Arc::new(CollectingEventSink::new());
    let rbac = RbacToolAuthorizer::new()
        .allow("echoer", ["everything__echo"])
        .allow("meta_only", ["mcp_call_tool", "mcp_search_tools"]);
    let agent = Agent::builder(calls())
        .tool_provider(McpToolProvider::new(Arc::clone(&connector)))
        .authorizer(Arc::new(rbac.clone()))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent
        .run(AgentRequest::new((), "go").user(UserContext::with_roles(["echoer"])))
        .await;
    assert!(result.is_completed(), "{:?}", result.error());
    let r = results(result.messages());
    assert!(!r[0].0, "echo is allowed: {}", r[0].1);
    assert!(r[0].1.contains("hi"), "the real server answered: {}", r[0].1);
    for (is_error, text) in &r[1..] {
        assert!(*is_error, "{text}");
        assert!(text.contains("not_permitted"), "{text}");
    }
    assert!(r[1].1.contains("everything__get-sum"), "{}", r[1].1);
    // Events name the external tools.
    let mut finished: Vec<(String, bool)> = sink
        .events()
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallFinished { tool, ok, .. } => Some((tool.clone(), *ok)),
            _ => None,
        })
        .collect();
    finished.sort();
    assert_eq!(
        finished,
        [
            ("everything__echo".to_owned(), true),
            ("everything__get-env".to_owned(), false),
            ("everything__get-sum".to_owned(), false)
        ],
        "calls run concurrently; each event names its external tool"
    );

    // The meta tools' own names permit no external tool.
    let agent = Agent::builder(calls())
        .tool_provider(McpToolProvider::new(connector))
        .authorizer(Arc::new(rbac))
        .build()
        .unwrap();
    let result = agent
        .run(AgentRequest::new((), "go").user(UserContext::with_roles(["meta_only"])))
        .await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert!(results(result.messages()).iter().all(|(is_error, _)| *is_error));
    support::assert_no_children(&marker, std::time::Duration::from_secs(3)).await;
}
