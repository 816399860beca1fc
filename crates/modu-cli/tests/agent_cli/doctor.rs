//! `modu doctor` and `modu mcp tools`: the checks, and the tools of the MCP servers.

use modu_testing::MockOpenAiServer;
use serde_json::{Value, json};

use crate::support::{everything_config, modu, output, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_lists_server_everything() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), everything_config(&script, "")).unwrap();
    let out = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(["mcp", "tools"])).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("everything__echo\tEchoes back the input string\n"),
        "{stdout}"
    );
    assert!(stdout.contains("everything__get-sum\t"), "{stdout}");

    let json_out =
        output(modu(dir.path(), "http://127.0.0.1:9/v1").args(["mcp", "tools", "--server", "everything", "--json"]))
            .await;
    let tools: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    let echo = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "everything__echo")
        .unwrap();
    assert_eq!(echo["input_schema"]["properties"]["message"]["type"], json!("string"));

    let unknown = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(["mcp", "tools", "--server", "nope"])).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(
        text(&unknown.stderr),
        "error: no MCP server named `nope` (configured: everything)\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_each_check_and_a_broken_server() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}\n[[mcp.servers]]\nname = \"broken\"\ntransport = \"stdio\"\ncommand = \"/nonexistent/modu-mcp-server\"\n",
        everything_config(&script, "")
    );
    std::fs::write(dir.path().join("modu.toml"), config).unwrap();
    let out = output(modu(dir.path(), &mock.base_url()).arg("doctor")).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "✓ config: modu.toml");
    assert_eq!(
        lines[1],
        format!("✓ model: {} answers, model `mock-model`", mock.base_url())
    );
    assert_eq!(lines[2], "✓ store: sqlite .modu/modu.db (0 sessions)");
    assert_eq!(lines[3], "✓ agent: builds (policy standard)");
    // 14: server-everything registers trigger-elicitation-request for a client that declares elicitation.
    assert_eq!(lines[4], "✓ mcp everything: 14 tools");
    assert_eq!(
        lines[5],
        "✗ mcp broken: MCP transport error (server broken): could not start \"/nonexistent/modu-mcp-server\": No such file or directory (os error 2)"
    );
    assert_eq!(text(&out.stderr), "error: 1 check(s) failed\n");

    // Everything healthy: exit 0.
    std::fs::write(dir.path().join("modu.toml"), everything_config(&script, "")).unwrap();
    let healthy = output(modu(dir.path(), &mock.base_url()).arg("doctor")).await;
    assert!(healthy.status.success(), "{}", text(&healthy.stdout));

    // Limits the policy cannot work with: what `run` would reject, doctor reports.
    let unusable = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_AGENT__POLICY", "plan_and_execute")
            .env("MODU_LIMITS__MAX_STEPS", "0")
            .arg("doctor"),
    )
    .await;
    assert_eq!(unusable.status.code(), Some(1));
    assert!(
        text(&unusable.stdout)
            .contains("✗ agent: invalid configuration: a strict Plan-and-Execute policy needs max_steps of at least 1"),
        "{}",
        text(&unusable.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_and_run_name_a_model_server_that_is_down() {
    let port = closed_port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let (out, doctor) = run_and_doctor(&url).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
    assert_eq!(
        error,
        format!(
            "error: cannot reach the model server at {url}: cannot connect to the model server ({url}/chat/completions)"
        )
    );
    assert!(out.stdout.is_empty());

    assert_eq!(doctor.status.code(), Some(1));
    assert!(
        text(&doctor.stdout).contains(&format!(
            "✗ model: cannot reach the model server at {url}: cannot connect to the model server ({url}/models)\n"
        )),
        "{}",
        text(&doctor.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_finds_an_ollama_model_named_without_its_tag() {
    // Ollama lists `llama3.2:latest`; `llama3.2` is the same model (Ollama's default tag), the
    // name its documentation and `ollama run llama3.2` use.
    let mock = modu_testing::MockOllamaServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (model, listed) in [("llama3.2", true), ("llama3.2:latest", true), ("llama3.2:1b", false)] {
        let out = output(
            modu(dir.path(), "unused")
                .env_remove("OPENAI_BASE_URL")
                .env_remove("OPENAI_MODEL")
                .env("OLLAMA_HOST", mock.base_url())
                .env("MODU_MODEL__MODEL", model)
                .arg("doctor"),
        )
        .await;
        let stdout = text(&out.stdout);
        let line = stdout.lines().find(|l| l.contains("model: ")).unwrap();
        assert!(line.starts_with("✓ model: "), "{model}: {stdout}");
        assert_eq!(!line.contains("the server does not list"), listed, "{model}: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_model_server_is_named_without_its_password() {
    let port = closed_port();
    let url = format!("http://alice:pa55-SECRET@127.0.0.1:{port}/v1");
    let shown = format!("http://***@127.0.0.1:{port}/v1");
    let (out, doctor) = run_and_doctor(&url).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("SECRET"), "{stderr}");
    assert!(
        stderr.contains(&format!("error: cannot reach the model server at {shown}: ")),
        "{stderr}"
    );

    let stdout = text(&doctor.stdout);
    assert!(!stdout.contains("SECRET"), "{stdout}");
    assert!(
        stdout.contains(&format!("✗ model: cannot reach the model server at {shown}: ")),
        "{stdout}"
    );
}

/// `modu run hello` (one model attempt) and then `modu doctor` against the model server at
/// `url`, in one fresh folder.
async fn run_and_doctor(url: &str) -> (std::process::Output, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let run = output(
        modu(dir.path(), url)
            .env("MODU_LIMITS__RETRY_ATTEMPTS", "1")
            .args(["run", "hello"]),
    )
    .await;
    let doctor = output(modu(dir.path(), url).arg("doctor")).await;
    (run, doctor)
}

/// A port that was free a moment ago: nothing listens there.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
