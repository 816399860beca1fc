//! OAuth consent for the command line: a loopback redirect (RFC 8252 §7.3).
//!
//! A server with `auth.oauth` in `modu.toml` gets the authorization-code flow of
//! `modu::mcp::oauth`. When it asks for authorization, the command prints the authorization URL on
//! stderr; the person opens it in a browser and approves, and the authorization server redirects
//! the browser to `http://127.0.0.1:<port>/callback`, where this handler listens (on the port of
//! `mcp.oauth_redirect_port`, or one the system picks). The tokens go to the MCP token store of
//! the configured store, so a later command needs no consent until they expire for good.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{OriginalUri, State};
use axum::response::Html;
use modu::mcp::oauth::{McpAuthorizationRequest, McpAuthorizationResponse, McpConsentError, McpConsentHandler};
use tokio::sync::{Mutex, mpsc};

/// How long the command waits for the browser's redirect.
pub const CONSENT_TIMEOUT: Duration = Duration::from_secs(300);

/// Waits for the authorization server's redirect on a loopback port.
pub struct LoopbackConsent {
    /// Bound when the command starts, so the redirect URI (registered with the authorization
    /// server) names a port that is ours. Each authorization serves on a copy of it, one at a
    /// time.
    listener: Mutex<std::net::TcpListener>,
    address: SocketAddr,
    timeout: Duration,
}

impl LoopbackConsent {
    /// Binds `127.0.0.1:port` (0: a free port).
    pub fn bind(port: u16) -> Result<Self, String> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .map_err(|e| format!("mcp.oauth_redirect_port: cannot listen on 127.0.0.1:{port}: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("the OAuth redirect listener: {e}"))?;
        let address = listener
            .local_addr()
            .map_err(|e| format!("the OAuth redirect listener: {e}"))?;
        Ok(LoopbackConsent {
            listener: Mutex::new(listener),
            address,
            timeout: CONSENT_TIMEOUT,
        })
    }

    /// Waits this long for the redirect instead of [`CONSENT_TIMEOUT`].
    #[cfg(test)]
    fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The redirect URI to register: `http://127.0.0.1:<port>/callback`.
    pub fn redirect_uri(&self) -> String {
        format!("http://{}/callback", self.address)
    }
}

/// Where the callback sends the redirect it got.
type Redirects = mpsc::Sender<String>;

async fn callback(State(redirects): State<Redirects>, OriginalUri(uri): OriginalUri) -> Html<&'static str> {
    let _ = redirects.send(uri.to_string()).await;
    Html(
        "<!doctype html><title>modu</title><p>Authorization received. You can close this tab and go back to the terminal.</p>",
    )
}

#[async_trait::async_trait]
impl McpConsentHandler for LoopbackConsent {
    async fn authorize(&self, request: &McpAuthorizationRequest) -> Result<McpAuthorizationResponse, McpConsentError> {
        // One authorization at a time, each on a copy of the bound socket.
        let bound = self.listener.lock().await;
        let listener = bound
            .try_clone()
            .and_then(tokio::net::TcpListener::from_std)
            .map_err(|e| McpConsentError::new(format!("the OAuth redirect listener: {e}")))?;
        let (tx, mut rx) = mpsc::channel(4);
        let app = axum::Router::new()
            .route("/callback", axum::routing::get(callback))
            .with_state(tx);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        eprintln!(
            "MCP server {:?} asks for authorization{}. Open this URL in a browser and approve:\n  {}\n(waiting up to {}s for the redirect to {})",
            request.server,
            if request.scopes.is_empty() {
                String::new()
            } else {
                format!(" (scopes: {})", request.scopes.join(" "))
            },
            request.authorization_url,
            self.timeout.as_secs(),
            request.redirect_uri,
        );
        let got = tokio::time::timeout(self.timeout, rx.recv()).await;
        let _ = stop.send(());
        let _ = server.await;
        drop(bound);
        let path = match got {
            Ok(Some(path)) => path,
            Ok(None) => return Err(McpConsentError::new("the OAuth redirect listener stopped")),
            Err(_) => {
                return Err(McpConsentError::new(format!(
                    "no redirect arrived within {}s",
                    self.timeout.as_secs()
                )));
            }
        };
        McpAuthorizationResponse::from_redirect_url(&format!("http://{}{path}", self.address))
    }
}

/// The consent handler and redirect URI the configuration asks for (shared by every server).
pub fn loopback(port: Option<u16>) -> Result<(Arc<LoopbackConsent>, String), String> {
    let consent = LoopbackConsent::bind(port.unwrap_or(0))?;
    let redirect = consent.redirect_uri();
    Ok((Arc::new(consent), redirect))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn request(consent: &LoopbackConsent) -> McpAuthorizationRequest {
        McpAuthorizationRequest::new("files", "https://as.example/authorize?state=s1", consent.redirect_uri())
    }

    /// A browser that follows the authorization server's redirect.
    async fn browse(url: String) -> String {
        let mut stream = tokio::net::TcpStream::connect(url.trim_start_matches("http://").split('/').next().unwrap())
            .await
            .unwrap();
        let path = format!("/{}", url.trim_start_matches("http://").split_once('/').unwrap().1);
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut page = String::new();
        stream.read_to_string(&mut page).await.unwrap();
        page
    }

    #[tokio::test]
    async fn the_redirect_gives_the_code_and_state_and_the_listener_serves_again() {
        let consent = Arc::new(LoopbackConsent::bind(0).unwrap());
        assert!(consent.redirect_uri().starts_with("http://127.0.0.1:"));
        assert!(consent.redirect_uri().ends_with("/callback"));
        for (code, state) in [("c1", "s1"), ("c2", "s2")] {
            let waiting = {
                let consent = Arc::clone(&consent);
                tokio::spawn(async move { consent.authorize(&request(&consent)).await })
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            let page = browse(format!("{}?code={code}&state={state}", consent.redirect_uri())).await;
            assert!(page.starts_with("HTTP/1.1 200"), "{page}");
            assert!(page.contains("You can close this tab"), "{page}");
            let response = waiting.await.unwrap().unwrap();
            assert_eq!((response.code.as_str(), response.state.as_str()), (code, state));
        }
    }

    #[tokio::test]
    async fn a_refusal_and_a_missing_redirect_are_errors() {
        let consent = Arc::new(LoopbackConsent::bind(0).unwrap());
        let waiting = {
            let consent = Arc::clone(&consent);
            tokio::spawn(async move { consent.authorize(&request(&consent)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        browse(format!("{}?error=access_denied&state=s1", consent.redirect_uri())).await;
        let refused = waiting.await.unwrap().unwrap_err();
        assert!(refused.to_string().contains("access_denied"), "{refused}");

        let impatient = LoopbackConsent::bind(0)
            .unwrap()
            .with_timeout(Duration::from_millis(200));
        let late = impatient.authorize(&request(&impatient)).await.unwrap_err();
        assert!(late.to_string().contains("no redirect arrived"), "{late}");
    }

    #[test]
    fn a_taken_port_is_a_clear_error() {
        let taken = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = LoopbackConsent::bind(port).err().unwrap();
        assert!(
            e.contains("mcp.oauth_redirect_port") && e.contains(&port.to_string()),
            "{e}"
        );
    }
}
