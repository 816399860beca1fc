//! The resource tools: ranges, search and refusals, the per-run read limit, and reads of files
//! on disk.

use modu_agent::{Agent, RunLimits};
use modu_skills::{READ_TOOL, SEARCH_TOOL, SkillLimits, SkillRegistry, SkillsProvider};
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::{INVOICE_BODY, registry, request, system_text, tool_results};

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

/// `modu_skill_read` on disk: a file that gets a second name (a hard link) after loading is
/// refused with a typed tool error, even when its bytes still match the loaded digest.
#[cfg(unix)]
#[tokio::test]
async fn modu_skill_read_refuses_a_hard_linked_file() {
    let dir = tempfile::tempdir().unwrap();
    let (root, skill) = invoice_skill_on_disk(dir.path());
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

/// `modu_skill_read` paging through text of multi-byte characters with a length shorter than
/// one of them always moves on: it returns one whole character and a `next_offset` past it,
/// never nothing with `next_offset` equal to `offset` (which a model would ask again forever).
#[tokio::test]
async fn modu_skill_read_pages_through_multi_byte_text_with_a_tiny_length() {
    let dir = tempfile::tempdir().unwrap();
    let (root, skill) = invoice_skill_on_disk(dir.path());
    // Three 3-byte characters.
    std::fs::write(skill.join("references/notes.md"), "請求書").unwrap();
    let provider = SkillsProvider::new(SkillRegistry::from_paths([&root]).unwrap());
    let read = |offset: u64| {
        (
            READ_TOOL,
            json!({"skill": "invoice-review", "path": "references/notes.md", "offset": offset, "length": 1}),
        )
    };
    let model = ScriptedModel::new()
        .tool_calls([read(0), read(3), read(4)])
        .text("done");
    let agent = provider.install(Agent::builder(model)).build().unwrap();
    let result = agent.run(request("Review", json!(["invoice-review"]))).await;
    assert!(result.is_completed(), "{:?}", result.error());
    let r: Vec<serde_json::Value> = tool_results(result.messages())
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    assert_eq!(r[0]["content"], "請", "{:?}", r[0]);
    assert_eq!(r[0]["next_offset"], 3, "{:?}", r[0]);
    assert_eq!(r[1]["content"], "求", "{:?}", r[1]);
    assert_eq!(r[1]["next_offset"], 6, "{:?}", r[1]);
    // An offset inside a character starts at the next one.
    assert_eq!(r[2]["content"], "書", "{:?}", r[2]);
    assert_eq!(r[2]["offset"], 6, "{:?}", r[2]);
    assert!(r[2].get("next_offset").is_none(), "{:?}", r[2]);
}

/// Writes the invoice-review skill (its SKILL.md and an empty `references/`) under
/// `dir/skills`; returns the skills root and the skill's folder.
fn invoice_skill_on_disk(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let root = dir.join("skills");
    let skill = root.join("invoice-review");
    std::fs::create_dir_all(skill.join("references")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        format!("---\nname: invoice-review\ndescription: Reviews invoices.\n---\n{INVOICE_BODY}\n"),
    )
    .unwrap();
    (root, skill)
}
