//! `cargo xtask tidy`: rules over the repository's text, each a pure function over paths and
//! text (unit-tested below each rule), run by `cargo xtask ci` after fmt.
//!
//! - `budget`: no `.rs` file over 600 lines unless allow-listed with a reason (`budget.rs`)
//! - `deps`: internal `modu*` dependencies follow the table in `deps.rs` (docs/architecture.md)
//! - `modules`: docs/architecture.md's modu-core and modu-agent module tables name the modules of their lib.rs
//! - `seed-refs`: rustdoc in crates/ does not cite the product seed documents
//! - `task-local`, `import-circle`, `layers`: modu-core's and modu-agent's import rules (`imports.rs`)

mod budget;
pub mod deps;
mod docs;
mod imports;

use std::fmt;
use std::path::{Path, PathBuf};

/// One broken rule, at a file (and a line when there is one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub path: String,
    pub line: usize,
    pub message: String,
}

impl Violation {
    fn new(rule: &'static str, path: impl Into<String>, line: usize, message: impl Into<String>) -> Self {
        Self {
            rule,
            path: path.into(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: [{}] {}", self.path, self.line, self.rule, self.message)
    }
}

/// The `.rs` files under `dir` (recursively), as paths relative to `root` with `/`.
fn rust_files(root: &Path, dir: &str) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if name != "target" && !name.to_string_lossy().starts_with('.') {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root.join(dir), &mut files);
    let mut out: Vec<String> = files
        .iter()
        .filter_map(|p| p.strip_prefix(root).ok())
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .collect();
    out.sort();
    out
}

fn read(root: &Path, rel: &str) -> Result<String, String> {
    std::fs::read_to_string(root.join(rel)).map_err(|e| format!("cannot read {rel}: {e}"))
}

/// Every rule over the repository at `root`.
pub fn check(root: &Path) -> Result<Vec<Violation>, String> {
    let mut out = Vec::new();

    // budget
    let mut sizes = Vec::new();
    for dir in budget::DIRS {
        for rel in rust_files(root, dir) {
            sizes.push((read(root, &rel)?.lines().count(), rel));
        }
    }
    out.extend(budget::check(&sizes, budget::ALLOW));

    // deps
    let mut manifests = Vec::new();
    for dir in deps::manifest_dirs(&read(root, "Cargo.toml")?)? {
        let rel = format!("{dir}/Cargo.toml");
        manifests.push((rel.clone(), read(root, &rel)?));
    }
    out.extend(deps::check(&manifests, deps::TABLE)?);
    let arch = "docs/architecture.md";
    out.extend(deps::check_doc(arch, &read(root, arch)?, deps::TABLE));
    for (from, to) in deps::backend_edges(deps::TABLE, deps::BACKEND_EXCEPTIONS) {
        out.push(Violation::new(
            "deps",
            "xtask/src/tidy/deps.rs",
            0,
            format!("the table lets backend {from} depend on backend {to}: backends do not depend on each other (docs/architecture.md)"),
        ));
    }

    // modules
    for krate in ["modu-core", "modu-agent"] {
        let lib = format!("crates/{krate}/src/lib.rs");
        out.extend(docs::module_table(
            krate,
            arch,
            &read(root, arch)?,
            &lib,
            &read(root, &lib)?,
        ));
    }

    // seed-refs
    for rel in rust_files(root, "crates") {
        out.extend(docs::seed_refs(&rel, &read(root, &rel)?));
    }

    // the imports of the contract and the runtime, each crate on its own
    let crates: [(&str, &[&str], &[&str]); 2] = [
        ("crates/modu-core/src/", imports::CORE_LAYERED, imports::CORE_LEAVES),
        ("crates/modu-agent/src/", imports::AGENT_LAYERED, &[]),
    ];
    for (src, layered, leaves) in crates {
        let mut files = std::collections::BTreeMap::new();
        for rel in rust_files(root, src) {
            let text = read(root, &rel)?;
            out.extend(imports::task_local(&rel, &text));
            let module = rel.trim_start_matches(src).trim_end_matches(".rs").to_owned();
            files.insert(module, text);
        }
        out.extend(imports::check(src, &files, layered, leaves));
    }

    Ok(out)
}

/// The workspace's publishable packages (no `publish = false`), by name.
pub fn publishable_packages(root: &Path) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for dir in deps::manifest_dirs(&read(root, "Cargo.toml")?)? {
        let rel = format!("{dir}/Cargo.toml");
        let text = read(root, &rel)?;
        if deps::publishable(&text).map_err(|e| format!("{rel}: {e}"))? {
            out.push(deps::internal_deps(&text).map_err(|e| format!("{rel}: {e}"))?.0);
        }
    }
    Ok(out)
}

/// `cargo xtask tidy`: print every violation; an error when there is one.
pub fn run(root: &Path) -> Result<(), String> {
    println!("\n==> tidy");
    let found = check(root)?;
    for v in &found {
        println!("{v}");
    }
    if found.is_empty() {
        println!("    ok");
        Ok(())
    } else {
        Err(format!("tidy: {} violation(s)", found.len()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    #[test]
    fn the_repository_is_tidy() {
        let root = super::super::root();
        let found = super::check(&root).unwrap();
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(found.is_empty(), "{}", text.join("\n"));
    }

    #[test]
    fn the_import_graph_of_modu_agent_is_not_vacuous() {
        // A checker that sees no edges would pass every tree: it sees these.
        let root = super::super::root();
        let src = "crates/modu-agent/src/";
        let mut files = std::collections::BTreeMap::new();
        for rel in super::rust_files(&root, src) {
            let text = super::read(&root, &rel).unwrap();
            files.insert(rel.trim_start_matches(src).trim_end_matches(".rs").to_owned(), text);
        }
        assert!(files.len() > 25, "{}", files.len());
        let graph = super::imports::graph(&files);
        assert!(graph["runner/ask"].contains("runner/mod"), "use super::{{Run, ..}}");
        assert!(graph["runner/mod"].contains("runner/policy"), "use policy::{{..}}");
        assert!(
            graph["plan/machine"].contains("runner/policy"),
            "crate::runner::policy::{{..}}"
        );
        // The known circle inside agent/ is seen (and allowed).
        let circles = super::imports::circles(&graph);
        assert!(
            circles.iter().any(|c| c.iter().all(|f| f.starts_with("agent/"))),
            "{circles:?}"
        );
    }
}
