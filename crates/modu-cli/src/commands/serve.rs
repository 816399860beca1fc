//! `modu serve`: the configured agent over HTTP (OpenAI-compatible, AG-UI, A2A and run
//! control, from modu-server) until Ctrl-C or `SIGTERM`.

use std::path::Path;

use clap::Args;
use modu::server::{BearerTokens, ModuServer, Principal};

use super::{CommandResult, Failure, load_config};
use crate::build;

/// The variable that holds the bearer token when `--token` is not given.
const TOKEN_VAR: &str = "MODU_SERVE_TOKEN";

/// Arguments of `modu serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on: an IP address or a host name, and a port (0 picks a free one).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// Require `Authorization: Bearer TOKEN` on every request (default: $MODU_SERVE_TOKEN;
    /// neither: no authentication, every request runs as an anonymous user).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Let pages from this origin (`https://app.example`) call the server from a browser
    /// (CORS); repeat for several. Without it no CORS headers are sent.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
}

/// The CORS layer for `--cors-origin`s (none: no layer).
fn cors(origins: &[String]) -> Result<Option<modu::server::cors::CorsLayer>, Failure> {
    use modu::server::cors::{AllowHeaders, AllowMethods, CorsLayer};
    if origins.is_empty() {
        return Ok(None);
    }
    let mut values = Vec::with_capacity(origins.len());
    for origin in origins {
        let bad = || {
            Failure::Usage(format!(
                "--cors-origin {origin:?} is not an origin such as https://app.example"
            ))
        };
        let trimmed = origin.trim_end_matches('/');
        let scheme_ok = trimmed.starts_with("http://") || trimmed.starts_with("https://");
        let host = trimmed.split_once("://").map(|(_, rest)| rest).unwrap_or_default();
        if !scheme_ok || host.is_empty() || host.contains('/') {
            return Err(bad());
        }
        values.push(axum::http::HeaderValue::from_str(trimmed).map_err(|_| bad())?);
    }
    Ok(Some(
        CorsLayer::new()
            .allow_origin(values)
            .allow_methods(AllowMethods::mirror_request())
            .allow_headers(AllowHeaders::mirror_request()),
    ))
}

/// The bearer token: `--token`, else `$MODU_SERVE_TOKEN`, else none. An empty one is a usage
/// error: `--token "$UNSET"` or `MODU_SERVE_TOKEN=` would otherwise serve without
/// authentication (with `--token ""`, even when MODU_SERVE_TOKEN holds the real token).
fn token(arg: Option<String>) -> Result<Option<String>, Failure> {
    let token = match arg {
        Some(token) if token.trim().is_empty() => {
            return Err(Failure::Usage(
                "--token is empty: give the token, or leave --token out to serve without authentication".into(),
            ));
        }
        Some(token) => token,
        None => match std::env::var(TOKEN_VAR) {
            Ok(token) if token.trim().is_empty() => {
                return Err(Failure::Usage(format!(
                    "{TOKEN_VAR} is empty: set it to the token, or unset it to serve without authentication"
                )));
            }
            Ok(token) => token,
            Err(std::env::VarError::NotPresent) => return Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Failure::Usage(format!("{TOKEN_VAR} is not valid UTF-8")));
            }
        },
    };
    Ok(Some(token))
}

/// Serves the agent of the configuration under its `[agent] name`, and prints the URL.
pub async fn run(args: ServeArgs, config: Option<&Path>) -> CommandResult {
    let token = token(args.token)?;
    let loaded = load_config(config)?;
    // A host name (`localhost:8080`) listens on the first address it resolves to that binds.
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(args.addr.as_str())
        .await
        .map_err(|e| Failure::Usage(format!("--addr {:?} is not HOST:PORT: {e}", args.addr)))?
        .collect();
    if addrs.is_empty() {
        return Err(Failure::Usage(format!("--addr {:?} resolves to no address", args.addr)));
    }
    let cors = cors(&args.cors_origins)?;
    let built = build::agent(&loaded.config, None).await?;
    let name = loaded.config.agent.name.clone();
    let mut server = ModuServer::new().agent(name.clone(), built.agent).dev_ui(true);
    if !built.active_skills.is_empty() {
        server = server.run_metadata(name.clone(), "skills", serde_json::json!(built.active_skills));
    }
    let authenticated = token.is_some();
    if let Some(token) = token {
        server = server.auth(BearerTokens::new().token(token, Principal::new("modu", Vec::<String>::new())));
    }
    if let Some(cors) = cors {
        server = server.cors(cors);
    }
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .map_err(|e| Failure::Invalid(format!("cannot listen on {}: {e}", args.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::Invalid(format!("cannot read the address listened on: {e}")))?;
    // Listening for Ctrl-C and SIGTERM before the URL is printed: a stop right after it stops
    // the server gracefully (not the process at once, as the default handlers would).
    let mut interrupts = Interrupts::listen()?;
    let url = format!("http://{local}");
    outln!("serving {name} on {url}")?;
    outln!("  dev UI:  {url}/")?;
    outln!("  OpenAI:  {url}/v1/chat/completions (model \"{name}\")")?;
    outln!("  AG-UI:   {url}/agui/{name}")?;
    outln!("  A2A:     {url}/a2a/{name} (card {url}/a2a/{name}/.well-known/agent-card.json)")?;
    if !authenticated && !local.ip().is_loopback() {
        eprintln!("warning: {local} is reachable from other machines and no token is set (--token)");
    }
    // Ctrl-C or SIGTERM lets the requests under way finish; a second one stops at once (a
    // client that keeps its request open, or a long stream, would otherwise keep the server
    // running).
    let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
    let serving = axum::serve(listener, server.router()).with_graceful_shutdown(async {
        let _ = stopping.await;
    });
    tokio::select! {
        served = serving => served.map_err(|e| Failure::Invalid(format!("the server stopped: {e}"))),
        () = async {
            interrupts.next().await;
            let _ = stop.send(());
            eprintln!("stopping: waiting for the requests under way ({AGAIN} again to stop now)");
            interrupts.next().await;
        } => Ok(()),
    }
}

/// What stops `modu serve` at once once it is stopping.
#[cfg(unix)]
const AGAIN: &str = "Ctrl-C or SIGTERM";
#[cfg(not(unix))]
const AGAIN: &str = "Ctrl-C";

/// Stop requests, from when [`Interrupts::listen`] is called: Ctrl-C (`SIGINT`) and, on Unix,
/// `SIGTERM`, the signal `docker stop`, systemd and Kubernetes send before they kill. Either
/// one starts the graceful stop; the next one of either stops at once.
struct Interrupts {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn listen() -> Result<Interrupts, Failure> {
        #[cfg(unix)]
        let listen = |kind: tokio::signal::unix::SignalKind, name: &str| {
            tokio::signal::unix::signal(kind).map_err(|e| Failure::Invalid(format!("cannot listen for {name}: {e}")))
        };
        Ok(Interrupts {
            #[cfg(unix)]
            interrupt: listen(tokio::signal::unix::SignalKind::interrupt(), "Ctrl-C")?,
            #[cfg(unix)]
            terminate: listen(tokio::signal::unix::SignalKind::terminate(), "SIGTERM")?,
        })
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}
