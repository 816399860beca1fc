#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

#[cfg(feature = "bench")]
pub mod bench;
pub mod conformance;
mod ollama_mock;
mod openai_mock;
mod scripted;

pub use ollama_mock::{MockOllamaServer, OllamaReply};
pub use openai_mock::{MockOpenAiServer, MockReply, instance_of};
pub use scripted::ScriptedModel;

/// Reads the address of a real server the tests need (Redis, an LLM server, …) from the
/// environment variable `var`.
///
/// When the variable is unset the test should skip: this returns `None` after printing a loud
/// line to stderr. Under CI (`CI` set to anything but `false` or `0`) a missing variable is a
/// missing install step, so this panics instead of letting the test pass silently.
pub fn service_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Some(v),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
            assert!(
                !ci,
                "{var} is not set but CI is: the service this test needs was not started (see .ci/run and `cargo xtask services`)"
            );
            eprintln!("SKIPPED: {var} is not set; start the service with `cargo xtask services` to run this test");
            None
        }
    }
}

/// A unique prefix for keys, tables or files of one test, so tests can run in parallel
/// against one server.
pub fn unique_prefix(test: &str) -> String {
    format!("modu-test:{test}:{}", uuid::Uuid::new_v4().simple())
}
