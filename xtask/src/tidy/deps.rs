//! Rule `deps`: which internal `modu*` crates each workspace crate may depend on, normal
//! (`[dependencies]`, `[build-dependencies]`, target-specific ones included) and dev
//! (`[dev-dependencies]`) separately. docs/architecture.md ("Crate graph") mirrors [`TABLE`],
//! checked by [`check_doc`].
//!
//! Documented rule: no backend crate ([`BACKENDS`]) has a normal dependency on another; the
//! facade and the CLI are the crates that see several. [`BACKEND_EXCEPTIONS`] lists the edges
//! that break it today (named, so they cannot grow silently). modu-core's external dependency
//! rule (no reqwest, redis, …) is `check_core_dependencies` in checks.rs, over `cargo tree`.

use std::collections::{BTreeMap, BTreeSet};

use super::Violation;

/// (crate, normal dependencies allowed, dev-dependencies allowed).
pub type Row = (&'static str, &'static [&'static str], &'static [&'static str]);

const STORES_DEV: &[&str] = &["modu-testing", "modu-mcp", "modu-agent"];

pub const TABLE: &[Row] = &[
    (
        "modu",
        &[
            "modu-core",
            "modu-agent",
            "modu-macros",
            "modu-openai",
            "modu-ollama",
            "modu-redis",
            "modu-sqlite",
            "modu-postgres",
            "modu-mcp",
            "modu-skills",
            "modu-otel",
            "modu-server",
        ],
        &["modu-testing"],
    ),
    ("modu-core", &[], &[]),
    (
        "modu-agent",
        &["modu-core", "modu-testing"],
        &["modu-testing", "modu-macros"],
    ),
    ("modu-macros", &[], &[]),
    ("modu-testing", &["modu-core"], &[]),
    ("modu-openai", &["modu-core"], &["modu-testing", "modu-agent"]),
    ("modu-ollama", &["modu-core"], &["modu-testing", "modu-agent"]),
    ("modu-redis", &["modu-core", "modu-mcp"], STORES_DEV),
    ("modu-sqlite", &["modu-core", "modu-mcp"], STORES_DEV),
    ("modu-postgres", &["modu-core", "modu-mcp"], STORES_DEV),
    (
        "modu-mcp",
        &["modu-core"],
        &["modu-testing", "modu-openai", "modu-agent"],
    ),
    ("modu-skills", &["modu-core", "modu-agent"], &["modu-testing"]),
    ("modu-otel", &["modu-core"], &["modu-testing", "modu-agent"]),
    (
        "modu-server",
        &["modu-core", "modu-agent"],
        &["modu-testing", "modu-openai"],
    ),
    (
        "modu-restate",
        &["modu-core", "modu-agent"],
        &["modu-testing", "modu-openai"],
    ),
    ("modu-cli", &["modu"], &["modu-testing"]),
    (
        "modu-chaos",
        &["modu-core", "modu-agent", "modu-redis", "modu-postgres"],
        &["modu-testing"],
    ),
    ("modu-examples", &["modu", "modu-testing"], &[]),
    ("modu-example-custom-provider", &["modu-core"], &[]),
    (
        "modu-crash-tests",
        &["modu-core", "modu-agent", "modu-testing", "modu-sqlite", "modu-redis"],
        &[],
    ),
    ("xtask", &[], &[]),
];

/// Crates that connect modu-core to one outside system each.
pub const BACKENDS: &[&str] = &[
    "modu-openai",
    "modu-ollama",
    "modu-redis",
    "modu-sqlite",
    "modu-postgres",
    "modu-mcp",
    "modu-skills",
    "modu-otel",
    "modu-server",
    "modu-restate",
];

/// Backend-to-backend normal edges that break the documented rule today: the stores' optional
/// `mcp` feature (their MCP OAuth token stores implement `modu_mcp::oauth::McpTokenStore`).
pub const BACKEND_EXCEPTIONS: &[(&str, &str)] = &[
    ("modu-redis", "modu-mcp"),
    ("modu-sqlite", "modu-mcp"),
    ("modu-postgres", "modu-mcp"),
];

/// The member directories of the root manifest's `[workspace]`.
pub fn manifest_dirs(root_manifest: &str) -> Result<Vec<String>, String> {
    let doc: toml::Table = root_manifest.parse().map_err(|e| format!("Cargo.toml: {e}"))?;
    let members = doc
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(toml::Value::as_array)
        .ok_or("Cargo.toml: no workspace.members")?;
    Ok(members
        .iter()
        .filter_map(toml::Value::as_str)
        .map(str::to_owned)
        .collect())
}

/// Whether a manifest's package may be published (no `publish = false` or `publish = []`).
pub fn publishable(manifest: &str) -> Result<bool, String> {
    let doc = manifest.parse::<toml::Table>().map_err(|e| e.to_string())?;
    Ok(match doc.get("package").and_then(|p| p.get("publish")) {
        Some(toml::Value::Boolean(b)) => *b,
        Some(toml::Value::Array(a)) => !a.is_empty(),
        _ => true,
    })
}

/// (package name, normal internal deps, dev internal deps) of one manifest.
pub fn internal_deps(manifest: &str) -> Result<(String, BTreeSet<String>, BTreeSet<String>), String> {
    let doc = manifest.parse::<toml::Table>().map_err(|e| e.to_string())?;
    let name = doc
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str)
        .ok_or("no package.name")?
        .to_owned();
    let (mut normal, mut dev) = (BTreeSet::new(), BTreeSet::new());
    let mut tables = vec![&doc];
    if let Some(targets) = doc.get("target").and_then(toml::Value::as_table) {
        tables.extend(targets.values().filter_map(toml::Value::as_table));
    }
    for table in tables {
        for key in ["dependencies", "build-dependencies", "dev-dependencies"] {
            let into = if key == "dev-dependencies" {
                &mut dev
            } else {
                &mut normal
            };
            for (dep, spec) in table.get(key).and_then(toml::Value::as_table).into_iter().flatten() {
                let real = spec.get("package").and_then(toml::Value::as_str).unwrap_or(dep);
                if real == "modu" || real.starts_with("modu-") {
                    into.insert(real.to_owned());
                }
            }
        }
    }
    Ok((name, normal, dev))
}

/// `manifests`: (path, text) of every workspace member's Cargo.toml.
pub fn check(manifests: &[(String, String)], table: &[Row]) -> Result<Vec<Violation>, String> {
    let mut out = Vec::new();
    let mut unpublished = BTreeSet::new();
    for (path, text) in manifests {
        if !publishable(text).map_err(|e| format!("{path}: {e}"))? {
            unpublished.insert(internal_deps(text).map_err(|e| format!("{path}: {e}"))?.0);
        }
    }
    for (path, text) in manifests {
        let (name, normal, dev) = internal_deps(text).map_err(|e| format!("{path}: {e}"))?;
        if !unpublished.contains(&name) {
            for dep in normal.iter().filter(|d| unpublished.contains(*d)) {
                out.push(Violation::new(
                    "deps",
                    path.clone(),
                    line_of(text, dep),
                    format!("{name} is published but depends on {dep}, which is `publish = false`"),
                ));
            }
        }
        let Some((_, allowed_normal, allowed_dev)) = table.iter().find(|(n, _, _)| *n == name) else {
            out.push(Violation::new(
                "deps",
                path.clone(),
                0,
                format!("{name} is not in the dependency table (xtask/src/tidy/deps.rs, docs/architecture.md)"),
            ));
            continue;
        };
        for (kind, deps, allowed) in [("", &normal, allowed_normal), ("dev-", &dev, allowed_dev)] {
            for dep in deps.iter().filter(|d| !allowed.contains(&d.as_str())) {
                out.push(Violation::new(
                    "deps",
                    path.clone(),
                    line_of(text, dep),
                    format!("{name} has a {kind}dependency on {dep}, which the dependency table does not allow (xtask/src/tidy/deps.rs, docs/architecture.md)"),
                ));
            }
        }
    }
    Ok(out)
}

/// Backend-to-backend normal edges the table allows beyond [`BACKEND_EXCEPTIONS`].
pub fn backend_edges(table: &[Row], exceptions: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, normal, _) in table.iter().filter(|(n, _, _)| BACKENDS.contains(n)) {
        for dep in normal.iter().filter(|d| BACKENDS.contains(d)) {
            if !exceptions.contains(&(*name, *dep)) {
                out.push(((*name).to_owned(), (*dep).to_owned()));
            }
        }
    }
    out
}

/// The crate names (`modu…`, `xtask`) a table cell names.
fn names(cell: &str, backticked: bool) -> BTreeSet<String> {
    let words: Vec<&str> = if backticked {
        cell.split('`').skip(1).step_by(2).collect()
    } else {
        cell.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).collect()
    };
    words
        .into_iter()
        .filter(|w| *w == "modu" || w.starts_with("modu-") || *w == "xtask")
        .map(str::to_owned)
        .collect()
}

/// docs/architecture.md's dependency table (the one headed `| crate | normal dependencies |`):
/// crate → (normal, dev, line).
pub fn doc_table(doc: &str) -> BTreeMap<String, (BTreeSet<String>, BTreeSet<String>, usize)> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for (i, line) in doc.lines().enumerate() {
        if line.starts_with("| crate | normal dependencies |") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').collect();
        if cells.len() < 4 || cells[1].trim_start().starts_with('-') {
            continue;
        }
        for name in names(cells[1], true) {
            out.insert(name, (names(cells[2], false), names(cells[3], false), i + 1));
        }
    }
    out
}

/// The doc's table names the same crates and dependencies as `table`.
pub fn check_doc(doc_path: &str, doc: &str, table: &[Row]) -> Vec<Violation> {
    let documented = doc_table(doc);
    let mut out = Vec::new();
    let set = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<String>>();
    for (name, normal, dev) in table {
        match documented.get(*name) {
            None => out.push(Violation::new(
                "deps",
                doc_path,
                0,
                format!("{name} is missing from the dependency table (it mirrors xtask/src/tidy/deps.rs)"),
            )),
            Some((n, d, line)) => {
                if *n != set(normal) || *d != set(dev) {
                    out.push(Violation::new(
                        "deps",
                        doc_path,
                        *line,
                        format!(
                            "{name}: the doc says {n:?} / dev {d:?}, xtask/src/tidy/deps.rs says {normal:?} / dev {dev:?}"
                        ),
                    ));
                }
            }
        }
    }
    for (name, (_, _, line)) in &documented {
        if !table.iter().any(|(n, _, _)| n == name) {
            out.push(Violation::new(
                "deps",
                doc_path,
                *line,
                format!("{name} is not in xtask/src/tidy/deps.rs"),
            ));
        }
    }
    out
}

fn line_of(text: &str, dep: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().starts_with(dep) && l.contains('='))
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TOY: &[Row] = &[("modu-a", &["modu-core"], &["modu-testing"])];

    fn manifest(extra: &str) -> Vec<(String, String)> {
        let text = format!(
            "[package]\nname = \"modu-a\"\n\n[dependencies]\nmodu-core.workspace = true\nserde = \"1\"\n\n[dev-dependencies]\nmodu-testing.workspace = true\n{extra}"
        );
        vec![("crates/modu-a/Cargo.toml".to_owned(), text)]
    }

    #[test]
    fn an_internal_dependency_outside_the_table_is_found() {
        let found = check(
            &manifest("\n[target.'cfg(unix)'.dependencies]\nmodu-redis = { workspace = true }\n"),
            TOY,
        )
        .unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].message.contains("modu-redis"), "{found:?}");
        assert_eq!(found[0].line, 12);
        // A renamed dependency counts by its package name; a dev-only one is checked as dev.
        let found = check(&manifest("extra = { package = \"modu-otel\", path = \"x\" }\n"), TOY).unwrap();
        assert!(found[0].message.contains("dev-dependency on modu-otel"), "{found:?}");
        // A crate the table does not know.
        assert_eq!(check(&manifest(""), &[]).unwrap().len(), 1);
    }

    #[test]
    fn a_published_crate_on_an_unpublished_one_is_found() {
        let toy: &[Row] = &[("modu-a", &["modu-core"], &["modu-testing"]), ("modu-core", &[], &[])];
        let mut manifests = manifest("");
        manifests.push((
            "crates/modu-core/Cargo.toml".to_owned(),
            "[package]\nname = \"modu-core\"\npublish = false\n".to_owned(),
        ));
        let found = check(&manifests, toy).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].message.contains("publish = false"), "{found:?}");
        manifests[1].1 = "[package]\nname = \"modu-core\"\n".to_owned();
        assert!(check(&manifests, toy).unwrap().is_empty());
        assert!(!publishable("[package]\npublish = []\n").unwrap());
    }

    #[test]
    fn dependencies_in_the_table_pass() {
        assert!(check(&manifest(""), TOY).unwrap().is_empty());
    }

    #[test]
    fn backends_do_not_depend_on_each_other_beyond_the_named_exceptions() {
        assert!(backend_edges(TABLE, BACKEND_EXCEPTIONS).is_empty());
        let planted: &[Row] = &[("modu-openai", &["modu-core", "modu-redis"], &[])];
        assert_eq!(
            backend_edges(planted, &[]),
            [("modu-openai".to_owned(), "modu-redis".to_owned())]
        );
    }

    const DOC: &str = "x\n\n| crate | normal dependencies | dev-dependencies |\n|---|---|---|\n| `modu-a`, `modu-b` (x) | modu-core; optional (feature `mcp`): modu-mcp | modu-testing |\n| `modu-core` | — | — |\n\nafter\n";

    #[test]
    fn the_doc_table_mirrors_the_table() {
        let table: &[Row] = &[
            ("modu-a", &["modu-core", "modu-mcp"], &["modu-testing"]),
            ("modu-b", &["modu-core", "modu-mcp"], &["modu-testing"]),
            ("modu-core", &[], &[]),
        ];
        assert!(
            check_doc("arch.md", DOC, table).is_empty(),
            "{:?}",
            check_doc("arch.md", DOC, table)
        );
    }

    #[test]
    fn a_drifted_doc_table_is_found() {
        let table: &[Row] = &[
            ("modu-a", &["modu-core"], &["modu-testing"]),
            ("modu-b", &["modu-core", "modu-mcp"], &["modu-testing"]),
            ("modu-x", &[], &[]),
        ];
        let found = check_doc("arch.md", DOC, table);
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(found.len(), 3, "{text:#?}");
        assert!(
            text[0].contains("arch.md:5:") && text[0].contains("modu-a"),
            "{text:#?}"
        );
        assert!(text[1].contains("modu-x is missing"), "{text:#?}");
        assert!(text[2].contains("modu-core is not in"), "{text:#?}");
    }

    #[test]
    fn workspace_members_are_read() {
        let dirs = manifest_dirs("[workspace]\nmembers = [\"crates/a\", \"xtask\"]\n").unwrap();
        assert_eq!(dirs, ["crates/a", "xtask"]);
    }
}
