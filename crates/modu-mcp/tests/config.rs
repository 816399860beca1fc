//! Configuration and selection rules, including every error case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use modu_core::{RunContext, ToolProvider};
use modu_mcp::{
    DefaultServerResolver, McpConfig, McpConnector, McpError, McpRuntimeServerResolver, McpSelectionRequest,
    McpServerConfig, McpServerConfigurationError, McpToolProvider, McpTransport, selection_from_metadata,
};
use serde_json::{Value, json};

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

fn configured() -> McpConfig {
    McpConfig::from_json(json!({
        "servers": [
            {"name": "github", "transport": "stdio", "command": "github-mcp-server", "env": {"GITHUB_TOKEN": "ghp_secret_value"}},
            {"name": "linear", "transport": "streamable_http", "url": "https://mcp.example.com/linear",
             "auth": {"bearer_token_env": "LINEAR_MCP_TOKEN"}, "call_timeout_seconds": 5}
        ]
    }))
    .unwrap()
}

fn err_message(e: McpServerConfigurationError) -> String {
    e.to_string()
}

#[test]
fn loads_servers_and_timeout_from_the_environment() {
    let config = McpConfig::from_env_with(env(&[
        (
            "MODU_MCP__SERVERS",
            r#"[{"name": "weather", "transport": "stdio", "command": "weather-mcp-server", "args": ["--fast"]}]"#,
        ),
        ("MODU_MCP__CONNECT_TIMEOUT_SECONDS", "12.5"),
    ]))
    .unwrap();
    assert_eq!(config.servers.len(), 1);
    assert_eq!(config.servers[0].name, "weather");
    assert_eq!(config.servers[0].transport, McpTransport::Stdio);
    assert_eq!(config.servers[0].args, vec!["--fast"]);
    assert_eq!(
        config.servers[0].call_timeout_seconds, 60.0,
        "call timeout defaults to 60"
    );
    assert_eq!(config.connect_timeout_seconds, 12.5);
}

#[test]
fn environment_defaults_are_empty_and_thirty_seconds() {
    let config = McpConfig::from_env_with(env(&[])).unwrap();
    assert!(config.servers.is_empty());
    assert_eq!(config.connect_timeout_seconds, 30.0);
}

#[test]
fn environment_errors_are_clear() {
    let e = McpConfig::from_env_with(env(&[("MODU_MCP__SERVERS", "{not json")])).unwrap_err();
    assert!(err_message(e).contains("MODU_MCP__SERVERS is not valid JSON"));
    let e = McpConfig::from_env_with(env(&[("MODU_MCP__SERVERS", r#"{"name": "x"}"#)])).unwrap_err();
    assert!(err_message(e).contains("must be a JSON array"));
    let e = McpConfig::from_env_with(env(&[("MODU_MCP__CONNECT_TIMEOUT_SECONDS", "soon")])).unwrap_err();
    assert!(err_message(e).contains("MODU_MCP__CONNECT_TIMEOUT_SECONDS must be a number"));
    let e = McpConfig::from_env_with(env(&[("MODU_MCP__CONNECT_TIMEOUT_SECONDS", "0")])).unwrap_err();
    assert!(err_message(e).contains("connect_timeout_seconds must be a positive number"));
}

#[test]
fn names_must_be_unique() {
    let e = McpConfig::from_json(json!({"servers": [
        {"name": "a", "transport": "stdio", "command": "x"},
        {"name": "a", "transport": "streamable_http", "url": "http://127.0.0.1:1/mcp"}
    ]}))
    .unwrap_err();
    assert_eq!(e.server.as_deref(), Some("a"));
    assert!(e.message.contains("used more than once"), "{e}");
}

#[test]
fn names_must_not_contain_double_underscore() {
    let e =
        McpServerConfig::from_json(json!({"name": "my__server", "transport": "stdio", "command": "x"})).unwrap_err();
    assert!(e.message.contains("must not contain \"__\""), "{e}");
    let e = McpServerConfig::from_json(json!({"name": "", "transport": "stdio", "command": "x"})).unwrap_err();
    assert!(e.message.contains("empty"), "{e}");
    let e = McpServerConfig::from_json(json!({"name": "a b", "transport": "stdio", "command": "x"})).unwrap_err();
    assert!(e.message.contains("ASCII letters"), "{e}");
}

#[test]
fn names_must_not_start_or_end_with_an_underscore() {
    // Server `a_` with tool `b` and server `a` with tool `_b` would both be `a___b`.
    for name in ["a_", "_a", "_", "weather_", "_weather"] {
        let e = McpServerConfig::from_json(json!({"name": name, "transport": "stdio", "command": "x"})).unwrap_err();
        assert_eq!(e.server.as_deref(), Some(name));
        assert!(e.message.contains("must not start or end with '_'"), "{name}: {e}");
        let e = McpConfig::new(vec![McpServerConfig::stdio(name, "x")]).unwrap_err();
        assert!(e.message.contains("must not start or end with '_'"), "{name}: {e}");
    }
    // '_' inside a name is fine.
    for name in ["a_b", "my_server-2", "a-_b"] {
        McpServerConfig::from_json(json!({"name": name, "transport": "stdio", "command": "x"})).unwrap();
    }
}

#[test]
fn urls_must_be_http_or_https() {
    for url in [
        "ftp://example.com/mcp",
        "example.com/mcp",
        "ws://127.0.0.1:1/mcp",
        "http://",
    ] {
        let e =
            McpServerConfig::from_json(json!({"name": "h", "transport": "streamable_http", "url": url})).unwrap_err();
        assert!(e.message.contains("url"), "{url}: {e}");
    }
    let e = McpServerConfig::from_json(json!({"name": "h", "transport": "streamable_http"})).unwrap_err();
    assert!(e.message.contains("needs a url"), "{e}");
    for url in ["http://127.0.0.1:8080/mcp", "https://mcp.example.com/linear"] {
        McpServerConfig::from_json(json!({"name": "h", "transport": "streamable_http", "url": url})).unwrap();
    }
    let e = McpServerConfig::from_json(json!({"name": "h", "transport": "streamable_http", "url": "https://a.example/mcp",
        "auth": {"oauth_client_credentials": {"token_url": "file:///etc/passwd", "client_id": "c", "client_secret_env": "S"}}}))
    .unwrap_err();
    assert!(e.message.contains("token_url"), "{e}");
}

#[test]
fn stdio_needs_a_command() {
    let e = McpServerConfig::from_json(json!({"name": "s", "transport": "stdio"})).unwrap_err();
    assert!(e.message.contains("stdio server needs a command"), "{e}");
    let e = McpServerConfig::from_json(json!({"name": "s", "transport": "stdio", "command": "  "})).unwrap_err();
    assert!(e.message.contains("stdio server needs a command"), "{e}");
    let e = McpServerConfig::from_json(json!({"name": "s", "transport": "stdio", "command": "x", "url": "http://a/"}))
        .unwrap_err();
    assert!(e.message.contains("no url"), "{e}");
}

#[test]
fn unknown_fields_and_transports_are_rejected() {
    let e = McpServerConfig::from_json(json!({"name": "s", "transport": "stdio", "command": "x", "cwd": "/tmp"}))
        .unwrap_err();
    assert!(e.message.contains("unknown field `cwd`"), "{e}");
    let e = McpServerConfig::from_json(json!({"name": "s", "transport": "sse", "url": "http://a/"})).unwrap_err();
    assert!(e.message.contains("unknown variant `sse`"), "{e}");
    let e = McpServerConfig::from_json(json!({"name": "h", "transport": "streamable_http", "url": "http://a/",
        "auth": {"bearer": "x"}}))
    .unwrap_err();
    assert!(e.message.contains("unknown field `bearer`"), "{e}");
    let e = McpConfig::from_json(json!({"servers": [], "timeout": 3})).unwrap_err();
    assert!(e.message.contains("unknown field `timeout`"), "{e}");
    let e = McpConfig::from_env_with(env(&[(
        "MODU_MCP__SERVERS",
        r#"[{"name": "s", "transport": "stdio", "command": "x", "extra": 1}]"#,
    )]))
    .unwrap_err();
    assert!(e.message.contains("unknown field `extra`"), "{e}");
}

#[test]
fn auth_takes_one_bearer_source_and_timeouts_are_positive() {
    let e = McpServerConfig::from_json(json!({"name": "h", "transport": "streamable_http", "url": "http://a/",
        "auth": {"bearer_token": "t", "bearer_token_env": "T"}}))
    .unwrap_err();
    assert!(e.message.contains("at most one"), "{e}");
    let e = McpServerConfig::from_json(
        json!({"name": "s", "transport": "stdio", "command": "x", "call_timeout_seconds": 0}),
    )
    .unwrap_err();
    assert!(e.message.contains("call_timeout_seconds"), "{e}");
}

#[test]
fn max_result_bytes_is_per_server_optional_and_positive() {
    let config = McpConfig::from_env_with(env(&[(
        "MODU_MCP__SERVERS",
        r#"[{"name": "big", "transport": "stdio", "command": "x", "max_result_bytes": 2048},
            {"name": "plain", "transport": "stdio", "command": "x"}]"#,
    )]))
    .unwrap();
    assert_eq!(config.servers[0].max_result_bytes, Some(2048));
    assert_eq!(
        config.servers[1].max_result_bytes, None,
        "unset: the provider's default"
    );
    assert!(format!("{:?}", config.servers[0]).contains("max_result_bytes: Some(2048)"));
    let e =
        McpServerConfig::from_json(json!({"name": "s", "transport": "stdio", "command": "x", "max_result_bytes": 0}))
            .unwrap_err();
    assert!(e.message.contains("max_result_bytes"), "{e}");
    let e =
        McpServerConfig::from_json(json!({"name": "s", "transport": "stdio", "command": "x", "max_result_bytes": -1}))
            .unwrap_err();
    assert!(
        e.message.contains("max_result_bytes") || e.message.contains("invalid value"),
        "{e}"
    );
}

#[test]
fn secrets_never_appear_in_debug_or_errors() {
    let server = McpServerConfig::from_json(json!({
        "name": "h", "transport": "streamable_http", "url": "https://mcp.example.com/x",
        "auth": {"headers": {"X-Api-Key": "key-secret-123"}, "bearer_token": "bearer-secret-456"}
    }))
    .unwrap();
    let debug = format!("{server:?}");
    assert!(
        !debug.contains("key-secret-123") && !debug.contains("bearer-secret-456"),
        "{debug}"
    );
    assert!(debug.contains("X-Api-Key") && debug.contains("<redacted>"), "{debug}");
    let config = configured();
    let debug = format!("{config:?}");
    assert!(!debug.contains("ghp_secret_value"), "{debug}");
    assert!(debug.contains("GITHUB_TOKEN"), "{debug}");
    // A secret given with the wrong type is not echoed back in the error.
    let e = McpServerConfig::from_json(
        json!({"name": "s", "transport": "stdio", "command": "x", "env": {"TOKEN": 987654321}}),
    )
    .unwrap_err();
    assert!(!e.to_string().contains("987654321"), "{e}");
    assert!(e.message.contains("invalid type"), "{e}");
}

#[test]
fn secrets_in_the_url_never_appear_in_debug() {
    // Hosted MCP servers often take their key in the URL: user info or a query parameter.
    let url = "https://user:pa55-word-x1@mcp.example.com/mcp?api_key=sk-url-secret-42&access_token=tok%2Fsecret-9&profile=work";
    let server = McpServerConfig::from_json(json!({"name": "h", "transport": "streamable_http", "url": url})).unwrap();
    let config = McpConfig::new(vec![server.clone()]).unwrap();
    let connector = McpConnector::new(config.clone()).unwrap();
    for debug in [format!("{server:?}"), format!("{config:?}"), format!("{connector:?}")] {
        for secret in ["pa55-word-x1", "sk-url-secret-42", "tok%2Fsecret-9", "tok/secret-9"] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        // The rest of the URL stays, to tell servers apart.
        assert!(
            debug.contains("mcp.example.com/mcp?api_key=[redacted]") && debug.contains("profile=work"),
            "{debug}"
        );
    }
    // A password with characters a URL encodes (as written and as encoded), and a token given
    // as the user name alone.
    for (url, secrets) in [
        (
            "https://user:päss wörd@mcp.example.com/mcp",
            &["päss wörd", "p%C3%A4ss%20w%C3%B6rd"][..],
        ),
        (
            "https://tok-en-user-secret@mcp.example.com/mcp",
            &["tok-en-user-secret"][..],
        ),
    ] {
        let server =
            McpServerConfig::from_json(json!({"name": "h", "transport": "streamable_http", "url": url})).unwrap();
        let debug = format!("{server:?}");
        for secret in secrets {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        assert!(debug.contains("mcp.example.com/mcp"), "{debug}");
    }
}

#[test]
fn secrets_in_stdio_arguments_never_appear_in_debug() {
    // Local servers often take their key on the command line, in either flag form.
    let server = McpServerConfig::stdio("gh", "npx").with_args([
        "-y",
        "some-mcp-server",
        "--api-key=sk-arg-secret-1",
        "--token",
        "tok-arg-secret-2",
        "-e",
        "GITHUB_TOKEN=ghp-arg-secret-3",
        "--port",
        "8080",
    ]);
    let config = McpConfig::new(vec![server.clone()]).unwrap();
    let connector = McpConnector::new(config.clone()).unwrap();
    for debug in [format!("{server:?}"), format!("{config:?}"), format!("{connector:?}")] {
        for secret in ["sk-arg-secret-1", "tok-arg-secret-2", "ghp-arg-secret-3"] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        // The flags and the ordinary arguments stay, to tell servers apart.
        for kept in [
            "\"some-mcp-server\"",
            "\"--api-key=<redacted>\"",
            "\"--token\", \"<redacted>\"",
            "\"GITHUB_TOKEN=<redacted>\"",
            "\"--port\", \"8080\"",
        ] {
            assert!(debug.contains(kept), "{kept} not in {debug}");
        }
    }
}

#[test]
fn omitted_selection_means_every_configured_server() {
    let resolver = DefaultServerResolver::new();
    let servers = resolver.resolve_selection(&configured(), None).unwrap();
    let names: Vec<_> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["github", "linear"]);
    // `mcp` without `servers`, or no `mcp` at all, is "omitted".
    let meta = json!({"mcp": {}});
    assert!(selection_from_metadata(meta.as_object().unwrap()).unwrap().is_none());
    let meta = json!({"other": 1});
    assert!(selection_from_metadata(meta.as_object().unwrap()).unwrap().is_none());
    let meta = json!({"mcp": "github"});
    assert!(selection_from_metadata(meta.as_object().unwrap()).is_err());
}

#[test]
fn empty_selection_means_no_server() {
    let servers = DefaultServerResolver::new()
        .resolve_selection(&configured(), Some(&json!([])))
        .unwrap();
    assert!(servers.is_empty());
}

#[test]
fn names_and_inline_servers_mix() {
    let selection = json!(["linear", {"name": "tenant-search", "transport": "streamable_http",
        "url": "https://tenant.example.com/mcp", "auth": {"bearer_token_env": "TENANT_MCP_TOKEN"}}]);
    let servers = DefaultServerResolver::new()
        .resolve_selection(&configured(), Some(&selection))
        .unwrap();
    let names: Vec<_> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["linear", "tenant-search"]);
    assert_eq!(
        servers[0].call_timeout_seconds, 5.0,
        "configured servers keep their settings"
    );
}

#[test]
fn selection_errors() {
    let resolver = DefaultServerResolver::new();
    let config = configured();
    let cases: Vec<(Value, &str)> = vec![
        (json!(["linear", "linear"]), "selected more than once"),
        (
            json!([{"name": "x", "transport": "streamable_http", "url": "http://127.0.0.1:1/"},
                   {"name": "x", "transport": "streamable_http", "url": "http://127.0.0.1:2/"}]),
            "selected more than once",
        ),
        (
            json!([{"name": "linear", "transport": "streamable_http", "url": "https://evil.example/mcp"}]),
            "shadows a configured server",
        ),
        (json!(["nope"]), "no configured MCP server is named \"nope\""),
        (json!("linear"), "must be an array"),
        (json!([42]), "server name or an inline server object"),
        (
            json!([{"name": "x", "transport": "streamable_http", "url": "http://a/", "surprise": true}]),
            "unknown field `surprise`",
        ),
        (
            json!([{"name": "x__y", "transport": "streamable_http", "url": "http://a/"}]),
            "__",
        ),
        (
            json!([{"name": "x", "transport": "streamable_http", "url": "gopher://a/"}]),
            "http(s)",
        ),
    ];
    for (selection, expected) in cases {
        let e = resolver.resolve_selection(&config, Some(&selection)).unwrap_err();
        assert!(
            e.to_string().contains(expected),
            "{selection}: expected {expected:?} in {e}"
        );
    }
}

#[test]
fn inline_stdio_needs_opt_in() {
    let selection = json!([{"name": "local", "transport": "stdio", "command": "rm", "args": ["-rf", "/"]}]);
    let e = DefaultServerResolver::new()
        .resolve_selection(&configured(), Some(&selection))
        .unwrap_err();
    assert!(e.message.contains("inline stdio servers are refused"), "{e}");
    let servers = DefaultServerResolver::new()
        .allow_inline_stdio(true)
        .resolve_selection(&configured(), Some(&selection))
        .unwrap();
    assert_eq!(servers[0].name, "local");
}

/// An application resolver: connection ids → configurations from its own store.
struct ConnectionStore;

#[async_trait::async_trait]
impl McpRuntimeServerResolver for ConnectionStore {
    async fn resolve(
        &self,
        _config: &McpConfig,
        request: &McpSelectionRequest<'_>,
    ) -> Result<Vec<McpServerConfig>, McpServerConfigurationError> {
        let ids = request.selection.and_then(Value::as_array).cloned().unwrap_or_default();
        let user = request.user.and_then(|u| u.user_id.clone()).unwrap_or_default();
        Ok(ids
            .iter()
            .filter_map(Value::as_str)
            .map(|id| {
                McpServerConfig::streamable_http(format!("conn-{id}"), format!("https://{user}.example.com/{id}"))
            })
            .collect())
    }
}

#[tokio::test]
async fn custom_resolvers_are_validated_too() {
    let resolver = ConnectionStore;
    let user = modu_core::UserContext::user("alice");
    let selection = json!(["7", "9"]);
    let request = McpSelectionRequest {
        selection: Some(&selection),
        metadata: None,
        user: Some(&user),
        run_id: None,
    };
    let servers = resolver.resolve(&McpConfig::default(), &request).await.unwrap();
    assert_eq!(servers[1].url.as_deref(), Some("https://alice.example.com/9"));
    // A resolver returning a duplicate name is caught by the connector.
    let connector = McpConnector::new(McpConfig::default())
        .unwrap()
        .with_resolver(Arc::new(ConnectionStore));
    let selection = json!(["7", "7"]);
    let e = connector
        .open_with(&McpSelectionRequest {
            selection: Some(&selection),
            metadata: None,
            user: Some(&user),
            run_id: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(e, McpError::Configuration(_)), "{e}");
}

#[tokio::test]
async fn provider_reads_the_selection_from_run_metadata() {
    let connector = Arc::new(McpConnector::new(configured()).unwrap());
    let provider: McpToolProvider<()> = McpToolProvider::new(Arc::clone(&connector));
    // [] → no server, no tools.
    let meta = json!({"mcp": {"servers": []}});
    let ctx = RunContext::new(Arc::new(()), "run-1").with_metadata(meta.as_object().unwrap().clone());
    let session = provider.open(&ctx).await.unwrap();
    assert!(session.tools().is_empty());
    session.close().await;
    // An unknown name fails the run's provider with a configuration error.
    let meta = json!({"mcp": {"servers": ["nope"]}});
    let ctx = RunContext::new(Arc::new(()), "run-2").with_metadata(meta.as_object().unwrap().clone());
    let e = provider.open(&ctx).await.err().unwrap();
    assert_eq!(e.provider, "mcp");
    assert!(e.message.contains("no configured MCP server is named"), "{}", e.message);
    // An inline stdio server through metadata is refused by default.
    let meta = json!({"mcp": {"servers": [{"name": "x", "transport": "stdio", "command": "sh"}]}});
    let ctx = RunContext::new(Arc::new(()), "run-3").with_metadata(meta.as_object().unwrap().clone());
    let e = provider.open(&ctx).await.err().unwrap();
    assert!(e.message.contains("inline stdio servers are refused"), "{}", e.message);
    // A selection source overrides metadata.
    let provider: McpToolProvider<()> = McpToolProvider::new(connector).with_selection_source(|_| Some(json!([])));
    let meta = json!({"mcp": {"servers": ["nope"]}});
    let ctx = RunContext::new(Arc::new(()), "run-4").with_metadata(meta.as_object().unwrap().clone());
    assert!(provider.open(&ctx).await.unwrap().tools().is_empty());
}
