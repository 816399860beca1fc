//! Loads the example catalog (`examples/skills`) with its lockfile and runs an agent with the
//! `invoice-review` skill selected explicitly. The model is scripted, so it runs offline:
//!
//! ```sh
//! cargo run -p modu-skills --example invoice_review
//! ```
//!
//! It prints the system message the model received (the skill's instructions are there), the
//! run's messages (the skill's text is not), and the tool results, including a read of
//! `references/policy.md` through `modu_skill_read`.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use modu_agent::{Agent, AgentRequest};
use modu_core::{FunctionTool, Role};
use modu_skills::{LOCKFILE_NAME, READ_TOOL, SkillRegistry, SkillsProvider};
use modu_testing::ScriptedModel;
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let catalog = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/skills");
    // Refuses to start if any file differs from what was reviewed and locked.
    let registry = SkillRegistry::from_paths_with_lockfile([&catalog], catalog.join(LOCKFILE_NAME))
        .expect("the example catalog matches its lockfile");
    for skill in registry.skills() {
        println!(
            "loaded {} {} {}",
            skill.name(),
            skill.manifest().version().unwrap_or("-"),
            skill.digest()
        );
    }
    let skills = SkillsProvider::new(registry);

    let lookup_invoice = FunctionTool::<()>::new(
        modu_core::ToolSpec::new(
            "lookup_invoice",
            "Look up an invoice by id",
            json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
        ),
        |_ctx, args| async move { Ok(json!({"id": args["id"], "vendor": "ACME", "total_eur": 1450})) },
    );
    let lookup_vendor = FunctionTool::<()>::new(
        modu_core::ToolSpec::new(
            "lookup_vendor",
            "Look up a vendor by name",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        ),
        |_ctx, args| async move { Ok(json!({"name": args["name"], "status": "active"})) },
    );
    let delete_invoice = FunctionTool::<()>::new(
        modu_core::ToolSpec::new(
            "delete_invoice",
            "Delete an invoice",
            json!({"type": "object", "properties": {}}),
        ),
        |_ctx, _args| async move { Ok(json!({"deleted": true})) },
    );

    let model = ScriptedModel::new()
        .tool_call(
            READ_TOOL,
            json!({"skill": "invoice-review", "path": "references/policy.md"}),
        )
        .tool_calls([
            ("lookup_invoice", json!({"id": "INV-42"})),
            ("lookup_vendor", json!({"name": "ACME"})),
        ])
        .text("INV-42 from ACME (active) totals 1,450 EUR: above 1,000 EUR, so it needs a second approval.");
    let agent = skills
        .install(Agent::builder(model.clone()).name("invoice-agent"))
        .instructions("Answer only with what you confirmed.")
        .tool(lookup_invoice)
        .tool(lookup_vendor)
        .tool(delete_invoice)
        .build()
        .expect("agent");

    let request = AgentRequest::new((), "Please review invoice INV-42").metadata("skills", json!(["invoice-review"]));
    let result = agent.run(request).await;

    let first = &model.requests()[0];
    println!(
        "\n--- system message of the first request ---\n{}",
        first.messages[0].text()
    );
    let offered: Vec<&str> = first.tools.iter().map(|t| t.name.as_str()).collect();
    println!("\n--- tools offered (allowed-tools narrows; delete_invoice is gone) ---\n{offered:?}");
    println!("\n--- run messages (no skill text here) ---");
    for m in result.messages() {
        let text = m.text();
        let shown: String = text.chars().take(100).collect();
        match m.role {
            Role::Assistant if m.has_tool_calls() => {
                let calls: Vec<&str> = m.tool_calls.iter().map(|c| c.name.as_str()).collect();
                println!("assistant calls {calls:?}");
            }
            role => println!("{role:?}: {shown}"),
        }
    }
    println!("\noutput: {}", result.output().map(String::as_str).unwrap_or("(none)"));
    assert!(result.is_completed(), "{:?}", result.error());
}
