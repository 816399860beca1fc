//! The unit tests of `modu_core::redact` (kept out of the crate's sources).
#![allow(clippy::unwrap_used)]

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;

use modu_core::redact::*;
#[allow(unused_imports)]
use modu_core::*;

#[test]
fn masks_key_headers_bearer_tokens_and_json_escapes() {
    let r = Redactor::new(
        Some("sk-live-123"),
        ["Bearer gw-token-9", "org-\"quoted\"", "1"],
        "http://127.0.0.1/v1",
    );
    let text =
        r.text("key sk-live-123, auth Bearer gw-token-9, token gw-token-9, json \"org-\\\"quoted\\\"\", HTTP 401");
    assert_eq!(text, "key ***, auth ***, token ***, json \"***\", HTTP 401");
    assert!(!r.leaks(&text));
    assert!(matches!(r.text("nothing here"), Cow::Borrowed(_)));
}

#[test]
fn longer_secrets_go_first() {
    let r = Redactor::new(Some("abcd"), ["xxabcdyy"], "http://h");
    assert_eq!(r.text("xxabcdyy and abcd"), "*** and ***");
}

#[test]
fn error_sources_with_secrets_become_masked_copies() {
    #[derive(Debug)]
    struct Leaky;
    impl fmt::Display for Leaky {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("failed with sk-live-123")
        }
    }
    impl StdError for Leaky {}
    let r = Redactor::new(Some("sk-live-123"), [], "http://h");
    let err = r.error(ModelError::transport("sent sk-live-123", Leaky));
    let ModelError::Transport { message, source } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(message, "sent ***");
    assert_eq!(source.as_ref().unwrap().to_string(), "failed with ***");
    assert!(!format!("{err:?}").contains("sk-live-123"));
}
