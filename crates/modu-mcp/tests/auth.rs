//! Auth against a local MCP endpoint (a minimal streamable-HTTP MCP server in axum, on
//! 127.0.0.1) that checks headers and bearer tokens, and a local OAuth2 token endpoint that
//! counts token requests: static headers, bearer tokens (inline and from the environment),
//! client-credentials tokens fetched, reused across runs, refreshed on expiry and after a
//! rejection, and typed failures that never show a secret.
//!
//! Tests that read secrets from environment variables re-run themselves in a child process
//! with those variables set (the workspace forbids `unsafe`, so `std::env::set_var` is out).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use modu_mcp::{McpAuthConfig, McpConfig, McpConnector, McpError, McpServerConfig, OAuthClientCredentialsConfig};
use serde_json::{Value, json};

#[derive(Default)]
struct Shared {
    /// (method, authorization, x-api-key) of every MCP request.
    seen: Vec<(String, Option<String>, Option<String>)>,
    required_api_key: Option<String>,
    /// Tokens the MCP endpoint accepts (`None`: accept any bearer, or none).
    accepted: Option<Vec<String>>,
    token_requests: usize,
    token_lifetime_secs: u64,
    client_secret: String,
    scopes: Vec<String>,
    /// Serve `tools/list` in two pages.
    paginate: bool,
    /// Where `/moved` redirects to (`None`: `/mcp` on this server).
    redirect_to: Option<String>,
}

type AppState = Arc<Mutex<Shared>>;

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"mcp\"")],
        "unauthorized",
    )
        .into_response()
}

async fn mcp(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap();
    let method = message["method"].as_str().unwrap_or("").to_owned();
    let authorization = header_str(&headers, "authorization");
    let api_key = header_str(&headers, "x-api-key");
    {
        let mut s = state.lock().unwrap();
        s.seen.push((method.clone(), authorization.clone(), api_key.clone()));
        if s.required_api_key.is_some() && s.required_api_key != api_key {
            return unauthorized();
        }
        if let Some(accepted) = &s.accepted {
            let ok = authorization
                .as_deref()
                .and_then(|a| a.strip_prefix("Bearer "))
                .is_some_and(|t| accepted.iter().any(|x| x == t));
            if !ok {
                return unauthorized();
            }
        }
    }
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method.as_str() {
        "initialize" => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "auth-test", "version": "1.0.0"}
        }),
        "tools/list" => {
            let paginate = state.lock().unwrap().paginate;
            let whoami = json!({
                "name": "whoami",
                "description": "Return the credentials this request carried.",
                "inputSchema": {"type": "object", "properties": {}}
            });
            let second = json!({
                "name": "second_page",
                "description": "Listed on the second page.",
                "inputSchema": {"type": "object", "properties": {}}
            });
            match (paginate, message["params"]["cursor"].as_str()) {
                (false, _) => json!({"tools": [whoami]}),
                (true, None) => json!({"tools": [whoami], "nextCursor": "page-2"}),
                (true, Some(_)) => json!({"tools": [second]}),
            }
        }
        "tools/call" => json!({
            "content": [{"type": "text", "text": "ok"}],
            "structuredContent": {"authorization": authorization, "x_api_key": api_key}
        }),
        _ => json!({}),
    };
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::HeaderName::from_static("mcp-session-id"), "session-1"),
        ],
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    )
        .into_response()
}

async fn token(State(state): State<AppState>, body: String) -> Response {
    let form: BTreeMap<String, String> = body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace('+', " ").replace("%20", " ")))
        .collect();
    let mut s = state.lock().unwrap();
    s.token_requests += 1;
    if form.get("grant_type").map(String::as_str) != Some("client_credentials")
        || form.get("client_id").map(String::as_str) != Some("modu-client")
        || form.get("client_secret") != Some(&s.client_secret)
    {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            json!({"error": "invalid_client"}).to_string(),
        )
            .into_response();
    }
    s.scopes = form
        .get("scope")
        .map(|s| s.split(' ').map(str::to_owned).collect())
        .unwrap_or_default();
    let token = format!("tok-{}", s.token_requests);
    if let Some(accepted) = &mut s.accepted {
        accepted.push(token.clone());
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"access_token": token, "token_type": "Bearer", "expires_in": s.token_lifetime_secs}).to_string(),
    )
        .into_response()
}

/// `307` to `redirect_to`, else to `/mcp` here.
async fn moved(State(state): State<AppState>) -> Response {
    let to = state
        .lock()
        .unwrap()
        .redirect_to
        .clone()
        .unwrap_or_else(|| "/mcp".into());
    (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]).into_response()
}

async fn start(shared: Shared) -> (String, AppState) {
    let state: AppState = Arc::new(Mutex::new(shared));
    let app = Router::new()
        .route(
            "/mcp",
            post(mcp)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .route("/token", post(token))
        .route("/moved", post(moved))
        .with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), state)
}

/// Runs the calling test in a child process with these environment variables; returns `true`
/// inside the child (run the body), `false` in the parent (done).
fn in_child_with_env(test: &str, envs: &[(&str, &str)]) -> bool {
    if std::env::var("MODU_MCP_AUTH_TEST_CHILD").is_ok() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("MODU_MCP_AUTH_TEST_CHILD", "1")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child test {test} failed:\n{text}");
    assert!(text.contains("1 passed"), "child test {test} did not run:\n{text}");
    false
}

/// The Authorization header of the last `tools/call` the server saw.
fn last_call_authorization(state: &AppState) -> Option<String> {
    let s = state.lock().unwrap();
    s.seen
        .iter()
        .rev()
        .find(|(m, _, _)| m == "tools/call")
        .and_then(|(_, a, _)| a.clone())
}

fn http_server(name: &str, url: String, auth: McpAuthConfig) -> McpConnector {
    let server = McpServerConfig::streamable_http(name, url).with_auth(auth);
    McpConnector::new(McpConfig::new(vec![server]).unwrap()).unwrap()
}

#[tokio::test]
async fn static_headers_and_inline_bearer_reach_the_server() {
    let (base, state) = start(Shared {
        required_api_key: Some("key-123".into()),
        accepted: Some(vec!["inline-token-xyz".into()]),
        ..Shared::default()
    })
    .await;
    let auth = McpAuthConfig {
        headers: [("X-Api-Key".to_owned(), "key-123".to_owned())].into(),
        bearer_token: Some("inline-token-xyz".into()),
        ..McpAuthConfig::default()
    };
    let session = http_server("secured", format!("{base}/mcp"), auth)
        .open_session(None)
        .await
        .unwrap();
    let out = session.call_tool("secured__whoami", json!({})).await.unwrap();
    // The server echoes both credentials; the result the model gets carries neither.
    assert_eq!(
        out,
        json!({"authorization": "Bearer [redacted]", "x_api_key": "[redacted]"})
    );
    session.close().await;
    let seen = state.lock().unwrap().seen.clone();
    assert!(seen.iter().any(|(m, _, _)| m == "initialize"));
    assert!(
        seen.iter()
            .all(|(_, a, k)| a.as_deref() == Some("Bearer inline-token-xyz") && k.as_deref() == Some("key-123")),
        "every request carried both: {seen:?}"
    );
}

#[tokio::test]
async fn a_refused_credential_is_a_typed_auth_error_without_the_secret() {
    let (base, _state) = start(Shared {
        accepted: Some(vec!["the-right-one".into()]),
        ..Shared::default()
    })
    .await;
    let auth = McpAuthConfig {
        bearer_token: Some("wrong-token-987".into()),
        ..McpAuthConfig::default()
    };
    let e = http_server("secured", format!("{base}/mcp"), auth)
        .open_session(None)
        .await
        .unwrap_err();
    let McpError::Auth(a) = &e else { panic!("{e}") };
    assert_eq!(a.server, "secured");
    assert!(!format!("{e} {e:?}").contains("wrong-token-987"));
}

#[tokio::test]
async fn bearer_token_from_an_environment_variable() {
    if !in_child_with_env(
        "bearer_token_from_an_environment_variable",
        &[("MODU_TEST_BEARER", "env-token-555")],
    ) {
        return;
    }
    let (base, state) = start(Shared {
        accepted: Some(vec!["env-token-555".into()]),
        ..Shared::default()
    })
    .await;
    let auth = McpAuthConfig {
        bearer_token_env: Some("MODU_TEST_BEARER".into()),
        ..McpAuthConfig::default()
    };
    let session = http_server("envsrv", format!("{base}/mcp"), auth)
        .open_session(None)
        .await
        .unwrap();
    let out = session.call_tool("envsrv__whoami", json!({})).await.unwrap();
    assert_eq!(last_call_authorization(&state).as_deref(), Some("Bearer env-token-555"));
    assert_eq!(out["authorization"], "Bearer [redacted]");
    session.close().await;
    // A missing variable is an auth error naming the variable.
    let auth = McpAuthConfig {
        bearer_token_env: Some("MODU_TEST_BEARER_MISSING".into()),
        ..McpAuthConfig::default()
    };
    let e = http_server("envsrv", format!("{base}/mcp"), auth)
        .open_session(None)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, McpError::Auth(a) if a.message.contains("MODU_TEST_BEARER_MISSING")),
        "{e}"
    );
}

fn oauth(base: &str, secret_env: &str) -> McpAuthConfig {
    McpAuthConfig {
        oauth_client_credentials: Some(
            serde_json::from_value::<OAuthClientCredentialsConfig>(json!({
                "token_url": format!("{base}/token"),
                "client_id": "modu-client",
                "client_secret_env": secret_env,
                "scopes": ["tools.read", "tools.call"]
            }))
            .unwrap(),
        ),
        ..McpAuthConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_client_credentials_tokens_are_reused_and_refreshed() {
    if !in_child_with_env(
        "oauth_client_credentials_tokens_are_reused_and_refreshed",
        &[("MODU_TEST_CLIENT_SECRET", "client-secret-42")],
    ) {
        return;
    }
    let (base, state) = start(Shared {
        accepted: Some(Vec::new()),
        token_lifetime_secs: 2,
        client_secret: "client-secret-42".into(),
        ..Shared::default()
    })
    .await;
    let connector = http_server("oauth", format!("{base}/mcp"), oauth(&base, "MODU_TEST_CLIENT_SECRET"));
    // Two runs: one token.
    let run1 = connector.open_session(None).await.unwrap();
    let run2 = connector.open_session(None).await.unwrap();
    let out = run2.call_tool("oauth__whoami", json!({})).await.unwrap();
    assert_eq!(last_call_authorization(&state).as_deref(), Some("Bearer tok-1"));
    assert_eq!(out["authorization"], "Bearer [redacted]");
    assert_eq!(state.lock().unwrap().token_requests, 1, "token reused across runs");
    assert_eq!(state.lock().unwrap().scopes, ["tools.read", "tools.call"]);
    // Past its expiry (2 s, used until 1.5 s): a new token.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let out = run1.call_tool("oauth__whoami", json!({})).await.unwrap();
    assert_eq!(last_call_authorization(&state).as_deref(), Some("Bearer tok-2"));
    assert_eq!(
        out["authorization"], "Bearer [redacted]",
        "a refreshed token is redacted too"
    );
    assert_eq!(state.lock().unwrap().token_requests, 2, "refreshed once on expiry");
    let out = run2.call_tool("oauth__whoami", json!({})).await.unwrap();
    assert_eq!(last_call_authorization(&state).as_deref(), Some("Bearer tok-2"));
    assert_eq!(out["authorization"], "Bearer [redacted]");
    assert_eq!(state.lock().unwrap().token_requests, 2);
    // The server revokes the token: one 401, a new token, the call retried.
    state.lock().unwrap().accepted = Some(Vec::new());
    let out = run1.call_tool("oauth__whoami", json!({})).await.unwrap();
    assert_eq!(last_call_authorization(&state).as_deref(), Some("Bearer tok-3"));
    assert_eq!(out["authorization"], "Bearer [redacted]");
    assert_eq!(state.lock().unwrap().token_requests, 3);
    run1.close().await;
    run2.close().await;
}

#[tokio::test]
async fn oauth_failures_are_typed_and_never_show_the_secret() {
    if !in_child_with_env(
        "oauth_failures_are_typed_and_never_show_the_secret",
        &[("MODU_TEST_WRONG_SECRET", "not-the-secret-77")],
    ) {
        return;
    }
    let (base, state) = start(Shared {
        token_lifetime_secs: 60,
        client_secret: "client-secret-42".into(),
        ..Shared::default()
    })
    .await;
    let connector = http_server("oauth", format!("{base}/mcp"), oauth(&base, "MODU_TEST_WRONG_SECRET"));
    let e = connector.open_session(None).await.unwrap_err();
    let McpError::Auth(a) = &e else { panic!("{e}") };
    assert!(a.message.contains("HTTP 401 (invalid_client)"), "{a}");
    assert!(!format!("{e} {e:?}").contains("not-the-secret-77"));
    assert_eq!(state.lock().unwrap().token_requests, 1);
    assert!(state.lock().unwrap().seen.is_empty(), "no MCP request without a token");
    // Missing secret variable.
    let connector = http_server("oauth", format!("{base}/mcp"), oauth(&base, "MODU_TEST_NO_SUCH_SECRET"));
    let e = connector.open_session(None).await.unwrap_err();
    assert!(
        matches!(&e, McpError::Auth(a) if a.message.contains("MODU_TEST_NO_SUCH_SECRET")),
        "{e}"
    );
    // Unreachable token endpoint.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let connector = http_server("oauth", format!("{base}/mcp"), oauth(&dead, "MODU_TEST_WRONG_SECRET"));
    let e = connector.open_session(None).await.unwrap_err();
    assert!(
        matches!(&e, McpError::Auth(a) if a.message.contains("could not be reached")),
        "{e}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn tool_listing_follows_pagination() {
    let (base, state) = start(Shared {
        paginate: true,
        ..Shared::default()
    })
    .await;
    let session = http_server("paged", format!("{base}/mcp"), McpAuthConfig::default())
        .open_session(None)
        .await
        .unwrap();
    let registry = session.registry();
    let names: Vec<&str> = registry.tools().iter().map(|t| t.external_name.as_str()).collect();
    assert_eq!(names, ["paged__whoami", "paged__second_page"]);
    let lists = state
        .lock()
        .unwrap()
        .seen
        .iter()
        .filter(|(m, _, _)| m == "tools/list")
        .count();
    assert_eq!(lists, 2);
    session.close().await;
}

/// The configured credentials go to the server's origin only: a redirect within it is
/// followed, one to another origin is not (reqwest's default would carry `X-Api-Key` along).
#[tokio::test]
async fn a_redirect_is_followed_within_the_origin_only() {
    let auth = McpAuthConfig {
        headers: [("X-Api-Key".to_owned(), "key-123".to_owned())].into(),
        bearer_token: Some("inline-token-xyz".into()),
        ..McpAuthConfig::default()
    };
    let (other, other_state) = start(Shared::default()).await;
    let (base, state) = start(Shared {
        redirect_to: Some(format!("{other}/mcp")),
        ..Shared::default()
    })
    .await;
    let e = http_server("moving", format!("{base}/moved"), auth.clone())
        .open_session(None)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("307"), "{text}");
    assert!(
        !text.contains("key-123") && !text.contains("inline-token-xyz"),
        "{text}"
    );
    assert!(
        other_state.lock().unwrap().seen.is_empty(),
        "the other origin got requests: {:?}",
        other_state.lock().unwrap().seen
    );
    assert!(state.lock().unwrap().seen.is_empty());

    // Within the origin: followed, with the credentials.
    let (base, state) = start(Shared {
        required_api_key: Some("key-123".into()),
        ..Shared::default()
    })
    .await;
    let session = http_server("moving", format!("{base}/moved"), auth)
        .open_session(None)
        .await
        .unwrap();
    let out = session.call_tool("moving__whoami", json!({})).await.unwrap();
    assert_eq!(out["x_api_key"], "[redacted]", "{out}");
    session.close().await;
    assert!(state.lock().unwrap().seen.iter().any(|(m, _, _)| m == "tools/call"));
}
