//! Partial JSON: what a structured answer holds so far, while its JSON text still arrives.
//!
//! [`partial_json`] reads any prefix of a JSON object or array and returns the value it
//! holds: complete members as they are, the string being written so far, and open objects and
//! arrays closed. A member whose value has not started, a number or literal not yet ended by a
//! delimiter, and a key still being written are left out, so every snapshot holds only values
//! the finished document will hold too (strings may still grow).
//!
//! The run loop uses it for the `OutputPartial` events of a streamed run. No well-kept crate does this
//! for `serde_json` (the ones published are single-release experiments), so it lives here: one
//! pass, no allocation beyond the completed copy.
//!
//! ```
//! use modu_agent::partial::partial_json;
//! use serde_json::json;
//!
//! assert_eq!(partial_json(r#"{"result": 5, "explanation": "2 + 3 is"#), Some(json!({"result": 5, "explanation": "2 + 3 is"})));
//! assert_eq!(partial_json(r#"{"result": 5, "expl"#), Some(json!({"result": 5})));
//! assert_eq!(partial_json(r#"{"items": [1, 2, 3"#), Some(json!({"items": [1, 2]})));
//! assert_eq!(partial_json("not json"), None);
//! ```

use serde_json::Value;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Frame {
    /// In an object, expecting a key (or `}`).
    Key,
    /// In an object, after a key, expecting `:`.
    Colon,
    /// In an object, after `:`, expecting a value.
    Value,
    /// In an object, after a value, expecting `,` or `}`.
    AfterValue,
    /// In an array, expecting a value (or `]`).
    Item,
    /// In an array, after a value, expecting `,` or `]`.
    AfterItem,
}

impl Frame {
    fn closer(self) -> char {
        match self {
            Frame::Key | Frame::Colon | Frame::Value | Frame::AfterValue => '}',
            Frame::Item | Frame::AfterItem => ']',
        }
    }
}

/// A place where the text so far, cut there and closed by the open frames, is valid JSON.
#[derive(Clone, Default)]
struct Safe {
    at: usize,
    closers: String,
}

fn closers(stack: &[Frame]) -> String {
    stack.iter().rev().map(|f| f.closer()).collect()
}

/// The value a prefix of a JSON object or array holds so far (see the [module](self)); `None`
/// when the text does not start an object or array, or is not JSON.
pub fn partial_json(text: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return (value.is_object() || value.is_array()).then_some(value);
    }
    let start = text.find(|c: char| !c.is_whitespace())?;
    if !text[start..].starts_with(['{', '[']) {
        return None;
    }
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut safe = Safe::default();
    // Inside a string: whether it is a key.
    let mut string: Option<bool> = None;
    let mut escaped = false;
    // Inside a number or literal: where it started.
    let mut scalar: Option<usize> = None;
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        if let Some(is_key) = string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                string = None;
                if is_key {
                    set_top(&mut stack, Frame::Colon);
                } else {
                    value_done(&mut stack);
                    safe = Safe {
                        at: i + 1,
                        closers: closers(&stack),
                    };
                }
            }
            i += 1;
            continue;
        }
        if scalar.is_some() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.') {
                i += 1;
                continue;
            }
            scalar = None;
            value_done(&mut stack);
            safe = Safe {
                at: i,
                closers: closers(&stack),
            };
            // The delimiter is read below.
        }
        let wants_value = matches!(stack.last(), None | Some(Frame::Value | Frame::Item));
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'{' | b'[' if wants_value => {
                stack.push(if b == b'{' { Frame::Key } else { Frame::Item });
                safe = Safe {
                    at: i + 1,
                    closers: closers(&stack),
                };
            }
            b'}' if matches!(stack.last(), Some(Frame::Key | Frame::AfterValue)) => {
                stack.pop();
                value_done(&mut stack);
                safe = Safe {
                    at: i + 1,
                    closers: closers(&stack),
                };
                if stack.is_empty() {
                    break;
                }
            }
            b']' if matches!(stack.last(), Some(Frame::Item | Frame::AfterItem)) => {
                stack.pop();
                value_done(&mut stack);
                safe = Safe {
                    at: i + 1,
                    closers: closers(&stack),
                };
                if stack.is_empty() {
                    break;
                }
            }
            b'"' if wants_value || stack.last() == Some(&Frame::Key) => {
                let is_key = stack.last() == Some(&Frame::Key);
                string = Some(is_key);
            }
            b':' if stack.last() == Some(&Frame::Colon) => set_top(&mut stack, Frame::Value),
            b',' => match stack.last() {
                Some(Frame::AfterValue) => set_top(&mut stack, Frame::Key),
                Some(Frame::AfterItem) => set_top(&mut stack, Frame::Item),
                _ => return None,
            },
            b if wants_value && !stack.is_empty() && (b.is_ascii_alphanumeric() || b == b'-') => scalar = Some(i),
            _ => return None,
        }
        i += 1;
    }
    let completed = match string {
        // A string value being written: show what it holds so far.
        Some(false) => {
            let mut body = text;
            if escaped {
                body = &body[..body.len() - 1];
            } else if let Some(cut) = open_unicode_escape(body) {
                body = &body[..cut];
            }
            if let Some(cut) = lone_high_surrogate(body) {
                body = &body[..cut];
            }
            value_done(&mut stack);
            format!("{body}\"{}", closers(&stack))
        }
        _ => format!("{}{}", &text[..safe.at], safe.closers),
    };
    serde_json::from_str(&completed).ok()
}

/// The part of a structured answer's text so far where its JSON is, as the output codec reads
/// the whole answer: after a reasoning model's `<think>…</think>` (`None` while it thinks) and
/// after a code fence's opening line (`None` until that line is over).
pub(crate) fn answer_json(text: &str) -> Option<&str> {
    let mut rest = text.trim_start();
    if let Some(thinking) = rest.strip_prefix("<think>") {
        rest = thinking.split_once("</think>")?.1.trim_start();
    }
    if let Some(fenced) = rest.strip_prefix("```") {
        let fenced = fenced.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
        // Until a line break or space ends it, "```js" may still become "```json".
        if !fenced.starts_with(char::is_whitespace) {
            return None;
        }
        rest = fenced.trim_start();
    }
    Some(rest)
}

/// A `\uXXXX` escape cut short at the end of `body`: where it starts.
///
/// Searched in bytes: the last five bytes of a string being written may start inside a
/// character of more than one byte (Korean text, say), where a `str` cannot be cut.
fn open_unicode_escape(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let tail = bytes.len().saturating_sub(5);
    let at = bytes[tail..].windows(2).rposition(|w| w == b"\\u")? + tail;
    let digits = &bytes[at + 2..];
    (digits.len() < 4 && digits.iter().all(u8::is_ascii_hexdigit) && !is_escaped(body, at)).then_some(at)
}

/// A `\uD800`–`\uDBFF` escape at the end of `body`: the first half of a character beyond
/// the BMP whose second half has not arrived (alone it is not JSON). Where it starts.
fn lone_high_surrogate(body: &str) -> Option<usize> {
    let at = body.len().checked_sub(6)?;
    let escape = body.as_bytes().get(at..)?;
    let hex = std::str::from_utf8(escape.get(2..)?).ok()?;
    let unit = u16::from_str_radix(hex, 16).ok()?;
    (escape.starts_with(b"\\u") && (0xD800..=0xDBFF).contains(&unit) && !is_escaped(body, at)).then_some(at)
}

/// Whether the backslash at `at` is itself escaped (preceded by an odd number of backslashes).
fn is_escaped(body: &str, at: usize) -> bool {
    body[..at].bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

fn set_top(stack: &mut [Frame], frame: Frame) {
    if let Some(top) = stack.last_mut() {
        *top = frame;
    }
}

/// A value ended in the innermost frame.
fn value_done(stack: &mut [Frame]) {
    if let Some(top) = stack.last_mut() {
        *top = match top {
            Frame::Item | Frame::AfterItem => Frame::AfterItem,
            _ => Frame::AfterValue,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::partial_json;
    use serde_json::{Value, json};

    #[test]
    fn every_prefix_of_a_document_reads_and_only_grows_towards_it() {
        let doc = r#"{"name": "Ada \"the\" first \u00e9", "age": 36, "tags": ["math", "code"], "ok": true, "nested": {"a": [1, {"b": null}], "c": -1.5e3}, "empty": {}}"#;
        let full: Value = serde_json::from_str(doc).unwrap_or(Value::Null);
        let mut last_keys = 0;
        for cut in 1..=doc.len() {
            if !doc.is_char_boundary(cut) {
                continue;
            }
            let prefix = &doc[..cut];
            let Some(snapshot) = partial_json(prefix) else {
                panic!("no snapshot for {prefix:?}");
            };
            let keys = snapshot.as_object().map_or(0, |m| m.len());
            assert!(keys >= last_keys, "members never disappear: {prefix:?}");
            last_keys = keys;
            // Every complete member is the document's own.
            for (k, v) in snapshot.as_object().into_iter().flatten() {
                let want = &full[k];
                match (v, want) {
                    (Value::String(got), Value::String(want)) => assert!(want.starts_with(got.as_str()), "{prefix:?}"),
                    (Value::Object(_), _) | (Value::Array(_), _) => {}
                    (got, want) => assert_eq!(got, want, "{prefix:?}"),
                }
            }
        }
        assert_eq!(partial_json(doc), Some(full));
    }

    #[test]
    fn incomplete_scalars_keys_and_escapes_are_left_out() {
        assert_eq!(partial_json(r#"{"a": 12"#), Some(json!({})));
        assert_eq!(partial_json(r#"{"a": 12,"#), Some(json!({"a": 12})));
        assert_eq!(partial_json(r#"{"a": tru"#), Some(json!({})));
        assert_eq!(partial_json(r#"{"a": "x\"#), Some(json!({"a": "x"})));
        assert_eq!(partial_json(r#"{"a": "x\u00"#), Some(json!({"a": "x"})));
        assert_eq!(partial_json(r#"{"a": "x\\u00"#), Some(json!({"a": "x\\u00"})));
        assert_eq!(partial_json(r#"{"a":"#), Some(json!({})));
        assert_eq!(partial_json(r#"{"ke"#), Some(json!({})));
        assert_eq!(partial_json(r#"[{"a": 1}, {"b""#), Some(json!([{"a": 1}, {}])));
        assert_eq!(partial_json("  {"), Some(json!({})));
        assert_eq!(partial_json(r#"{"a": "한국"#), Some(json!({"a": "한국"})));
        assert_eq!(partial_json(r#"{"a": "é\u00"#), Some(json!({"a": "é"})));
        // A surrogate pair cut after its first half, or inside its second.
        assert_eq!(partial_json(r#"{"a": "x\ud83d"#), Some(json!({"a": "x"})));
        assert_eq!(partial_json(r#"{"a": "x\ud83d\"#), Some(json!({"a": "x"})));
        assert_eq!(partial_json(r#"{"a": "x\ud83d\ude0"#), Some(json!({"a": "x"})));
        assert_eq!(partial_json(r#"{"a": "x\ud83d\ude00"#), Some(json!({"a": "x😀"})));
        assert_eq!(partial_json(r#"{"a": "x\\ud83d"#), Some(json!({"a": "x\\ud83d"})));
    }

    #[test]
    fn an_answers_json_starts_after_its_thinking_and_its_fence() {
        use super::answer_json;
        assert_eq!(answer_json(" {\"a\""), Some("{\"a\""));
        assert_eq!(answer_json("<think>{\"b\": 1}"), None);
        assert_eq!(answer_json("<think>{\"b\": 1}</think>\n{\"a\""), Some("{\"a\""));
        assert_eq!(answer_json("```js"), None);
        assert_eq!(answer_json("```json\n{\"a\""), Some("{\"a\""));
        assert_eq!(answer_json("<think>x</think>```\n["), Some("["));
    }

    #[test]
    fn what_is_not_an_object_or_array_is_none() {
        assert_eq!(partial_json(""), None);
        assert_eq!(partial_json("\"text"), None);
        assert_eq!(partial_json("42"), None);
        assert_eq!(partial_json("Sure! {\"a\": 1}"), None);
        assert_eq!(partial_json("{]"), None);
        assert_eq!(partial_json("{\"a\" 1"), None);
    }
}
