//! Authentication, RBAC from the principal, body limits and nesting, over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::{post, serve, weather_agent};
use modu_server::{AuthError, Authenticator, BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

fn chat() -> Value {
    json!({"model": "weather", "messages": [{"role": "user", "content": "Weather?"}], "user": "mallory"})
}

fn answer(text: &str) -> String {
    let body: Value = serde_json::from_str(text).unwrap();
    body["choices"][0]["message"]["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn requests_without_a_valid_bearer_token_get_401_in_json() {
    let tokens = BearerTokens::new().token("good-token", Principal::new("alice", ["weather"]));
    let base = serve(
        ModuServer::new()
            .agent("weather", weather_agent(Arc::default()))
            .auth(tokens)
            .router(),
    )
    .await;
    let url = format!("{base}/v1/chat/completions");
    for token in [None, Some("bad-token"), Some("")] {
        let (status, text, headers) = post(&url, token, &chat()).await;
        assert_eq!(status, 401, "{token:?}");
        assert_eq!(headers["www-authenticate"], "Bearer");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    let models = reqwest::get(format!("{base}/v1/models")).await.unwrap();
    assert_eq!(models.status(), 401, "every route is behind the auth layer");
    let (status, text, _) = post(&url, Some("good-token"), &chat()).await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn rbac_decides_on_the_principals_roles_not_on_the_payload() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tokens = BearerTokens::new()
        .token("alice", Principal::new("alice", ["weather"]))
        .token("bob", Principal::new("bob", ["sales"]));
    let app = ModuServer::new()
        .agent("weather", weather_agent(Arc::clone(&runs)))
        .auth(tokens)
        .router();
    let base = serve(app).await;
    let url = format!("{base}/v1/chat/completions");

    // bob has no `weather` role: the tool is refused whatever the payload says.
    let mut body = chat();
    body["user"] = json!("alice");
    body["roles"] = json!(["weather"]);
    let (status, text, _) = post(&url, Some("bob"), &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool did not run for bob");
    assert!(!answer(&text).contains("sunny"), "{text}");

    // The AG-UI payload cannot name a user or roles either.
    let agui = json!({"threadId": "t", "runId": "r-bob", "messages": [{"id": "1", "role": "user", "content": "hi"}],
                      "forwardedProps": {"user": "alice", "roles": ["weather"]}});
    let (status, _, _) = post(&format!("{base}/agui/weather"), Some("bob"), &agui).await;
    assert_eq!(status, 200);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let (status, text, _) = post(&url, Some("alice"), &chat()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(answer(&text).contains("\"user\":\"alice\""), "{text}");
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_in_json() {
    let app = ModuServer::new()
        .agent("weather", weather_agent(Arc::default()))
        .body_limit(2_000)
        .router();
    let base = serve(app).await;
    let mut body = chat();
    body["messages"][0]["content"] = json!("x".repeat(5_000));
    let (status, text, _) = post(&format!("{base}/v1/chat/completions"), None, &body).await;
    assert_eq!(status, 413, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large");
    let (status, _, _) = post(
        &format!("{base}/agui/weather"),
        None,
        &json!({"pad": "y".repeat(5_000)}),
    )
    .await;
    assert_eq!(status, 413);
}

/// An application's own scheme: the user comes from a header a proxy set.
struct ProxyHeader;

#[async_trait]
impl Authenticator for ProxyHeader {
    async fn authenticate(&self, headers: &http::HeaderMap) -> Result<Principal, AuthError> {
        let user = headers
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .ok_or(AuthError::Missing)?;
        Ok(Principal::new(user, ["weather"]))
    }
}

#[tokio::test]
async fn the_router_nests_in_an_application_with_its_own_authenticator() {
    let runs = Arc::new(AtomicUsize::new(0));
    let modu = ModuServer::new()
        .agent("weather", weather_agent(Arc::clone(&runs)))
        .auth(ProxyHeader)
        .router();
    let app = axum::Router::new()
        .route("/health", axum::routing::get(|| async { "ok" }))
        .nest("/ai", modu);
    let base = serve(app).await;
    let client = reqwest::Client::new();
    assert_eq!(
        reqwest::get(format!("{base}/health"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "ok"
    );
    let response = client
        .post(format!("{base}/ai/v1/chat/completions"))
        .header("x-user", "carol")
        .json(&chat())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(answer(&response.text().await.unwrap()).contains("\"user\":\"carol\""));
    let refused = client
        .post(format!("{base}/ai/v1/chat/completions"))
        .json(&chat())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn without_auth_a_principal_from_the_applications_own_layer_is_used() {
    let runs = Arc::new(AtomicUsize::new(0));
    let modu = ModuServer::new()
        .agent("weather", weather_agent(Arc::clone(&runs)))
        .router();
    let app = modu.layer(axum::middleware::from_fn(
        |mut request: axum::extract::Request, next: axum::middleware::Next| async move {
            request.extensions_mut().insert(Principal::new("dave", ["weather"]));
            next.run(request).await
        },
    ));
    let base = serve(app).await;
    let (status, text, _) = post(&format!("{base}/v1/chat/completions"), None, &chat()).await;
    assert_eq!(status, 200, "{text}");
    assert!(answer(&text).contains("\"user\":\"dave\""), "{text}");

    // Without any principal the caller is anonymous: no roles, so RBAC refuses the tool.
    let bare = serve(
        ModuServer::new()
            .agent("weather", weather_agent(Arc::clone(&runs)))
            .router(),
    )
    .await;
    let (status, _, _) = post(&format!("{bare}/v1/chat/completions"), None, &chat()).await;
    assert_eq!(status, 200);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_dev_ui_is_served_only_when_enabled_and_its_page_needs_no_token() {
    let tokens = || BearerTokens::new().token("good-token", Principal::new("alice", ["weather"]));
    let with_ui = serve(
        ModuServer::new()
            .agent("weather", weather_agent(Arc::default()))
            .auth(tokens())
            .dev_ui(true)
            .router(),
    )
    .await;
    let page = reqwest::get(format!("{with_ui}/")).await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(
        html.contains("agui/") && html.contains("resume"),
        "the page runs AG-UI and resumes"
    );
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "nothing comes from elsewhere"
    );
    // The API behind it still needs the token.
    assert_eq!(
        reqwest::get(format!("{with_ui}/v1/models"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );

    let without = serve(
        ModuServer::new()
            .agent("weather", weather_agent(Arc::default()))
            .auth(tokens())
            .router(),
    )
    .await;
    assert_ne!(
        reqwest::get(format!("{without}/")).await.unwrap().status().as_u16(),
        200
    );
}

#[tokio::test]
async fn cors_answers_the_allowed_origin_only_and_preflights_need_no_token() {
    use modu_server::cors::{AllowHeaders, AllowMethods, CorsLayer};
    let tokens = BearerTokens::new().token("good-token", Principal::new("alice", ["weather"]));
    let cors = CorsLayer::new()
        .allow_origin(["https://app.example".parse::<reqwest::header::HeaderValue>().unwrap()])
        .allow_methods(AllowMethods::mirror_request())
        .allow_headers(AllowHeaders::mirror_request());
    let app = ModuServer::new()
        .agent("weather", weather_agent(Arc::default()))
        .auth(tokens.clone())
        .cors(cors)
        .router();
    let base = serve(app).await;
    let url = format!("{base}/v1/chat/completions");
    let client = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        client
            .request(reqwest::Method::OPTIONS, &url)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization,content-type")
            .send()
    };

    // The preflight, without a token: answered by the CORS layer.
    let response = preflight("https://app.example").await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["access-control-allow-origin"], "https://app.example");
    assert_eq!(response.headers()["access-control-allow-methods"], "POST");
    let response = preflight("https://evil.example").await.unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none());

    // The request itself: allowed with the header, a refusal too, another origin without.
    let send = |origin: &'static str, token: &'static str| {
        client
            .post(&url)
            .header("origin", origin)
            .bearer_auth(token)
            .json(&chat())
            .send()
    };
    let ok = send("https://app.example", "good-token").await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["access-control-allow-origin"], "https://app.example");
    let refused = send("https://app.example", "bad-token").await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["access-control-allow-origin"], "https://app.example");
    let other = send("https://evil.example", "good-token").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());

    // Without `cors`, no CORS headers at all.
    let plain = serve(
        ModuServer::new()
            .agent("weather", weather_agent(Arc::default()))
            .auth(tokens)
            .router(),
    )
    .await;
    let response = reqwest::Client::new()
        .post(format!("{plain}/v1/chat/completions"))
        .header("origin", "https://app.example")
        .bearer_auth("good-token")
        .json(&chat())
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn unknown_paths_methods_and_unreadable_path_parameters_are_answered_in_the_error_shape() {
    let tokens = || BearerTokens::new().token("good-token", Principal::new("alice", ["weather"]));
    let router = || {
        ModuServer::new()
            .agent("weather", weather_agent(Arc::default()))
            .auth(tokens())
    };
    let alone = serve(router().router()).await;
    let with_ui = serve(router().dev_ui(true).router()).await;
    let nested = serve(axum::Router::new().nest("/ai", router().router())).await;
    let cases = [
        ("GET", format!("{alone}/v1/chat/completions"), 405, "method_not_allowed"),
        ("DELETE", format!("{alone}/agui/weather"), 405, "method_not_allowed"),
        ("POST", format!("{alone}/v1/nothing"), 404, "not_found"),
        ("GET", format!("{alone}/agents/%FF/sessions"), 400, "invalid_request"),
        (
            "GET",
            format!("{alone}/agents/weather/sessions/%FF%FE/messages"),
            400,
            "invalid_request",
        ),
        ("POST", format!("{alone}/a2a/%C3%28"), 400, "invalid_request"),
        ("POST", format!("{with_ui}/"), 405, "method_not_allowed"),
        ("GET", format!("{with_ui}/nothing"), 404, "not_found"),
        ("GET", format!("{nested}/ai/nothing"), 404, "not_found"),
        ("PUT", format!("{nested}/ai/v1/models"), 405, "method_not_allowed"),
    ];
    for (method, url, status, code) in cases {
        let response = reqwest::Client::new()
            .request(method.parse().unwrap(), &url)
            .bearer_auth("good-token")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{method} {url}");
        if status == 405 {
            assert!(response.headers().contains_key("allow"), "{method} {url}");
        }
        let text = response.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{method} {url}: {text:?}"));
        assert_eq!(body["error"]["code"], code, "{method} {url}: {body}");
        assert!(body["error"]["message"].is_string(), "{method} {url}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{method} {url}: {body}");
    }
    // Without credentials an unknown path is 401, as every other route is.
    let response = reqwest::get(format!("{alone}/v1/nothing")).await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
}
