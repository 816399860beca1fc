//! Costs of skills: loading a catalog from disk (openat per component, SHA-256 of every file)
//! and the per-request work of the context provider (cached selection, instructions, tool
//! narrowing).
//!
//! ```sh
//! CARGO_TARGET_DIR=/work/target-skills cargo bench -p modu-skills --bench skills
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use modu_core::context_provider::{ContextProvider, ModelContext, Stage};
use modu_core::{Message, RunContext, ToolDefinition};
use modu_skills::{SkillRegistry, SkillsProvider};
use serde_json::json;

fn catalog() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/skills")
}

fn bench(c: &mut Criterion) {
    c.bench_function("registry_from_paths_with_lockfile (1 skill, 5 files)", |b| {
        let dir = catalog();
        let lock = dir.join("skills.lock.json");
        b.iter(|| black_box(SkillRegistry::from_paths_with_lockfile([&dir], &lock).unwrap()))
    });

    let provider = SkillsProvider::new(SkillRegistry::from_paths([catalog()]).unwrap());
    let mut meta = serde_json::Map::new();
    meta.insert("skills".into(), json!(["invoice-review"]));
    let ctx = RunContext::new(Arc::new(()), "bench-run").with_metadata(meta);
    let tools: Vec<ToolDefinition> = ["lookup_invoice", "lookup_vendor", "delete_invoice", "modu_skill_read"]
        .iter()
        .map(|n| ToolDefinition::new(*n, String::new(), json!({"type": "object"})))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    c.bench_function("context_provider_invoking (explicit, cached selection)", |b| {
        b.iter(|| {
            let mut context = ModelContext::default();
            context.stage = Some(Stage::Act);
            context.messages.push(Message::user("Review invoice 42"));
            context.tools = tools.clone();
            rt.block_on(ContextProvider::<()>::invoking(&provider, &ctx, &mut context))
                .unwrap();
            black_box(context)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
