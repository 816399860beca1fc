//! The import graph of modu-core's files, checked: which files import each other in a circle.
//!
//! A node is a source file (`plan/machine`, `runner/gate`, …); an edge is a `crate::`, `super::`
//! or `self::` path (use groups expanded) or a child module's path that resolves to another
//! file. Files of `agent/` may import each other in a circle (the agent, its handoffs and
//! agent-as-tool are mutually recursive, as axum's `Router` and `MethodRouter` are). Everything
//! else is layered: `agent/api` and `agent/build` → `runner` → `agent/mod`, `agent/request` →
//! `plan` → `canonical`, `event`, `tool`, … → `message`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Where files may import each other in a circle (prefixes).
const KNOWN_CIRCLE: &[&str] = &["agent/"];

fn files(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).unwrap();
            // Test modules may import anything.
            let text = text.split("#[cfg(test)]").next().unwrap_or_default().to_owned();
            out.insert(rel.trim_end_matches(".rs").to_owned(), text);
        }
    }
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

/// Every path a file names: `crate::…`, `super::…`, `self::…` (use groups expanded one level).
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(root) {
            if code[..i].chars().last().is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            let rest = &code[i..];
            let end = rest.find(|c: char| !(is_ident(c) || c == ':')).unwrap_or(rest.len());
            let head = rest[..end].trim_end_matches(':').to_owned();
            if rest[end..].starts_with('{') {
                let body = &rest[end + 1..];
                let (mut depth, mut item, mut items) = (0, String::new(), Vec::new());
                for c in body.chars() {
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

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = BTreeMap::new();
    files(&root, &root, &mut all);
    let mut graph = BTreeMap::new();
    for (file, text) in &all {
        if file == "lib" {
            continue;
        }
        let me = module_of(file);
        // Comments (and doc comments) name paths that are not imports.
        let text: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let mut named = paths(&text);
        // Child modules used by their bare name (`use journal::Emitter`).
        for line in text.lines() {
            let l = line.trim_start();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            if let Some(name) = l.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) {
                let needle = format!("{name}::");
                let used = text
                    .match_indices(&needle)
                    .any(|(i, _)| !text[..i].chars().last().is_some_and(|c| is_ident(c) || c == ':'));
                if used {
                    named.push(format!("self::{name}"));
                }
            }
        }
        let edges: &mut BTreeSet<String> = graph.entry(file.clone()).or_default();
        for path in named {
            let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let mut target: Vec<String> = Vec::new();
            let mut rest = &segments[..];
            match segments.first() {
                Some(&"crate") => rest = &segments[1..],
                _ => {
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
            }
            target.extend(rest.iter().map(|s| (*s).to_owned()));
            if let Some(to) = resolve(&target, &all)
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
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
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
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
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

#[test]
fn no_import_circle_outside_agent() {
    let graph = graph();
    assert!(graph.len() > 30, "the source files were found: {}", graph.len());
    for circle in circles(&graph) {
        let outside: Vec<_> = circle
            .iter()
            .filter(|f| !KNOWN_CIRCLE.iter().any(|k| f.starts_with(k)))
            .collect();
        assert!(
            outside.is_empty(),
            "{outside:?} import in a circle with {circle:?}: move the shared item down"
        );
    }
}

#[test]
fn the_policies_and_the_plan_data_are_layered() {
    let graph = graph();
    let circled: BTreeSet<String> = circles(&graph).into_iter().flatten().collect();
    for file in [
        "plan/machine",
        "plan/model",
        "runner/mod",
        "runner/gate",
        "middleware",
        "plan/state",
        "runner/policy",
        "runner/state",
        "canonical",
        "event",
        "tool",
        "sinks/mod",
    ] {
        assert!(graph.contains_key(file), "{file} exists");
        assert!(!circled.contains(file), "{file} is in an import circle");
    }
    // The data of a plan depends on nothing else of the crate.
    assert!(graph["plan/model"].is_empty(), "{:?}", graph["plan/model"]);
}

#[test]
fn the_graph_sees_use_groups_and_child_modules() {
    // The checker itself: a circle it cannot see would make the tests above vacuous.
    let graph = graph();
    assert!(graph["runner/ask"].contains("runner/mod"), "use super::{{Run, ..}}");
    assert!(graph["runner/mod"].contains("runner/policy"), "use policy::{{..}}");
    assert!(
        graph["plan/machine"].contains("runner/policy"),
        "crate::runner::policy::{{..}}"
    );
}
