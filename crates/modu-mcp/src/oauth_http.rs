//! The streamable-HTTP client of a server with an [`OAuthFlow`]: it sends the flow's token
//! and answers the server's challenges by running the flow.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use crate::error::McpAuthError;
use crate::oauth_flow::{Challenge, OAuthFlow};

/// A pooled reqwest client that sends the flow's token and, when the server challenges a
/// POST (401, or 403 `insufficient_scope`), runs the flow and sends it again. The event
/// stream GET and the session DELETE carry the token but never start an authorization.
#[derive(Clone)]
pub(crate) struct OAuthFlowHttpClient {
    pub(crate) inner: crate::http_client::UrlFreeHttp,
    pub(crate) flow: Arc<OAuthFlow>,
}

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

fn io(e: McpAuthError) -> StreamableHttpError<reqwest::Error> {
    // The auth error itself, so the session reports it as one (see `describe`).
    StreamableHttpError::Io(std::io::Error::other(e))
}

impl OAuthFlowHttpClient {
    async fn authorized<T, F, Fut>(&self, call: F) -> HttpResult<T>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = HttpResult<T>>,
    {
        let mut token = self.flow.token().await.map_err(io)?;
        let mut authorizations = 0;
        let mut refreshed = false;
        // Bounded however the server answers: each round authorizes, refreshes or takes a
        // token another request obtained.
        let rounds = self.flow.config.max_authorizations.saturating_mul(2).saturating_add(2);
        for _ in 0..rounds {
            let challenge = match call(token.clone()).await {
                Err(StreamableHttpError::AuthRequired(e)) => Challenge::Unauthorized(e.www_authenticate_header),
                Err(StreamableHttpError::InsufficientScope(e)) => Challenge::InsufficientScope {
                    header: e.www_authenticate_header,
                    scope: e.required_scope,
                },
                Err(e) if crate::describe::is_plain_unauthorized(&e) => Challenge::Unauthorized(String::new()),
                other => return other,
            };
            let fresh = self
                .flow
                .answer(token.as_deref(), challenge, &mut authorizations, &mut refreshed)
                .await
                .map_err(io)?;
            token = Some(fresh);
        }
        Err(io(self.flow.fail("the server kept refusing the tokens it was given")))
    }

    async fn with_current<T, F, Fut>(&self, call: F) -> HttpResult<T>
    where
        F: FnOnce(Option<String>) -> Fut,
        Fut: Future<Output = HttpResult<T>>,
    {
        let token = self.flow.token().await.map_err(io)?;
        call(token).await
    }
}

impl StreamableHttpClient for OAuthFlowHttpClient {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = HttpResult<StreamableHttpPostResponse>> + Send + '_ {
        self.authorized(move |token| {
            self.inner.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = HttpResult<StreamableHttpPostResponse>> + Send + '_ {
        self.authorized(move |token| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = HttpResult<()>> + Send + '_ {
        self.with_current(move |token| self.inner.delete_session(uri, session_id, token, custom_headers))
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = HttpResult<BoxStream<'static, Result<Sse, SseError>>>> + Send + '_ {
        self.with_current(move |token| {
            self.inner
                .get_stream(uri, session_id, last_event_id, token, custom_headers)
        })
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = HttpResult<BoxStream<'static, Result<Sse, SseError>>>> + Send + '_ {
        self.with_current(move |token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                token,
                custom_headers,
                max_sse_event_size,
            )
        })
    }
}
