//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`) against
//! modu-mcp's client.
//!
//! This test binary is two programs (`harness = false`):
//!
//! - **The client the suite drives.** The suite starts a test server for a scenario, then runs
//!   `<this binary> <server url>` with `MCP_CONFORMANCE_SCENARIO` set (and, for some
//!   scenarios, `MCP_CONFORMANCE_CONTEXT`, a JSON object). [`client`] does what the scenario
//!   asks with modu-mcp's public API only: open a session, call tools, close.
//! - **The driver** (`cargo test -p modu-mcp --test conformance`): lists the suite's client
//!   scenarios, runs each against this binary, prints pass or fail per scenario and the total,
//!   and fails when a scenario in [`EXPECTED_TO_PASS`] fails, or when a scenario is in neither
//!   list (none is silently ignored). It reads `MODU_MCP_CONFORMANCE` (the suite's
//!   `dist/index.js`) and `MODU_MCP_NODE22` (a Node 22 binary), which `cargo xtask` exports.
//!
//! The suite's servers listen on every interface; `tests/peers/node_localhost.cjs`
//! (`NODE_OPTIONS=--require`) binds them to 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// The client scenarios modu-mcp passes. `elicitation-sep1034-client-defaults` answers through
/// a live [`modu_mcp::McpElicitationHandler`] that accepts an empty form: modu-mcp fills in the
/// schema's defaults. The `auth/*` ones run the authorization-code flow of
/// [`modu_mcp::oauth`] (discovery with the 2025-03-26 fallbacks, client ID metadata documents,
/// dynamic and pre-registered clients, scope selection and step-up, `offline_access`);
/// `auth/resource-mismatch` checks that the client refuses to authorize against a protected
/// resource whose metadata names another server.
const EXPECTED_TO_PASS: &[&str] = &[
    "initialize",
    "tools_call",
    "sse-retry",
    "elicitation-sep1034-client-defaults",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/cross-app-access-complete-flow",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
];

/// The client scenarios left failing, each with its reason (the README names them too).
const EXPECTED_TO_FAIL: &[(&str, &str)] = &[(
    "auth/2025-03-26-oauth-metadata-backcompat",
    "the suite's authorization server metadata, served at the root, names the issuer <root>/oauth; rmcp refuses the mismatch (RFC 8414 section 3.3)",
)];

fn main() -> ExitCode {
    if let Ok(scenario) = std::env::var("MCP_CONFORMANCE_SCENARIO") {
        let Some(url) = std::env::args().skip(1).last() else {
            eprintln!("usage: MCP_CONFORMANCE_SCENARIO=<name> conformance <server url>");
            return ExitCode::from(2);
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        return match runtime.block_on(client::run(&scenario, &url)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{scenario}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    driver()
}

/// The client the suite drives, on modu-mcp's public API.
mod client {
    use std::sync::Arc;
    use std::time::Duration;

    use modu_mcp::oauth::{
        McpAuthorizationRequest, McpAuthorizationResponse, McpConsentError, McpConsentHandler, McpIdentityProvider,
        McpJwtAlgorithm, McpOAuth,
    };
    use modu_mcp::{
        McpConfig, McpConnector, McpElicitation, McpElicitationAnswer, McpElicitationHandler, McpError,
        McpSelectionRequest, McpServerConfig, McpSession, McpSessionOptions,
    };
    use serde_json::{Value, json};

    /// The name the session gives the suite's server.
    const SERVER: &str = "suite";
    /// Where the suite's authorization server redirects (nothing listens: the consent
    /// handler reads the redirect instead of following it).
    const REDIRECT_URI: &str = "http://localhost:3000/callback";
    /// The client ID metadata document URL the suite expects (`auth/basic-cimd`).
    const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

    /// Approves like a user who always consents: the suite's authorization endpoint
    /// redirects at once, so a GET that does not follow the redirect has the code and
    /// state in its `Location` header.
    struct FollowRedirect {
        http: reqwest::Client,
    }

    #[async_trait::async_trait]
    impl McpConsentHandler for FollowRedirect {
        async fn authorize(
            &self,
            request: &McpAuthorizationRequest,
        ) -> Result<McpAuthorizationResponse, McpConsentError> {
            let response = self
                .http
                .get(&request.authorization_url)
                .send()
                .await
                .map_err(|e| McpConsentError::new(format!("the authorization endpoint failed: {e}")))?;
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| {
                    McpConsentError::new(format!(
                        "the authorization endpoint answered HTTP {} without a redirect",
                        response.status().as_u16()
                    ))
                })?;
            McpAuthorizationResponse::from_redirect_url(location)
        }
    }

    /// A person who accepts every form without filling anything in.
    struct AcceptEmpty;

    #[async_trait::async_trait]
    impl McpElicitationHandler for AcceptEmpty {
        async fn elicit(&self, request: &McpElicitation) -> McpElicitationAnswer {
            println!("elicitation from {}: {}", request.server, request.message);
            McpElicitationAnswer::Accept(Default::default())
        }
    }

    /// The OAuth flow every scenario gets (it only starts when the server challenges).
    fn oauth(scenario: &str) -> McpOAuth {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let mut oauth = McpOAuth::new(REDIRECT_URI, Arc::new(FollowRedirect { http }))
            .with_client_name("modu-mcp conformance client")
            .with_client_metadata_url(CLIENT_METADATA_URL);
        // `auth/pre-registration` hands over a registered client in the context.
        let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
            .ok()
            .and_then(|c| serde_json::from_str(&c).ok())
            .unwrap_or_default();
        let text = |key: &str| context.get(key).and_then(Value::as_str);
        // The client-credentials scenarios hand over a machine client's id and secret.
        if scenario == "auth/client-credentials-basic"
            && let (Some(id), Some(secret)) = (text("client_id"), text("client_secret"))
        {
            return McpOAuth::client_credentials(id, secret);
        }
        if scenario == "auth/cross-app-access-complete-flow"
            && let (Some(id), Some(secret), Some(idp_id), Some(id_token), Some(issuer), Some(token_endpoint)) = (
                text("client_id"),
                text("client_secret"),
                text("idp_client_id"),
                text("idp_id_token"),
                text("idp_issuer"),
                text("idp_token_endpoint"),
            )
        {
            let idp = McpIdentityProvider::new(issuer, token_endpoint, idp_id);
            return McpOAuth::cross_app_access(idp, id_token, id, secret);
        }
        if scenario == "auth/client-credentials-jwt"
            && let (Some(id), Some(pem), Some(algorithm)) = (
                text("client_id"),
                text("private_key_pem"),
                text("signing_algorithm").and_then(McpJwtAlgorithm::from_name),
            )
        {
            return McpOAuth::private_key_jwt(id, pem.as_bytes().to_vec(), algorithm);
        }
        if let Some(id) = text("client_id") {
            let secret = text("client_secret").map(str::to_owned);
            oauth = oauth.with_client(id, secret);
        }
        oauth
    }

    pub async fn run(scenario: &str, url: &str) -> Result<(), McpError> {
        let server = McpServerConfig::streamable_http(SERVER, url).with_call_timeout(Duration::from_secs(20));
        let connector = McpConnector::new(McpConfig::new(vec![server])?)?.with_oauth(SERVER, oauth(scenario));
        let options = McpSessionOptions::default().with_elicitation(AcceptEmpty);
        let session = connector
            .open_with_options(&McpSelectionRequest::new(None), options)
            .await?;
        let outcome = exercise(scenario, &session).await;
        session.close().await;
        outcome
    }

    async fn exercise(scenario: &str, session: &McpSession) -> Result<(), McpError> {
        match scenario {
            // The handshake (and tools/list) is the whole scenario.
            "initialize" => Ok(()),
            "tools_call" => {
                let out = call(session, "add_numbers", json!({"a": 5, "b": 3})).await?;
                println!("add_numbers: {out}");
                Ok(())
            }
            // Anything else: call every tool the server offers with no arguments.
            _ => {
                let names: Vec<String> = session.registry().tools().iter().map(|t| t.tool.clone()).collect();
                for name in names {
                    let out = call(session, &name, json!({})).await?;
                    println!("{name}: {out}");
                }
                Ok(())
            }
        }
    }

    async fn call(session: &McpSession, tool: &str, arguments: Value) -> Result<Value, McpError> {
        session.call_tool(&format!("{SERVER}__{tool}"), arguments).await
    }
}

/// Lists the suite's client scenarios, runs each, checks the outcome against the two lists.
fn driver() -> ExitCode {
    let (Some(suite), Some(node)) = (
        modu_testing::service_env("MODU_MCP_CONFORMANCE"),
        modu_testing::service_env("MODU_MCP_NODE22"),
    ) else {
        return ExitCode::SUCCESS;
    };
    let preload = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/node_localhost.cjs");
    let node_options = format!("--require {}", preload.display());
    let me = std::env::current_exe().unwrap();
    let listing = Command::new(&node)
        .args([suite.as_str(), "list", "--client"])
        .env("NODE_OPTIONS", &node_options)
        .output()
        .unwrap();
    assert!(listing.status.success(), "{listing:?}");
    let scenarios: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(
        !scenarios.is_empty(),
        "the suite listed no client scenarios: {listing:?}"
    );

    let out_dir = std::env::temp_dir().join(format!("modu-mcp-conformance-{}", std::process::id()));
    let mut passed = Vec::new();
    let mut problems = Vec::new();
    for scenario in &scenarios {
        let started = Instant::now();
        let run = Command::new(&node)
            .args([suite.as_str(), "client", "--command"])
            .arg(&me)
            .args(["--scenario", scenario, "--timeout", "30000", "-o"])
            .arg(&out_dir)
            .env("NODE_OPTIONS", &node_options)
            .env_remove("MCP_CONFORMANCE_SCENARIO")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let ok = run.status.success();
        println!(
            "{} {scenario} ({:.1}s)",
            if ok { "PASS" } else { "FAIL" },
            started.elapsed().as_secs_f64()
        );
        let expected_failure = EXPECTED_TO_FAIL.iter().find(|(name, _)| name == scenario);
        match (ok, EXPECTED_TO_PASS.contains(&scenario.as_str()), expected_failure) {
            (true, _, None) => passed.push(scenario.clone()),
            (true, _, Some(_)) => {
                passed.push(scenario.clone());
                problems.push(format!("{scenario} passes now: move it to EXPECTED_TO_PASS"));
            }
            (false, true, _) => {
                let stdout = String::from_utf8_lossy(&run.stdout);
                let tail: Vec<&str> = stdout.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                problems.push(format!("{scenario} failed:\n{}", tail.join("\n")));
            }
            (false, false, Some((_, reason))) => println!("     expected: {reason}"),
            (false, false, None) => problems.push(format!("{scenario} fails and is in neither list")),
        }
    }
    for name in EXPECTED_TO_PASS {
        if !scenarios.iter().any(|s| s == name) {
            problems.push(format!("{name} is expected to pass but the suite no longer lists it"));
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    println!(
        "conformance: {} of {} client scenarios pass",
        passed.len(),
        scenarios.len()
    );
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        for problem in &problems {
            eprintln!("{problem}");
        }
        ExitCode::FAILURE
    }
}
