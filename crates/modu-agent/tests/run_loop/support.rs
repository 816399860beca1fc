//! Helpers shared by the run-loop tests: a counting `add` tool, fast retries, tool results.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modu_agent::RetryConfig;
use modu_core::FunctionTool;

pub(crate) fn fast_retry(attempts: u32) -> RetryConfig {
    RetryConfig::new(attempts).with_backoff(Duration::from_millis(1), Duration::from_millis(5))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct AddArgs {
    a: i64,
    b: i64,
}

pub(crate) fn add_tool(calls: Arc<AtomicUsize>) -> FunctionTool<()> {
    FunctionTool::typed("add", "Add two integers", move |_ctx, a: AddArgs| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok(a.a + a.b) }
    })
}
