//! The unit tests of `modu_core::canonical` (kept out of the crate's sources).

use modu_core::canonical::*;
#[allow(unused_imports)]
use modu_core::*;
use serde_json::json;

#[test]
fn canonical_json_ignores_key_order_and_number_spelling() -> Result<(), serde_json::Error> {
    let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": {"y": 2.0, "x": [1e0, "s"]}}"#)?;
    let b: serde_json::Value = serde_json::from_str(r#"{"a": {"x": [1, "s"], "y": 2}, "b": 1.0}"#)?;
    assert_eq!(canonical_json(&a), canonical_json(&b));
    assert_eq!(canonical_json(&a), r#"{"a":{"x":[1,"s"],"y":2},"b":1}"#);
    assert_ne!(canonical_json(&json!({"a": 1.5})), canonical_json(&json!({"a": 1})));
    assert_ne!(canonical_json(&json!({"a": "1"})), canonical_json(&json!({"a": 1})));
    Ok(())
}

#[test]
fn effective_arguments_fill_schema_defaults() {
    let schema = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "default": 100},
            "opts": {"type": "object", "properties": {"exact": {"type": "boolean", "default": false}}}
        }
    });
    let short = effective_arguments(&schema, &json!({"query": "x", "opts": {}}));
    let long = effective_arguments(&schema, &json!({"query": "x", "limit": 100, "opts": {"exact": false}}));
    assert_eq!(json_hash(&short), json_hash(&long));
    assert_ne!(
        json_hash(&short),
        json_hash(&effective_arguments(&schema, &json!({"query": "x", "limit": 5})))
    );
}

#[test]
fn effective_arguments_follow_refs_and_ignore_nulls() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        #[serde(default = "ten")]
        size: u32,
    }
    fn ten() -> u32 {
        10
    }
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        query: String,
        inner: Inner,
        note: Option<String>,
    }
    let schema = modu_core::tool::schema_for::<Args>();
    let a = effective_arguments(&schema, &json!({"query": "x", "inner": {}, "note": null}));
    let b = effective_arguments(&schema, &json!({"query": "x", "inner": {"size": 10}}));
    assert_eq!(json_hash(&a), json_hash(&b), "{a} vs {b}");
    let c = effective_arguments(&schema, &json!({"query": "x", "inner": {"size": 11}}));
    assert_ne!(json_hash(&a), json_hash(&c));
}

#[test]
fn sanitizers_cap_and_clean() {
    assert_eq!(sanitize_id("step 1\n<script>"), "step1script");
    assert_eq!(sanitize_id(&"a".repeat(200)).len(), MAX_ID_CHARS);
    let m = sanitize_message(&format!("bad\u{7}\nthing{}", "x".repeat(1000)));
    assert!(m.starts_with("bad  thing"));
    assert_eq!(m.chars().count(), MAX_SAFE_MESSAGE_CHARS + 1);
}

#[test]
fn safe_messages_strip_format_characters() {
    // A right-to-left override would make "txt.exe" read as "exe.txt".
    let m =
        sanitize_message("file \u{202E}txt.exe\u{202C} zero\u{200B}width \u{FEFF}bom \u{2066}iso\u{2069} tag\u{E0041}");
    for c in [
        '\u{202E}',
        '\u{202C}',
        '\u{200B}',
        '\u{FEFF}',
        '\u{2066}',
        '\u{2069}',
        '\u{E0041}',
    ] {
        assert!(!m.contains(c), "{:?} left in {m:?}", c);
    }
    assert!(m.contains("txt.exe"));
    // Letters, marks and emoji stay.
    assert_eq!(sanitize_message("안녕 café 🦀"), "안녕 café 🦀");
}
