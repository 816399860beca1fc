//! A modu agent with MCP servers attached through `McpToolProvider`: lazy discovery with two
//! meta tools, search, calls routed to the right server, per-run selection, the tool filter,
//! and no server process left after a run (whatever its outcome).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use modu_agent::{Agent, AgentRequest};
use modu_core::Tool;
use modu_core::{Role, UserContext};
use modu_mcp::{
    McpApprovalPolicy, McpCallTool, McpConfig, McpConnector, McpSession, McpToolDescriptor, McpToolProvider,
    McpToolRegistry, approval_description,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

fn connector(python: &str, marker: &str) -> Arc<McpConnector> {
    let config = McpConfig::new(vec![
        support::many_stdio("alpha", python, &format!("alpha-{marker}")),
        support::many_stdio("beta", python, &format!("beta-{marker}")),
    ])
    .unwrap();
    Arc::new(McpConnector::new(config).unwrap())
}

fn tool_results(messages: &[modu_core::Message]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| serde_json::from_str(&m.text()).unwrap_or(Value::String(m.text())))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_request_carries_only_the_two_meta_tools_and_calls_reach_the_right_server() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("agent-many");
    let model = ScriptedModel::new()
        .tool_call("mcp_search_tools", json!({"query": "aurora borealis", "limit": 5}))
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "beta__tool_042", "arguments": {"value": "north"}}),
        )
        .text("The aurora is visible.");
    let agent: Agent<()> = Agent::builder(model.clone())
        .name("mcp-agent")
        .tool_provider(McpToolProvider::new(connector(&python, &marker)))
        .build()
        .unwrap();
    let result = agent.run("Will I see the aurora?").await;
    assert!(result.is_completed(), "{:?}", result.error());

    let requests = model.requests();
    let mut first: Vec<String> = requests[0].tools.iter().map(|t| t.name.clone()).collect();
    first.sort();
    assert_eq!(
        first,
        ["mcp_call_tool", "mcp_search_tools"],
        "200 tools discovered, two offered"
    );

    let results = tool_results(result.messages());
    let search = &results[0];
    assert_eq!(search["total"], 2, "{search}");
    let names: Vec<&str> = search["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha__tool_042", "beta__tool_042"]);
    assert!(search["tools"][0]["input_schema"]["properties"]["value"].is_object());
    assert_eq!(
        results[1],
        json!({"tool": "tool_042", "server": format!("beta-{marker}"), "args": {"value": "north"}})
    );

    support::assert_no_children(&marker, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_tools_by_name_and_by_description_words() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("search-many");
    let connector = connector(&python, &marker);
    let session = connector.open_session(Some(&json!(["alpha"]))).await.unwrap();
    assert_eq!(session.registry().len(), 100);
    let by_name = session.search("tool_077", 3, |_| true);
    assert_eq!(by_name["tools"][0]["name"], "alpha__tool_077");
    let exact = session.search("alpha__tool_013", 3, |_| true);
    assert_eq!(exact["tools"][0]["name"], "alpha__tool_013");
    let by_words = session.search("invoice reconciliation", 3, |_| true);
    assert_eq!(by_words["total"], 1);
    assert_eq!(by_words["tools"][0]["name"], "alpha__tool_077");
    let everything = session.search("", 7, |_| true);
    assert_eq!(
        (everything["count"].as_u64(), everything["total"].as_u64()),
        (Some(7), Some(100))
    );
    let nothing = session.search("zebra", 3, |_| true);
    assert_eq!(nothing["total"], 0);
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_metadata_selects_servers_and_the_filter_hides_tools_per_request() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("select-many");
    let provider = McpToolProvider::new(connector(&python, &marker))
        .with_filter(|ctx, tool| tool.tool != "tool_042" || ctx.user().has_role("astronomer"));
    let model = ScriptedModel::new()
        .tool_call("mcp_search_tools", json!({"query": "aurora"}))
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "beta__tool_042", "arguments": {"value": "x"}}),
        )
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "alpha__tool_001", "arguments": {"value": "x"}}),
        )
        .text("done")
        .tool_call("mcp_search_tools", json!({"query": "aurora"}))
        .text("done");
    let agent: Agent<()> = Agent::builder(model.clone()).tool_provider(provider).build().unwrap();

    // Only beta, and a user without the role: tool_042 is hidden from search and calls.
    let request = AgentRequest::new((), "look").metadata("mcp", json!({"servers": ["beta"]}));
    let result = agent.run(request).await;
    assert!(result.is_completed(), "{:?}", result.error());
    let results = tool_results(result.messages());
    assert_eq!(results[0]["total"], 0, "{}", results[0]);
    assert_eq!(results[1]["error"]["type"], "not_found", "{}", results[1]);
    assert_eq!(
        results[2]["error"]["type"], "not_found",
        "alpha is not selected: {}",
        results[2]
    );

    // With the role, the same search finds it.
    let request = AgentRequest::new((), "look")
        .metadata("mcp", json!({"servers": ["beta"]}))
        .user(UserContext::with_roles(["astronomer"]));
    let result = agent.run(request).await;
    let results = tool_results(result.messages());
    assert_eq!(results[0]["total"], 1);
    assert_eq!(results[0]["tools"][0]["name"], "beta__tool_042");
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_still_closes_its_servers() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("failed-run");
    let model = ScriptedModel::new().tool_call("mcp_search_tools", json!({"query": "tool"})); // then the script runs out
    let agent: Agent<()> = Agent::builder(model)
        .tool_provider(McpToolProvider::new(connector(&python, &marker)))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert!(!result.is_completed());
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
}

#[test]
fn approval_names_the_external_tool() {
    let args = json!({"tool_name": "weather__forecast", "arguments": {"city": "Seoul"}});
    let approval = approval_description(&args).unwrap();
    assert_eq!(approval.tool_name, "weather__forecast");
    assert_eq!(approval.mcp_tool_name, "forecast");
    assert_eq!(approval.mcp_server, "weather");
    assert_eq!(approval.mcp_arguments, json!({"city": "Seoul"}));
    assert!(approval_description(&json!({"tool_name": "plain"})).is_none());
}

#[test]
fn approvals_name_the_listed_server_and_tool_not_a_split_of_the_name() {
    // A registry built directly (configuration refuses a server named `a_`): server `a_`'s
    // tool `b` has the external name `a___b`, which a split at the first `__` reads as server
    // `a`, tool `_b`. The approval must name the tool the call runs.
    let mut registry = McpToolRegistry::new();
    registry.insert(McpToolDescriptor::new("a_", "b", "B.", json!({"type": "object"})));
    let session = Arc::new(McpSession::from_registry(registry));
    let args = json!({"tool_name": "a___b", "arguments": {"x": 1}});
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let policy: McpApprovalPolicy<()> = Arc::new({
        let seen = Arc::clone(&seen);
        move |_, d| {
            seen.lock()
                .unwrap()
                .push((d.mcp_server.clone(), d.mcp_tool_name.clone()));
            true
        }
    });
    let call = McpCallTool::new(session, None).with_approval(Some(policy));
    let d = call.approval_description(&args).unwrap();
    assert_eq!(
        (d.tool_name.as_str(), d.mcp_server.as_str(), d.mcp_tool_name.as_str()),
        ("a___b", "a_", "b")
    );
    assert_eq!(d.mcp_arguments, json!({"x": 1}));
    // What the policy is shown, and what the approval prompt carries.
    let ctx = modu_core::RunContext::new(Arc::new(()), "run-1");
    assert!(Tool::<()>::needs_approval(&call, &ctx, &args));
    assert_eq!(*seen.lock().unwrap(), [("a_".to_owned(), "b".to_owned())]);
    let request = Tool::<()>::approval_request(&call, "call-1", &args);
    assert_eq!(request.tool_name, "a___b");
    assert_eq!(request.metadata["mcp_server"], "a_");
    assert_eq!(request.metadata["mcp_tool_name"], "b");
    // An unknown tool is still refused; a name that is no external name is still invalid.
    let e = call.approval_description(&json!({"tool_name": "a__c"})).unwrap_err();
    assert_eq!(e.kind, modu_core::ToolErrorKind::NotFound, "{e:?}");
    let e = call.approval_description(&json!({"tool_name": "plain"})).unwrap_err();
    assert_eq!(e.reason, "invalid_arguments", "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_name_the_external_tool_and_the_call_runs_once_approved() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("agent-approval");
    let checkpoints = Arc::new(modu_core::InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .tool_call(
            "mcp_call_tool",
            json!({"tool_name": "beta__tool_007", "arguments": {"value": "go"}}),
        )
        .text("done");
    let agent: Agent<()> = Agent::builder(model.clone())
        .tool_provider(
            McpToolProvider::new(connector(&python, &marker)).with_approval(|_ctx, d| d.mcp_server == "beta"),
        )
        .checkpoint_store(checkpoints)
        .build()
        .unwrap();
    let paused = agent.run("call it").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let request = &paused.approvals()[0];
    assert_eq!(
        request.tool_name, "beta__tool_007",
        "the external tool, not mcp_call_tool"
    );
    assert_eq!(request.metadata["mcp_tool_name"], "tool_007");
    assert_eq!(request.metadata["mcp_arguments"], json!({"value": "go"}));
    // Nothing reached the server yet; after approval the call runs (in a new session).
    assert!(tool_results(paused.messages()).is_empty());
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
    agent.approve(paused.run_id(), &request.call_id).await.unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(done.output().map(String::as_str), Some("done"), "{:?}", done.error());
    let results = tool_results(done.messages());
    assert_eq!(results[0]["tool"], "tool_007");
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tools_offer_each_external_tool_under_its_name_and_honour_filter_and_approval() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("agent-direct");
    let checkpoints = Arc::new(modu_core::InMemoryCheckpointStore::new());
    let model = ScriptedModel::new()
        .tool_call("beta__tool_042", json!({"value": "north"}))
        .tool_call("alpha__tool_001", json!({"value": "south"}))
        .text("done");
    let agent: Agent<()> = Agent::builder(model.clone())
        .tool_provider(
            McpToolProvider::new(connector(&python, &marker))
                .with_direct_tools()
                .with_filter(|_ctx, t| t.tool != "tool_099")
                .with_approval(|_ctx, d| d.tool_name == "alpha__tool_001"),
        )
        .checkpoint_store(checkpoints)
        .build()
        .unwrap();
    let paused = agent.run("go").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let first = &model.requests()[0];
    let names: Vec<&str> = first.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 2 * 100 - 2, "every tool but the filtered ones");
    assert!(names.contains(&"beta__tool_042") && !names.contains(&"alpha__tool_099"));
    assert!(!names.contains(&"mcp_call_tool"));
    let schema = &first
        .tools
        .iter()
        .find(|t| t.name == "beta__tool_042")
        .unwrap()
        .parameters;
    assert!(schema["properties"]["value"].is_object(), "{schema}");
    // The direct call reached the right server; the approval names the external tool.
    let results = tool_results(paused.messages());
    assert_eq!(results.len(), 1, "the approved-later call has not run");
    assert_eq!(results[0]["tool"], "tool_042");
    let request = &paused.approvals()[0];
    assert_eq!(request.tool_name, "alpha__tool_001");
    assert_eq!(request.metadata["mcp_server"], "alpha");
    agent.approve(paused.run_id(), &request.call_id).await.unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(done.output().map(String::as_str), Some("done"), "{:?}", done.error());
    let results = tool_results(done.messages());
    assert_eq!(
        results[0],
        json!({"tool": "tool_042", "server": format!("beta-{marker}"), "args": {"value": "north"}})
    );
    assert_eq!(results[1]["tool"], "tool_001");
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_plan_restricts_each_step_to_the_external_tools_it_names() {
    use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
    let Some(python) = support::python() else { return };
    let marker = support::marker("agent-direct-plan");
    let model = ScriptedModel::new()
        .text(json!({"steps": [{"description": "Ask beta", "allowed_tools": ["beta__tool_042"]}]}).to_string())
        .tool_call("beta__tool_042", json!({"value": "north"}))
        .text(json!({"status": "completed", "result": "beta answered"}).to_string())
        .text("beta answered");
    let agent: Agent<()> = Agent::builder(model.clone())
        .tool_provider(McpToolProvider::new(connector(&python, &marker)).with_direct_tools())
        .decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()))
        .build()
        .unwrap();
    let result = agent.run("ask beta").await;
    assert_eq!(result.error(), None);
    let requests = model.requests();
    // The planner's schema lists the external tools; the step's request offers only its tool.
    let tools_enum = &requests[0].response_format.as_ref().unwrap().schema["properties"]["steps"]["items"]["properties"]
        ["allowed_tools"]["items"]["enum"];
    assert_eq!(tools_enum.as_array().unwrap().len(), 200);
    let act: Vec<&str> = requests[1].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(act, ["beta__tool_042"]);
    assert_eq!(result.plan().unwrap().tool_trace[0].tool_name, "beta__tool_042");
    assert!(result.plan().unwrap().tool_trace[0].ok);
    support::assert_no_children(&marker, Duration::from_secs(1)).await;
}
