//! `modu` signs in to an OAuth-protected MCP server: the official MCP conformance suite's
//! `auth/metadata-default` scenario (its protected resource, authorization server with dynamic
//! registration, and checks) runs `tests/peers/oauth_signin.sh`, which starts
//! `modu mcp tools --json` on a `modu.toml` whose server has `auth.oauth` and plays the person
//! at the browser: it opens the authorization URL modu prints and follows the redirects to
//! modu's loopback callback. The suite and Node 22 come from `cargo xtask services`
//! (`MODU_MCP_CONFORMANCE`, `MODU_MCP_NODE22`).
//!
//! The tokens land in the configured store: in Redis under the configured key prefix, in
//! PostgreSQL in the configured schema, beside the conversations and checkpoints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;

use modu::mcp::oauth::McpTokenStore;

/// What one sign-in left: modu's stdout and stderr, and the key its tokens are stored under.
struct SignedIn {
    stdout: String,
    stderr: String,
    token_key: String,
}

/// Runs the suite's scenario against `modu mcp tools --json` with `store` as `MODU_STORE__*`
/// variables; `None` when the suite is not installed (outside CI).
async fn sign_in(store: &[(&str, &str)]) -> Option<SignedIn> {
    let (Some(suite), Some(node)) = (
        modu_testing::service_env("MODU_MCP_CONFORMANCE"),
        modu_testing::service_env("MODU_MCP_NODE22"),
    ) else {
        return None;
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
        .envs(store.iter().copied())
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
    Some(SignedIn {
        stdout,
        stderr,
        token_key: format!("suite {}", read("url")),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modu_signs_in_through_its_loopback_redirect_and_lists_the_tools() {
    let Some(signed) = sign_in(&[]).await else {
        return;
    };
    let (stdout, stderr) = (&signed.stdout, &signed.stderr);
    // modu asked the person, then listed the protected server's tools.
    assert!(stderr.contains("asks for authorization"), "{stderr}");
    assert!(stderr.contains("/callback"), "{stderr}");
    let listed: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(listed.to_string().contains("\"name\":\"suite__"), "{listed}");
}

/// Signs in with the store `kind` at `url` and `setting` (`PREFIX` or `SCHEMA`) set to `value`;
/// then the tokens are in `configured`, not in `default` (the store without the setting).
async fn tokens_land_where_configured(
    kind: &str,
    url: &str,
    setting: (&str, &str),
    default: &dyn McpTokenStore,
    configured: impl AsyncFnOnce() -> Box<dyn McpTokenStore>,
) {
    let store = [
        ("MODU_STORE__KIND", kind),
        ("MODU_STORE__URL", url),
        (setting.0, setting.1),
    ];
    let Some(signed) = sign_in(&store).await else {
        return;
    };
    assert!(
        signed.stdout.contains("\"suite__"),
        "the tools are listed: {}",
        signed.stderr
    );
    let key = &signed.token_key;
    assert!(
        default.load(key).await.unwrap().is_none(),
        "{kind}: not where {} is unset",
        setting.0
    );
    let configured = configured().await;
    assert!(
        configured.load(key).await.unwrap().is_some(),
        "{kind}: under {}",
        setting.0
    );
    configured.clear(key).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_in_tokens_live_under_the_configured_redis_prefix() {
    let Some(url) = modu_testing::service_env("REDIS_URL") else {
        return;
    };
    let prefix = modu_testing::unique_prefix("modu-cli-oauth");
    let default = modu::redis::RedisMcpTokenStore::connect(&url).await.unwrap();
    let configured = async || Box::new(default.clone().with_prefix(prefix.clone())) as Box<dyn McpTokenStore>;
    tokens_land_where_configured("redis", &url, ("MODU_STORE__PREFIX", &prefix), &default, configured).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_in_tokens_live_in_the_configured_postgres_schema() {
    let Some(url) = modu_testing::service_env("MODU_POSTGRES_URL") else {
        return;
    };
    let schema = modu_testing::unique_prefix("modu_cli_oauth");
    let default = modu::postgres::PostgresMcpTokenStore::connect(&url).await.unwrap();
    let configured = async || {
        let pool = modu::postgres::connect_in_schema(&url, &schema).await.unwrap();
        Box::new(modu::postgres::PostgresMcpTokenStore::from_pool(pool).await.unwrap()) as Box<dyn McpTokenStore>
    };
    tokens_land_where_configured("postgres", &url, ("MODU_STORE__SCHEMA", &schema), &default, configured).await;
}
