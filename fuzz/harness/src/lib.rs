//! The fuzz targets' entry points: one function per target, taking the fuzzer's bytes.
//!
//! Each function must return normally for every input: a panic (a failed assertion included)
//! is a finding. The libFuzzer binaries in `fuzz/fuzz_targets/` only call these; the
//! regression replay (`tests/regressions.rs`) runs them on every committed corpus file and every
//! file of `fuzz/artifacts-regressions/`, on stable, as a normal `cargo test`.
//!
//! Besides "no panic", the targets check properties the code promises (documented next to
//! each function).

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod agents;

mod checkpoint;
mod mcp;
mod skills;
mod streams;
mod toml_config;
mod tool_args;

pub use checkpoint::checkpoint;
pub use mcp::mcp_tool_result;
pub use skills::skill_front_matter;
pub use streams::{ollama_ndjson, openai_sse, pieces};
pub use toml_config::modu_toml;
pub use tool_args::tool_arguments;

/// The targets, by name (the folders of `fuzz/corpus/` and `fuzz/artifacts-regressions/`).
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("openai_sse", openai_sse),
    ("ollama_ndjson", ollama_ndjson),
    ("tool_arguments", tool_arguments),
    ("checkpoint", checkpoint),
    ("skill_front_matter", skill_front_matter),
    ("mcp_tool_result", mcp_tool_result),
    ("modu_toml", modu_toml),
];

/// One current-thread runtime per thread, created once (libFuzzer runs inputs on one thread).
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
    }
    RT.with(|rt| rt.block_on(f))
}
