//! Rendering of rustdoc JSON types and function signatures for the API snapshots, so a changed
//! parameter type, return type, bound or field type shows as a diff, not only a changed name.
//!
//! Paths are rendered by their last segment (`Option`, not `std::option::Option` or
//! `crate::x::Option`): how the source spells a path is not part of the API, and moving a `use`
//! must not show as a change.

use serde_json::Value;

fn last_segment(path: &str) -> &str {
    path.rsplit("::").next().unwrap_or(path)
}

fn join(values: Option<&Value>, sep: &str, f: impl Fn(&Value) -> String) -> String {
    values
        .and_then(Value::as_array)
        .map(|a| a.iter().map(f).collect::<Vec<_>>().join(sep))
        .unwrap_or_default()
}

/// A path with its generic arguments: `Option<Duration>`, `Fn(u32) -> bool`.
fn path(p: &Value) -> String {
    let name = last_segment(
        p.get("path")
            .or_else(|| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("?"),
    );
    format!("{name}{}", args(p.get("args")))
}

fn args(args: Option<&Value>) -> String {
    let Some(args) = args.filter(|a| !a.is_null()) else {
        return String::new();
    };
    if let Some(angle) = args.get("angle_bracketed") {
        let mut parts: Vec<String> = angle
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(generic_arg).collect())
            .unwrap_or_default();
        if let Some(constraints) = angle.get("constraints").and_then(Value::as_array) {
            parts.extend(constraints.iter().map(constraint));
        }
        return if parts.is_empty() {
            String::new()
        } else {
            format!("<{}>", parts.join(", "))
        };
    }
    if let Some(paren) = args.get("parenthesized") {
        let inputs = join(paren.get("inputs"), ", ", ty);
        return match paren.get("output").filter(|o| !o.is_null()) {
            Some(out) => format!("({inputs}) -> {}", ty(out)),
            None => format!("({inputs})"),
        };
    }
    String::new()
}

fn generic_arg(arg: &Value) -> String {
    if let Some(t) = arg.get("type") {
        return ty(t);
    }
    if let Some(l) = arg.get("lifetime").and_then(Value::as_str) {
        return l.to_owned();
    }
    if let Some(c) = arg.get("const") {
        return c.get("expr").and_then(Value::as_str).unwrap_or("_").to_owned();
    }
    "_".to_owned()
}

fn constraint(c: &Value) -> String {
    let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
    let binding = c.get("binding");
    if let Some(eq) = binding.and_then(|b| b.get("equality")) {
        let value = eq.get("type").map_or_else(|| "_".to_owned(), ty);
        return format!("{name}{} = {value}", args(c.get("args")));
    }
    let bounds = bounds(binding.and_then(|b| b.get("constraint")));
    format!("{name}{}: {bounds}", args(c.get("args")))
}

/// Bounds joined with ` + `: `Send + Sync + 'static`.
fn bounds(list: Option<&Value>) -> String {
    join(list, " + ", |b| {
        if let Some(t) = b.get("trait_bound") {
            let modifier = match t.get("modifier").and_then(Value::as_str) {
                Some("maybe") => "?",
                Some("maybe_const") => "~const ",
                _ => "",
            };
            let hrtb = match t.get("generic_params").and_then(Value::as_array) {
                Some(params) if !params.is_empty() => {
                    let names: Vec<&str> = params
                        .iter()
                        .filter_map(|p| p.get("name").and_then(Value::as_str))
                        .collect();
                    format!("for<{}> ", names.join(", "))
                }
                _ => String::new(),
            };
            return format!(
                "{hrtb}{modifier}{}",
                t.get("trait").map_or_else(|| "?".to_owned(), path)
            );
        }
        if let Some(l) = b.get("outlives").and_then(Value::as_str) {
            return l.to_owned();
        }
        "use<..>".to_owned()
    })
}

/// A type as the source would write it (paths by their last segment).
pub(crate) fn ty(t: &Value) -> String {
    let Some((kind, body)) = t.as_object().and_then(|o| o.iter().next()) else {
        return "?".to_owned();
    };
    match kind.as_str() {
        "resolved_path" => path(body),
        "generic" | "primitive" => body.as_str().unwrap_or("?").to_owned(),
        "tuple" => {
            let items: Vec<String> = body.as_array().map(|a| a.iter().map(ty).collect()).unwrap_or_default();
            if items.len() == 1 {
                format!("({},)", items[0])
            } else {
                format!("({})", items.join(", "))
            }
        }
        "slice" => format!("[{}]", ty(body)),
        "array" => format!(
            "[{}; {}]",
            body.get("type").map_or_else(|| "?".to_owned(), ty),
            body.get("len").and_then(Value::as_str).unwrap_or("_")
        ),
        "borrowed_ref" => {
            let lifetime = body
                .get("lifetime")
                .and_then(Value::as_str)
                .map(|l| format!("{l} "))
                .unwrap_or_default();
            let mutable = if body.get("is_mutable").and_then(Value::as_bool) == Some(true) {
                "mut "
            } else {
                ""
            };
            format!(
                "&{lifetime}{mutable}{}",
                body.get("type").map_or_else(|| "?".to_owned(), ty)
            )
        }
        "raw_pointer" => {
            let mutable = body.get("is_mutable").and_then(Value::as_bool) == Some(true);
            format!(
                "*{} {}",
                if mutable { "mut" } else { "const" },
                body.get("type").map_or_else(|| "?".to_owned(), ty)
            )
        }
        "impl_trait" => format!("impl {}", bounds(Some(body))),
        "dyn_trait" => {
            let traits = join(body.get("traits"), " + ", |p| {
                p.get("trait").map_or_else(|| "?".to_owned(), path)
            });
            match body.get("lifetime").and_then(Value::as_str) {
                Some(l) => format!("dyn {traits} + {l}"),
                None => format!("dyn {traits}"),
            }
        }
        "qualified_path" => {
            let name = body.get("name").and_then(Value::as_str).unwrap_or("?");
            let self_type = body.get("self_type").map_or_else(|| "?".to_owned(), ty);
            match body.get("trait").filter(|t| !t.is_null()) {
                Some(t) => format!("<{self_type} as {}>::{name}", path(t)),
                None => format!("{self_type}::{name}"),
            }
        }
        "function_pointer" => {
            let sig = body.get("sig").unwrap_or(&Value::Null);
            format!("fn{}", inputs_output(sig, false))
        }
        "infer" => "_".to_owned(),
        other => other.to_owned(),
    }
}

/// `(self, n: u32) -> Self`; with `named` false, the parameter names are left out.
fn inputs_output(sig: &Value, named: bool) -> String {
    let inputs = join(sig.get("inputs"), ", ", |p| {
        let name = p.get(0).and_then(Value::as_str).unwrap_or("_");
        let t = p.get(1).map_or_else(|| "?".to_owned(), ty);
        match (name, t.as_str()) {
            ("self", "Self") => "self".to_owned(),
            ("self", "&Self") => "&self".to_owned(),
            ("self", "&mut Self") => "&mut self".to_owned(),
            _ if named => format!("{name}: {t}"),
            _ => t,
        }
    });
    match sig.get("output").filter(|o| !o.is_null()) {
        Some(out) => format!("({inputs}) -> {}", ty(out)),
        None => format!("({inputs})"),
    }
}

/// The generic parameters written by the author (not the synthetic `impl Trait` ones):
/// `<'a, T: Send, const N: usize>`.
fn generic_params(generics: Option<&Value>) -> String {
    let Some(params) = generics.and_then(|g| g.get("params")).and_then(Value::as_array) else {
        return String::new();
    };
    let rendered: Vec<String> = params
        .iter()
        .filter_map(|p| {
            let name = p.get("name").and_then(Value::as_str)?;
            let kind = p.get("kind")?;
            if let Some(t) = kind.get("type") {
                if t.get("is_synthetic").and_then(Value::as_bool) == Some(true) {
                    return None;
                }
                let b = bounds(t.get("bounds"));
                return Some(if b.is_empty() {
                    name.to_owned()
                } else {
                    format!("{name}: {b}")
                });
            }
            if let Some(c) = kind.get("const") {
                return Some(format!(
                    "const {name}: {}",
                    c.get("type").map_or_else(|| "?".to_owned(), ty)
                ));
            }
            Some(name.to_owned())
        })
        .collect();
    if rendered.is_empty() {
        String::new()
    } else {
        format!("<{}>", rendered.join(", "))
    }
}

fn where_clause(generics: Option<&Value>) -> String {
    let predicates = join(generics.and_then(|g| g.get("where_predicates")), ", ", |p| {
        if let Some(b) = p.get("bound_predicate") {
            let t = b.get("type").map_or_else(|| "?".to_owned(), ty);
            return format!("{t}: {}", bounds(b.get("bounds")));
        }
        if let Some(l) = p.get("lifetime_predicate") {
            let name = l.get("lifetime").and_then(Value::as_str).unwrap_or("?");
            let outlives = join(l.get("outlives"), " + ", |o| o.as_str().unwrap_or("?").to_owned());
            return format!("{name}: {outlives}");
        }
        if let Some(e) = p.get("eq_predicate") {
            let lhs = e.get("lhs").map_or_else(|| "?".to_owned(), ty);
            let rhs = e
                .get("rhs")
                .and_then(|r| r.get("type"))
                .map_or_else(|| "?".to_owned(), ty);
            return format!("{lhs} = {rhs}");
        }
        "?".to_owned()
    });
    if predicates.is_empty() {
        String::new()
    } else {
        format!(" where {predicates}")
    }
}

/// A function's signature after its path: `<T: Send>(self, n: u32) -> Self where …`, with
/// `async`/`unsafe`/`const` in front when the header says so.
pub(crate) fn signature(function: &Value) -> String {
    let sig = function.get("sig").unwrap_or(&Value::Null);
    let generics = function.get("generics");
    format!(
        "{}{}{}",
        generic_params(generics),
        inputs_output(sig, true),
        where_clause(generics)
    )
}

/// `async `, `unsafe `, `const ` (in that order) as a function's header says.
pub(crate) fn qualifiers(function: &Value) -> String {
    let header = function.get("header");
    let flag = |k: &str| header.and_then(|h| h.get(k)).and_then(Value::as_bool) == Some(true);
    let mut out = String::new();
    for (key, word) in [("is_const", "const "), ("is_async", "async "), ("is_unsafe", "unsafe ")] {
        if flag(key) {
            out.push_str(word);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path_of(name: &str, args: Value) -> Value {
        json!({"resolved_path": {"path": name, "id": 1, "args": args}})
    }

    #[test]
    fn a_signature_names_its_types_bounds_and_where_clause() {
        let duration = path_of("std::time::Duration", Value::Null);
        let option = path_of(
            "Option",
            json!({"angle_bracketed": {"args": [{"type": duration}], "constraints": []}}),
        );
        let into = json!({"trait_bound": {"trait": {"path": "Into", "id": 2, "args": {"angle_bracketed": {"args": [{"type": option}], "constraints": []}}}, "generic_params": [], "modifier": "none"}});
        let f = json!({
            "sig": {"inputs": [["self", {"generic": "Self"}], ["t", {"impl_trait": [into]}], ["s", {"borrowed_ref": {"lifetime": null, "is_mutable": false, "type": {"primitive": "str"}}}]],
                    "output": {"generic": "Self"}},
            "generics": {"params": [
                {"name": "T", "kind": {"type": {"bounds": [{"trait_bound": {"trait": {"path": "Send", "id": 3, "args": null}, "generic_params": [], "modifier": "none"}}, {"outlives": "'static"}], "default": null, "is_synthetic": false}}},
                {"name": "impl Into<Option<Duration>>", "kind": {"type": {"bounds": [], "default": null, "is_synthetic": true}}}
            ], "where_predicates": [{"bound_predicate": {"type": {"generic": "T"}, "bounds": [{"trait_bound": {"trait": {"path": "Clone", "id": 4, "args": null}, "generic_params": [], "modifier": "none"}}], "generic_params": []}}]},
            "header": {"is_async": true, "is_const": false, "is_unsafe": false}
        });
        assert_eq!(
            signature(&f),
            "<T: Send + 'static>(self, t: impl Into<Option<Duration>>, s: &str) -> Self where T: Clone"
        );
        assert_eq!(qualifiers(&f), "async ");
    }

    #[test]
    fn types_render_as_written() {
        assert_eq!(ty(&json!({"tuple": []})), "()");
        assert_eq!(ty(&json!({"slice": {"primitive": "u8"}})), "[u8]");
        assert_eq!(
            ty(
                &json!({"dyn_trait": {"traits": [{"trait": {"path": "Fn", "id": 1, "args": {"parenthesized": {"inputs": [{"primitive": "u32"}], "output": {"primitive": "bool"}}}}, "generic_params": []}], "lifetime": "'static"}})
            ),
            "dyn Fn(u32) -> bool + 'static"
        );
        assert_eq!(
            ty(
                &json!({"qualified_path": {"name": "Output", "args": null, "self_type": {"generic": "F"}, "trait": {"path": "Future", "id": 1, "args": null}}})
            ),
            "<F as Future>::Output"
        );
    }
}
