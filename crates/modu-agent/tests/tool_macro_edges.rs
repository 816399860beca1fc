//! `#[tool]` on functions whose names or parameters could clash with what the macro generates.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use modu_core::{RunContext, Tool};
use modu_macros::tool;
use serde_json::json;

/// Search within a context the model names.
#[tool]
async fn search(ctx: String, arguments: Vec<String>) -> String {
    format!("{ctx}: {}", arguments.join(","))
}

/// The same, synchronously.
#[tool]
fn search_sync(ctx: String, arguments: Vec<String>) -> String {
    format!("{ctx}: {}", arguments.join(","))
}

/// A parameter named `ctx` beside the run context.
#[tool]
async fn scoped(run: &RunContext<u8>, ctx: String) -> String {
    format!("{}:{ctx}", run.context())
}

/// A parameter named as the function.
#[tool]
async fn echo(echo: String) -> String {
    echo
}

#[tokio::test]
async fn parameters_named_like_the_generated_code_are_the_models() {
    let unit = RunContext::new(Arc::new(()), "run-1");
    let args = json!({"ctx": "docs", "arguments": ["a", "b"]});
    assert_eq!(Search.call(&unit, args.clone()).await.unwrap(), json!("docs: a,b"));
    assert_eq!(SearchSync.call(&unit, args).await.unwrap(), json!("docs: a,b"));
    let spec = Tool::<()>::spec(&Search);
    assert!(spec.parameters["properties"].get("ctx").is_some());
    assert!(spec.parameters["properties"].get("arguments").is_some());
    let seven = RunContext::new(Arc::new(7u8), "run-2");
    assert_eq!(Scoped.call(&seven, json!({"ctx": "x"})).await.unwrap(), json!("7:x"));
    assert_eq!(Echo.call(&unit, json!({"echo": "hi"})).await.unwrap(), json!("hi"));
}

/// Match a pattern (a raw identifier as the function's name).
#[tool]
async fn r#match(pattern: String, r#type: String) -> String {
    format!("{pattern}/{type}", type = r#type)
}

#[tokio::test]
async fn a_raw_identifier_names_the_tool_without_its_prefix() {
    let spec = Tool::<()>::spec(&Match);
    assert_eq!(spec.name, "match");
    assert!(spec.parameters["properties"].get("type").is_some());
    let unit = RunContext::new(Arc::new(()), "run-3");
    let out = Match
        .call(&unit, json!({"pattern": "a*", "type": "glob"}))
        .await
        .unwrap();
    assert_eq!(out, json!("a*/glob"));
}

/// Convert a document.
///
/// Formats:
/// - text
///   - plain
///   - markdown
///
///     indented code stays code
#[tool]
async fn convert(text: String) -> String {
    text
}

#[test]
fn the_description_keeps_the_doc_comments_indentation() {
    let spec = Tool::<()>::spec(&Convert);
    assert_eq!(
        spec.description,
        "Convert a document.\n\nFormats:\n- text\n  - plain\n  - markdown\n\n    indented code stays code"
    );
}

/// Pick an item by the model's index.
#[tool]
async fn pick(index: usize) -> String {
    let items = ["a", "b"];
    items[index].to_owned()
}

#[tokio::test]
async fn an_async_tool_that_panics_fails_its_call_as_a_sync_one_does() {
    let unit = RunContext::new(Arc::new(()), "run-4");
    let e = Pick.call(&unit, json!({"index": 5})).await.unwrap_err();
    assert_eq!(e.reason, "tool_panicked");
    let model = modu_testing::ScriptedModel::new()
        .tool_calls([("pick", json!({"index": 7}))])
        .text("done");
    let agent = modu_agent::Agent::builder(model).tool(Pick).build().unwrap();
    let result = agent.run("pick the eighth").await;
    assert!(result.is_completed());
    assert!(result.messages()[2].text().contains("tool_panicked"));
}
