//! Secrets in tool arguments, tool errors, model text, run output and run errors never reach
//! a span (name, attributes, status, events) with content capture on: real agent runs, the
//! in-memory exporter, and a search of everything exported for every secret.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use modu_agent::Agent;
use modu_core::{FunctionTool, ModelError, ToolError, ToolSpec};
use modu_otel::OtelEventSink;
use modu_testing::ScriptedModel;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::json;

const SECRETS: &[&str] = &[
    "Sx-arg-password",
    "Sx-arg-apikey",
    "Sx-arg-bearer",
    "Sx-toolerr-passwd",
    "Sx-toolerr-json",
    "Sx-model-refresh",
    "Sx-model-auth",
    "Sx-runerr-apikey",
    "Sx-runerr-password",
];

fn tool(name: &str) -> ToolSpec {
    ToolSpec::new(name, "test tool", json!({"type": "object"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_a_span_with_content_capture_on() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let sink = Arc::new(
        OtelEventSink::builder(provider.tracer("test"))
            .capture_content(true)
            .build(),
    );
    let lookup = FunctionTool::<()>::new(tool("lookup"), |_ctx, _args| async move { Ok(json!({"ok": true})) });
    let connect = FunctionTool::<()>::new(tool("connect"), |_ctx, _args| async move {
        Err(ToolError::execution("db_error")
            .with_message("login failed for passwd=Sx-toolerr-passwd, server said {\"secret\": \"Sx-toolerr-json\"}"))
    });
    let arguments = json!({
        "auth": {"password": "Sx-arg-password"},
        "items": [{"api_key": "Sx-arg-apikey"}],
        "headers": "{\"Authorization\": \"Bearer Sx-arg-bearer\"}",
    });
    let model = ScriptedModel::new()
        .tool_calls([("lookup", arguments), ("connect", json!({"host": "db"}))])
        .text_deltas([
            "Done. refresh_token: Sx-model-refresh; ",
            "Authorization: Bearer Sx-model-auth",
        ]);
    let agent = Agent::builder(model)
        .name("masked")
        .tool(lookup)
        .tool(connect)
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let done = agent.run("go").await;
    assert!(done.is_completed(), "{:?}", done.error());
    assert!(done.output().unwrap().contains("Sx-model-refresh"));

    let failing = ScriptedModel::new().error(|| ModelError::Authentication {
        status: 401,
        message: "{\"error\": {\"api_key\": \"Sx-runerr-apikey\"}} password=Sx-runerr-password".into(),
    });
    let agent2 = Agent::builder(failing)
        .name("masked-fail")
        .event_sink(sink)
        .build()
        .unwrap();
    let failed = agent2.run("go").await;
    assert!(failed.error().unwrap().to_string().contains("Sx-runerr-apikey"));

    let spans = exporter.get_finished_spans().unwrap();
    let exported = format!("{spans:?}");
    // Content was captured and masked, the errors were recorded.
    for needle in [
        "gen_ai.tool.call.arguments",
        "gen_ai.output.messages",
        "db_error",
        "***",
    ] {
        assert!(exported.contains(needle), "{needle} not exported:\n{exported}");
    }
    for s in SECRETS {
        assert!(!exported.contains(s), "secret {s} in a span:\n{exported}");
    }
}
