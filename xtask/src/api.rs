//! `cargo xtask api [--bless]`: the public API of the published library crates, as a sorted
//! list of items (`xtask/api/<crate>.txt`), diffed against the committed snapshot.
//!
//! The list comes from the nightly toolchain's rustdoc JSON (`-Z unstable-options
//! --output-format json`), read with serde_json only (no rustdoc-types pin to keep in step with
//! the nightly's format version): modules, re-exports, types with their public fields,
//! variants, inherent methods and trait impls, traits with their items, functions, constants,
//! statics, macros. Names, kinds and a function's parameter names: a changed parameter or
//! return type under the same names is not seen.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// (package, features): what each snapshot documents. The facade is documented with its
/// default features only (all features would build every backend on nightly: minutes);
/// each backend's own API is modu-core's traits, implemented.
pub const CRATES: &[(&str, &[&str])] = &[("modu-core", &[]), ("modu-agent", &[]), ("modu", &[])];

fn snapshot_path(root: &Path, package: &str) -> PathBuf {
    root.join("xtask/api").join(format!("{package}.txt"))
}

struct Walk<'a> {
    index: &'a serde_json::Map<String, Value>,
    out: BTreeSet<String>,
    seen: BTreeSet<String>,
}

fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The kind of an item (`inner`'s one key) and its body.
fn kind(item: &Value) -> Option<(&str, &Value)> {
    match item.get("inner")? {
        Value::Object(m) => m.iter().next().map(|(k, v)| (k.as_str(), v)),
        Value::String(s) => Some((s.as_str(), &Value::Null)),
        _ => None,
    }
}

fn ids(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter(|i| !i.is_null()).map(id_key).collect())
        .unwrap_or_default()
}

impl Walk<'_> {
    fn get(&self, id: &str) -> Option<&Value> {
        self.index.get(id)
    }

    fn public(item: &Value) -> bool {
        item.get("visibility").and_then(Value::as_str) == Some("public")
    }

    fn item(&mut self, id: &str, prefix: &str) {
        let Some(item) = self.get(id).cloned() else { return };
        if !Self::public(&item) {
            return;
        }
        let Some((k, body)) = kind(&item) else { return };
        let name = item.get("name").and_then(Value::as_str).unwrap_or("_");
        let path = format!("{prefix}::{name}");
        match k {
            "module" => {
                self.out.insert(format!("mod {path}"));
                if self.seen.insert(id.to_owned()) {
                    for child in ids(body.get("items")) {
                        self.item(&child, &path);
                    }
                }
            }
            "use" => {
                let source = body.get("source").and_then(Value::as_str).unwrap_or("?");
                if body.get("is_glob").and_then(Value::as_bool) == Some(true) {
                    self.out.insert(format!("use {prefix}::* = {source}::*"));
                } else {
                    let name = body.get("name").and_then(Value::as_str).unwrap_or(name);
                    self.out.insert(format!("use {prefix}::{name} = {source}"));
                }
            }
            "struct" | "union" => {
                self.out.insert(format!("{k} {path}"));
                let fields = body.get("kind").map_or(Vec::new(), |kind| match kind {
                    Value::Object(m) => m
                        .get("plain")
                        .map(|p| ids(p.get("fields")))
                        .or_else(|| m.get("tuple").map(|t| ids(Some(t))))
                        .unwrap_or_default(),
                    _ => Vec::new(),
                });
                let fields = if k == "union" { ids(body.get("fields")) } else { fields };
                self.fields(&fields, &path);
                self.impls(&ids(body.get("impls")), &path);
            }
            "enum" => {
                self.out.insert(format!("enum {path}"));
                for v in ids(body.get("variants")) {
                    if let Some(name) = self.get(&v).and_then(|v| v.get("name")).and_then(Value::as_str) {
                        self.out.insert(format!("variant {path}::{name}"));
                    }
                }
                self.impls(&ids(body.get("impls")), &path);
            }
            "trait" => {
                self.out.insert(format!("trait {path}"));
                for i in ids(body.get("items")) {
                    if let Some(it) = self.get(&i) {
                        let n = it.get("name").and_then(Value::as_str).unwrap_or("_");
                        let k = kind(it).map_or("?", |(k, _)| k);
                        self.out.insert(format!("trait-item {path}::{n} ({k})"));
                    }
                }
            }
            "function" => {
                self.out.insert(format!("fn {path}{}", params(body)));
            }
            other => {
                self.out.insert(format!("{other} {path}"));
            }
        }
    }

    fn fields(&mut self, fields: &[String], path: &str) {
        for f in fields {
            if let Some(field) = self.get(f)
                && Self::public(field)
            {
                let n = field.get("name").and_then(Value::as_str).unwrap_or("_");
                self.out.insert(format!("field {path}::{n}"));
            }
        }
    }

    fn impls(&mut self, impls: &[String], path: &str) {
        for i in impls {
            let Some((_, body)) = self.get(i).and_then(kind).map(|(k, b)| (k.to_owned(), b.clone())) else {
                continue;
            };
            if body.get("is_synthetic").and_then(Value::as_bool) == Some(true)
                || body.get("blanket_impl").is_some_and(|b| !b.is_null())
            {
                continue;
            }
            match body.get("trait").filter(|t| !t.is_null()) {
                Some(t) => {
                    let name = t
                        .get("path")
                        .or_else(|| t.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or("?");
                    self.out.insert(format!("impl {name} for {path}"));
                }
                None => {
                    for m in ids(body.get("items")) {
                        if let Some(it) = self.get(&m)
                            && Self::public(it)
                        {
                            let n = it.get("name").and_then(Value::as_str).unwrap_or("_");
                            let line = match kind(it) {
                                Some(("function", f)) => format!("fn {path}::{n}{}", params(f)),
                                Some((k, _)) => format!("{k} {path}::{n}"),
                                None => format!("? {path}::{n}"),
                            };
                            self.out.insert(line);
                        }
                    }
                }
            }
        }
    }
}

/// A function's parameter names, `(self, attempt)`.
fn params(function: &Value) -> String {
    let names: Vec<&str> = function
        .get("sig")
        .and_then(|s| s.get("inputs"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|p| p.get(0).and_then(Value::as_str)).collect())
        .unwrap_or_default();
    format!("({})", names.join(", "))
}

/// The public items of a crate, from its rustdoc JSON, one per line, sorted.
pub fn items(json: &Value) -> Result<Vec<String>, String> {
    let index = json
        .get("index")
        .and_then(Value::as_object)
        .ok_or("rustdoc JSON without index")?;
    let root = json.get("root").map(id_key).ok_or("rustdoc JSON without root")?;
    let name = index
        .get(&root)
        .and_then(|r| r.get("name"))
        .and_then(Value::as_str)
        .ok_or("rustdoc JSON: no root module")?
        .to_owned();
    let mut walk = Walk {
        index,
        out: BTreeSet::new(),
        seen: BTreeSet::new(),
    };
    let root_item = index.get(&root).cloned().unwrap_or(Value::Null);
    if let Some((_, body)) = kind(&root_item) {
        for child in ids(body.get("items")) {
            walk.item(&child, &name);
        }
    }
    Ok(walk.out.into_iter().collect())
}

/// A line diff of two sorted lists: `-` removed, `+` added.
pub fn diff(old: &[String], new: &[String]) -> Vec<String> {
    let (o, n): (BTreeSet<&String>, BTreeSet<&String>) = (old.iter().collect(), new.iter().collect());
    let mut out: Vec<String> = o.difference(&n).map(|l| format!("- {l}")).collect();
    out.extend(n.difference(&o).map(|l| format!("+ {l}")));
    out
}

const HEADER: &str =
    "# The public API, by `cargo xtask api` (nightly rustdoc JSON). Rewrite with `cargo xtask api --bless`.";

fn rustdoc_json(root: &Path, package: &str, features: &[&str]) -> Result<Value, String> {
    let mut cmd = Command::new("cargo");
    cmd.args(["+nightly", "rustdoc", "-p", package, "--lib", "--locked"]);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    cmd.args(["--", "-Z", "unstable-options", "--output-format", "json"]);
    super::run(&format!("api: rustdoc JSON of {package}"), &mut cmd)?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let file = target.join("doc").join(format!("{}.json", package.replace('-', "_")));
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// `cargo xtask api [--bless]`.
pub fn run(root: &Path, bless: bool) -> Result<(), String> {
    let mut failed = Vec::new();
    for (package, features) in CRATES {
        let now = items(&rustdoc_json(root, package, features)?)?;
        let path = snapshot_path(root, package);
        if bless {
            let _ = std::fs::create_dir_all(path.parent().unwrap_or(root));
            let text = format!("{HEADER}\n{}\n", now.join("\n"));
            std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            println!("    wrote {} ({} items)", path.display(), now.len());
            continue;
        }
        let old: Vec<String> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(str::to_owned)
            .collect();
        let changes = diff(&old, &now);
        if changes.is_empty() {
            println!(
                "    {package}: the public API matches xtask/api/{package}.txt ({} items)",
                now.len()
            );
        } else {
            println!("    {package}: the public API differs from xtask/api/{package}.txt:");
            for c in &changes {
                println!("      {c}");
            }
            failed.push(*package);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "public API of {} changed: review the diff, then `cargo xtask api --bless` and commit the snapshot",
            failed.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn json() -> Value {
        serde_json::json!({
            "root": 0,
            "index": {
                "0": {"name": "k", "visibility": "public", "inner": {"module": {"is_crate": true, "items": [1, 2, 3, 6, 9]}}},
                "1": {"name": "a", "visibility": "public", "inner": {"module": {"items": [4]}}},
                "2": {"name": "hidden", "visibility": "crate", "inner": {"function": {}}},
                "3": {"name": "Agent", "visibility": "public", "inner": {"use": {"source": "a::Agent", "name": "Agent", "is_glob": false}}},
                "4": {"name": "Agent", "visibility": "public", "inner": {"struct": {"kind": {"plain": {"fields": [5, 10]}}, "impls": [7, 8]}}},
                "5": {"name": "id", "visibility": "public", "inner": {"struct_field": {}}},
                "10": {"name": "secret", "visibility": "default", "inner": {"struct_field": {}}},
                "6": {"name": "Kind", "visibility": "public", "inner": {"enum": {"variants": [11], "impls": []}}},
                "11": {"name": "One", "visibility": "default", "inner": {"variant": {}}},
                "7": {"name": null, "visibility": "default", "inner": {"impl": {"trait": null, "items": [12], "is_synthetic": false, "blanket_impl": null}}},
                "12": {"name": "run", "visibility": "public", "inner": {"function": {"sig": {"inputs": [["self", {}], ["n", {}]]}}}},
                "8": {"name": null, "visibility": "default", "inner": {"impl": {"trait": {"path": "Clone"}, "items": [], "is_synthetic": false, "blanket_impl": null}}},
                "9": {"name": "Tool", "visibility": "public", "inner": {"trait": {"items": [13]}}},
                "13": {"name": "call", "visibility": "default", "inner": {"function": {}}}
            }
        })
    }

    #[test]
    fn public_items_are_listed() {
        let items = items(&json()).unwrap();
        assert_eq!(
            items,
            [
                "enum k::Kind",
                "field k::a::Agent::id",
                "fn k::a::Agent::run(self, n)",
                "impl Clone for k::a::Agent",
                "mod k::a",
                "struct k::a::Agent",
                "trait k::Tool",
                "trait-item k::Tool::call (function)",
                "use k::Agent = a::Agent",
                "variant k::Kind::One",
            ]
        );
    }

    #[test]
    fn a_changed_api_is_a_diff_and_an_unchanged_one_is_not() {
        let old: Vec<String> = ["fn k::a", "fn k::b"].map(str::to_owned).to_vec();
        let new: Vec<String> = ["fn k::a", "fn k::c"].map(str::to_owned).to_vec();
        assert_eq!(diff(&old, &new), ["- fn k::b", "+ fn k::c"]);
        assert!(diff(&old, &old).is_empty());
    }
}
