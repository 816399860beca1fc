//! Skills in agent runs: selection (explicit, auto, hybrid), applies-to stages, skill text kept
//! out of stored messages, allowed-tools narrowing and the resource tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use modu_agent::{Agent, AgentRequest, RunLimits};
use modu_core::context_provider::Stage;
use modu_core::{
    AgentError, ChatRequest, ConversationStore, FunctionTool, InMemoryConversationStore, Message, Role, ToolSpec,
};
use modu_skills::{
    InMemorySkillSource, ModelSkillSelector, READ_TOOL, SEARCH_TOOL, SkillLimits, SkillRegistry, SkillsProvider,
};
use modu_testing::ScriptedModel;
use serde_json::json;

const INVOICE_BODY: &str = "INVOICE-PROCEDURE: check totals against references/policy.md.";
const FINAL_BODY: &str = "FINAL-FORMAT: answer with a verdict.";
const OTHER_BODY: &str = "OTHER-PROCEDURE: be brief.";

fn registry() -> SkillRegistry {
    let source = InMemorySkillSource::new("test")
        .with_file(
            "invoice-review",
            "SKILL.md",
            format!(
                "---\nname: invoice-review\ndescription: Reviews invoices against company policy.\n\
                 metadata:\n  version: \"1.0.0\"\nallowed-tools: lookup_invoice lookup_vendor\n\
                 applies-to:\n  - plan\n  - act\n---\n{INVOICE_BODY}\n"
            ),
        )
        .with_file(
            "invoice-review",
            "references/policy.md",
            "# Policy\nInvoices above 1000 EUR need a second approval.\nVendors must be registered.\n",
        )
        .with_file("invoice-review", "assets/report-template.md", "# Report\nVerdict: ...\n")
        .with_file("invoice-review", "assets/logo.png", vec![0x89, b'P', b'N', b'G', 0, 0, 0, 13, 0xff])
        .with_file("invoice-review", "scripts/check.sh", "#!/bin/sh\necho secret-script\n")
        .with_file(
            "final-format",
            "SKILL.md",
            format!("---\nname: final-format\ndescription: Formats final verdicts.\napplies-to: [finalize]\n---\n{FINAL_BODY}\n"),
        )
        .with_file(
            "other",
            "SKILL.md",
            format!("---\nname: other\ndescription: Answers briefly.\n---\n{OTHER_BODY}\n"),
        );
    SkillRegistry::from_sources(vec![Arc::new(source)]).unwrap()
}

fn counting_tool(name: &str, counter: Arc<AtomicU32>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new(
            name,
            format!("The {name} tool"),
            json!({"type": "object", "properties": {}}),
        ),
        move |_ctx, _args| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"ok": true}))
            }
        },
    )
}

fn system_text(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(Message::text)
        .collect::<Vec<_>>()
        .join("\n")
}

fn tool_names(request: &ChatRequest) -> Vec<String> {
    let mut names: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
    names.sort();
    names
}

fn request(text: &str, skills: serde_json::Value) -> AgentRequest<()> {
    AgentRequest::new((), text).metadata("skills", skills)
}

fn tool_results(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(Message::text)
        .collect()
}

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
async fn resource_reads_ranges_search_and_refusals() {
    let provider = SkillsProvider::new(registry());
    let model = ScriptedModel::new()
        .tool_calls([
            (
                READ_TOOL,
                json!({"skill": "invoice-review", "path": "references/policy.md", "offset": 9, "length": 8}),
            ),
            (
                READ_TOOL,
                json!({"skill": "invoice-review", "path": "assets/report-template.md"}),
            ),
            (SEARCH_TOOL, json!({"query": "REGISTERED"})),
            (
                READ_TOOL,
                json!({"skill": "invoice-review", "path": "scripts/check.sh"}),
            ),
            (READ_TOOL, json!({"skill": "invoice-review", "path": "SKILL.md"})),
            (READ_TOOL, json!({"skill": "invoice-review", "path": "assets/logo.png"})),
            (
                READ_TOOL,
                json!({"skill": "invoice-review", "path": "references/../SKILL.md"}),
            ),
            (READ_TOOL, json!({"skill": "invoice-review", "path": "/etc/passwd"})),
            (READ_TOOL, json!({"skill": "other", "path": "references/policy.md"})),
            (
                READ_TOOL,
                json!({"skill": "invoice-review", "path": "references/missing.md"}),
            ),
        ])
        .text("done");
    let agent = provider.install(Agent::builder(model.clone())).build().unwrap();
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    assert!(result.is_completed(), "{:?}", result.error());
    let r = tool_results(result.messages());
    assert_eq!(r.len(), 10);
    let first: serde_json::Value = serde_json::from_str(&r[0]).unwrap();
    assert_eq!(first["content"], "Invoices");
    assert_eq!(first["offset"], 9);
    assert_eq!(first["next_offset"], 17);
    assert!(r[1].contains("Verdict"), "{}", r[1]);
    let search: serde_json::Value = serde_json::from_str(&r[2]).unwrap();
    assert_eq!(search["matches"][0]["path"], "references/policy.md");
    assert_eq!(search["matches"][0]["line"], 3);
    assert!(
        r[3].contains("path_refused_outside_resources") && !r[3].contains("secret-script"),
        "{}",
        r[3]
    );
    assert!(r[4].contains("path_refused_outside_resources"), "{}", r[4]);
    assert!(r[5].contains("path_refused_binary"), "{}", r[5]);
    assert!(r[6].contains("path_refused_parent_component"), "{}", r[6]);
    assert!(r[7].contains("path_refused_absolute"), "{}", r[7]);
    assert!(r[8].contains("skill_not_active"), "{}", r[8]);
    assert!(r[9].contains("no_such_resource"), "{}", r[9]);
    // The system message lists only readable resources (not scripts/, not binary assets).
    let system = system_text(&model.requests()[0]);
    assert!(
        system.contains("assets/report-template.md") && !system.contains("logo.png") && !system.contains("scripts/")
    );
}

#[tokio::test]
async fn resource_read_limit_is_enforced_per_run() {
    let provider = SkillsProvider::new(registry()).limits(SkillLimits::default().max_resource_reads(2));
    let read = json!({"skill": "invoice-review", "path": "references/policy.md"});
    let model = ScriptedModel::new()
        .tool_call(READ_TOOL, read.clone())
        .tool_call(SEARCH_TOOL, json!({"query": "approval"}))
        .tool_call(READ_TOOL, read.clone())
        .text("done")
        .tool_call(READ_TOOL, read.clone())
        .text("again");
    let agent = provider
        .install(Agent::builder(model.clone()))
        .limits(RunLimits::default().max_tool_calls(10))
        .build()
        .unwrap();
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    assert!(result.is_completed(), "{:?}", result.error());
    let r = tool_results(result.messages());
    assert!(r[0].contains("second approval"));
    assert!(r[1].contains("matches"));
    assert!(
        r[2].contains("limit_exceeded") && r[2].contains("skill_resource_limit"),
        "{}",
        r[2]
    );
    // A new run starts with a fresh budget.
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    assert!(result.is_completed());
    assert!(tool_results(result.messages())[0].contains("second approval"));
}

#[tokio::test]
async fn resource_reads_do_not_count_against_max_tool_calls() {
    let provider = SkillsProvider::new(registry()).limits(SkillLimits::default().max_resource_reads(5));
    let read = json!({"skill": "invoice-review", "path": "references/policy.md"});
    let model = ScriptedModel::new()
        .tool_call(READ_TOOL, read.clone())
        .tool_call(SEARCH_TOOL, json!({"query": "approval"}))
        .tool_call(READ_TOOL, read)
        .text("done");
    // Three resource calls with a business-tool budget of one: the run still completes.
    let agent = provider
        .install(Agent::builder(model))
        .limits(RunLimits::default().max_tool_calls(1))
        .build()
        .unwrap();
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("done"),
        "{:?}",
        result.error()
    );
    assert_eq!(result.stats().tool_calls, 0);
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

/// `modu_skill_read` on disk: a file that gets a second name (a hard link) after loading is
/// refused with a typed tool error, even when its bytes still match the loaded digest.
#[cfg(unix)]
#[tokio::test]
async fn modu_skill_read_refuses_a_hard_linked_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("skills");
    let skill = root.join("invoice-review");
    std::fs::create_dir_all(skill.join("references")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        format!("---\nname: invoice-review\ndescription: Reviews invoices.\n---\n{INVOICE_BODY}\n"),
    )
    .unwrap();
    let policy = skill.join("references/policy.md");
    std::fs::write(&policy, "Invoices above 1000 EUR need a second approval.\n").unwrap();
    let provider = SkillsProvider::new(SkillRegistry::from_paths([&root]).unwrap());
    // After loading, the file is replaced by a hard link to an outside file with the same bytes.
    let outside = dir.path().join("outside.md");
    std::fs::copy(&policy, &outside).unwrap();
    std::fs::remove_file(&policy).unwrap();
    std::fs::hard_link(&outside, &policy).unwrap();
    let model = ScriptedModel::new()
        .tool_calls([(
            READ_TOOL,
            json!({"skill": "invoice-review", "path": "references/policy.md"}),
        )])
        .text("done");
    let agent = provider.install(Agent::builder(model.clone())).build().unwrap();
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    assert!(result.is_completed(), "{:?}", result.error());
    let r = tool_results(result.messages());
    assert_eq!(r.len(), 1);
    assert!(
        r[0].contains("path_refused_hard_link") && !r[0].contains("second approval"),
        "{}",
        r[0]
    );
    // With the outside name removed, the same call reads the file.
    std::fs::remove_file(&outside).unwrap();
    let model = ScriptedModel::new()
        .tool_calls([(
            READ_TOOL,
            json!({"skill": "invoice-review", "path": "references/policy.md"}),
        )])
        .text("done");
    let agent = provider.install(Agent::builder(model)).build().unwrap();
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    let r = tool_results(result.messages());
    assert!(r[0].contains("second approval"), "{}", r[0]);
}
