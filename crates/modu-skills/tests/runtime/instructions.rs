//! The active skills' instructions: in the system message only, never in stored messages, and
//! only at the stages their `applies-to` names.

use std::sync::Arc;

use modu_agent::Agent;
use modu_core::context_provider::Stage;
use modu_core::{ConversationStore, InMemoryConversationStore, Role};
use modu_skills::{READ_TOOL, SkillsProvider};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{
    FINAL_BODY, INVOICE_BODY, OTHER_BODY, counting_tool, registry, request, system_text, tool_names, tool_results,
};

#[tokio::test]
async fn explicit_skill_goes_to_instructions_never_to_stored_messages() {
    let provider = SkillsProvider::new(registry());
    let store = Arc::new(InMemoryConversationStore::new());
    let model = ScriptedModel::new()
        .tool_call(
            READ_TOOL,
            json!({"skill": "invoice-review", "path": "references/policy.md"}),
        )
        .text("Needs a second approval.");
    let agent = provider
        .install(Agent::builder(model.clone()))
        .conversation_store(store.clone())
        .build()
        .unwrap();
    let result = agent
        .run(request("Review invoice 42", json!(["invoice-review"])).session("s1"))
        .await;
    assert!(result.is_completed(), "{:?}", result.error());
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        let system = system_text(r);
        assert!(system.contains(INVOICE_BODY), "{system}");
        assert!(!system.contains(OTHER_BODY));
        assert!(
            system.contains("references/policy.md"),
            "resources are listed: {system}"
        );
        // Only the system message carries the skill.
        assert!(
            r.messages
                .iter()
                .filter(|m| m.role != Role::System)
                .all(|m| !m.text().contains("INVOICE-PROCEDURE"))
        );
    }
    let stored = store.load("s1").await.unwrap();
    assert!(!stored.is_empty());
    for m in stored.iter().chain(result.messages().iter()) {
        assert_ne!(m.role, Role::System);
        assert!(!m.text().contains("INVOICE-PROCEDURE"), "skill text leaked: {m:?}");
    }
    // The resource read itself is an ordinary tool result.
    assert!(tool_results(result.messages())[0].contains("second approval"));
    // The per-run cache is dropped when the run ends.
    assert_eq!(provider.cached_runs(), 0);
}

#[tokio::test]
async fn no_skills_selected_means_no_instructions_and_no_resource_tools() {
    let provider = SkillsProvider::new(registry());
    let model = ScriptedModel::new().text("hi");
    let agent = provider
        .install(Agent::builder(model.clone()))
        .tool(counting_tool("lookup_invoice", Arc::default()))
        .build()
        .unwrap();
    assert!(agent.run("hello").await.is_completed());
    let r = &model.requests()[0];
    assert!(!system_text(r).contains("<skill"));
    assert_eq!(tool_names(r), ["lookup_invoice"]);
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Verdict {
    approved: bool,
}

#[tokio::test]
async fn applies_to_limits_instructions_to_their_stages() {
    let provider = SkillsProvider::new(registry());
    let model = ScriptedModel::new()
        .tool_call("lookup_invoice", json!({}))
        .text("Looks fine.")
        .text(r#"{"approved": true}"#);
    let agent = provider
        .install(Agent::builder(model.clone()).output::<Verdict>())
        .tool(counting_tool("lookup_invoice", Arc::default()))
        .build()
        .unwrap();
    let result = agent
        .run(request("Review invoice 42", json!(["invoice-review", "final-format"])))
        .await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert!(result.output().unwrap().approved);
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "act, act, finalize");
    for act in &requests[..2] {
        // Act: tools, no output schema.
        assert!(!act.tools.is_empty() && act.response_format.is_none());
        let system = system_text(act);
        assert!(system.contains(INVOICE_BODY), "act gets invoice-review (plan, act)");
        assert!(!system.contains(FINAL_BODY), "act does not get final-format (finalize)");
    }
    let fin = &requests[2];
    assert!(
        fin.tools.is_empty() && fin.response_format.is_some(),
        "the finalize request"
    );
    let system = system_text(fin);
    assert!(system.contains(FINAL_BODY), "{system}");
    assert!(!system.contains(INVOICE_BODY), "{system}");
    let _ = Stage::Finalize;
}
