//! The dev UI at `/` (opt in with [`ModuServer::dev_ui`](crate::ModuServer::dev_ui)): one
//! static page embedded in the binary, no build step, nothing fetched from the internet. It
//! chats with a mounted agent over the AG-UI endpoint (the answer streams in, tool calls show
//! as they happen) and answers approvals with Approve / Reject buttons, which resume the run.
//! A side panel lists the agent's sessions (choosing one loads its history and continues the
//! thread) and the runs the page started, with each run's AG-UI events as they came.
//!
//! The page itself is served without authentication (it holds no data); every request it
//! makes carries the bearer token typed into it.

use axum::response::{Html, IntoResponse, Response};
use http::HeaderValue;
use http::header::{CONTENT_SECURITY_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS};

/// The page.
const PAGE: &str = include_str!("ui/index.html");

/// `GET /`.
pub(crate) async fn index() -> Response {
    let mut response = Html(PAGE).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
        ),
    );
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}
