//! The unit tests of `modu_core::mask` (kept out of the crate's sources).
#![allow(clippy::unwrap_used)]

use modu_core::mask::*;
#[allow(unused_imports)]
use modu_core::*;
use serde_json::Value;
use serde_json::json;

#[test]
fn key_rule() {
    let m = SecretMasker::default();
    for k in [
        "api_key",
        "API_KEY",
        "apiKey",
        "X-Api-Key",
        "openai_api_key",
        "myapikey",
        "token",
        "github_token",
        "accessToken",
        "Authorization",
        "password",
        "db_password",
        "passwd",
        "client_secret",
        "Set-Cookie",
        "cookie",
    ] {
        assert!(m.is_secret_key(k), "{k} should be secret");
    }
    for k in [
        "tokens",
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "tokenizer",
        "run_id",
        "text",
        "agent",
        "tools",
    ] {
        assert!(!m.is_secret_key(k), "{k} should not be secret");
    }
}

#[test]
fn masks_nested_arrays_and_json_in_strings() {
    let m = SecretMasker::default();
    let v = json!({
        "a": {"b": {"c": {"password": "p1", "keep": "ok"}}},
        "list": [{"token": "t1"}, [{"api_key": "k1"}]],
        "embedded": "{\"client_secret\": \"s1\", \"n\": 1}",
        "text": "call with api_key=k2 and Authorization: Bearer b1, \"password\": \"p2\" done",
        "escaped": "body={\\\"secret\\\":\\\"s2\\\"}",
        "usage": {"input_tokens": 3},
        "nothing": null,
        "token": null
    });
    let out = m.mask_value(&v).to_string();
    for s in ["p1", "t1", "k1", "s1", "k2", "b1", "p2", "s2"] {
        assert!(
            !out.contains(&format!("{s}\"")) && !out.contains(&format!("{s} ")),
            "{s} leaked: {out}"
        );
    }
    let masked = m.mask_value(&v);
    assert_eq!(masked["a"]["b"]["c"]["keep"], "ok");
    assert_eq!(masked["usage"]["input_tokens"], 3);
    assert_eq!(masked["a"]["b"]["c"]["password"], MASK);
    assert_eq!(
        masked["text"],
        "call with api_key=*** and Authorization: Bearer ***, \"password\": \"***\" done"
    );
    assert_eq!(masked["escaped"], "body={\\\"secret\\\":\\\"***\\\"}");
    let embedded: Value = serde_json::from_str(masked["embedded"].as_str().unwrap()).unwrap();
    assert_eq!(embedded, json!({"client_secret": "***", "n": 1}));
    assert!(masked["token"].is_null());
}

#[test]
fn free_text_patterns() {
    let m = SecretMasker::default();
    assert_eq!(m.mask_text("url?x=1&apikey=abc&y=2"), "url?x=1&apikey=***&y=2");
    assert_eq!(m.mask_text("token='q w'"), "token='***'");
    assert_eq!(m.mask_text("no secrets here, tokens: 5"), "no secrets here, tokens: 5");
    assert_eq!(m.mask_text("the token limit"), "the token limit");
    assert_eq!(m.mask_text("비밀 password=한글값 끝"), "비밀 password=*** 끝");
}

#[test]
fn odd_text_never_panics() {
    let m = SecretMasker::default();
    for t in [
        "",
        "token",
        "token=",
        "token:",
        "token=\"",
        "token=\"\\",
        "token='한",
        "password=\\\"",
        "api_key: \"a\\é\"",
        "Authorization: Bearer",
        "Authorization: bearer 한국어",
        "{\"token\": ",
        "[1, {\"secret\": [\"x\"]}]",
        "x-api-key=é=é",
        "\\\"token\\\":",
    ] {
        let _ = m.mask_text(t);
    }
    assert_eq!(m.mask_text("[1, {\"secret\": [\"x\"]}]"), "[1,{\"secret\":\"***\"}]");
}

#[test]
fn custom_keys() {
    let m = SecretMasker::new(["ssn"]);
    assert!(m.is_secret_key("user_ssn"));
    assert!(!m.is_secret_key("password"));
    let m = SecretMasker::default().with_additional_keys(["ssn"]);
    assert!(m.is_secret_key("password") && m.is_secret_key("SSN"));
}

#[test]
fn a_cookie_header_in_text_is_masked_to_the_end_of_its_line() {
    let m = SecretMasker::default();
    let masked = m.mask_text("GET /\r\nCookie: theme=dark; sessionid=SEC-COOKIE-SESSION\r\nAccept: */*");
    assert!(!masked.contains("SEC-COOKIE-SESSION"), "{masked}");
    assert!(!masked.contains("theme=dark"), "{masked}");
    assert!(masked.contains("Accept: */*"), "the next header is kept: {masked}");
    let masked = m.mask_text("set-cookie: id=SEC-SET-COOKIE; Path=/; HttpOnly");
    assert!(!masked.contains("SEC-SET-COOKIE"), "{masked}");
    // Other keys still end at `;`.
    assert_eq!(m.mask_text("token=t1; keep=1"), "token=***; keep=1");
}
