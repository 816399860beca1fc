//! `allowed-tools` narrowing: it grants nothing, admits meta tools' calls by identity, and the
//! authorizer still decides.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use modu_agent::Agent;
use modu_core::ToolSpec;
use modu_skills::{READ_TOOL, SEARCH_TOOL, SkillsProvider};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{counting_tool, registry, request, tool_names, tool_results};

#[tokio::test]
async fn allowed_tools_narrows_the_offered_tools_and_grants_nothing() {
    let deletes = Arc::new(AtomicU32::new(0));
    let lookups = Arc::new(AtomicU32::new(0));
    let provider = SkillsProvider::new(registry());
    let model = ScriptedModel::new()
        .tool_call("delete_invoice", json!({}))
        .tool_call("lookup_invoice", json!({}))
        .text("done");
    let agent = provider
        .install(Agent::builder(model.clone()))
        .tool(counting_tool("lookup_invoice", Arc::clone(&lookups)))
        .tool(counting_tool("delete_invoice", Arc::clone(&deletes)))
        .build()
        .unwrap();
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    assert!(result.is_completed(), "{:?}", result.error());
    // lookup_vendor is declared but not registered: declaring grants nothing.
    assert_eq!(
        tool_names(&model.requests()[0]),
        ["lookup_invoice", READ_TOOL, SEARCH_TOOL]
    );
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        0,
        "a tool outside allowed-tools never runs"
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    let results = tool_results(result.messages());
    assert!(
        results[0].contains("not_found") || results[0].contains("unknown_tool"),
        "{}",
        results[0]
    );

    // A skill without allowed-tools does not narrow.
    let model = ScriptedModel::new().text("ok");
    let agent = provider
        .install(Agent::builder(model.clone()))
        .tool(counting_tool("lookup_invoice", Arc::default()))
        .tool(counting_tool("delete_invoice", Arc::default()))
        .build()
        .unwrap();
    assert!(agent.run(request("x", json!(["other"]))).await.is_completed());
    assert_eq!(tool_names(&model.requests()[0]), ["delete_invoice", "lookup_invoice"]);
}

#[tokio::test]
async fn the_authorizer_still_decides_for_skill_and_business_tools() {
    use modu_core::{RbacToolAuthorizer, UserContext};
    let lookups = Arc::new(AtomicU32::new(0));
    let provider = SkillsProvider::new(registry());
    let model = ScriptedModel::new()
        .tool_call(
            READ_TOOL,
            json!({"skill": "invoice-review", "path": "references/policy.md"}),
        )
        .tool_call("lookup_invoice", json!({}))
        .text("done");
    // The role may call lookup_invoice but not the resource tools: the skill grants nothing.
    let rbac = RbacToolAuthorizer::new().allow("clerk", ["lookup_invoice"]);
    let agent = provider
        .install(Agent::builder(model.clone()))
        .tool(counting_tool("lookup_invoice", Arc::clone(&lookups)))
        .authorizer(Arc::new(rbac))
        .build()
        .unwrap();
    let result = agent
        .run(request("Review", json!(["invoice-review"])).user(UserContext::with_roles(["clerk"])))
        .await;
    assert!(result.is_completed(), "{:?}", result.error());
    let r = tool_results(result.messages());
    assert!(r[0].contains("authorization"), "{}", r[0]);
    assert!(!r[0].contains("second approval"));
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
}

/// A meta tool in the shape of MCP's `mcp_call_tool`: it runs the tool named in `tool_name`.
struct CallExternal {
    spec: ToolSpec,
    ran: Arc<std::sync::Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl modu_core::Tool<()> for CallExternal {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(
        &self,
        _ctx: &modu_core::RunContext<()>,
        arguments: serde_json::Value,
    ) -> Result<serde_json::Value, modu_core::ToolError> {
        let name = arguments["tool_name"].as_str().unwrap_or_default().to_owned();
        self.ran.lock().unwrap().push(name);
        Ok(json!("ran"))
    }
    fn identity(&self, arguments: &serde_json::Value) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(arguments["tool_name"].as_str().unwrap_or("call_external").to_owned())
    }
}

#[tokio::test]
async fn allowed_tools_admit_external_tools_through_a_meta_tool_by_identity() {
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let provider = SkillsProvider::new(registry());
    let model = ScriptedModel::new()
        .tool_calls([
            ("call_external", json!({"tool_name": "lookup_vendor"})),
            ("call_external", json!({"tool_name": "delete_vendor"})),
        ])
        .text("done");
    let agent = provider
        .install(Agent::builder(model.clone()))
        .tool(CallExternal {
            spec: ToolSpec::new(
                "call_external",
                "Call an external tool",
                json!({"type": "object", "properties": {"tool_name": {"type": "string"}}}),
            )
            .meta(true),
            ran: Arc::clone(&ran),
        })
        .build()
        .unwrap();
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    assert!(result.is_completed(), "{:?}", result.error());
    // The meta tool stays offered; only lookup_vendor (listed in allowed-tools) runs through it.
    assert!(tool_names(&model.requests()[0]).contains(&"call_external".to_owned()));
    assert_eq!(*ran.lock().unwrap(), ["lookup_vendor"]);
    let results = tool_results(result.messages());
    assert!(results[1].contains("tool_not_allowed"), "{}", results[1]);
}
