//! OpenAI's strict structured outputs: the subset of JSON Schema `strict: true` takes
//! (read through [`ResponseFormat::wire_schema`](crate::model::ResponseFormat::wire_schema)).
//!
//! With `strict: true`, OpenAI refuses a `json_schema` response format (400 "Invalid schema
//! for response_format") unless every object sets `additionalProperties: false` and lists all
//! of its properties in `required`, and it takes only some keywords. A schema derived from a
//! Rust type (schemars) has neither rule by default: a struct allows other properties, and an
//! `Option` field or a `#[serde(default)]` one is not required. `strict_schema` rewrites such
//! a schema into that subset so that every answer the rewritten schema allows still parses
//! into the type (a property that becomes required stays nullable when its schema allows
//! `null`; a `#[serde(default)]` one must then be given), and says when it cannot (a map, a
//! schema allowing any value, `allOf`, `not`, an object with alternatives beside its
//! properties as `#[serde(flatten)]` of an enum makes, a root that is not an object): the
//! request then goes without `strict`, the schema as it is.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// Keywords OpenAI's strict mode refuses and no rewrite can replace.
const REFUSED: &[&str] = &[
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "prefixItems",
];

/// Keywords dropped from a strict schema because OpenAI's strict mode does not take them:
/// annotations (`default`: every property is required anyway) and the constraints it lists
/// as unsupported (string lengths, which schemars gives a `char`; `uniqueItems`, which it
/// gives a set; property counts). The answer is still parsed by serde.
const DROPPED: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "default",
    "examples",
    "deprecated",
    "minLength",
    "maxLength",
    "uniqueItems",
    "minProperties",
    "maxProperties",
];

/// The string formats OpenAI's strict mode takes; others (schemars' `int64`, `uint8`,
/// `double`, …) are dropped: serde checks the number's range when it parses.
const FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// How deep `$ref`s are followed when one must be inlined (a `$ref` beside other keywords).
const MAX_INLINE_DEPTH: usize = 16;

/// `schema` in the form OpenAI's strict mode takes: borrowed when it already is, rewritten
/// when it can be, `None` when it cannot (send it without `strict`).
pub(crate) fn strict_schema(schema: &Value) -> Option<Cow<'_, Value>> {
    if is_strict(schema, true) {
        return Some(Cow::Borrowed(schema));
    }
    let mut rewritten = schema.clone();
    let defs = rewritten
        .as_object()
        .and_then(|o| o.get("$defs").or_else(|| o.get("definitions")))
        .cloned()
        .unwrap_or(Value::Null);
    rewrite(&mut rewritten, &defs, 0)?;
    is_strict(&rewritten, true).then_some(Cow::Owned(rewritten))
}

/// Whether `schema` already satisfies the rules `rewrite` establishes.
fn is_strict(schema: &Value, root: bool) -> bool {
    let Some(o) = schema.as_object() else {
        return false;
    };
    if root && o.get("type").and_then(Value::as_str) != Some("object") {
        return false;
    }
    if REFUSED.iter().chain(DROPPED).any(|k| o.contains_key(*k)) || o.contains_key("oneOf") {
        return false;
    }
    if let Some(format) = o.get("format")
        && !format.as_str().is_some_and(|f| FORMATS.contains(&f))
    {
        return false;
    }
    if o.contains_key("$ref") && o.len() > 1 {
        return false;
    }
    if !has_type(o) {
        return false;
    }
    if is_object(o) {
        let Some(properties) = o.get("properties").and_then(Value::as_object) else {
            return false;
        };
        if o.contains_key("anyOf") {
            return false;
        }
        if o.get("additionalProperties") != Some(&Value::Bool(false)) {
            return false;
        }
        let required: Vec<&str> = o
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if properties.len() != required.len() || !properties.keys().all(|k| required.contains(&k.as_str())) {
            return false;
        }
    }
    subschemas(o).all(|s| is_strict(s, false))
}

/// Whether `o` says what its values are (a schema any value fits has no strict form).
fn has_type(o: &Map<String, Value>) -> bool {
    ["type", "anyOf", "$ref", "enum", "const"]
        .iter()
        .any(|k| o.contains_key(*k))
}

fn is_object(o: &Map<String, Value>) -> bool {
    o.contains_key("properties")
        || match o.get("type") {
            Some(Value::String(t)) => t == "object",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
            _ => false,
        }
}

/// The schemas directly inside `o`.
fn subschemas(o: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    let in_map = |key: &str| {
        o.get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.values())
    };
    let in_list = |key: &str| o.get(key).and_then(Value::as_array).into_iter().flatten();
    in_map("properties")
        .chain(in_map("$defs"))
        .chain(in_map("definitions"))
        .chain(in_list("anyOf"))
        .chain(in_list("oneOf"))
        .chain(o.get("items"))
}

/// Puts a `$ref`'s definition under the keywords beside the `$ref`: both apply, so
/// `properties` and `required` are joined (schemars puts an internally tagged variant's tag
/// there, beside a `$ref` to its fields); a description or title beside it is the one kept;
/// any other keyword on both sides with different values has no single form (`None`).
fn merge(o: &mut Map<String, Value>, definition: Map<String, Value>) -> Option<()> {
    for (key, value) in definition {
        match o.get_mut(&key) {
            None => {
                o.insert(key, value);
            }
            Some(existing) if *existing == value => {}
            Some(_) if key == "description" || key == "title" => {}
            Some(Value::Object(mine)) if key == "properties" => {
                let Value::Object(theirs) = value else { return None };
                for (name, schema) in theirs {
                    match mine.get(&name) {
                        Some(own) if *own != schema => return None,
                        _ => {
                            mine.insert(name, schema);
                        }
                    }
                }
            }
            Some(Value::Array(mine)) if key == "required" => {
                let Value::Array(theirs) = value else { return None };
                for name in theirs {
                    if !mine.contains(&name) {
                        mine.push(name);
                    }
                }
            }
            Some(_) => return None,
        }
    }
    Some(())
}

/// Rewrites `schema` in place into the strict subset; `None` when it cannot be.
fn rewrite(schema: &mut Value, defs: &Value, depth: usize) -> Option<()> {
    let o = schema.as_object_mut()?;
    if REFUSED.iter().any(|k| o.contains_key(*k)) {
        return None;
    }
    // A `$ref` with other keywords beside it (schemars puts a field's description there):
    // strict mode takes a `$ref` alone, so the definition is inlined under those keywords.
    if o.contains_key("$ref") && o.len() > 1 {
        if depth >= MAX_INLINE_DEPTH {
            return None;
        }
        let target = o.remove("$ref")?;
        let name = target
            .as_str()?
            .strip_prefix("#/$defs/")
            .or_else(|| target.as_str()?.strip_prefix("#/definitions/"))?;
        let Value::Object(definition) = defs.get(name)?.clone() else {
            return None;
        };
        merge(o, definition)?;
        return rewrite(schema, defs, depth + 1);
    }
    for key in DROPPED {
        o.remove(*key);
    }
    if o.get("format")
        .is_some_and(|f| !f.as_str().is_some_and(|f| FORMATS.contains(&f)))
    {
        o.remove("format");
    }
    if let Some(one_of) = o.remove("oneOf") {
        // Serde still takes exactly one variant; `anyOf` is the union strict mode takes.
        if o.insert("anyOf".to_owned(), one_of).is_some() {
            return None;
        }
    }
    if !has_type(o) {
        // A schema any value fits (`serde_json::Value`): strict mode has no such schema.
        return None;
    }
    if is_object(o) {
        if o.contains_key("anyOf") {
            // Alternatives beside the object's own properties (`#[serde(flatten)]` of an enum):
            // closing both the object and each alternative would leave no answer.
            return None;
        }
        match o.get("additionalProperties") {
            None => {
                o.insert("additionalProperties".to_owned(), Value::Bool(false));
            }
            Some(Value::Bool(false)) => {}
            // A map (`HashMap<String, T>`): strict mode has no open objects.
            Some(_) => return None,
        }
        let properties = o.entry("properties").or_insert_with(|| Value::Object(Map::new()));
        let names: Vec<Value> = properties.as_object()?.keys().cloned().map(Value::String).collect();
        o.insert("required".to_owned(), Value::Array(names));
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(map) = o.get_mut(key) {
            for sub in map.as_object_mut()?.values_mut() {
                rewrite(sub, defs, depth)?;
            }
        }
    }
    if let Some(list) = o.get_mut("anyOf") {
        for sub in list.as_array_mut()? {
            rewrite(sub, defs, depth)?;
        }
    }
    if let Some(items) = o.get_mut("items") {
        rewrite(items, defs, depth)?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_strict_schema_is_sent_as_it_is() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "required": ["a"],
            "additionalProperties": false
        });
        assert!(matches!(strict_schema(&schema), Some(Cow::Borrowed(_))));
    }

    #[test]
    fn refused_forms_have_no_strict_schema() {
        for schema in [
            json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}}}),
            json!({"type": "object", "properties": {"v": true}}),
            json!({"type": "object", "properties": {"v": {}}}),
            json!({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}}),
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"type": "string"}),
        ] {
            assert!(strict_schema(&schema).is_none(), "{schema}");
        }
    }

    #[test]
    fn a_ref_beside_properties_keeps_both_sides_fields() {
        // An internally tagged newtype variant: the tag beside a `$ref` to the fields.
        let schema = json!({
            "type": "object",
            "properties": {"action": {"$ref": "#/$defs/Args", "type": "object",
                "properties": {"kind": {"type": "string", "const": "Search"}}, "required": ["kind"]}},
            "required": ["action"],
            "$defs": {"Args": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
        });
        let strict = strict_schema(&schema).unwrap();
        let action = &strict["properties"]["action"];
        assert_eq!(action["required"], json!(["kind", "query"]), "{action}");
        assert_eq!(action["properties"]["query"], json!({"type": "string"}));
        // A conflicting keyword has no single form.
        let conflict = json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/N", "type": "string"}},
                              "$defs": {"N": {"type": "integer"}}});
        assert!(strict_schema(&conflict).is_none());
    }

    #[test]
    fn an_object_with_alternatives_beside_its_properties_has_no_strict_form() {
        // `struct Req { id: u32, #[serde(flatten)] op: Op }` with an externally tagged `Op`.
        let schema = json!({
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
            "oneOf": [{"type": "object", "properties": {"Search": {"type": "string"}}, "required": ["Search"]},
                      {"type": "object", "properties": {"Stop": {"type": "null"}}, "required": ["Stop"]}]
        });
        assert!(strict_schema(&schema).is_none());
    }

    #[test]
    fn constraints_strict_mode_does_not_take_are_dropped() {
        let schema = json!({"type": "object", "properties": {
            "c": {"type": "string", "minLength": 1, "maxLength": 1},
            "set": {"type": "array", "items": {"type": "string"}, "uniqueItems": true, "maxItems": 3}}});
        let strict = strict_schema(&schema).unwrap();
        assert_eq!(strict["properties"]["c"], json!({"type": "string"}));
        assert_eq!(
            strict["properties"]["set"],
            json!({"type": "array", "items": {"type": "string"}, "maxItems": 3})
        );
    }

    #[test]
    fn a_recursive_ref_with_a_description_is_not_inlined_for_ever() {
        let schema = json!({
            "type": "object",
            "properties": {"next": {"$ref": "#/$defs/Node", "description": "the next"}},
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node", "description": "again"}}}}
        });
        assert!(strict_schema(&schema).is_none());
    }
}
