//! The shape of the run path, checked: file budgets under `src/runner/` and `src/plan/`,
//! decision policies without IO. (No task-local state and no import circle: `cargo xtask tidy`.)
//! (A budget that is exceeded means a file holds more than one concern: split it.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_runner_stays_within_its_file_budgets() {
    let runner = src().join("runner");
    assert!(lines(&runner.join("mod.rs")) <= 450, "runner/mod.rs is over 450 lines");
    let mut files = Vec::new();
    rust_files(&runner, &mut files);
    assert!(files.len() >= 8, "{files:?}");
    rust_files(&src().join("plan"), &mut files);
    let over: Vec<_> = files
        .iter()
        .map(|f| (f.strip_prefix(src()).unwrap().display().to_string(), lines(f)))
        .filter(|(_, n)| *n > 600)
        .collect();
    assert!(over.is_empty(), "files under runner/ or plan/ over 600 lines: {over:?}");
    assert!(
        lines(&src().join("agent/api.rs")) <= 300,
        "agent/api.rs is over 300 lines"
    );
}

#[test]
fn decision_policies_do_no_io() {
    // The strict machine and the standard policy decide; the driver (runner/mod.rs) awaits.
    for file in [
        "plan/machine.rs",
        "plan/recovery.rs",
        "plan/planning.rs",
        "plan/steps.rs",
        "plan/prompts.rs",
        "plan/state.rs",
        "runner/standard.rs",
        "runner/policy.rs",
    ] {
        let text = std::fs::read_to_string(src().join(file)).unwrap();
        let awaits = text
            .match_indices(".await")
            .any(|(i, _)| !text[i + 6..].starts_with(|c: char| c.is_alphanumeric() || c == '_'));
        assert!(!awaits, "{file} awaits: a policy returns a Next instead");
        assert!(
            !text.contains("impl<C, O> Run"),
            "{file} reaches into the run: use the View"
        );
    }
    // The data events and errors carry depends on nothing else of the crate.
    let model = std::fs::read_to_string(src().join("../../modu-core/src/plan.rs")).unwrap();
    assert!(!model.contains("use crate"), "plan/model.rs imports from the crate");
    // The tool gate does not borrow Plan-and-Execute helpers.
    let gate = std::fs::read_to_string(src().join("runner/gate.rs")).unwrap();
    assert!(!gate.contains("crate::plan::"), "runner/gate.rs uses crate::plan::");
}
