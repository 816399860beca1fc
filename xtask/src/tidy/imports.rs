//! The import rules of modu-core and modu-agent, each crate on its own:
//! - `task-local`: no `task_local!` (per-call data rides in request extensions).
//! - `import-circle`: the files of a crate's src import each other in a circle only inside
//!   modu-agent's `agent/` (the agent, its handoffs and agent-as-tool are mutually recursive).
//!   Everything else is layered: in modu-agent `agent/api` and `agent/build` → `runner` →
//!   `agent/mod`, `agent/request` → `plan`; in modu-core `outcome`, `event` → `tool`, … →
//!   `message`.
//! - `layers`: the files named in [`CORE_LAYERED`] / [`AGENT_LAYERED`] exist and are in no
//!   circle; the leaves ([`CORE_LEAVES`]: the plan data, the typed codes) import nothing of the
//!   crate but each other.
//!
//! A node is a source file (`plan/machine`, `runner/gate`, …); an edge is a `crate::`, `super::`
//! or `self::` path (use groups expanded one level) or a child module's bare path (`journal::x`
//! after `mod journal;`) that resolves to another file. `#[cfg(test)]` code and comments are
//! not imports.

use std::collections::{BTreeMap, BTreeSet};

use super::Violation;

/// Where files may import each other in a circle (prefixes).
const KNOWN_CIRCLE: &[&str] = &["agent/"];

/// modu-core's files that must exist and be in no circle.
pub const CORE_LAYERED: &[&str] = &["plan", "canonical", "event", "tool", "outcome", "context"];

/// modu-core's files that import nothing of the crate but each other.
pub const CORE_LEAVES: &[&str] = &["plan", "codes"];

/// modu-agent's files that must exist and be in no circle.
pub const AGENT_LAYERED: &[&str] = &[
    "plan/machine",
    "runner/mod",
    "runner/gate",
    "middleware",
    "plan/state",
    "runner/policy",
    "runner/state",
    "sinks/mod",
];

pub fn task_local(path: &str, text: &str) -> Vec<Violation> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(concat!("task_", "local!")))
        .map(|(i, _)| {
            Violation::new(
                "task-local",
                path,
                i + 1,
                "task-local state: carry per-call data in request extensions",
            )
        })
        .collect()
}

/// The module path of a file (`runner/mod` → `runner`).
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The deepest file a module path names.
fn resolve(path: &[String], files: &BTreeMap<String, String>) -> Option<String> {
    (1..=path.len()).rev().find_map(|n| {
        let base = path[..n].join("/");
        [base.clone(), format!("{base}/mod")]
            .into_iter()
            .find(|f| files.contains_key(f))
    })
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn follows_path(code: &str, i: usize) -> bool {
    code[..i].chars().last().is_some_and(|c| is_ident(c) || c == ':')
}

/// Every path a file names: `crate::…`, `super::…`, `self::…` (use groups expanded one level).
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(root) {
            if follows_path(code, i) {
                continue;
            }
            let rest = &code[i..];
            let end = rest.find(|c: char| !(is_ident(c) || c == ':')).unwrap_or(rest.len());
            let head = rest[..end].trim_end_matches(':').to_owned();
            if rest[end..].starts_with('{') {
                let (mut depth, mut item, mut items) = (0, String::new(), Vec::new());
                for c in rest[end + 1..].chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                        _ if depth == 0 => item.push(c),
                        _ => {}
                    }
                }
                items.push(item);
                for it in items {
                    let it = it.split(" as ").next().unwrap_or_default().trim().trim_end_matches(':');
                    if !it.is_empty() && it != "*" {
                        out.push(format!("{head}::{it}"));
                    }
                }
            }
            out.push(head);
        }
    }
    out
}

/// The file graph of a crate's sources (`files`: file without `.rs` → text).
pub fn graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (file, text) in files {
        if file == "lib" {
            continue;
        }
        let me = module_of(file);
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code: String = code
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let mut named = paths(&code);
        // Child modules used by their bare name (`use journal::Emitter`).
        for line in code.lines() {
            let l = line.trim_start();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            if let Some(name) = l.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) {
                let needle = format!("{name}::");
                if code.match_indices(&needle).any(|(i, _)| !follows_path(&code, i)) {
                    named.push(format!("self::{name}"));
                }
            }
        }
        let edges: &mut BTreeSet<String> = graph.entry(file.clone()).or_default();
        for path in named {
            let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let mut target: Vec<String> = Vec::new();
            let mut rest = &segments[..];
            if segments.first() == Some(&"crate") {
                rest = &segments[1..];
            } else {
                target = me.clone();
                while let Some((first, tail)) = rest.split_first() {
                    match *first {
                        "super" => {
                            target.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = tail;
                }
            }
            target.extend(rest.iter().map(|s| (*s).to_owned()));
            if let Some(to) = resolve(&target, files)
                && &to != file
                && to != "lib"
            {
                edges.insert(to);
            }
        }
    }
    graph
}

/// Strongly connected components with more than one file (Tarjan).
pub fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            let candidate = if !t.index.contains_key(w) {
                visit(t, w);
                t.low[w]
            } else if t.on.contains(w) {
                t.index[w]
            } else {
                continue;
            };
            if let Some(lv) = t.low.get_mut(v) {
                *lv = (*lv).min(candidate);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// `src`: the source folder's path (for messages); `files`: its files without `.rs` → text.
/// `layered`: files that must exist and be in no circle; `leaves`: files that import nothing of
/// the crate.
pub fn check(src: &str, files: &BTreeMap<String, String>, layered: &[&str], leaves: &[&str]) -> Vec<Violation> {
    let graph = graph(files);
    let circles = circles(&graph);
    let mut out = Vec::new();
    for circle in &circles {
        let outside: Vec<&String> = circle
            .iter()
            .filter(|f| !KNOWN_CIRCLE.iter().any(|k| f.starts_with(k)))
            .collect();
        for file in outside {
            out.push(Violation::new(
                "import-circle",
                format!("{src}{file}.rs"),
                0,
                format!("imports in a circle with {circle:?}: move the shared item down"),
            ));
        }
    }
    let circled: BTreeSet<&String> = circles.iter().flatten().collect();
    for file in layered {
        if !graph.contains_key(*file) {
            out.push(Violation::new(
                "layers",
                format!("{src}{file}.rs"),
                0,
                "a layered file is missing (update xtask/src/tidy/imports.rs)",
            ));
        } else if circled.contains(&(*file).to_owned()) && !out.iter().any(|v| v.path == format!("{src}{file}.rs")) {
            out.push(Violation::new(
                "layers",
                format!("{src}{file}.rs"),
                0,
                "a layered file is in an import circle",
            ));
        }
    }
    for leaf in leaves {
        let beyond: BTreeSet<&String> = graph
            .get(*leaf)
            .into_iter()
            .flatten()
            .filter(|to| !leaves.contains(&to.as_str()))
            .collect();
        if !beyond.is_empty() {
            let edges = beyond;
            out.push(Violation::new(
                "layers",
                format!("{src}{leaf}.rs"),
                0,
                format!("the leaf {leaf} imports {edges:?}: it depends on nothing of the crate but other leaves"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter().map(|(f, t)| ((*f).to_owned(), (*t).to_owned())).collect()
    }

    #[test]
    fn task_locals_are_found() {
        let found = task_local("x.rs", "use x;\ntokio::task_local! { static X: u8; }\n");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].line, 2);
        assert!(task_local("x.rs", "let local = 1;\n").is_empty());
    }

    #[test]
    fn the_graph_sees_use_groups_child_modules_and_super() {
        let g = graph(&files(&[
            ("lib", "mod runner;"),
            ("runner/mod", "mod policy;\nuse policy::Next;\n"),
            ("runner/ask", "use super::{Run, policy::Ask};\n"),
            ("runner/policy", "// crate::event is a comment\n"),
            (
                "plan/machine",
                "use crate::runner::policy::{Fed, Next as N};\n#[cfg(test)]\nuse crate::event::X;\n",
            ),
            ("event", ""),
        ]));
        assert!(g["runner/mod"].contains("runner/policy"), "{g:?}");
        assert!(
            g["runner/ask"].contains("runner/mod") && g["runner/ask"].contains("runner/policy"),
            "{g:?}"
        );
        assert!(g["plan/machine"].contains("runner/policy"), "{g:?}");
        assert!(
            !g["plan/machine"].contains("event") && g["runner/policy"].is_empty(),
            "{g:?}"
        );
    }

    #[test]
    fn a_circle_outside_agent_is_found() {
        let planted = files(&[
            ("event", "use crate::tool::Tool;\n"),
            ("tool", "use crate::event::AgentEvent;\n"),
            ("agent/mod", "use super::compose::X;\n"),
            ("agent/compose", "use crate::agent::Agent;\n"),
        ]);
        let found = check("src/", &planted, &[], &[]);
        let circle: Vec<&str> = found
            .iter()
            .filter(|v| v.rule == "import-circle")
            .map(|v| v.path.as_str())
            .collect();
        assert_eq!(circle, ["src/event.rs", "src/tool.rs"], "{found:?}");
        let planted = files(&[("plan/model", "use crate::event::X;\n"), ("event", "")]);
        assert!(
            check("src/", &planted, &[], &["plan/model"])
                .iter()
                .any(|v| v.rule == "layers" && v.path == "src/plan/model.rs")
        );
    }

    #[test]
    fn a_layered_tree_passes() {
        let mut clean: Vec<(&str, &str)> = AGENT_LAYERED.iter().map(|f| (*f, "")).collect();
        clean.push((
            "plan/machine",
            "use crate::event::X;\nuse crate::runner::policy::Next;\n",
        ));
        clean.push(("agent/mod", "use super::compose::X;\nuse crate::tool::Tool;\n"));
        clean.push(("agent/compose", "use crate::agent::Agent;\n"));
        assert!(
            check("src/", &files(&clean), AGENT_LAYERED, &[]).is_empty(),
            "{:?}",
            check("src/", &files(&clean), AGENT_LAYERED, &[])
        );
    }
}
