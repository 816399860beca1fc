//! Project automation, in Rust rather than shell scripts.
//!
//! - `cargo xtask ci` — everything CI checks: format, tidy, clippy, the core's dependency rule,
//!   the workspace on exactly its `rust-version` toolchain (`msrv.rs`), the
//!   facade's feature matrix, the provider crates without TLS, the tests (with real services
//!   started), every bench target once in smoke mode, the fuzz smoke (`fuzz/smoke.sh`), docs,
//!   the public API of modu-core, modu-agent and modu against `xtask/api/*.txt` (nightly rustdoc JSON),
//!   `cargo package` of every publishable crate, the examples with their output checked,
//!   cargo-deny (required under `CI=true`).
//! - `cargo xtask tidy` — the repository's rules (xtask/src/tidy/): file budgets, the internal
//!   crate dependency table, docs/architecture.md's module table, no seed references in rustdoc,
//!   modu-core's and modu-agent's import rules.
//! - `cargo xtask api [--bless]` — the public-API snapshot check alone; `--bless` rewrites it.
//! - `cargo xtask step <name>` — one of those steps alone (`no-tls`, `examples`, `bench-smoke`,
//!   `fuzz-smoke`, `deny`, `package`, `msrv`), with the services the environment names (`REDIS_URL`, …).
//! - `cargo xtask services` — installs (once, under `.services/`) and starts the real servers the
//!   tests use (Redis, PostgreSQL, a llama.cpp server with a small model, MCP peers), writes
//!   `.services/env.sh`, and keeps them running until Ctrl-C.
//! - `cargo xtask bench [loop|load|server|all] [ARGS..]` — the benchmarks (ARGS go to the load
//!   benches: `--quick`, `--reps N`, `--runs-scale F`, `--enforce`; server: `--quick`, `--runs N`,
//!   `--concurrency N`, `--latency-ms N`). `cargo xtask bench footprint [--runs R]
//!   [--concurrency C]`: the load bench's clients under callgrind (needs valgrind), deterministic.
#![allow(clippy::print_stdout)]

mod api;
mod api_sig;
mod bench;
mod checks;
mod examples;
mod msrv;
mod services;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use bench::{bench, bench_smoke};
use checks::{check_core_dependencies, deny, facade_feature_sets, fuzz_smoke, no_tls, package};
use examples::examples;
use services::{Services, services_foreground, test_with_services};

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(&args[1..]),
        Some("tidy") => tidy::run(&root()),
        Some("api") => api::run(&root(), args.iter().any(|a| a == "--bless")),
        Some("services") => services_foreground(),
        Some("bench") => bench(&args[1..]),
        Some("test") => test_with_services(&args[1..]),
        // Hidden: one CI step alone, for working on it.
        Some("step") => step(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 ci [--skip-services]   fmt, clippy, dependency rule, feature matrix, no-TLS builds, tests,\n  \
                 \x20                      bench smoke, fuzz smoke, docs, examples (output checked), deny\n  \
                 tidy                   the repository's rules: file budgets, crate dependency table, doc tables, rustdoc, imports\n  \
                 api [--bless]          the public API of modu-core, modu-agent and modu (nightly rustdoc JSON) against xtask/api/*.txt\n  \
                 test [ARGS..]          cargo test --workspace --all-features with services up (extra args passed on)\n  \
                 services               install and start Redis, llama.cpp and MCP peers; Ctrl-C stops them\n  \
                 bench [loop|load|server|all]  run the benchmarks (load takes --quick, --reps N, --enforce; server --quick, --runs N, --concurrency N)\n  \
                 bench footprint [--runs R] [--concurrency C]  the load bench's clients under callgrind (needs valgrind)"
            );
            Err(String::new())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("xtask: {e}");
            }
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn run(step: &str, cmd: &mut Command) -> Result<()> {
    println!("\n==> {step}\n    {cmd:?}");
    let started = Instant::now();
    let status = cmd
        .current_dir(root())
        .status()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    println!("    ({step}: {:.1}s)", started.elapsed().as_secs_f64());
    if status.success() {
        Ok(())
    } else {
        Err(format!("{step} failed ({status})"))
    }
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .current_dir(root())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed ({})", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ci(args: &[String]) -> Result<()> {
    let skip_services = args.iter().any(|a| a == "--skip-services");
    let started = Instant::now();
    run("fmt", Command::new(cargo()).args(["fmt", "--all", "--check"]))?;
    tidy::run(&root())?;
    run(
        "clippy",
        Command::new(cargo()).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    check_core_dependencies()?;
    msrv::run(&root())?;
    for feature_args in facade_feature_sets() {
        let mut cmd = Command::new(cargo());
        cmd.args(["check", "-p", "modu", "--locked"]).args(&feature_args);
        run(&format!("facade {}", feature_args.join(" ")), &mut cmd)?;
    }
    no_tls()?;
    // The services stay up for the bench smoke (Redis, the MCP peer).
    let services = if skip_services {
        run(
            "test",
            Command::new(cargo()).args(["test", "--workspace", "--all-features", "--locked"]),
        )?;
        None
    } else {
        let services = Services::start()?;
        let mut cmd = Command::new(cargo());
        cmd.args(["test", "--workspace", "--all-features", "--no-fail-fast", "--locked"])
            .envs(&services.env);
        run("test (with services)", &mut cmd)?;
        Some(services)
    };
    bench_smoke(services.as_ref().map(|s| &s.env))?;
    drop(services);
    fuzz_smoke()?;
    run(
        "doc",
        Command::new(cargo())
            .args(["doc", "--workspace", "--all-features", "--no-deps", "--locked"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    println!("\n==> api: the public API against xtask/api/");
    api::run(&root(), false)?;
    package()?;
    examples()?;
    deny()?;
    println!("\nci: all green in {:.0}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Whether this runs under CI (`CI` set to anything but empty, `false` or `0`), as
/// `modu_testing::service_env` reads it.
fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// `cargo xtask step <name>`: one CI step alone. The services are not started: the steps use
/// what the environment names (`REDIS_URL`, `MODU_MCP_EVERYTHING`).
fn step(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("no-tls") => no_tls(),
        Some("examples") => examples(),
        Some("bench-smoke") => bench_smoke(None),
        Some("fuzz-smoke") => fuzz_smoke(),
        Some("deny") => deny(),
        Some("package") => package(),
        Some("msrv") => msrv::run(&root()),
        other => Err(format!(
            "unknown step {other:?}; one of: no-tls, examples, bench-smoke, fuzz-smoke, deny, package, msrv"
        )),
    }
}
