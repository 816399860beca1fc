//! Against a server on the low-level API of PyPI `mcp` 2.x (`tests/servers/lowlevel_server.py`),
//! which answers only the requests it has handlers for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use modu_mcp::{McpConfig, McpConnector, McpServerConfig};
use std::time::Duration;

use serde_json::json;

fn lowlevel(python: &str, marker: &str) -> McpServerConfig {
    McpServerConfig::stdio("notes", python)
        .with_args([support::test_file("servers/lowlevel_server.py"), marker.to_owned()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tools_opens_with_none() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("lowlevel-no-tools");
    let connector = McpConnector::new(McpConfig::new(vec![lowlevel(&python, &marker)]).unwrap()).unwrap();
    // The server declares no `tools` capability and answers tools/list with "method not
    // found": the session opens with no tool of it, and its resources can be read.
    let session = connector.open_session(None).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(session.server_names(), ["notes"]);
    assert_eq!(session.search("", 10, |_| true)["total"], 0);
    let read = session.read_resource("notes", "notes://one").await.unwrap();
    assert_eq!(read["contents"][0]["text"], "note one");
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_of_a_server_without_templates_are_listed() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("lowlevel-resources");
    let connector = McpConnector::new(McpConfig::new(vec![lowlevel(&python, &marker)]).unwrap()).unwrap();
    let session = connector.open_session(None).await.unwrap();
    // The server offers resources but answers resources/templates/list with "method not
    // found": it has no templates, and its resources are still listed.
    for server in [Some("notes"), None] {
        let listed = session.list_resources(server).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            listed,
            json!({
                "resources": [{"server": "notes", "uri": "notes://one", "name": "one", "mimeType": "text/plain"}],
                "resource_templates": []
            })
        );
    }
    let read = session.read_resource("notes", "notes://one").await.unwrap();
    assert_eq!(read["contents"][0]["text"], "note one");
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pagination_going_round_in_a_circle_ends_with_what_was_listed() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("circular-cursor");
    let server = McpServerConfig::stdio("circle", python)
        .with_args([support::test_file("servers/circular_cursor_server.py"), marker.clone()]);
    let config = McpConfig::new(vec![server])
        .unwrap()
        .with_connect_timeout(Duration::from_secs(60));
    let connector = McpConnector::new(config).unwrap();
    // Every page names the next cursor "again": the listing stops at the repeated cursor
    // instead of asking until the connect timeout while the pages pile up (then the open
    // fails with that timeout). No time is asserted: a loaded machine starts Python slowly.
    let session = connector.open_session(None).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(session.search("", 10, |_| true)["total"], 1);
    assert_eq!(
        session.call_tool("circle__ping", json!({})).await.unwrap(),
        json!("pong")
    );
    let resources = session
        .list_resources(Some("circle"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resources["resources"].as_array().unwrap().len(), 2, "{resources}");
    let prompts = session
        .list_prompts(Some("circle"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    session.close().await;
}

fn listings(python: &str, name: &str, mode: &str, marker: &str) -> McpServerConfig {
    McpServerConfig::stdio(name, python).with_args([
        support::test_file("servers/listings_server.py"),
        mode.to_owned(),
        marker.to_owned(),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_listings_fail_leaves_the_others_listed_and_is_named() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("failing-listings");
    let config = McpConfig::new(vec![
        listings(&python, "healthy", "ok", &marker),
        listings(&python, "broken", "fail", &marker),
    ])
    .unwrap();
    let session = McpConnector::new(config)
        .unwrap()
        .open_session(None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Both servers offer resources and prompts; "broken" answers both listings with an error.
    let listed = session.list_resources(None).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        listed,
        json!({
            "resources": [{"server": "healthy", "uri": "notes://one", "name": "one"}],
            "resource_templates": [],
            "failed": [{"server": "broken",
                "error": "MCP request resources/list to server broken failed (protocol_error): the server answered with error -32603: listing broke"}]
        })
    );
    let prompts = session.list_prompts(None).await.unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<(&str, &str)> = prompts.iter().map(|p| (p.server.as_str(), p.name.as_str())).collect();
    assert_eq!(names, [("healthy", "greet")]);
    let failed: Vec<Option<&str>> = prompts.failed.iter().map(|e| e.server()).collect();
    assert_eq!(failed, [Some("broken")]);
    assert!(
        prompts.failed[0].to_string().contains("listing broke"),
        "{}",
        prompts.failed[0]
    );
    // Asked by name, the failing server's listing is the error; the healthy one lists no failure.
    assert!(session.list_prompts(Some("broken")).await.is_err());
    assert!(session.list_resources(Some("broken")).await.is_err());
    assert!(session.list_prompts(Some("healthy")).await.unwrap().failed.is_empty());
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_across_servers_ask_every_server_at_once_and_keep_their_order() {
    let Some(python) = support::python() else { return };
    let marker = support::marker("concurrent-listings");
    let flag = std::env::temp_dir().join(&marker).to_string_lossy().into_owned();
    let at = |name: &str, mode: &str, timeout: u64| {
        McpServerConfig::stdio(name, &python)
            .with_args([
                support::test_file("servers/listings_server.py"),
                mode.to_owned(),
                flag.clone(),
                marker.clone(),
            ])
            .with_call_timeout(Duration::from_secs(timeout))
    };
    // "waits" answers only once "signals" has been asked, which a client asking one server at
    // a time does only after giving up on "waits" (its 120 s timeout) and on "hangs", which
    // never answers (2 s).
    let config = McpConfig::new(vec![
        at("waits", "wait", 120),
        at("hangs", "hang", 2),
        at("signals", "signal", 120),
    ])
    .unwrap();
    let session = McpConnector::new(config)
        .unwrap()
        .open_session(None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let listed = session.list_resources(None).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        listed,
        json!({
            "resources": [
                {"server": "waits", "uri": "notes://one", "name": "one"},
                {"server": "signals", "uri": "notes://one", "name": "one"},
            ],
            "resource_templates": [],
            "failed": [{"server": "hangs",
                "error": "MCP request resources/list to server hangs failed (timeout): no answer within 2.0s"}]
        })
    );
    let prompts = session.list_prompts(None).await.unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<(&str, &str)> = prompts.iter().map(|p| (p.server.as_str(), p.name.as_str())).collect();
    assert_eq!(names, [("waits", "greet"), ("signals", "greet")]);
    let failed: Vec<Option<&str>> = prompts.failed.iter().map(|e| e.server()).collect();
    assert_eq!(failed, [Some("hangs")]);
    session.close().await;
    for method in ["resources", "prompts"] {
        let _ = std::fs::remove_file(format!("{flag}.{method}"));
    }
}
