//! Against a server on the low-level API of PyPI `mcp` 2.x (`tests/servers/lowlevel_server.py`),
//! which answers only the requests it has handlers for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use modu_mcp::{McpConfig, McpConnector, McpServerConfig};
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
