//! A server's tool listing into the session's registry: one descriptor per listed tool, the
//! first tool keeping an external name that two would share.

use std::sync::Arc;

use serde_json::Value;

use crate::registry::{McpToolDescriptor, McpToolRegistry};

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
