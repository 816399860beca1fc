//! MCP resources as a run's context ([`McpResourceContext`]) against server-everything: read
//! once per run, in every request's instructions; a resource that cannot be read ends the run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use modu_agent::Agent;
use modu_core::{AgentError, Role};
use modu_mcp::{McpConfig, McpConnector, McpResourceContext};
use modu_testing::ScriptedModel;
use serde_json::json;

fn connector(script: &str, marker: &str) -> Arc<McpConnector> {
    let config = McpConfig::new(vec![support::everything_stdio("everything", script, marker)]).unwrap();
    Arc::new(McpConnector::new(config).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_in_every_requests_instructions() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("resource-context");
    let model = ScriptedModel::new().tool_call("noop", json!({})).text("answered");
    let noop = modu_core::FunctionTool::<()>::new(
        modu_core::ToolSpec::new("noop", "Does nothing", json!({"type": "object"})),
        |_ctx, _args: serde_json::Value| async { Ok(json!("ok")) },
    );
    let context = McpResourceContext::new(connector(&script, &marker))
        .resource("everything", "demo://resource/dynamic/text/5")
        .resource("everything", "demo://resource/dynamic/text/7");
    let agent: Agent = Agent::builder(model.clone())
        .instructions("Be brief.")
        .tool(noop)
        .context_provider(context)
        .build()
        .unwrap();
    let result = agent.run("What do the resources say?").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("answered"),
        "{:?}",
        result.error()
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let system = &request.messages[0];
        assert_eq!(system.role, Role::System);
        let text = system.text();
        assert!(text.starts_with("Be brief."), "{text}");
        let five = text.find("MCP resource demo://resource/dynamic/text/5 (server everything):\nResource 5:");
        let seven = text.find("MCP resource demo://resource/dynamic/text/7 (server everything):\nResource 7:");
        assert!(five.is_some() && seven.is_some() && five < seven, "{text}");
    }
    // The servers were opened for the reading and closed again.
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_that_cannot_be_read_ends_the_run_naming_it() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("resource-context-missing");
    let model = ScriptedModel::new().text("never asked");
    let context =
        McpResourceContext::new(connector(&script, &marker)).resource("everything", "demo://no/such/resource");
    let agent: Agent = Agent::builder(model.clone()).context_provider(context).build().unwrap();
    let result = agent.run("Go.").await;
    match &result.error() {
        Some(AgentError::ContextProvider { provider, message }) => {
            assert_eq!(provider, "mcp_resources");
            assert!(message.contains("demo://no/such/resource"), "{message}");
        }
        other => panic!("not a context provider error: {other:?}"),
    }
    assert!(
        model.requests().is_empty(),
        "the model was not asked without its context"
    );

    // A server that is not configured is named too.
    let context = McpResourceContext::new(connector(&script, &marker)).resource("nowhere", "a://b");
    let agent: Agent = Agent::builder(ScriptedModel::new().text("x"))
        .context_provider(context)
        .build()
        .unwrap();
    let result = agent.run("Go.").await;
    assert!(
        result
            .error()
            .as_ref()
            .is_some_and(|e| e.to_string().contains("\"nowhere\"")),
        "{:?}",
        result.error()
    );
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}
