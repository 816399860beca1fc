//! Rules over documentation text:
//! - `modules`: each of docs/architecture.md's module tables ("## modu-core, module by module",
//!   "## modu-agent, module by module") names exactly the modules that crate's lib.rs declares (`mod x;`, `pub mod x { .. }`; `__private`
//!   excluded).
//! - `seed-refs`: rustdoc (`///`, `//!`) in crates/ says what the code does, not where the
//!   product seed documents asked for it (`seed 002`, seed file names and titles, `§` section
//!   references other than an RFC's, Korean text quoted from them).

use std::collections::BTreeMap;

use super::Violation;

/// The heading of a crate's module table.
pub fn heading(krate: &str) -> String {
    format!("## {krate}, module by module")
}

/// The modules a crate root declares at top level, with their lines.
pub fn declared_modules(lib: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (i, line) in lib.lines().enumerate() {
        let rest = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        let Some(rest) = rest.strip_prefix("mod ") else {
            continue;
        };
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !name.is_empty() && !name.starts_with("__") {
            out.insert(name, i + 1);
        }
    }
    out
}

/// The modules the table under `heading` names (the first column, in backticks).
pub fn table_modules(doc: &str, heading: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let Some(start) = doc.lines().position(|l| l.trim() == heading) else {
        return out;
    };
    for (i, line) in doc.lines().enumerate().skip(start + 1) {
        if line.starts_with("## ") {
            break;
        }
        let Some(cell) = line.strip_prefix('|').and_then(|l| l.split('|').next()) else {
            continue;
        };
        let cell = cell.trim();
        if let Some(name) = cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')) {
            out.insert(name.to_owned(), i + 1);
        }
    }
    out
}

pub fn module_table(krate: &str, doc_path: &str, doc: &str, lib_path: &str, lib: &str) -> Vec<Violation> {
    let heading = heading(krate);
    let table = table_modules(doc, &heading);
    if table.is_empty() {
        return vec![Violation::new(
            "modules",
            doc_path,
            0,
            format!("no module table under {heading:?}"),
        )];
    }
    let declared = declared_modules(lib);
    let mut out = Vec::new();
    for (name, line) in declared.iter().filter(|(n, _)| !table.contains_key(*n)) {
        out.push(Violation::new(
            "modules",
            lib_path,
            *line,
            format!("module `{name}` is not in {doc_path}'s {krate} table: add a row"),
        ));
    }
    for (name, line) in table.iter().filter(|(n, _)| !declared.contains_key(*n)) {
        out.push(Violation::new(
            "modules",
            doc_path,
            *line,
            format!("the {krate} table names `{name}`, which {lib_path} does not declare"),
        ));
    }
    out
}

/// What in one doc-comment line refers to the seed documents, if anything.
fn seed_reference(doc: &str) -> Option<&'static str> {
    let lower = doc.to_lowercase();
    let bytes = lower.as_bytes();
    for (i, _) in lower.match_indices("seed") {
        let after = &lower[i + 4..];
        let before_ok = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let numbered = after
            .trim_start_matches([' ', '#'])
            .starts_with(|c: char| c.is_ascii_digit())
            && (after.starts_with(' ') || after.starts_with('#'));
        if before_ok && (numbered || after.starts_with("s/") || after.starts_with(" document")) {
            return Some("a seed document by number or path");
        }
    }
    if lower.contains("moduagent") {
        return Some("the moduagent seed");
    }
    if doc.contains('§') && !doc.contains("RFC") {
        return Some("a section (§) of a seed document");
    }
    if doc
        .chars()
        .any(|c| ('\u{AC00}'..='\u{D7A3}').contains(&c) || ('\u{1100}'..='\u{11FF}').contains(&c))
    {
        return Some("Korean text quoted from a seed document");
    }
    // A seed file name: three digits, `_`, sixteen hex digits.
    let is_name = |w: &str| {
        let w = w.trim_end_matches(".txt");
        w.len() == 20
            && w[..3].bytes().all(|b| b.is_ascii_digit())
            && &w[3..4] == "_"
            && w[4..].bytes().all(|b| b.is_ascii_hexdigit())
    };
    if lower.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(is_name) {
        return Some("a seed file name");
    }
    None
}

pub fn seed_refs(path: &str, text: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim_start();
        let Some(doc) = l.strip_prefix("///").or_else(|| l.strip_prefix("//!")) else {
            continue;
        };
        if let Some(what) = seed_reference(doc) {
            out.push(Violation::new(
                "seed-refs",
                path,
                i + 1,
                format!("rustdoc refers to {what}: say the behaviour itself"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# x\n\n## modu-core, module by module\n\n| module | holds |\n|---|---|\n| `message` | Message |\n| `tool` | Tool |\n\nImports are layered.\n\n## Next\n\n| `other` | x |\n";

    #[test]
    fn a_drifted_module_table_is_found() {
        let lib = "//! x\npub mod message;\nmod runner;\n#[cfg(test)]\nmod tool;\npub mod __private {\n    pub mod inner {}\n}\n";
        let found = module_table("modu-core", "arch.md", DOC, "lib.rs", lib);
        assert!(
            found
                .iter()
                .any(|v| v.path == "lib.rs" && v.line == 3 && v.message.contains("`runner`")),
            "{found:?}"
        );
        assert_eq!(found.len(), 1, "{found:?}");
        let found = module_table("modu-core", "arch.md", DOC, "lib.rs", "pub mod message;\n");
        assert!(
            found
                .iter()
                .any(|v| v.path == "arch.md" && v.line == 8 && v.message.contains("`tool`")),
            "{found:?}"
        );
        assert_eq!(module_table("modu-core", "arch.md", "no table", "lib.rs", "").len(), 1);
    }

    #[test]
    fn a_matching_module_table_passes() {
        let lib = "pub mod message;\npub mod tool {\n    pub use x;\n}\npub mod __private {}\n";
        assert!(module_table("modu-core", "arch.md", DOC, "lib.rs", lib).is_empty());
    }

    #[test]
    fn seed_references_in_rustdoc_are_found() {
        for planted in [
            "/// The final answer (seed 002).",
            "    //! As seeds/000_04ea0964ed434476.txt asks.",
            "/// See 003_edf62d0d6b19e095 for the rule.",
            "/// Recovery (\"Tool 실패 복구\").",
            "/// As in moduagent 0.3.2.",
            "/// See §4.2.",
            "/// The seed documents say so.",
        ] {
            let text = format!("fn a() {{}}\n{planted}\nfn b() {{}}\n");
            let found = seed_refs("x.rs", &text);
            assert_eq!(found.len(), 1, "{planted}: {found:?}");
            assert_eq!(found[0].line, 2);
        }
    }

    #[test]
    fn clean_rustdoc_passes() {
        let text = "/// A seed for reproducible sampling.\n/// Sets the seed.\n///     .seed(7)\n//! A loopback redirect (RFC 8252 §7.3).\n// seed 002 (a plain comment, not rustdoc)\nlet seeds = 3;\n";
        assert!(seed_refs("x.rs", text).is_empty(), "{:?}", seed_refs("x.rs", text));
    }
}
