//! The OAuth authorization-code flow ([`modu_mcp::oauth`]) against a local fixture on
//! 127.0.0.1: a minimal streamable-HTTP MCP server (axum) that wants a bearer token, its
//! protected resource metadata, and an authorization server (metadata, dynamic
//! registration, an authorization endpoint that redirects at once, a token endpoint with
//! refresh tokens). The consent handler follows nothing: it reads the redirect's `Location`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use modu_mcp::oauth::{
    InMemoryTokenStore, McpAuthorizationRequest, McpAuthorizationResponse, McpConsentError, McpConsentHandler,
    McpOAuth, McpStoredTokens, McpTokenStore,
};
use modu_mcp::{McpAuthConfig, McpConfig, McpConnector, McpError, McpServerConfig};
use serde_json::{Value, json};

mod support;

#[derive(Default)]
struct Shared {
    base: String,
    /// Valid access tokens and their scopes.
    access: HashMap<String, Vec<String>>,
    /// Valid refresh tokens and their scopes.
    refresh: HashMap<String, Vec<String>>,
    /// Authorization codes not yet exchanged, with their scopes.
    codes: HashMap<String, Vec<String>>,
    issued: usize,
    /// The query of every authorization request.
    authorizations: Vec<BTreeMap<String, String>>,
    /// The grant type of every token request.
    grants: Vec<String>,
    registrations: usize,
    /// Scopes the authorization server never grants.
    withheld: Vec<String>,
}

type AppState = Arc<Mutex<Shared>>;

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn challenge(s: &Shared, status: StatusCode, extra: &str) -> Response {
    let value = format!(
        "Bearer {extra}resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
        s.base
    );
    (status, [(header::WWW_AUTHENTICATE, value)], "").into_response()
}

async fn mcp(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let message: Value = serde_json::from_slice(&body).unwrap();
    let method = message["method"].as_str().unwrap_or("").to_owned();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let scopes = {
        let s = state.lock().unwrap();
        let token = authorization.as_deref().and_then(|a| a.strip_prefix("Bearer "));
        let Some(scopes) = token.and_then(|t| s.access.get(t)).cloned() else {
            return challenge(&s, StatusCode::UNAUTHORIZED, "scope=\"read\", ");
        };
        if method == "tools/call" && message["params"]["name"] == "admin" && !scopes.iter().any(|x| x == "admin") {
            return challenge(
                &s,
                StatusCode::FORBIDDEN,
                "error=\"insufficient_scope\", scope=\"read admin\", ",
            );
        }
        scopes
    };
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let tool = |name: &str| json!({"name": name, "description": name, "inputSchema": {"type": "object"}});
    let result = match method.as_str() {
        "initialize" => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "oauth-test", "version": "1.0.0"}
        }),
        "tools/list" => json!({"tools": [tool("whoami"), tool("admin")]}),
        "tools/call" => json!({
            "content": [{"type": "text", "text": "ok"}],
            "structuredContent": {"authorization": authorization, "scopes": scopes}
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

async fn resource_metadata(State(state): State<AppState>) -> Response {
    let base = state.lock().unwrap().base.clone();
    json_response(
        StatusCode::OK,
        json!({"resource": format!("{base}/mcp"), "authorization_servers": [base], "scopes_supported": ["read"]}),
    )
}

async fn server_metadata(State(state): State<AppState>) -> Response {
    let base = state.lock().unwrap().base.clone();
    json_response(
        StatusCode::OK,
        json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": format!("{base}/token"),
            "registration_endpoint": format!("{base}/register"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"]
        }),
    )
}

async fn register(State(state): State<AppState>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap();
    state.lock().unwrap().registrations += 1;
    json_response(
        StatusCode::CREATED,
        json!({"client_id": "registered-client", "redirect_uris": request["redirect_uris"]}),
    )
}

async fn authorize(State(state): State<AppState>, uri: Uri) -> Response {
    let query: BTreeMap<String, String> = reqwest::Url::parse(&format!("http://fixture{uri}"))
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    let mut s = state.lock().unwrap();
    s.issued += 1;
    let code = format!("code-{}", s.issued);
    let withheld = s.withheld.clone();
    let scopes: Vec<String> = query
        .get("scope")
        .map(|v| {
            v.split(' ')
                .filter(|x| !withheld.iter().any(|w| w == x))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    s.codes.insert(code.clone(), scopes);
    s.authorizations.push(query.clone());
    let location = format!("{}?code={code}&state={}", query["redirect_uri"], query["state"]);
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

async fn token(State(state): State<AppState>, body: String) -> Response {
    let form: BTreeMap<String, String> = body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace('+', " ").replace("%20", " ")))
        .collect();
    let mut s = state.lock().unwrap();
    let grant = form.get("grant_type").cloned().unwrap_or_default();
    s.grants.push(grant.clone());
    let scopes = match grant.as_str() {
        "authorization_code" if form.contains_key("code_verifier") => form.get("code").and_then(|c| s.codes.remove(c)),
        "refresh_token" => form.get("refresh_token").and_then(|r| s.refresh.remove(r)),
        _ => None,
    };
    let Some(scopes) = scopes else {
        return json_response(StatusCode::BAD_REQUEST, json!({"error": "invalid_grant"}));
    };
    s.issued += 1;
    let access = format!("access-token-{}", s.issued);
    let refresh = format!("refresh-token-{}", s.issued);
    s.access.insert(access.clone(), scopes.clone());
    s.refresh.insert(refresh.clone(), scopes.clone());
    json_response(
        StatusCode::OK,
        json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": 3600,
            "refresh_token": refresh,
            "scope": scopes.join(" ")
        }),
    )
}

/// Starts the fixture; its base URL and state.
async fn fixture() -> (String, AppState) {
    let state = AppState::default();
    let app = Router::new()
        .route(
            "/mcp",
            post(mcp)
                .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                .delete(|| async { StatusCode::OK }),
        )
        .route("/.well-known/oauth-protected-resource/mcp", get(resource_metadata))
        .route("/.well-known/oauth-authorization-server", get(server_metadata))
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    state.lock().unwrap().base = base.clone();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, state)
}

/// Consents at once by reading the authorization endpoint's redirect; counts its calls.
#[derive(Default)]
struct AutoConsent {
    calls: AtomicUsize,
    /// Refuse every authorization instead.
    decline: bool,
}

#[async_trait::async_trait]
impl McpConsentHandler for AutoConsent {
    async fn authorize(&self, request: &McpAuthorizationRequest) -> Result<McpAuthorizationResponse, McpConsentError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.decline {
            return Err(McpConsentError::new("the user closed the browser"));
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let response = http.get(&request.authorization_url).send().await.unwrap();
        let location = response.headers()[reqwest::header::LOCATION]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(location.starts_with(&request.redirect_uri), "{location}");
        McpAuthorizationResponse::from_redirect_url(&location)
    }
}

const REDIRECT: &str = "http://127.0.0.1:8976/callback";

fn connector(base: &str, oauth: McpOAuth) -> McpConnector {
    let server = McpServerConfig::streamable_http("files", format!("{base}/mcp"));
    McpConnector::new(McpConfig::new(vec![server]).unwrap())
        .unwrap()
        .with_oauth("files", oauth)
}

#[tokio::test]
async fn the_token_store_round_trips() {
    let store = InMemoryTokenStore::new();
    assert_eq!(store.load("files http://x/mcp").await.unwrap(), None);
    let mut tokens = McpStoredTokens::new("client", "access");
    tokens.refresh_token = Some("refresh".into());
    tokens.scopes = vec!["read".into()];
    store.save("files http://x/mcp", tokens.clone()).await.unwrap();
    assert_eq!(store.load("files http://x/mcp").await.unwrap(), Some(tokens));
    assert_eq!(store.load("other http://x/mcp").await.unwrap(), None);
    store.clear("files http://x/mcp").await.unwrap();
    assert_eq!(store.load("files http://x/mcp").await.unwrap(), None);
}

#[tokio::test]
async fn a_challenge_authorizes_and_a_second_connect_reuses_the_stored_token() {
    let (base, state) = fixture().await;
    let consent = Arc::new(AutoConsent::default());
    let store = Arc::new(InMemoryTokenStore::new());
    let oauth = McpOAuth::new(REDIRECT, consent.clone()).with_token_store(store.clone());

    let session = connector(&base, oauth.clone()).open_session(None).await.unwrap();
    assert_eq!(consent.calls.load(Ordering::SeqCst), 1);
    let out = session.call_tool("files__whoami", json!({})).await.unwrap();
    // The token the server echoes is a credential: redacted from the result.
    assert_eq!(out["authorization"], "Bearer [redacted]", "{out}");
    assert_eq!(out["scopes"], json!(["read"]));
    session.close().await;
    {
        let s = state.lock().unwrap();
        assert_eq!(s.registrations, 1);
        let query = &s.authorizations[0];
        assert_eq!(query["client_id"], "registered-client");
        assert_eq!(query["scope"], "read", "the challenge's scope");
        assert_eq!(query["code_challenge_method"], "S256");
        assert_eq!(query["resource"], format!("{base}/mcp"));
        assert_eq!(s.grants, ["authorization_code"]);
    }
    let stored = store.load(&format!("files {base}/mcp")).await.unwrap().unwrap();
    assert_eq!(stored.client_id, "registered-client");
    assert!(stored.refresh_token.is_some());

    // Another connector with the same store: no consent, no token request.
    let session = connector(&base, oauth).open_session(None).await.unwrap();
    session.call_tool("files__whoami", json!({})).await.unwrap();
    session.close().await;
    assert_eq!(consent.calls.load(Ordering::SeqCst), 1);
    assert_eq!(state.lock().unwrap().grants.len(), 1);
}

#[tokio::test]
async fn a_refused_token_is_refreshed_without_consent_and_can_step_up_after() {
    let (base, state) = fixture().await;
    let consent = Arc::new(AutoConsent::default());
    let session = connector(&base, McpOAuth::new(REDIRECT, consent.clone()))
        .open_session(None)
        .await
        .unwrap();
    // The server forgets every access token (refresh tokens stay valid).
    state.lock().unwrap().access.clear();
    session.call_tool("files__whoami", json!({})).await.unwrap();
    assert_eq!(consent.calls.load(Ordering::SeqCst), 1);
    assert_eq!(state.lock().unwrap().grants, ["authorization_code", "refresh_token"]);
    // A step-up after the refresh still sends the user back to the redirect URI.
    let out = session.call_tool("files__admin", json!({})).await.unwrap();
    session.close().await;
    assert_eq!(out["scopes"], json!(["read", "admin"]), "{out}");
    assert_eq!(consent.calls.load(Ordering::SeqCst), 2);
    assert_eq!(state.lock().unwrap().authorizations[1]["redirect_uri"], REDIRECT);
}

#[tokio::test]
async fn insufficient_scope_steps_up() {
    let (base, state) = fixture().await;
    let consent = Arc::new(AutoConsent::default());
    let session = connector(&base, McpOAuth::new(REDIRECT, consent.clone()))
        .open_session(None)
        .await
        .unwrap();
    let out = session.call_tool("files__admin", json!({})).await.unwrap();
    session.close().await;
    assert_eq!(out["scopes"], json!(["read", "admin"]), "{out}");
    assert_eq!(consent.calls.load(Ordering::SeqCst), 2);
    let s = state.lock().unwrap();
    assert_eq!(s.authorizations[1]["scope"], "read admin");
}

#[tokio::test]
async fn step_ups_are_bounded_and_fail_as_auth_errors_without_tokens() {
    let (base, state) = fixture().await;
    state.lock().unwrap().withheld = vec!["admin".into()];
    let consent = Arc::new(AutoConsent::default());
    let oauth = McpOAuth::new(REDIRECT, consent.clone()).with_max_authorizations(2);
    let session = connector(&base, oauth).open_session(None).await.unwrap();
    assert_eq!(consent.calls.load(Ordering::SeqCst), 1);
    let err = session.call_tool("files__admin", json!({})).await.unwrap_err();
    session.close().await;
    let McpError::Auth(auth) = &err else {
        panic!("not an auth error: {err:?}");
    };
    assert_eq!(auth.server, "files");
    assert!(auth.message.contains("admin"), "{auth}");
    assert!(!auth.message.contains("access-token-"), "{auth}");
    // The call itself authorized at most twice.
    assert_eq!(consent.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_declined_consent_is_an_auth_error() {
    let (base, _state) = fixture().await;
    let consent = Arc::new(AutoConsent {
        decline: true,
        ..AutoConsent::default()
    });
    let err = connector(&base, McpOAuth::new(REDIRECT, consent.clone()))
        .open_session(None)
        .await
        .unwrap_err();
    let McpError::Auth(auth) = &err else {
        panic!("not an auth error: {err:?}");
    };
    assert!(auth.message.contains("closed the browser"), "{auth}");
    assert_eq!(consent.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn oauth_and_a_configured_bearer_token_are_refused_together() {
    let (base, _state) = fixture().await;
    let consent = Arc::new(AutoConsent::default());
    let auth = McpAuthConfig {
        bearer_token: Some("static-token".into()),
        ..McpAuthConfig::default()
    };
    let server = McpServerConfig::streamable_http("files", format!("{base}/mcp")).with_auth(auth);
    let err = McpConnector::new(McpConfig::new(vec![server]).unwrap())
        .unwrap()
        .with_oauth("files", McpOAuth::new(REDIRECT, consent.clone()))
        .open_session(None)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Configuration(_)), "{err:?}");
    assert!(!err.to_string().contains("static-token"), "{err}");
    assert_eq!(consent.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_server_configured_with_auth_oauth_signs_in_through_the_applications_consent() {
    let (base, state) = fixture().await;
    let config = McpConfig::from_json(json!({"servers": [{
        "name": "files", "transport": "streamable_http", "url": format!("{base}/mcp"),
        "auth": {"oauth": {"scopes": ["read"]}}
    }]}))
    .unwrap();
    let consent = Arc::new(AutoConsent::default());
    let store = Arc::new(InMemoryTokenStore::new());
    let connector = McpConnector::new(config)
        .unwrap()
        .with_configured_oauth(REDIRECT, consent.clone(), store.clone())
        .unwrap();
    let session = connector.open_session(None).await.unwrap();
    assert_eq!(consent.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        session.call_tool("files__whoami", json!({})).await.unwrap()["scopes"],
        json!(["read"])
    );
    session.close().await;
    assert_eq!(state.lock().unwrap().authorizations[0]["scope"], "read");
    assert!(store.load(&format!("files {base}/mcp")).await.unwrap().is_some());

    // Bad settings are configuration errors; an unset client secret is an auth error.
    for (oauth, wanted) in [
        (json!({"client_secret_env": "X"}), "needs auth.oauth.client_id"),
        (
            json!({"client_metadata_url": "http://x/c.json"}),
            "must be an https URL",
        ),
        (json!({"bogus": true}), "unknown field"),
    ] {
        let e = McpConfig::from_json(json!({"servers": [{
            "name": "files", "transport": "streamable_http", "url": format!("{base}/mcp"), "auth": {"oauth": oauth}
        }]}))
        .unwrap_err();
        assert!(e.to_string().contains(wanted), "{e}");
    }
    let config = McpConfig::from_json(json!({"servers": [{
        "name": "files", "transport": "streamable_http", "url": format!("{base}/mcp"),
        "auth": {"oauth": {"client_id": "pre", "client_secret_env": "MODU_TEST_UNSET_OAUTH_SECRET"}}
    }]}))
    .unwrap();
    let e = McpConnector::new(config)
        .unwrap()
        .with_configured_oauth(REDIRECT, consent, store)
        .err()
        .unwrap();
    assert!(matches!(e, McpError::Auth(_)), "{e}");
    assert!(e.to_string().contains("MODU_TEST_UNSET_OAUTH_SECRET"), "{e}");
}

/// The authorization code and the tokens are in no log line at `DEBUG` (rmcp logs the code it
/// exchanges there). The runtime has one thread, so the test's subscriber sees every task.
#[tokio::test(flavor = "current_thread")]
async fn the_code_and_the_tokens_are_in_no_debug_log_line() {
    let (logs, _guard) = support::capture_logs();
    let (base, state) = fixture().await;
    let consent = Arc::new(AutoConsent::default());
    let session = connector(&base, McpOAuth::new(REDIRECT, consent.clone()))
        .open_session(None)
        .await
        .unwrap();
    session.call_tool("files__whoami", json!({})).await.unwrap();
    session.close().await;
    assert_eq!(consent.calls.load(Ordering::SeqCst), 1);
    assert_eq!(state.lock().unwrap().grants, ["authorization_code"]);
    let logs = logs.lock().unwrap().clone();
    // The subscriber saw the flow (so the absence below means something).
    assert!(logs.contains("OAuth authorization complete"), "{logs}");
    // The fixture issued code-1, then access-token-2 and refresh-token-2.
    for secret in ["code-1", "access-token-2", "refresh-token-2"] {
        assert!(!logs.contains(secret), "{secret} logged:\n{logs}");
    }
}
