//! [`SecretMasker`]: replaces secret values in JSON and in free text with `"***"`.

use serde_json::Value;

/// The replacement for a secret value.
pub const MASK: &str = "***";

/// The keys masked by [`SecretMasker::default`].
pub const DEFAULT_SECRET_KEYS: &[&str] = &[
    "api_key",
    "apikey",
    "token",
    "access_token",
    "refresh_token",
    "authorization",
    "password",
    "passwd",
    "secret",
    "client_secret",
    "cookie",
    "set-cookie",
    "x-api-key",
];

/// Masks secrets in events before they leave the process (logs, audit files, traces).
///
/// # Which keys are secret
///
/// A key (an object key, or a `key=value` / `key: value` word in text) is secret when, compared
/// case-insensitively, one of the configured keys matches it by **words** or by **suffix**:
///
/// * **words**: keys are split into words at `_`, `-`, `.`, spaces and lower→upper camelCase
///   boundaries (`X-Api-Key` → `x api key`, `accessToken` → `access token`); the key is secret
///   when the configured key's words occur consecutively in it. `api_key` thus matches
///   `x-api-key`, `apiKey` and `openai_api_key_v2`; `token` matches `github_token` and
///   `Token`; `secret` matches `client_secret` and `secret_value`.
/// * **suffix**: with the separators removed, the key ends with the configured key with its
///   separators removed (`myapikey` ends with `apikey`, `githubtoken` with `token`).
///
/// Whole words are required, so `tokens`, `input_tokens`, `max_tokens` and `tokenizer` are
/// **not** secret (usage counters stay readable), while `token_count` is (conservative).
///
/// # What is masked
///
/// * the value under a secret key, whatever it is (string, number, object, array), becomes
///   `"***"`; `null` stays `null`;
/// * objects and arrays are walked recursively, to any depth;
/// * a string that holds a JSON object or array is parsed, masked and serialised again;
/// * any other string is scanned for `key=value`, `key: value`, `"key": "value"` and
///   `\"key\":\"value\"` (escaped JSON inside text) where `key` is secret; the value
///   (quoted, or up to the next space, `,`, `;`, `&`, `)`, `}`, `]`, quote or `<`) becomes
///   `***`. `Authorization: Bearer abc` masks the scheme's credential too (`Bearer ***`).
///
/// Free-text scanning is a best effort: a secret with no recognisable key in front of it (a
/// bare token in prose) cannot be found, and a secret split across two model deltas is seen
/// as two halves. Sinks therefore mask whole events, and secrets should be kept out of
/// messages in the first place.
#[derive(Clone, Debug)]
pub struct SecretMasker {
    /// Each configured key as lowercase words, and compacted (no separators).
    keys: Vec<(Vec<String>, String)>,
}

impl Default for SecretMasker {
    fn default() -> Self {
        Self::new(DEFAULT_SECRET_KEYS.iter().copied())
    }
}

fn words(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in key.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_key_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-' || c == '.'
}

impl SecretMasker {
    /// A masker for these keys (replacing the default list).
    pub fn new<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut m = SecretMasker { keys: Vec::new() };
        for k in keys {
            m.push_key(k.as_ref());
        }
        m
    }

    /// The default list plus these keys.
    pub fn with_additional_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for k in keys {
            self.push_key(k.as_ref());
        }
        self
    }

    fn push_key(&mut self, key: &str) {
        let w = words(key);
        if w.is_empty() {
            return;
        }
        let compact = w.concat();
        self.keys.push((w, compact));
    }

    /// Whether values under `key` are secret (see the type's docs for the rule).
    pub fn is_secret_key(&self, key: &str) -> bool {
        let w = words(key);
        if w.is_empty() {
            return false;
        }
        let compact = w.concat();
        self.keys.iter().any(|(kw, kc)| {
            compact.ends_with(kc.as_str()) || (kw.len() <= w.len() && w.windows(kw.len()).any(|win| win == &kw[..]))
        })
    }

    /// Masks a JSON value in place.
    pub fn mask_value_in_place(&self, value: &mut Value) {
        self.mask_depth(value, 0);
    }

    /// Returns a masked copy of a JSON value.
    pub fn mask_value(&self, value: &Value) -> Value {
        let mut v = value.clone();
        self.mask_value_in_place(&mut v);
        v
    }

    fn mask_depth(&self, value: &mut Value, depth: usize) {
        match value {
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    if self.is_secret_key(k) {
                        if !v.is_null() {
                            *v = Value::String(MASK.to_owned());
                        }
                    } else {
                        self.mask_depth(v, depth);
                    }
                }
            }
            Value::Array(items) => {
                for v in items {
                    self.mask_depth(v, depth);
                }
            }
            Value::String(s) => {
                if let Some(masked) = self.mask_string_depth(s, depth) {
                    *s = masked;
                }
            }
            _ => {}
        }
    }

    /// Masks a string: JSON inside it (when it is a JSON object or array), else `key=value`
    /// patterns in it.
    pub fn mask_text(&self, text: &str) -> String {
        self.mask_string_depth(text, 0).unwrap_or_else(|| text.to_owned())
    }

    /// `None` when nothing changed.
    fn mask_string_depth(&self, text: &str, depth: usize) -> Option<String> {
        let trimmed = text.trim_start();
        if depth < 8
            && (trimmed.starts_with('{') || trimmed.starts_with('['))
            && let Ok(mut inner) = serde_json::from_str::<Value>(text)
        {
            let before = inner.clone();
            self.mask_depth(&mut inner, depth + 1);
            if inner == before {
                return None;
            }
            return Some(inner.to_string());
        }
        self.mask_free_text(text)
    }

    /// Scans free text for `key<sep>value` where key is secret; `None` when nothing changed.
    fn mask_free_text(&self, text: &str) -> Option<String> {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut copied = 0usize; // bytes of `text` already in `out`
        let mut changed = false;
        let mut i = 0usize;
        while i < text.len() {
            let Some(c) = text[i..].chars().next() else { break };
            if !is_key_char(c) || (i > 0 && text[..i].chars().next_back().is_some_and(is_key_char)) {
                i += c.len_utf8();
                continue;
            }
            // A word starts at i.
            let word_end = text[i..]
                .find(|ch: char| !is_key_char(ch))
                .map_or(text.len(), |n| i + n);
            // Skip closing quotes (possibly escaped), spaces, then a separator.
            let mut j = word_end;
            loop {
                if text[j..].starts_with("\\\"") {
                    j += 2;
                } else if j < bytes.len() && (bytes[j] == b'"' || bytes[j] == b'\'') {
                    j += 1;
                } else {
                    break;
                }
            }
            while j < bytes.len() && bytes[j] == b' ' {
                j += 1;
            }
            // Only a word followed by a separator is a candidate key (cheap check first).
            if j >= bytes.len() || !(bytes[j] == b'=' || bytes[j] == b':') || !self.is_secret_key(&text[i..word_end]) {
                i = word_end;
                continue;
            }
            j += 1;
            while j < bytes.len() && (bytes[j] == b' ' || bytes[j] == b'\t') {
                j += 1;
            }
            let (start, end) = if text[j..].starts_with("\\\"") {
                let s = j + 2;
                let e = text[s..].find("\\\"").map_or(text.len(), |n| s + n);
                (s, e)
            } else if j < bytes.len() && (bytes[j] == b'"' || bytes[j] == b'\'') {
                let q = bytes[j];
                let s = j + 1;
                let mut e = s;
                while e < bytes.len() && bytes[e] != q {
                    e += if bytes[e] == b'\\' { 2 } else { 1 };
                }
                (s, e.min(bytes.len()))
            } else {
                let mut s = j;
                // `Bearer xyz`, `Basic xyz`: keep the scheme, mask the credential.
                let rest = &text[j..];
                for scheme in ["bearer ", "basic ", "token "] {
                    if rest.len() >= scheme.len()
                        && rest.is_char_boundary(scheme.len())
                        && rest[..scheme.len()].eq_ignore_ascii_case(scheme)
                    {
                        s = j + scheme.len();
                        while s < bytes.len() && bytes[s] == b' ' {
                            s += 1;
                        }
                        break;
                    }
                }
                // A cookie header's value is a `;`-separated list of secrets: masked to the line's end.
                let key = &text[i..word_end];
                let whole_line = key.eq_ignore_ascii_case("cookie") || key.eq_ignore_ascii_case("set-cookie");
                let e = text[s..]
                    .find(|ch: char| {
                        if whole_line {
                            matches!(ch, '\r' | '\n' | '"' | '\'' | '<' | '\\')
                        } else {
                            ch.is_whitespace()
                                || matches!(ch, ',' | ';' | '&' | ')' | '}' | ']' | '"' | '\'' | '<' | '\\')
                        }
                    })
                    .map_or(text.len(), |n| s + n);
                (s, e)
            };
            if end > start {
                out.push_str(&text[copied..start]);
                out.push_str(MASK);
                copied = end;
                changed = true;
            }
            i = end.max(word_end);
        }
        if !changed {
            return None;
        }
        out.push_str(&text[copied..]);
        Some(out)
    }
}
