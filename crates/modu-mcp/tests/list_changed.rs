//! `notifications/tools/list_changed` within a run, against a Python MCPServer that adds and
//! removes tools while connected (tests/servers/dynamic_tools_server.py): the next search
//! finds an added tool, a removed one is refused with a typed error, and direct tools are
//! rebuilt by `McpToolSession::refresh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use modu_agent::Agent;
use modu_core::{Role, RunContext, ToolErrorKind, ToolSession};
use modu_mcp::{
    InvocationFailure, McpConfig, McpConnector, McpError, McpServerConfig, McpToolProvider, McpToolSession,
};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

fn dynamic(python: &str, marker: &str) -> Arc<McpConnector> {
    let server = McpServerConfig::stdio("dyn", python).with_args([
        support::test_file("servers/dynamic_tools_server.py"),
        "stdio".into(),
        marker.into(),
    ]);
    Arc::new(McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap())
}

fn names(search: &Value) -> Vec<String> {
    search["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_change_is_listed_before_the_next_search_and_call() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("list-changed");
    let session = dynamic(&python, &marker).open_session(None).await.unwrap();
    assert_eq!(session.registry().len(), 3);
    assert!(!session.tools_stale());
    assert!(!session.refresh_tools().await, "nothing announced, nothing listed");
    assert_eq!(session.tools_version(), 0);

    let out = session
        .call_tool("dyn__add_tool", json!({"name": "gadget"}))
        .await
        .unwrap();
    assert_eq!(out, json!("added gadget"));
    // The announcement came before the answer: it is known now, listed at the next use.
    assert!(session.tools_stale());
    assert!(
        session.registry().get("dyn__gadget").is_none(),
        "a snapshot does not change"
    );
    assert!(session.refresh_tools().await);
    assert_eq!(session.tools_version(), 1);
    assert_eq!(names(&session.search("gadget", 5, |_| true)), ["dyn__gadget"]);
    assert_eq!(
        session.call_tool("dyn__gadget", json!({})).await.unwrap(),
        json!("gadget is here")
    );

    // Removed: the next call lists again by itself and is refused with a typed error.
    session
        .call_tool("dyn__remove_tool", json!({"name": "gadget"}))
        .await
        .unwrap();
    let e = session.call_tool("dyn__gadget", json!({})).await.unwrap_err();
    let McpError::ToolInvocation(inv) = &e else {
        panic!("{e}")
    };
    assert_eq!(inv.failure, InvocationFailure::ToolRemoved);
    assert_eq!(inv.server.as_deref(), Some("dyn"));
    assert!(inv.message.contains("removed the tool"), "{}", inv.message);
    let te = e.to_tool_error();
    assert_eq!(
        (te.kind, te.reason.as_str()),
        (ToolErrorKind::NotFound, "mcp_tool_removed")
    );
    assert!(
        session.search("gadget", 5, |_| true)["tools"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // A name that never existed is still an unknown tool.
    let e = session.call_tool("dyn__never", json!({})).await.unwrap_err();
    assert!(
        matches!(&e, McpError::ToolInvocation(i) if i.failure == InvocationFailure::UnknownTool),
        "{e}"
    );
    // Added back: callable again.
    session
        .call_tool("dyn__add_tool", json!({"name": "gadget"}))
        .await
        .unwrap();
    assert_eq!(
        session.call_tool("dyn__gadget", json!({})).await.unwrap(),
        json!("gadget is here")
    );
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

fn tool_texts(messages: &[modu_core::Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_finds_a_tool_added_during_its_run_and_is_refused_a_removed_one() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("list-changed-agent");
    let call = |tool: &str, arguments: Value| json!({"tool_name": tool, "arguments": arguments});
    let model = ScriptedModel::new()
        .tool_call("mcp_search_tools", json!({"query": "gizmo"}))
        .tool_call("mcp_call_tool", call("dyn__add_tool", json!({"name": "gizmo"})))
        .tool_call("mcp_search_tools", json!({"query": "gizmo"}))
        .tool_call("mcp_call_tool", call("dyn__gizmo", json!({})))
        .tool_call("mcp_call_tool", call("dyn__remove_tool", json!({"name": "gizmo"})))
        .tool_call("mcp_call_tool", call("dyn__gizmo", json!({})))
        .text("done");
    let agent: Agent<()> = Agent::builder(model.clone())
        .tool_provider(McpToolProvider::new(dynamic(&python, &marker)))
        .build()
        .unwrap();
    let result = agent.run("Make a gizmo.").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let texts = tool_texts(result.messages());
    let before: Value = serde_json::from_str(&texts[0]).unwrap();
    assert_eq!(before["total"], 0, "{before}");
    let after: Value = serde_json::from_str(&texts[2]).unwrap();
    assert_eq!(names(&after), ["dyn__gizmo"]);
    assert!(texts[3].contains("gizmo is here"), "{}", texts[3]);
    assert!(texts[5].contains("removed the tool"), "{}", texts[5]);
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tools_are_rebuilt_by_refresh_and_a_removed_one_is_no_longer_offered() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("list-changed-direct");
    // What `McpToolProvider::with_direct_tools` opens for a run.
    let opened = dynamic(&python, &marker).open_session(None).await.unwrap();
    let session: McpToolSession<()> = McpToolSession::direct(Arc::new(opened), None, None);
    let ctx = RunContext::new(Arc::new(()), "run-direct");
    let tool_names = |tools: &[Arc<dyn modu_core::Tool<()>>]| {
        let mut names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
        names.sort();
        names
    };
    let tools = session.tools();
    assert_eq!(tool_names(&tools), ["dyn__add_tool", "dyn__ping", "dyn__remove_tool"]);
    let add = tools.iter().find(|t| t.spec().name == "dyn__add_tool").unwrap();
    add.call(&ctx, json!({"name": "widget"})).await.unwrap();

    // What the core would call before its next model request.
    assert!(session.refresh().await, "the tools changed");
    assert!(!session.refresh().await, "and then did not");
    let tools = session.tools();
    assert_eq!(
        tool_names(&tools),
        ["dyn__add_tool", "dyn__ping", "dyn__remove_tool", "dyn__widget"]
    );
    let widget = tools.iter().find(|t| t.spec().name == "dyn__widget").unwrap().clone();
    assert!(widget.is_enabled(&ctx));
    assert_eq!(widget.call(&ctx, json!({})).await.unwrap(), json!("widget is here"));

    let remove = tools.iter().find(|t| t.spec().name == "dyn__remove_tool").unwrap();
    remove.call(&ctx, json!({"name": "widget"})).await.unwrap();
    let e = widget.call(&ctx, json!({})).await.unwrap_err();
    assert_eq!(
        (e.kind, e.reason.as_str()),
        (ToolErrorKind::NotFound, "mcp_tool_removed")
    );
    assert!(!widget.is_enabled(&ctx), "a removed tool is no longer offered");
    assert!(session.refresh().await);
    assert!(!tool_names(&session.tools()).contains(&"dyn__widget".to_owned()));
    Box::new(session).close().await;
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_direct_tools_mode_the_next_request_offers_an_added_tool_and_not_a_removed_one() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("list-changed-direct-agent");
    let model = ScriptedModel::new()
        .tool_call("dyn__add_tool", json!({"name": "widget"}))
        .tool_call("dyn__widget", json!({}))
        .tool_call("dyn__remove_tool", json!({"name": "widget"}))
        .tool_call("dyn__widget", json!({}))
        .text("done");
    let agent: Agent<()> = Agent::builder(model.clone())
        .tool_provider(McpToolProvider::new(dynamic(&python, &marker)).with_direct_tools())
        .build()
        .unwrap();
    let result = agent.run("Make a widget, use it, remove it.").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let offered: Vec<bool> = model
        .requests()
        .iter()
        .map(|r| r.tools.iter().any(|t| t.name == "dyn__widget"))
        .collect();
    // Before the add, after it, after the use, after the removal, after the refused call.
    assert_eq!(offered, [false, true, true, false, false]);
    let texts = tool_texts(result.messages());
    assert!(texts[1].contains("widget is here"), "{}", texts[1]);
    assert!(
        texts[3].contains("dyn__widget"),
        "the removed tool is refused by name: {}",
        texts[3]
    );
    assert!(!texts[3].contains("widget is here"), "{}", texts[3]);
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}
