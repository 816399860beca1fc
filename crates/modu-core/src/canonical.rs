//! Canonical JSON, stable hashes, argument masking and identifier sanitising: one module used by
//! both decision policies, the tool trace and the agent fingerprint.

use crate::mask::SecretMasker;

/// The most characters of an identifier kept in the trace and failure metadata.
#[doc(hidden)]
pub const MAX_ID_CHARS: usize = 64;
/// The most characters of a safe message shown to the model.
#[doc(hidden)]
pub const MAX_SAFE_MESSAGE_CHARS: usize = 300;

/// An identifier fit for metadata: letters, digits and `_-.:/` only, at most [`MAX_ID_CHARS`].
#[doc(hidden)]
pub fn sanitize_id(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/'))
        .take(MAX_ID_CHARS)
        .collect()
}

/// Whether `c` is a Unicode format character (general category Cf: bidirectional overrides
/// and isolates such as U+202E, zero-width characters, the BOM, tag characters, …).
pub(crate) fn is_format_char(c: char) -> bool {
    matches!(c as u32,
        0x00AD
        | 0x0600..=0x0605
        | 0x061C
        | 0x06DD
        | 0x070F
        | 0x0890..=0x0891
        | 0x08E2
        | 0x180E
        | 0x200B..=0x200F
        | 0x202A..=0x202E
        | 0x2060..=0x2064
        | 0x2066..=0x206F
        | 0xFEFF
        | 0xFFF9..=0xFFFB
        | 0x110BD
        | 0x110CD
        | 0x13430..=0x1343F
        | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A
        | 0xE0001
        | 0xE0020..=0xE007F)
}

/// A message without control or format characters (see [`is_format_char`]), at most
/// [`MAX_SAFE_MESSAGE_CHARS`].
#[doc(hidden)]
pub fn sanitize_message(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if c.is_control() || is_format_char(c) { ' ' } else { c })
        .take(MAX_SAFE_MESSAGE_CHARS + 1)
        .collect();
    if cleaned.chars().count() > MAX_SAFE_MESSAGE_CHARS {
        let mut cut: String = cleaned.chars().take(MAX_SAFE_MESSAGE_CHARS).collect();
        cut.push('…');
        cut
    } else {
        cleaned
    }
}

/// Canonical JSON: object keys sorted, numbers spelled one way (an integral number as an
/// integer, so `1`, `1.0` and `1e0` agree), no whitespace.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => out.push_str(&value.to_string()),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else if let Some(f) = n.as_f64() {
                if f == 0.0 {
                    // 0.0 and -0.0 are the integer 0.
                    out.push('0');
                } else if f.is_finite() && f.fract() == 0.0 {
                    // An integral float of any magnitude, spelled as the exact integer it is
                    // (what an integer literal of the same value gives above).
                    out.push_str(&format!("{f:.0}"));
                } else {
                    out.push_str(&serde_json::Value::from(f).to_string());
                }
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
    }
}

/// The arguments a tool effectively runs with: `args` with the `default`s of its JSON schema
/// filled in for absent properties (recursively through nested objects, following local
/// `$ref`s and `anyOf`/`oneOf` branches), and `null` members dropped (serde reads an absent
/// `Option` and a `null` one alike).
pub fn effective_arguments(schema: &serde_json::Value, args: &serde_json::Value) -> serde_json::Value {
    let mut out = args.clone();
    apply_defaults(schema, schema, &mut out, 0);
    drop_nulls(&mut out);
    out
}

/// `schema` with local `$ref`s (`#/$defs/…`, `#/definitions/…`) followed.
fn resolve<'a>(mut schema: &'a serde_json::Value, root: &'a serde_json::Value) -> &'a serde_json::Value {
    for _ in 0..8 {
        match schema.get("$ref").and_then(|r| r.as_str()) {
            Some(reference) => match reference.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(target) => schema = target,
                None => break,
            },
            None => break,
        }
    }
    schema
}

fn apply_defaults(schema: &serde_json::Value, root: &serde_json::Value, value: &mut serde_json::Value, depth: usize) {
    if depth > 32 {
        return;
    }
    let schema = resolve(schema, root);
    if let Some(props) = schema.get("properties").and_then(|p| p.as_object())
        && let Some(obj) = value.as_object_mut()
    {
        for (name, prop) in props {
            match obj.get_mut(name) {
                Some(inner) => apply_defaults(prop, root, inner, depth + 1),
                None => {
                    if let Some(default) = resolve(prop, root).get("default").or_else(|| prop.get("default")) {
                        obj.insert(name.clone(), default.clone());
                    }
                }
            }
        }
        return;
    }
    // Option<Struct> and unions: the first branch with properties describes an object value.
    if value.is_object() {
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(branches) = schema.get(key).and_then(|b| b.as_array())
                && let Some(branch) = branches.iter().find(|b| resolve(b, root).get("properties").is_some())
            {
                apply_defaults(branch, root, value, depth + 1);
                return;
            }
        }
    }
}

fn drop_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// A stable hash of canonical JSON (stable across processes and versions).
#[doc(hidden)]
pub fn json_hash(value: &serde_json::Value) -> String {
    stable_hash(&canonical_json(value))
}

/// Masks secret keys of arguments shown in traces and events (one masker per process).
#[doc(hidden)]
pub fn mask_arguments(value: &serde_json::Value) -> serde_json::Value {
    static MASKER: std::sync::OnceLock<SecretMasker> = std::sync::OnceLock::new();
    MASKER.get_or_init(SecretMasker::default).mask_value(value)
}

/// FNV-1a (64 bit) of `text` as 16 hex digits: stable across processes and Rust versions, for
/// values that checkpoints keep (fingerprints, argument hashes).
#[doc(hidden)]
pub fn stable_hash(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
