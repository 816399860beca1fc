//! The run loop's own overhead: one run = one model call that calls a tool, the tool call,
//! and a second model call that answers — with `ScriptedModel`, so no I/O is measured.
//!
//! Run with `cargo bench -p modu-core --bench run_loop` (or `cargo xtask bench`). Prints
//! criterion's time per run, then the bytes and allocations per run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::alloc::System;

use criterion::Criterion;
use modu_core::{Agent, FunctionTool};
use modu_testing::ScriptedModel;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

fn agent() -> Agent<(), String> {
    let model = ScriptedModel::new()
        .tool_call("add", serde_json::json!({"a": 2, "b": 3}))
        .text("2 + 3 = 5")
        .cycle()
        .without_recording();
    let add = FunctionTool::<()>::typed(
        "add",
        "Add two integers",
        |_ctx, a: AddArgs| async move { Ok(a.a + a.b) },
    );
    Agent::builder(model)
        .instructions("You add numbers.")
        .tool(add)
        .build()
        .unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let agent = agent();
    // Warm up (lazy statics, schema validators).
    for _ in 0..100 {
        assert!(rt.block_on(agent.run("What is 2 + 3?")).is_ok());
    }

    let mut c = Criterion::default().configure_from_args();
    c.bench_function("run_loop/one_tool_call_then_answer", |b| {
        b.to_async(&rt).iter(|| async {
            let r = agent.run("What is 2 + 3?").await;
            assert!(r.is_ok());
            r
        })
    });
    c.final_summary();

    let runs = 2_000u64;
    let region = Region::new(GLOBAL);
    for _ in 0..runs {
        let r = rt.block_on(agent.run("What is 2 + 3?"));
        assert!(r.is_ok());
    }
    let stats = region.change();
    println!(
        "run_loop/one_tool_call_then_answer: {} bytes allocated per run, {} allocations per run ({} runs)",
        stats.bytes_allocated as u64 / runs,
        stats.allocations as u64 / runs,
        runs
    );
}
