//! `modu` signs in to an OAuth-protected MCP server: the official MCP conformance suite's
//! `auth/metadata-default` scenario (its protected resource, authorization server with dynamic
//! registration, and checks) runs `tests/peers/oauth_signin.sh`, which starts
//! `modu mcp tools --json` on a `modu.toml` whose server has `auth.oauth` and plays the person
//! at the browser: it opens the authorization URL modu prints and follows the redirects to
//! modu's loopback callback. The suite and Node 22 come from `cargo xtask services`
//! (`MODU_MCP_CONFORMANCE`, `MODU_MCP_NODE22`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_signs_in_through_its_loopback_redirect_and_lists_the_tools() {
    let (Some(suite), Some(node)) = (
        modu_testing::service_env("MODU_MCP_CONFORMANCE"),
        modu_testing::service_env("MODU_MCP_NODE22"),
    ) else {
        return;
    };
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The suite's servers listen on every interface; this binds them to 127.0.0.1.
    let preload = here.join("../modu-mcp/tests/peers/node_localhost.cjs");
    let script = here.join("tests/peers/oauth_signin.sh");
    let out = tempfile::tempdir().unwrap();
    let results = out.path().join("results");
    let command = format!("bash {} {}", script.display(), env!("CARGO_BIN_EXE_modu"));
    let mut run = tokio::process::Command::new(&node);
    run.args([suite.as_str(), "client", "--command", &command])
        .args(["--scenario", "auth/metadata-default", "--timeout", "60000", "-o"])
        .arg(&results)
        .env("NODE_OPTIONS", format!("--require {}", preload.display()))
        .env("MODU_SIGNIN_OUT", out.path().join("modu"))
        .env_remove("MCP_CONFORMANCE_SCENARIO")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let done = tokio::time::timeout(std::time::Duration::from_secs(120), run.output())
        .await
        .expect("the suite did not finish within 120 s")
        .unwrap();
    let read = |name: &str| std::fs::read_to_string(out.path().join("modu").join(name)).unwrap_or_default();
    let (stdout, stderr) = (read("stdout"), read("stderr"));
    let suite_said = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "the suite's checks failed:\n{suite_said}\nmodu's stderr:\n{stderr}"
    );
    // modu asked the person, then listed the protected server's tools.
    assert!(stderr.contains("asks for authorization"), "{stderr}");
    assert!(stderr.contains("/callback"), "{stderr}");
    let listed: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(listed.to_string().contains("\"name\":\"suite__"), "{listed}");
}
