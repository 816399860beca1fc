//! `#[tool]` from modu-macros, used with modu-core alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use modu_agent::{Agent, AgentRequest};
use modu_core::{RunContext, Tool, ToolError, ToolErrorKind};
use modu_macros::tool;
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

/// Add two integers.
#[tool(idempotent, timeout_seconds = 5, max_result_bytes = 64)]
async fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Multiply, synchronously.
#[tool(name = "multiply")]
fn mul(a: f64, b: f64) -> f64 {
    a * b
}

struct Shop {
    greeting: String,
}

/// Greet the current user.
#[tool(repair_safe)]
async fn greet(ctx: &RunContext<Shop>, name: String) -> String {
    format!("{}, {name}", ctx.context().greeting)
}

#[derive(Debug, thiserror::Error)]
#[error("db connection string postgres://admin:hunter2@db failed")]
struct DbError;

fn map_db(err: &(dyn std::error::Error + Send + Sync + 'static)) -> Option<ToolError> {
    err.downcast_ref::<DbError>()
        .map(|_| ToolError::execution("database_unavailable").retryable(true))
}

/// Look up an order.
#[tool(error_mapper = map_db)]
async fn lookup(id: u32) -> Result<String, DbError> {
    if id == 0 {
        Err(DbError)
    } else {
        Ok(format!("order {id}"))
    }
}

/// Fails with a typed error.
#[tool]
fn strict(n: u8) -> Result<u8, ToolError> {
    if n > 10 {
        Err(ToolError::validation("too_big", "n must be at most 10"))
    } else {
        Ok(n)
    }
}

#[test]
fn specs_come_from_the_function() {
    let spec = Tool::<()>::spec(&Add);
    assert_eq!(spec.name, "add");
    assert_eq!(spec.description, "Add two integers.");
    assert!(spec.idempotent && !spec.blocking);
    assert_eq!(spec.timeout, Some(Duration::from_secs(5)));
    assert_eq!(spec.max_result_bytes, Some(64));
    assert_eq!(spec.parameters["type"], "object");
    assert_eq!(spec.parameters["properties"]["a"]["type"], "integer");
    assert_eq!(spec.parameters["additionalProperties"], false);
    let required: Vec<&str> = spec.parameters["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, vec!["a", "b"]);

    let spec = Tool::<()>::spec(&Mul);
    assert_eq!(spec.name, "multiply");
    assert!(spec.blocking, "sync functions run on the blocking pool");

    // The context parameter is not part of the schema.
    let spec = Tool::<Shop>::spec(&Greet);
    assert!(spec.repair_safe);
    assert!(spec.parameters["properties"].get("ctx").is_none());
    assert!(spec.parameters["properties"].get("name").is_some());
}

#[tokio::test]
async fn calls_pass_the_context_and_map_errors() {
    let ctx = RunContext::new(
        std::sync::Arc::new(Shop {
            greeting: "Hello".into(),
        }),
        "run-1",
    );
    assert_eq!(
        Greet.call(&ctx, json!({"name": "Ada"})).await.unwrap(),
        json!("Hello, Ada")
    );
    let unit = RunContext::new(std::sync::Arc::new(()), "run-2");
    assert_eq!(Mul.call(&unit, json!({"a": 1.5, "b": 2.0})).await.unwrap(), json!(3.0));
    // Unknown fields and wrong types are validation errors.
    let e = Add.call(&unit, json!({"a": 1, "b": 2, "c": 3})).await.unwrap_err();
    assert_eq!(e.kind, ToolErrorKind::Validation);
    // The mapper classifies the tool's own error; its text never reaches the ToolError.
    let e = Lookup.call(&unit, json!({"id": 0})).await.unwrap_err();
    assert_eq!(e.reason, "database_unavailable");
    assert!(e.retryable);
    assert!(!format!("{e:?}").contains("hunter2"));
    // A ToolError returned by the function passes through.
    let e = Strict.call(&unit, json!({"n": 11})).await.unwrap_err();
    assert_eq!(e.reason, "too_big");
}

#[tokio::test]
async fn macro_tools_drive_an_agent() {
    let model = ScriptedModel::new()
        .tool_calls([("greet", json!({"name": "Ada"}))])
        .text("done");
    let agent = Agent::builder(model.clone())
        .context::<Shop>()
        .tool(Greet)
        .build()
        .unwrap();
    let result = agent
        .run(AgentRequest::new(
            Shop {
                greeting: "Welcome".into(),
            },
            "greet Ada",
        ))
        .await;
    assert!(result.is_completed());
    let tool_msg = &result.messages()[2];
    assert_eq!(tool_msg.text(), "Welcome, Ada");
    let offered: Vec<Value> = model.requests()[0]
        .tools
        .iter()
        .map(|t| (*t.parameters).clone())
        .collect();
    assert_eq!(offered[0]["properties"]["name"]["type"], "string");
}
