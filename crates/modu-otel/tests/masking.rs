//! Secrets in tool arguments, tool results, model messages and errors never reach the logging
//! or audit output: a real agent run, the sinks behind a `CompositeEventSink`, and a search of
//! the captured text for every secret.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modu_agent::Agent;
use modu_agent::sinks::{AuditEventSink, CompositeEventSink, LoggingEventSink};
use modu_core::{FunctionTool, ModelError, ToolError, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

/// A `Write` that appends to a shared buffer (for the tracing subscriber and the audit sink).
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Buf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Buf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const SECRETS: &[&str] = &[
    "Sx-pass-3deep",
    "Sx-apikey-arr",
    "Sx-token-arr2",
    "Sx-bearer-jsonstr",
    "Sx-clientsecret-text",
    "Sx-cookie-arr",
    "Sx-result-access",
    "Sx-result-setcookie",
    "Sx-toolerr-passwd",
    "Sx-toolerr-json-secret",
    "Sx-model-refresh",
    "Sx-model-xapikey",
    "Sx-model-auth",
    "Sx-runerr-apikey",
    "Sx-runerr-password",
];

fn permissive(name: &str) -> ToolSpec {
    ToolSpec::new(name, "test tool", json!({"type": "object"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_logging_or_audit_output() {
    let log = Buf::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let audit_buf = Buf::default();
    let audit = Arc::new(AuditEventSink::new(audit_buf.clone()).with_deltas(true));
    let sink = CompositeEventSink::builder()
        .sink("log", Arc::new(LoggingEventSink::new().with_deltas(true)))
        .sink("audit", audit)
        .build();

    let seen_password = Arc::new(Mutex::new(String::new()));
    let seen = Arc::clone(&seen_password);
    let lookup = FunctionTool::<()>::new(permissive("lookup"), move |_ctx, args| {
        let seen = Arc::clone(&seen);
        async move {
            *seen.lock().unwrap() = args["config"]["auth"]["credentials"]["password"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            Ok(json!({
                "result": {"deep": {"deeper": {"access_token": "Sx-result-access"}}},
                "cookies": [{"set-cookie": "Sx-result-setcookie"}],
            }))
        }
    });
    let failing = FunctionTool::<()>::new(permissive("connect"), |_ctx, _args| async move {
        Err(ToolError::execution("db_error").with_message(
            "login failed for passwd=Sx-toolerr-passwd, server said {\"secret\": \"Sx-toolerr-json-secret\"}",
        ))
    });

    let arguments = json!({
        "config": {"auth": {"credentials": {"password": "Sx-pass-3deep", "user": "kim"}}},
        "items": [{"api_key": "Sx-apikey-arr"}, {"nested": [{"token": "Sx-token-arr2"}]}],
        "headers": "{\"Authorization\": \"Bearer Sx-bearer-jsonstr\"}",
        "note": "use client_secret=Sx-clientsecret-text please",
        "jar": [["cookie", {"cookie": "Sx-cookie-arr"}]],
    });
    let model = ScriptedModel::new()
        .tool_calls([("lookup", arguments), ("connect", json!({"host": "db"}))])
        .text_deltas([
            "Done. refresh_token: Sx-model-refresh; ",
            "config {\"x-api-key\": \"Sx-model-xapikey\"} ",
            "and Authorization: Bearer Sx-model-auth",
        ]);
    let agent = Agent::builder(model)
        .name("masked")
        .tool(lookup)
        .tool(failing)
        .event_sink(Arc::new(sink.clone()))
        .build()
        .unwrap();
    let result = agent.run("go").await;
    assert!(result.is_completed(), "{:?}", result.error());
    // The secrets really flowed through the run.
    assert_eq!(*seen_password.lock().unwrap(), "Sx-pass-3deep");
    let transcript = serde_json::to_string(&result.messages()).unwrap();
    for s in ["Sx-result-access", "Sx-toolerr-passwd", "Sx-apikey-arr"] {
        assert!(transcript.contains(s), "{s} should be in the run's messages");
    }
    assert!(
        result
            .output()
            .map(String::as_str)
            .unwrap()
            .contains("Sx-model-refresh")
    );

    // A failing run: the model error text carries secrets.
    let failing_model = ScriptedModel::new().error(|| ModelError::Authentication {
        status: 401,
        message:
            "{\"error\": {\"message\": \"bad key\", \"api_key\": \"Sx-runerr-apikey\"}} password=Sx-runerr-password"
                .into(),
    });
    let agent2 = Agent::builder(failing_model)
        .name("masked-fail")
        .event_sink(Arc::new(sink.clone()))
        .build()
        .unwrap();
    let failed = agent2.run("go").await;
    let err = failed.error().expect("the run fails").to_string();
    assert!(err.contains("Sx-runerr-apikey"));

    assert!(sink.flush(Duration::from_secs(5)).await);
    let stats = sink.stats();
    assert!(stats.iter().all(|s| s.lost() == 0 && s.delivered > 0), "{stats:?}");

    let logs = log.text();
    let audit = audit_buf.text();
    // The outputs are there and masked.
    for needle in ["tool_call_started", "run_failed", "model_delta", "***"] {
        assert!(logs.contains(needle), "log lacks {needle}:\n{logs}");
        assert!(audit.contains(needle), "audit lacks {needle}:\n{audit}");
    }
    assert!(audit.contains("\\\"user\\\":\\\"kim\\\"") || audit.contains("\"user\":\"kim\""));
    for s in SECRETS {
        assert!(!logs.contains(s), "secret {s} in the log output:\n{logs}");
        assert!(!audit.contains(s), "secret {s} in the audit output:\n{audit}");
    }
    // Every audit line is JSON.
    for line in audit.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["type"].is_string() && v["ts_ms"].is_u64());
    }
}
