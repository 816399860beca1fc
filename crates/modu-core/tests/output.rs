//! The unit tests of `modu_core::output` (kept out of the crate's sources).

use modu_core::output::*;
#[allow(unused_imports)]
use modu_core::*;

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema, Debug, PartialEq)]
struct A {
    n: i32,
}

#[test]
fn parses_fenced_json_and_reports_errors() {
    let c = JsonCodec::<A>::new();
    assert_eq!(c.parse("```json\n{\"n\": 3}\n```"), Ok(A { n: 3 }));
    assert!(c.parse("{\"n\": \"x\"}").is_err());
    assert_eq!(c.response_format().map(|f| f.name), Some("A".to_string()));
}
