//! A server's tool listing into the session's registry: one descriptor per listed tool, the
//! first tool keeping an external name that two would share; and the pages of a listing.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::PaginatedRequestParams;
use rmcp::service::ServiceError;

use serde_json::Value;

use crate::registry::{McpToolDescriptor, McpToolRegistry};

/// Every page of a listing (`tools/list`, `resources/list`, ...): `page` asks for the page at a
/// cursor and answers its items and the next cursor. A cursor the server gave before (its
/// pagination goes round in a circle, such as a next cursor on every page) ends the listing
/// with what was listed and a warning, instead of asking again until the timeout while the
/// items pile up.
pub(crate) async fn all_pages<T, Fut>(
    server: &str,
    request: &str,
    mut page: impl FnMut(Option<PaginatedRequestParams>) -> Fut,
) -> Result<Vec<T>, ServiceError>
where
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut seen = HashSet::new();
    let (mut items, mut cursor) = page(None).await?;
    while let Some(next) = cursor {
        if !seen.insert(next.clone()) {
            tracing::warn!(
                server = %server,
                request = %request,
                "MCP listing stopped: the server gave the cursor {next:?} twice (its pagination goes round in a circle)"
            );
            break;
        }
        let (more, after) = page(Some(PaginatedRequestParams::default().with_cursor(Some(next)))).await?;
        items.extend(more);
        cursor = after;
    }
    Ok(items)
}

/// Every tool of a server, page by page ([`all_pages`]).
pub(crate) async fn all_tools(
    server: &str,
    peer: &rmcp::Peer<rmcp::RoleClient>,
) -> Result<Vec<rmcp::model::Tool>, ServiceError> {
    all_pages(server, "tools/list", |params| async move {
        peer.list_tools(params).await.map(|r| (r.tools, r.next_cursor))
    })
    .await
}

/// Adds a server's listed tools to `registry`, in listing order (see [`add_first`]).
pub(crate) fn add_listed(registry: &mut McpToolRegistry, server: &str, tools: &[rmcp::model::Tool]) {
    for tool in tools {
        add_first(registry, Arc::new(descriptor(server, tool)));
    }
}

/// Adds a tool unless its external name is taken: by another server's tool (`a` with `_b`
/// and `a_` with `b` would both be `a___b`; configuration refuses such server names), or by a
/// tool of the same name earlier in its server's listing. The first keeps the name and the
/// other is left out with a warning: a tool is never replaced silently.
pub(crate) fn add_first(registry: &mut McpToolRegistry, descriptor: Arc<McpToolDescriptor>) {
    let name = descriptor.external_name.clone();
    let (server, tool) = (descriptor.server.clone(), descriptor.tool.clone());
    if let Err(kept) = registry.insert_first(descriptor) {
        tracing::warn!(
            external_name = %name,
            server = %server,
            tool = %tool,
            kept_server = %kept.server,
            kept_tool = %kept.tool,
            "MCP tool left out: tool {tool:?} of server {server:?} has the external name {name:?} \
             of tool {:?} of server {:?}, which is kept",
            kept.tool,
            kept.server,
        );
    }
}

/// The descriptor of a listed tool.
pub(crate) fn descriptor(server: &str, tool: &rmcp::model::Tool) -> McpToolDescriptor {
    let descriptor = McpToolDescriptor::new(
        server,
        tool.name.to_string(),
        tool.description.as_deref().unwrap_or_default(),
        Value::Object((*tool.input_schema).clone()),
    );
    match &tool.output_schema {
        Some(schema) => descriptor.with_output_schema(Value::Object((**schema).clone())),
        None => descriptor,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, description: &str) -> rmcp::model::Tool {
        serde_json::from_value(json!({
            "name": name,
            "description": description,
            "inputSchema": {"type": "object"}
        }))
        .unwrap()
    }

    #[test]
    fn a_listed_tool_never_replaces_one_with_the_same_external_name() {
        let mut registry = McpToolRegistry::new();
        // Two servers whose names join to the same external name (configuration refuses `a_`
        // now; the registry keeps the first whatever the names).
        add_listed(&mut registry, "a", &[tool("_b", "a's _b")]);
        add_listed(&mut registry, "a_", &[tool("b", "a_'s b")]);
        // One listing with the same name twice.
        add_listed(&mut registry, "c", &[tool("dup", "first"), tool("dup", "second")]);
        let names: Vec<&str> = registry.tools().iter().map(|t| t.external_name.as_str()).collect();
        assert_eq!(names, ["a___b", "c__dup"]);
        let kept = registry.get("a___b").unwrap();
        assert_eq!(
            (kept.server.as_str(), kept.tool.as_str(), kept.description.as_str()),
            ("a", "_b", "a's _b")
        );
        assert_eq!(registry.get("c__dup").unwrap().description, "first");
    }
}
