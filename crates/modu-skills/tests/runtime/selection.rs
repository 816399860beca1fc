//! Choosing a run's skills: unknown names and bad options, `auto` and `hybrid` selection.

use std::sync::Arc;

use modu_agent::{Agent, AgentRequest};
use modu_core::{AgentError, Message};
use modu_skills::{ModelSkillSelector, SkillsProvider};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{INVOICE_BODY, OTHER_BODY, counting_tool, registry, request, system_text};

#[tokio::test]
async fn unknown_explicit_skill_fails_the_run_with_a_typed_error() {
    let provider = SkillsProvider::new(registry());
    let model = ScriptedModel::new().text("never");
    let agent = provider.install(Agent::builder(model.clone())).build().unwrap();
    let result = agent.run(request("x", json!(["invoice-reviw"]))).await;
    match result.error() {
        Some(AgentError::ContextProvider { provider, message }) => {
            assert_eq!(provider, "skills");
            assert!(message.contains("unknown skill \"invoice-reviw\""), "{message}");
            assert!(message.contains("invoice-review"), "lists what exists: {message}");
        }
        other => panic!("expected a context provider error, got {other:?}"),
    }
    assert!(model.requests().is_empty(), "the model is never called");
    assert_eq!(provider.cached_runs(), 0);
    // Malformed options are typed errors too.
    let result = agent
        .run(request("x", json!("invoice-review")).metadata("skill_mode", json!("magic")))
        .await;
    assert!(matches!(result.error(), Some(AgentError::ContextProvider { message, .. }) if message.contains("magic")));
    let result = agent
        .run(AgentRequest::new((), "x").metadata("skill_mode", json!("auto")))
        .await;
    assert!(
        matches!(result.error(), Some(AgentError::ContextProvider { message, .. }) if message.contains("selector")),
        "{:?}",
        result.error()
    );
}

#[tokio::test]
async fn auto_selection_is_a_separate_structured_call_without_tools() {
    let selector_model = ScriptedModel::new().text(r#"{"skills": ["invoice-review"]}"#);
    let provider =
        SkillsProvider::new(registry()).selector(ModelSkillSelector::new(Arc::new(selector_model.clone()), 2));
    let model = ScriptedModel::new().text("Reviewed.");
    let agent = provider
        .install(Agent::builder(model.clone()))
        .tool(counting_tool("lookup_invoice", Arc::default()))
        .build()
        .unwrap();
    let result = agent
        .run(AgentRequest::new((), "Please review this invoice").metadata("skill_mode", json!("auto")))
        .await;
    assert!(result.is_completed(), "{:?}", result.error());

    let sel = selector_model.requests();
    assert_eq!(sel.len(), 1);
    let sel = &sel[0];
    assert!(sel.tools.is_empty(), "the selection request carries no tools");
    assert!(sel.tool_choice.is_none());
    let format = sel.response_format.as_ref().expect("structured output");
    assert_eq!(format.name, "skill_selection");
    let names = &format.schema["properties"]["skills"]["items"]["enum"];
    assert_eq!(names, &json!(["final-format", "invoice-review", "other"]));
    let prompt: String = sel.messages.iter().map(Message::text).collect::<Vec<_>>().join("\n");
    assert!(prompt.contains("Please review this invoice"));
    assert!(
        prompt.contains("Reviews invoices against company policy."),
        "descriptions are shown"
    );
    assert!(
        !prompt.contains("INVOICE-PROCEDURE") && !prompt.contains("OTHER-PROCEDURE"),
        "bodies are not"
    );

    let system = system_text(&model.requests()[0]);
    assert!(system.contains(INVOICE_BODY));
    assert!(!system.contains(OTHER_BODY));
}

#[tokio::test]
async fn hybrid_pins_explicit_skills_and_fills_the_rest() {
    let selector_model = ScriptedModel::new().text(r#"{"skills": ["invoice-review", "other"]}"#);
    let provider =
        SkillsProvider::new(registry()).selector(ModelSkillSelector::new(Arc::new(selector_model.clone()), 2));
    let model = ScriptedModel::new().text("ok");
    let agent = provider.install(Agent::builder(model.clone())).build().unwrap();
    let result = agent
        .run(request("Review it", json!(["other"])).metadata("skill_mode", json!("hybrid")))
        .await;
    assert!(result.is_completed(), "{:?}", result.error());
    // The pinned skill is not offered to the selector, which may add one more.
    let sel = &selector_model.requests()[0];
    let names = &sel.response_format.as_ref().unwrap().schema["properties"]["skills"]["items"]["enum"];
    assert_eq!(names, &json!(["final-format", "invoice-review"]));
    let system = system_text(&model.requests()[0]);
    assert!(system.contains(OTHER_BODY) && system.contains(INVOICE_BODY), "{system}");
    let other_at = system.find(OTHER_BODY).unwrap();
    assert!(
        other_at < system.find(INVOICE_BODY).unwrap(),
        "pinned skills come first"
    );

    // With the pinned skills filling max_skills, the selector is not asked at all.
    let idle = ScriptedModel::new();
    let provider = SkillsProvider::new(registry()).selector(ModelSkillSelector::new(Arc::new(idle.clone()), 1));
    let model = ScriptedModel::new().text("ok");
    let agent = provider.install(Agent::builder(model.clone())).build().unwrap();
    let result = agent
        .run(request("Review it", json!(["other"])).metadata("skill_mode", json!("hybrid")))
        .await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert!(idle.requests().is_empty());
    assert!(system_text(&model.requests()[0]).contains(OTHER_BODY));
}

#[tokio::test]
async fn selector_answer_that_is_not_json_fails_the_run() {
    let selector_model = ScriptedModel::new().text("I think invoice-review");
    let provider = SkillsProvider::new(registry()).selector(ModelSkillSelector::new(Arc::new(selector_model), 2));
    let agent = provider
        .install(Agent::builder(ScriptedModel::new().text("x")))
        .build()
        .unwrap();
    let result = agent
        .run(AgentRequest::new((), "x").metadata("skill_mode", json!("auto")))
        .await;
    assert!(
        matches!(result.error(), Some(AgentError::ContextProvider { message, .. }) if message.contains("not JSON")),
        "{:?}",
        result.error()
    );
}
