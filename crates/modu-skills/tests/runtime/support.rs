//! Shared helpers: the test catalog, a counting tool and readers of model requests and results.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use modu_agent::AgentRequest;
use modu_core::{ChatRequest, FunctionTool, Message, Role, ToolSpec};
use modu_skills::{InMemorySkillSource, SkillRegistry};
use serde_json::json;

pub(crate) const INVOICE_BODY: &str = "INVOICE-PROCEDURE: check totals against references/policy.md.";
pub(crate) const FINAL_BODY: &str = "FINAL-FORMAT: answer with a verdict.";
pub(crate) const OTHER_BODY: &str = "OTHER-PROCEDURE: be brief.";

pub(crate) fn registry() -> SkillRegistry {
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

pub(crate) fn counting_tool(name: &str, counter: Arc<AtomicU32>) -> FunctionTool<()> {
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

pub(crate) fn system_text(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(Message::text)
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn tool_names(request: &ChatRequest) -> Vec<String> {
    let mut names: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
    names.sort();
    names
}

pub(crate) fn request(text: &str, skills: serde_json::Value) -> AgentRequest<()> {
    AgentRequest::new((), text).metadata("skills", skills)
}

pub(crate) fn tool_results(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(Message::text)
        .collect()
}
