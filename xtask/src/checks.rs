//! The CI checks that are one cargo (or script) run each: the core's dependency rule, the
//! facade's feature sets, the provider crates without TLS, the fuzz smoke, `cargo package`
//! and cargo-deny. `ci` and `step` in main.rs run them.

use std::process::{Command, Stdio};

use crate::{Result, cargo, is_ci, output, root, run, tidy};

/// Crates the core must never depend on (ARCHITECTURE.md, dependency rule).
const CORE_BANNED: &[&str] = &["reqwest", "redis", "sqlx", "rmcp", "opentelemetry", "hyper", "axum"];
/// Facade features checked one at a time.
const FACADE_FEATURES: &[&str] = &[
    "macros", "openai", "ollama", "redis", "sqlite", "postgres", "mcp", "skills", "otel", "server",
];

/// Every publishable crate packages cleanly (`cargo package --no-verify`: the manifests, readme
/// and file lists are well-formed and every internal dependency resolves among the packages
/// themselves; verifying would build each package from scratch, many minutes on two cores).
pub(crate) fn package() -> Result<()> {
    let mut cmd = Command::new(cargo());
    cmd.args(["package", "--no-verify", "--allow-dirty"]);
    for name in tidy::publishable_packages(&root())? {
        cmd.args(["-p", &name]);
    }
    run("package", &mut cmd)
}

/// The provider crates build without TLS (plain HTTP only; `default-features = false`).
pub(crate) fn no_tls() -> Result<()> {
    for package in ["modu-openai", "modu-ollama"] {
        run(
            &format!("{package} without TLS"),
            Command::new(cargo()).args(["check", "-p", package, "--no-default-features", "--locked"]),
        )?;
    }
    Ok(())
}

/// cargo-deny's bans, licenses and sources checks. Missing cargo-deny fails under CI (`.ci/run`
/// installs it) and is skipped, loudly, elsewhere.
pub(crate) fn deny() -> Result<()> {
    let installed = Command::new(cargo())
        .args(["deny", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if installed {
        run(
            "cargo deny",
            Command::new(cargo()).args(["deny", "--all-features", "check", "bans", "licenses", "sources"]),
        )
    } else if is_ci() {
        Err(
            "cargo deny is not installed, and CI is set: the licence, bans and sources check cannot run \
             (.ci/run installs it: cargo install cargo-deny --locked --version 0.20.2)"
                .to_owned(),
        )
    } else {
        println!("\n==> cargo deny: not installed, skipped (cargo install cargo-deny to run it; under CI this fails)");
        Ok(())
    }
}

/// `fuzz/smoke.sh` (each cargo-fuzz target for a short while, on nightly), when it exists.
pub(crate) fn fuzz_smoke() -> Result<()> {
    let script = root().join("fuzz/smoke.sh");
    if !script.exists() {
        println!("\n==> fuzz smoke: no fuzz/smoke.sh, skipped");
        return Ok(());
    }
    run("fuzz smoke", Command::new("bash").arg(&script))
}

pub(crate) fn facade_feature_sets() -> Vec<Vec<String>> {
    let mut sets = vec![vec!["--no-default-features".to_owned()]];
    for f in FACADE_FEATURES {
        sets.push(vec![
            "--no-default-features".to_owned(),
            "--features".to_owned(),
            (*f).to_owned(),
        ]);
    }
    sets
}

/// The normal dependency trees of modu-core and modu-agent must hold none of the backend
/// crates, and modu-core's dev tree not modu-testing (no dev-dependency cycle).
pub(crate) fn check_core_dependencies() -> Result<()> {
    for package in ["modu-core", "modu-agent"] {
        println!("\n==> dependency rule: {package} depends on none of {CORE_BANNED:?}");
        let tree = output(Command::new(cargo()).args([
            "tree",
            "-p",
            package,
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "--locked",
        ]))?;
        let offenders = banned_in_tree(&tree);
        if !offenders.is_empty() {
            return Err(format!("{package} depends on {}", offenders.join(", ")));
        }
        println!("    ok ({} lines in the tree)", tree.lines().count());
    }
    let dev = output(Command::new(cargo()).args([
        "tree",
        "-p",
        "modu-core",
        "-e",
        "dev",
        "--prefix",
        "none",
        "--format",
        "{p}",
        "--locked",
    ]))?;
    if dev
        .lines()
        .any(|l| l.starts_with("modu-testing ") || l.starts_with("modu-agent "))
    {
        return Err("modu-core's dev-dependencies reach modu-testing or modu-agent".into());
    }
    Ok(())
}

fn banned_in_tree(tree: &str) -> Vec<String> {
    let mut offenders: Vec<String> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| {
            CORE_BANNED
                .iter()
                .any(|b| *name == *b || name.starts_with(&format!("{b}-")) || name.starts_with(&format!("{b}_")))
        })
        .map(str::to_owned)
        .collect();
    offenders.sort();
    offenders.dedup();
    offenders
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banned_crates_are_found_in_a_tree() {
        let tree = "modu-core v0.1.0\ntokio v1.0.0\nreqwest v0.13.0\nopentelemetry_sdk v0.31.0\nredis-test v1\nredistribute v1\n";
        assert_eq!(banned_in_tree(tree), vec!["opentelemetry_sdk", "redis-test", "reqwest"]);
        assert!(banned_in_tree("modu-core v0.1.0\nserde v1\n").is_empty());
    }
}
