//! Replays every committed input through the targets' entry points, on stable, as a normal
//! `cargo test`: `fuzz/artifacts-regressions/<target>/*` (every crash, hang or OOM the fuzzers
//! found, kept after its fix) and `fuzz/corpus/<target>/*` (the minimised corpora).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use modu_core::InMemoryCheckpointStore;
use modu_fuzz_harness::TARGETS;
use modu_fuzz_harness::agents::{Policy, agent, finishing_model};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != ".gitkeep"))
        .collect();
    out.sort();
    out
}

fn replay(kind: &str) -> usize {
    let mut total = 0;
    for (target, run) in TARGETS {
        for file in files(&fuzz_dir().join(kind).join(target)) {
            let data = std::fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{target} panics on {}", file.display());
            total += 1;
        }
    }
    total
}

#[test]
fn every_regression_input_passes() {
    let n = replay("artifacts-regressions");
    eprintln!("{n} regression inputs replayed");
}

#[test]
fn every_corpus_input_passes() {
    let n = replay("corpus");
    assert!(n > 0, "no corpus files found under {}", fuzz_dir().display());
    for (target, _) in TARGETS {
        assert!(
            !files(&fuzz_dir().join("corpus").join(target)).is_empty(),
            "the {target} corpus is empty"
        );
    }
    eprintln!("{n} corpus inputs replayed");
}

/// The checkpoint seeds are real checkpoints of the fuzz agents: without that the target would
/// only ever see fingerprint mismatches.
#[tokio::test(flavor = "current_thread")]
async fn checkpoint_seeds_import_into_the_fuzz_agents() {
    let dir = fuzz_dir().join("corpus").join("checkpoint");
    let seeds: Vec<PathBuf> = files(&dir)
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("seed_"))
        .collect();
    assert!(
        seeds.len() >= 20,
        "expected the make-seeds checkpoints in {}",
        dir.display()
    );
    let store = Arc::new(InMemoryCheckpointStore::new());
    let agents = [Policy::Standard, Policy::Strict].map(|p| agent(p, finishing_model(), Arc::clone(&store)));
    let mut versions = std::collections::BTreeSet::new();
    for seed in &seeds {
        let value: serde_json::Value = serde_json::from_slice(&std::fs::read(seed).unwrap()).unwrap();
        let mut imported = false;
        for a in &agents {
            imported |= a.import_state(value.clone()).await.is_ok();
        }
        assert!(imported, "{} imports into neither fuzz agent", seed.display());
        versions.insert((
            value["agent"].as_str().unwrap().to_owned(),
            value["schema_version"].as_u64().unwrap(),
        ));
    }
    // Seeds of every schema version this build reads, for both policies.
    let expected: std::collections::BTreeSet<(String, u64)> = ["standard", "strict"]
        .into_iter()
        .flat_map(|a| (1..=u64::from(modu_agent::CHECKPOINT_SCHEMA_VERSION)).map(move |v| (a.to_owned(), v)))
        .collect();
    assert_eq!(versions, expected);
}
