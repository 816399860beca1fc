//! `modu serve` as a process: the built binary serves the agent of a modu.toml (whose model is
//! `MockOpenAiServer`, started in this process) and prints its URL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// The built `modu` in `dir`, with nothing leaking in from the machine's environment.
fn command(dir: &std::path::Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_modu"));
    cmd.current_dir(dir);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("MODU_") || k.starts_with("OPENAI_") || k.starts_with("OLLAMA_") {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// Starts `modu serve` in `dir`; returns the child and the URL it printed.
async fn serve(dir: &std::path::Path, extra: &[&str]) -> (tokio::process::Child, String) {
    serve_with_env(dir, extra, &[]).await
}

/// [`serve`] with these environment variables set.
async fn serve_with_env(
    dir: &std::path::Path,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (tokio::process::Child, String) {
    let mut cmd = command(dir);
    cmd.envs(envs.iter().copied())
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("modu serve printed no URL within 30 s")
        .unwrap()
        .expect("modu serve ended before printing its URL");
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{first}");
    // Keep reading stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

fn config(mock: &MockOpenAiServer) -> String {
    format!(
        "[agent]\nname = \"helper\"\ninstructions = \"Be brief.\"\n\n[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\n\n[store]\nkind = \"memory\"\n",
        mock.base_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_serve_serves_the_configured_agent_and_prints_its_url() {
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::Text("Hello from the mock.".into()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), config(&mock)).unwrap();
    let (mut child, url) = serve(dir.path(), &[]).await;
    let http = reqwest::Client::new();

    let models: Value = http
        .get(format!("{url}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "helper");
    let response = http
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "helper", "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let completion: Value = response.json().await.unwrap();
    assert_eq!(completion["choices"][0]["message"]["content"], "Hello from the mock.");
    // The model got the configured instructions, then the user's message.
    let sent = &mock.requests()[0]["messages"];
    assert_eq!(sent[0]["content"], "Be brief.");
    assert_eq!(sent[1]["content"], "Hi");
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_serve_with_a_token_refuses_requests_without_it() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), config(&mock)).unwrap();
    let (mut child, url) = serve(dir.path(), &["--token", "s3cret"]).await;
    let http = reqwest::Client::new();
    let denied = http.get(format!("{url}/v1/models")).send().await.unwrap();
    assert_eq!(denied.status().as_u16(), 401);
    let allowed = http
        .get(format!("{url}/v1/models"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status().as_u16(), 200);
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_serve_with_a_cors_origin_answers_that_origins_preflight() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), config(&mock)).unwrap();
    let (mut child, url) = serve(
        dir.path(),
        &["--token", "s3cret", "--cors-origin", "https://app.example"],
    )
    .await;
    let http = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        http.request(reqwest::Method::OPTIONS, format!("{url}/agui/helper"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization,content-type")
            .send()
    };
    let allowed = preflight("https://app.example").await.unwrap();
    assert_eq!(allowed.status().as_u16(), 200);
    assert_eq!(allowed.headers()["access-control-allow-origin"], "https://app.example");
    let other = preflight("https://evil.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    child.kill().await.unwrap();

    // A value that is not an origin is a usage error, before anything is served.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_modu"))
        .current_dir(dir.path())
        .args(["serve", "--addr", "127.0.0.1:0", "--cors-origin", "app.example/path"])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--cors-origin \"app.example/path\" is not an origin"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_serve_refuses_an_empty_token_instead_of_serving_without_authentication() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), config(&mock)).unwrap();
    // `--token "$TOKEN"` with TOKEN unset, while MODU_SERVE_TOKEN holds the real token.
    let mut cmd = command(dir.path());
    cmd.env("MODU_SERVE_TOKEN", "s3cret")
        .args(["serve", "--addr", "127.0.0.1:0", "--token", ""])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("modu serve started serving with an empty token")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--token is empty"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("serving"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_serve_refuses_an_empty_modu_serve_token_as_it_refuses_an_empty_token() {
    // `MODU_SERVE_TOKEN=$TOKEN` with TOKEN unset: the same mistake as `--token ""`.
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), config(&mock)).unwrap();
    let mut cmd = command(dir.path());
    cmd.env("MODU_SERVE_TOKEN", "")
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("modu serve started serving with an empty MODU_SERVE_TOKEN")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: MODU_SERVE_TOKEN is empty"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("serving"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_serve_listens_on_a_host_name() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), config(&mock)).unwrap();
    let mut cmd = command(dir.path());
    cmd.args(["serve", "--addr", "localhost:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("modu serve printed no URL within 30 s")
        .unwrap();
    let Some(first) = first else {
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).await.unwrap();
        panic!("modu serve --addr localhost:0 did not serve: {stderr}");
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let url = first.split_whitespace().find(|w| w.starts_with("http://")).unwrap();
    // A loopback address: no warning about other machines.
    assert!(
        url.starts_with("http://127.0.0.1:") || url.starts_with("http://[::1]:"),
        "{first}"
    );
    let models: Value = reqwest::get(format!("{url}/v1/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "helper");
    child.kill().await.unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).await.unwrap();
    assert!(!stderr.contains("warning"), "{stderr}");

    // A name that does not resolve is a usage error.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_modu"))
        .current_dir(dir.path())
        .args(["serve", "--addr", "no-such-host.invalid:8080"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --addr \"no-such-host.invalid:8080\" is not HOST:PORT"),
        "{stderr}"
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_stops_modu_serve_while_a_request_stays_open() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), config(&mock)).unwrap();
    let (mut child, url) = serve(dir.path(), &[]).await;
    // A client that never finishes its request: the first Ctrl-C waits for it.
    let mut open = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut open, b"GET /v1/models HTTP/1.1\r\n")
        .await
        .unwrap();
    let pid = child.id().unwrap().to_string();
    let interrupt = || {
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
    };
    assert!(interrupt().success());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The first Ctrl-C waits for the open request.
    assert!(
        child.try_wait().unwrap().is_none(),
        "modu serve stopped at the first Ctrl-C"
    );
    assert!(interrupt().success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("modu serve still runs 10 s after a second Ctrl-C")
        .unwrap();
    assert!(status.success(), "{status}");
}

/// `docker stop`, systemd and Kubernetes stop a service with SIGTERM and kill it only after a
/// grace period: the run under way finishes and its answer reaches the client.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_modu_serve_after_the_run_under_way_answers() {
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::Delayed(
        Duration::from_millis(1500),
        Box::new(MockReply::Text("Finished.".into())),
    ));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("modu.toml"), config(&mock)).unwrap();
    let (mut child, url) = serve(dir.path(), &[]).await;
    let answer = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({"model": "helper", "messages": [{"role": "user", "content": "Hi"}]}))
            .send()
            .await?
            .json::<Value>()
            .await
    });
    // The run is under way once the model has its request.
    tokio::time::timeout(Duration::from_secs(10), async {
        while mock.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the model got no request");
    let pid = child.id().unwrap().to_string();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(term.success());
    let completion = answer.await.unwrap().expect("SIGTERM cut off the run under way");
    assert_eq!(completion["choices"][0]["message"]["content"], "Finished.");
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("modu serve still runs 10 s after SIGTERM with no request open")
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_serve_never_sends_its_environment_to_an_mcp_server_a_request_names() {
    // What the caller's own "MCP server" receives: every byte of every request.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil = format!("http://{}/mcp", listener.local_addr().unwrap());
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let sink = std::sync::Arc::clone(&received);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let sink = std::sync::Arc::clone(&sink);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
    });
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::Text("Hello.".into()));
    let dir = tempfile::tempdir().unwrap();
    // An agent with MCP tools (a configured server the selection below replaces).
    let toml = format!(
        "{}\n[[mcp.servers]]\nname = \"local\"\ntransport = \"stdio\"\ncommand = \"true\"\n",
        config(&mock)
    );
    std::fs::write(dir.path().join("modu.toml"), toml).unwrap();
    let (mut child, url) = serve_with_env(dir.path(), &[], &[("MODU_TEST_SERVER_SECRET", "sk-do-not-leak")]).await;
    // An unauthenticated network caller names an inline server of its own that reads a
    // variable of the server's environment as its bearer token.
    let inline = |auth: Value| {
        json!({
            "threadId": "t1", "runId": "r1",
            "messages": [{"id": "m1", "role": "user", "content": "Hi"}],
            "tools": [], "context": [], "state": {},
            "forwardedProps": {"mcp": {"servers": [
                {"name": "evil", "transport": "streamable_http", "url": evil, "auth": auth}
            ]}}
        })
    };
    let http = reqwest::Client::new();
    for auth in [
        json!({"bearer_token_env": "MODU_TEST_SERVER_SECRET"}),
        json!({"oauth_client_credentials": {
            "token_url": evil, "client_id": "c", "client_secret_env": "MODU_TEST_SERVER_SECRET"
        }}),
    ] {
        let response = http
            .post(format!("{url}/agui/helper"))
            .json(&inline(auth.clone()))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = response.text().await.unwrap();
        assert_eq!(status, 400, "{auth}: {body}");
        assert!(body.contains("environment"), "{body}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = String::from_utf8_lossy(&received.lock().unwrap()).into_owned();
    assert!(
        !seen.contains("sk-do-not-leak"),
        "the server's secret was sent to the caller's URL: {seen}"
    );
    child.kill().await.unwrap();
}
