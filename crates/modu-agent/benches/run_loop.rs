//! The run loop's own overhead: one run = one model call that calls a tool, the tool call,
//! and a second model call that answers — with `ScriptedModel`, so no I/O is measured. The
//! strict Plan-and-Execute run does the same work through PLAN, ACT_TOOL, STEP_RESULT and
//! FINALIZE (four model calls, checkpoints in memory at every transition).
//!
//! Run with `cargo bench -p modu-agent --bench run_loop` (or `cargo xtask bench`). Prints
//! criterion's time per run, then the bytes and allocations per run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::alloc::System;

use criterion::Criterion;
use modu_agent::Agent;
use modu_core::FunctionTool;
use modu_testing::ScriptedModel;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

/// The agent the benchmarks run: the standard policy, or strict Plan-and-Execute (whose script
/// adds the plan and the step result), with or without an in-memory checkpoint store.
fn agent(strict: bool, checkpoints: bool) -> Agent<(), String> {
    use modu_agent::plan::{LlmPlanGenerator, PlanAndExecutePolicy};
    let mut model = ScriptedModel::new();
    if strict {
        model = model.text(r#"{"steps": [{"description": "Add 2 and 3", "allowed_tools": ["add"]}]}"#);
    }
    model = model.tool_call("add", serde_json::json!({"a": 2, "b": 3}));
    if strict {
        model = model.text(r#"{"status": "completed", "result": "2 + 3 = 5"}"#);
    }
    let model = model.text("2 + 3 = 5").cycle().without_recording();
    let add = FunctionTool::<()>::typed(
        "add",
        "Add two integers",
        |_ctx, a: AddArgs| async move { Ok(a.a + a.b) },
    );
    let mut builder = Agent::builder(model).instructions("You add numbers.").tool(add);
    if strict {
        builder = builder.decision_policy(PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model()));
    }
    if checkpoints {
        builder = builder.checkpoint_store(std::sync::Arc::new(modu_core::InMemoryCheckpointStore::new()));
    }
    builder.build().unwrap()
}

/// Bytes and allocations per run of `agent`, over 2,000 runs.
fn allocations(rt: &tokio::runtime::Runtime, name: &str, agent: &Agent<(), String>) {
    let runs = 2_000u64;
    let region = Region::new(GLOBAL);
    for _ in 0..runs {
        let r = rt.block_on(agent.run("What is 2 + 3?"));
        assert!(r.is_completed());
    }
    let stats = region.change();
    println!(
        "{name}: {} bytes allocated per run, {} allocations per run ({} runs)",
        stats.bytes_allocated as u64 / runs,
        stats.allocations as u64 / runs,
        runs
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cases = [
        ("run_loop/one_tool_call_then_answer", agent(false, false)),
        ("run_loop/one_tool_call_then_answer_checkpointed", agent(false, true)),
        ("run_loop/strict_plan_one_step_one_tool", agent(true, false)),
        ("run_loop/strict_plan_one_step_one_tool_checkpointed", agent(true, true)),
    ];
    // Warm up (lazy statics, schema validators).
    for (_, agent) in &cases {
        for _ in 0..100 {
            assert!(rt.block_on(agent.run("What is 2 + 3?")).is_completed());
        }
    }

    let mut c = Criterion::default().configure_from_args();
    for (name, agent) in &cases {
        c.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async {
                let r = agent.run("What is 2 + 3?").await;
                assert!(r.is_completed());
                r
            })
        });
    }
    c.final_summary();

    allocations(&rt, cases[0].0, &cases[0].1);
    allocations(&rt, cases[2].0, &cases[2].1);
}
