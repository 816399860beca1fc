//! `cargo xtask api [--bless]`: the public API of the published library crates, as a sorted
//! list of items (`xtask/api/<crate>.txt`), diffed against the committed snapshot.
//!
//! The list comes from the nightly toolchain's rustdoc JSON (`-Z unstable-options
//! --output-format json`), read with serde_json only (no rustdoc-types pin to keep in step with
//! the nightly's format version): modules, re-exports, types with their public fields,
//! variants, inherent methods and trait impls, traits with their items, functions, constants,
//! statics, macros. Functions and trait methods are listed with their signatures (generic
//! parameters and bounds, parameter names and types, return type, where clause, `async`/
//! `unsafe`/`const`) and fields with their types, rendered by [`crate::api_sig`]: a changed
//! type or bound under the same names is a diff too.
//!
//! Rustdoc JSON does not inline re-exports: `mod builder; pub use builder::AgentBuilder;` is a
//! `use` item pointing at a struct in a private module. The walk follows such re-exports (and
//! globs of private modules) to items of this crate and lists them as if defined at the
//! re-export's path, under its name. An item reachable at several paths is listed once: at its
//! definition if that is in a public module, else at the path with the fewest `::` segments,
//! ties broken lexicographically. Items of other crates stay `use` lines.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::api_sig::{self, qualifiers, signature};

/// (package, features): what each snapshot documents. The facade is documented with its
/// default features only (all features would build every backend on nightly: minutes);
/// each backend's own API is modu-core's traits, implemented.
pub const CRATES: &[(&str, &[&str])] = &[("modu-core", &[]), ("modu-agent", &[]), ("modu", &[])];

fn snapshot_path(root: &Path, package: &str) -> PathBuf {
    root.join("xtask/api").join(format!("{package}.txt"))
}

/// Where the walk may list an item: (rank, `::` segments, path, id). Rank 0: the item is
/// defined in a public module, at this path; rank 1: it is reached through a re-export. The walk
/// takes the smallest first and lists each item once, so the first place popped is its one path.
type Place = (u8, usize, String, String);

struct Walk<'a> {
    index: &'a serde_json::Map<String, Value>,
    out: BTreeSet<String>,
    seen: BTreeSet<String>,
    queue: BTreeSet<Place>,
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

    /// Queue `id` to be listed at `path`. What a place lists only grows its path (a module's
    /// children, a glob's items) or keeps it (a re-export's target, ranked after any
    /// definition), so places pop in order and the first pop of an item is its best place.
    fn push(&mut self, rank: u8, path: String, id: String) {
        let segments = path.matches("::").count();
        self.queue.insert((rank, segments, path, id));
    }

    /// Queue a module's child `id` under `prefix`: at its name, a re-export's (new) name, or
    /// `*` for a glob.
    fn child(&mut self, id: &str, prefix: &str, rank: u8) {
        let Some(item) = self.get(id) else { return };
        if !Self::public(item) {
            return;
        }
        let name = match kind(item) {
            Some(("use", body)) if body.get("is_glob").and_then(Value::as_bool) == Some(true) => "*",
            Some(("use", body)) => body.get("name").and_then(Value::as_str).unwrap_or("_"),
            _ => item.get("name").and_then(Value::as_str).unwrap_or("_"),
        };
        self.push(rank, format!("{prefix}::{name}"), id.to_owned());
    }

    /// The item of this crate a `use` names, through re-exports of re-exports; `None` for
    /// another crate's item (not in the index).
    fn target(&self, body: &Value) -> Option<String> {
        let mut id = body.get("id").filter(|i| !i.is_null()).map(id_key)?;
        let mut hops = BTreeSet::new();
        loop {
            let item = self.get(&id)?;
            match kind(item) {
                Some(("use", b)) if b.get("is_glob").and_then(Value::as_bool) != Some(true) => {
                    if !hops.insert(id.clone()) {
                        return None;
                    }
                    id = b.get("id").filter(|i| !i.is_null()).map(id_key)?;
                }
                _ => return Some(id),
            }
        }
    }

    fn walk(&mut self) {
        while let Some((rank, _, path, id)) = self.queue.pop_first() {
            if let Some((prefix, name)) = path.rsplit_once("::")
                && self.seen.insert(id.clone())
            {
                self.item(&id, prefix, name, rank);
            }
        }
    }

    /// List item `id` at `prefix::name`.
    fn item(&mut self, id: &str, prefix: &str, name: &str, rank: u8) {
        let Some(item) = self.get(id).cloned() else { return };
        if !Self::public(&item) {
            return;
        }
        let Some((k, body)) = kind(&item) else { return };
        let path = format!("{prefix}::{name}");
        match k {
            "module" => {
                self.out.insert(format!("mod {path}"));
                for child in ids(body.get("items")) {
                    self.child(&child, &path, rank);
                }
            }
            "use" => {
                let source = body.get("source").and_then(Value::as_str).unwrap_or("?");
                if body.get("is_glob").and_then(Value::as_bool) == Some(true) {
                    self.out.insert(format!("use {prefix}::* = {source}::*"));
                    // A glob of this crate's module (private, or it would be walked already):
                    // its public items, under the glob's prefix.
                    let module = body.get("id").filter(|i| !i.is_null()).map(id_key);
                    let items = module
                        .and_then(|m| self.get(&m))
                        .and_then(kind)
                        .filter(|(k, _)| *k == "module")
                        .map(|(_, m)| ids(m.get("items")))
                        .unwrap_or_default();
                    for child in items {
                        self.child(&child, prefix, 1);
                    }
                } else {
                    self.out.insert(format!("use {path} = {source}"));
                    // A variant stays listed with its enum.
                    if let Some(target) = self.target(body)
                        && self
                            .get(&target)
                            .is_some_and(|t| Self::public(t) && kind(t).is_none_or(|(k, _)| k != "variant"))
                    {
                        self.push(1, path, target);
                    }
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
                        let line = match kind(it) {
                            Some(("function", f)) => format!("trait-item {}", fn_line(f, &path, n)),
                            Some((k, _)) => format!("trait-item {path}::{n} ({k})"),
                            None => format!("trait-item {path}::{n} (?)"),
                        };
                        self.out.insert(line);
                    }
                }
            }
            "function" => {
                self.out
                    .insert(format!("{}fn {path}{}", qualifiers(body), signature(body)));
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
                match kind(field).filter(|(k, _)| *k == "struct_field") {
                    Some((_, t)) => self.out.insert(format!("field {path}::{n}: {}", api_sig::ty(t))),
                    None => self.out.insert(format!("field {path}::{n}")),
                };
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
                                Some(("function", f)) => fn_line(f, path, n),
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

/// A method's line: `async fn path::name<…>(…) -> …` (for inherent methods and trait items).
fn fn_line(function: &Value, path: &str, name: &str) -> String {
    format!("{}fn {path}::{name}{}", qualifiers(function), signature(function))
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
        seen: BTreeSet::from([root.clone()]),
        queue: BTreeSet::new(),
    };
    let root_item = index.get(&root).cloned().unwrap_or(Value::Null);
    if let Some((_, body)) = kind(&root_item) {
        for child in ids(body.get("items")) {
            walk.child(&child, &name, 0);
        }
    }
    walk.walk();
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
                "5": {"name": "id", "visibility": "public", "inner": {"struct_field": {"primitive": "u64"}}},
                "10": {"name": "secret", "visibility": "default", "inner": {"struct_field": {}}},
                "6": {"name": "Kind", "visibility": "public", "inner": {"enum": {"variants": [11], "impls": []}}},
                "11": {"name": "One", "visibility": "default", "inner": {"variant": {}}},
                "7": {"name": null, "visibility": "default", "inner": {"impl": {"trait": null, "items": [12], "is_synthetic": false, "blanket_impl": null}}},
                "12": {"name": "run", "visibility": "public", "inner": {"function": {"sig": {"inputs": [["self", {"borrowed_ref": {"lifetime": null, "is_mutable": false, "type": {"generic": "Self"}}}], ["n", {"primitive": "u32"}]], "output": {"primitive": "bool"}}}}},
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
                "field k::a::Agent::id: u64",
                "fn k::a::Agent::run(&self, n: u32) -> bool",
                "impl Clone for k::a::Agent",
                "mod k::a",
                "struct k::a::Agent",
                "trait k::Tool",
                "trait-item fn k::Tool::call()",
                "use k::Agent = a::Agent",
                "variant k::Kind::One",
            ]
        );
    }

    /// `k` with `pub mod a`, `pub mod z` and private `b`, `g`, `p`:
    /// `pub use b::Builder` (also `pub use crate::b::Builder` in `a`), `pub use b::Thing as
    /// Renamed`, `pub use a::Agent` (defined in public `a`), `Tie` re-exported in `a` and `z`,
    /// `pub use g::*` (`g` also globs itself), `pub use b::p as q` (`p` re-exports itself).
    fn reexports() -> Value {
        serde_json::from_str(
            r#"{
            "root": 0,
            "index": {
                "0": {"name": "k", "visibility": "public", "inner": {"module": {"is_crate": true, "items": [1, 2, 3, 4, 5, 6, 7, 8, 9]}}},
                "1": {"name": "a", "visibility": "public", "inner": {"module": {"items": [10, 11, 12]}}},
                "2": {"name": "b", "visibility": "default", "inner": {"module": {"items": [20, 30, 50, 60]}}},
                "3": {"name": null, "visibility": "public", "inner": {"use": {"source": "b::Builder", "name": "Builder", "id": 20, "is_glob": false}}},
                "4": {"name": null, "visibility": "public", "inner": {"use": {"source": "b::Thing", "name": "Renamed", "id": 30, "is_glob": false}}},
                "5": {"name": null, "visibility": "public", "inner": {"use": {"source": "a::Agent", "name": "Agent", "id": 10, "is_glob": false}}},
                "6": {"name": null, "visibility": "public", "inner": {"use": {"source": "g", "name": "g", "id": 40, "is_glob": true}}},
                "7": {"name": "z", "visibility": "public", "inner": {"module": {"items": [13]}}},
                "8": {"name": null, "visibility": "public", "inner": {"use": {"source": "b::p", "name": "q", "id": 60, "is_glob": false}}},
                "9": {"name": null, "visibility": "public", "inner": {"use": {"source": "other::Ext", "name": "Ext", "id": 99, "is_glob": false}}},
                "10": {"name": "Agent", "visibility": "public", "inner": {"struct": {"kind": "unit", "impls": []}}},
                "11": {"name": null, "visibility": "public", "inner": {"use": {"source": "crate::b::Builder", "name": "Builder", "id": 20, "is_glob": false}}},
                "12": {"name": null, "visibility": "public", "inner": {"use": {"source": "crate::b::Tie", "name": "Tie", "id": 50, "is_glob": false}}},
                "13": {"name": null, "visibility": "public", "inner": {"use": {"source": "crate::b::Tie", "name": "Tie", "id": 50, "is_glob": false}}},
                "20": {"name": "Builder", "visibility": "public", "inner": {"struct": {"kind": {"plain": {"fields": [21, 22]}}, "impls": [23, 25, 26]}}},
                "21": {"name": "model", "visibility": "public", "inner": {"struct_field": {"resolved_path": {"path": "crate::m::Model", "id": 90, "args": null}}}},
                "22": {"name": "secret", "visibility": "default", "inner": {"struct_field": {}}},
                "23": {"name": null, "visibility": "default", "inner": {"impl": {"trait": null, "items": [24, 27], "is_synthetic": false, "blanket_impl": null}}},
                "24": {"name": "build", "visibility": "public", "inner": {"function": {"sig": {"inputs": [["self", {"generic": "Self"}]], "output": {"resolved_path": {"path": "Built", "id": 91, "args": null}}}}}},
                "27": {"name": "check", "visibility": "crate", "inner": {"function": {"sig": {"inputs": []}}}},
                "25": {"name": null, "visibility": "default", "inner": {"impl": {"trait": {"path": "Clone"}, "items": [], "is_synthetic": false, "blanket_impl": null}}},
                "26": {"name": null, "visibility": "default", "inner": {"impl": {"trait": {"path": "Send"}, "items": [], "is_synthetic": true, "blanket_impl": null}}},
                "30": {"name": "Thing", "visibility": "public", "inner": {"struct": {"kind": "unit", "impls": []}}},
                "50": {"name": "Tie", "visibility": "public", "inner": {"struct": {"kind": "unit", "impls": []}}},
                "40": {"name": "g", "visibility": "default", "inner": {"module": {"items": [41, 42, 43]}}},
                "41": {"name": "helper", "visibility": "public", "inner": {"function": {"sig": {"inputs": [["x", {"slice": {"primitive": "u8"}}]]}}}},
                "42": {"name": "internal", "visibility": "crate", "inner": {"function": {}}},
                "43": {"name": null, "visibility": "public", "inner": {"use": {"source": "self", "name": "g", "id": 40, "is_glob": true}}},
                "60": {"name": "p", "visibility": "public", "inner": {"module": {"items": [61, 62]}}},
                "61": {"name": "Inner", "visibility": "public", "inner": {"trait": {"items": []}}},
                "62": {"name": null, "visibility": "public", "inner": {"use": {"source": "self", "name": "again", "id": 60, "is_glob": false}}}
            }
        }"#,
        )
        .unwrap()
    }

    /// `json` with every module's items in reverse order.
    fn reversed(mut json: Value) -> Value {
        for item in json["index"].as_object_mut().unwrap().values_mut() {
            if let Some(items) = item.pointer_mut("/inner/module/items").and_then(Value::as_array_mut) {
                items.reverse();
            }
        }
        json
    }

    #[test]
    fn reexports_of_private_items_are_listed_once_at_their_best_path() {
        let items = items(&reexports()).unwrap();
        assert_eq!(
            items,
            [
                "field k::Builder::model: Model",
                "fn k::Builder::build(self) -> Built",
                "fn k::helper(x: [u8])",
                "impl Clone for k::Builder",
                "mod k::a",
                "mod k::q",
                "mod k::z",
                "struct k::Builder",
                "struct k::Renamed",
                "struct k::a::Agent",
                "struct k::a::Tie",
                "trait k::q::Inner",
                "use k::* = g::*",
                "use k::* = self::*",
                "use k::Agent = a::Agent",
                "use k::Builder = b::Builder",
                "use k::Ext = other::Ext",
                "use k::Renamed = b::Thing",
                "use k::a::Builder = crate::b::Builder",
                "use k::a::Tie = crate::b::Tie",
                "use k::q = b::p",
                "use k::q::again = self",
                "use k::z::Tie = crate::b::Tie",
            ]
        );
        assert_eq!(
            self::items(&reversed(reexports())).unwrap(),
            items,
            "independent of JSON order"
        );
    }

    #[test]
    fn a_struct_in_a_private_module_is_listed_at_its_reexport() {
        let items = items(&reexports()).unwrap();
        for line in [
            "struct k::Builder",
            "field k::Builder::model: Model",
            "fn k::Builder::build(self) -> Built",
            "impl Clone for k::Builder",
        ] {
            assert!(items.iter().any(|l| l == line), "{line} missing: {items:#?}");
        }
        assert!(
            !items
                .iter()
                .any(|l| l.contains("secret") || l.contains("check") || l.contains("Send"))
        );
        assert!(
            !items
                .iter()
                .any(|l| l.contains("k::b::") || l.contains("k::g::") || l.contains("k::p"))
        );
    }

    #[test]
    fn a_renamed_reexport_uses_the_new_name() {
        let items = items(&reexports()).unwrap();
        assert!(items.iter().any(|l| l == "struct k::Renamed"));
        assert!(!items.iter().any(|l| l.contains("Thing") && !l.starts_with("use ")));
    }

    #[test]
    fn an_item_reexported_at_two_paths_is_listed_once() {
        for json in [reexports(), reversed(reexports())] {
            let items = items(&json).unwrap();
            // Fewest segments: k::Builder, not k::a::Builder.
            let builder: Vec<_> = items
                .iter()
                .filter(|l| l.starts_with("struct ") && l.ends_with("::Builder"))
                .collect();
            assert_eq!(builder, ["struct k::Builder"]);
            // Same segments: lexicographic, k::a::Tie before k::z::Tie.
            let tie: Vec<_> = items
                .iter()
                .filter(|l| l.starts_with("struct ") && l.ends_with("::Tie"))
                .collect();
            assert_eq!(tie, ["struct k::a::Tie"]);
        }
    }

    #[test]
    fn a_directly_public_item_reexported_elsewhere_is_listed_once() {
        let items = items(&reexports()).unwrap();
        let agent: Vec<_> = items
            .iter()
            .filter(|l| l.contains("Agent") && !l.starts_with("use "))
            .collect();
        assert_eq!(agent, ["struct k::a::Agent"]);
    }

    #[test]
    fn a_changed_api_is_a_diff_and_an_unchanged_one_is_not() {
        let old: Vec<String> = ["fn k::a", "fn k::b"].map(str::to_owned).to_vec();
        let new: Vec<String> = ["fn k::a", "fn k::c"].map(str::to_owned).to_vec();
        assert_eq!(diff(&old, &new), ["- fn k::b", "+ fn k::c"]);
        assert!(diff(&old, &old).is_empty());
    }
}
