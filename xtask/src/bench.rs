//! `cargo xtask bench` (the benchmarks) and the CI bench smoke (every `[[bench]]` target once).

use std::collections::BTreeMap;
use std::process::Command;

use crate::{Result, cargo, root, run};

pub(crate) fn bench(args: &[String]) -> Result<()> {
    let which = args.first().map_or("all", String::as_str);
    if matches!(which, "loop" | "all") {
        run(
            "bench: run loop overhead (ScriptedModel)",
            Command::new(cargo()).args(["bench", "-p", "modu-agent", "--bench", "run_loop"]),
        )?;
    }
    if matches!(which, "load" | "all") {
        run(
            "bench: load through the OpenAI client vs hand-written reqwest",
            Command::new(cargo())
                .args(["run", "--release", "-p", "modu-openai", "--example", "load", "--"])
                .args(args.iter().skip(1)),
        )?;
    }
    // Not part of `all`: needs valgrind, and judges nothing (a diagnostic of the load bench).
    if which == "footprint" {
        run(
            "bench: the load bench's clients under callgrind (cost per run, hot code)",
            Command::new(cargo())
                .args([
                    "run",
                    "--release",
                    "-p",
                    "modu-openai",
                    "--example",
                    "load",
                    "--",
                    "--footprint",
                ])
                .args(args.iter().skip(1)),
        )?;
    }
    // --- modu-server: 1,000 concurrent AG-UI SSE runs against the in-process agent ---
    if matches!(which, "server" | "all") {
        run(
            "bench: AG-UI server load vs the agent in-process",
            Command::new(cargo())
                .args([
                    "run",
                    "--release",
                    "-p",
                    "modu-server",
                    "--example",
                    "server_load",
                    "--",
                ])
                .args(args.iter().skip(1)),
        )?;
    }
    // --- end: modu-server ---
    if !matches!(which, "loop" | "load" | "footprint" | "server" | "all") {
        return Err(format!(
            "unknown benchmark {which:?}; use loop, load, footprint, server or all"
        ));
    }
    Ok(())
}

/// `(package, bench)` for every `[[bench]]` target of the crates under `crates/`.
fn bench_targets() -> Result<Vec<(String, String)>> {
    let dir = root().join("crates");
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let manifest = entry.path().join("Cargo.toml");
        if let Ok(text) = std::fs::read_to_string(&manifest) {
            out.extend(benches_in_manifest(&text));
        }
    }
    out.sort();
    Ok(out)
}

/// The package name and the `[[bench]]` names of one Cargo.toml.
fn benches_in_manifest(text: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut package = None;
    let mut benches = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        let Some(value) = line
            .strip_prefix("name")
            .map(str::trim_start)
            .and_then(|rest| rest.strip_prefix('='))
            .map(|v| v.trim().trim_matches('"').to_owned())
        else {
            continue;
        };
        match section.as_str() {
            "[package]" => package = Some(value),
            "[[bench]]" => benches.push(value),
            _ => {}
        }
    }
    let package = package.unwrap_or_default();
    benches.into_iter().map(|b| (package.clone(), b)).collect()
}

/// Every bench target once, in its smoke mode (`-- --test`: criterion runs each benchmark once
/// as a test; the custom harnesses honour the same flag), so their assertions execute. One
/// cargo invocation over the workspace.
pub(crate) fn bench_smoke(services: Option<&BTreeMap<String, String>>) -> Result<()> {
    let targets = bench_targets()?;
    if targets.is_empty() {
        return Err("no [[bench]] targets found under crates/".into());
    }
    // The dev profile and the test build's feature set: the smoke checks the benches'
    // assertions, not their speed, so it reuses what `cargo test` compiled instead of building
    // the whole workspace again in the bench profile (20 minutes cold on 2 cores).
    let mut cmd = Command::new(cargo());
    cmd.args([
        "bench",
        "--locked",
        "--profile",
        "dev",
        "--workspace",
        "--all-features",
        "--bench",
        "*",
        "--",
        "--test",
    ]);
    if let Some(env) = services {
        cmd.envs(env);
    }
    let labels: Vec<String> = targets.iter().map(|(p, b)| format!("{p}/{b}")).collect();
    run(&format!("bench smoke ({})", labels.join(", ")), &mut cmd)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn bench_targets_come_from_the_manifests() {
        let manifest = "[package]\nname = \"modu-x\"\n\n[dependencies]\nname-dep = \"1\"\n\n[[bench]]\nname = \"fast\"\nharness = false\n\n[[bench]]\nname=\"slow\"\n\n[[example]]\nname = \"ex\"\n";
        assert_eq!(
            benches_in_manifest(manifest),
            [
                ("modu-x".to_owned(), "fast".to_owned()),
                ("modu-x".to_owned(), "slow".to_owned())
            ]
        );
        let targets = bench_targets().unwrap();
        for known in [
            ("modu-agent", "run_loop"),
            ("modu-mcp", "mcp"),
            ("modu-otel", "overhead"),
            ("modu-postgres", "checkpoint"),
            ("modu-redis", "checkpoint"),
            ("modu-skills", "skills"),
            ("modu-sqlite", "checkpoint"),
        ] {
            assert!(
                targets.iter().any(|(p, b)| p == known.0 && b == known.1),
                "{known:?} not in {targets:?}"
            );
        }
    }
}
