//! [`UrlFreeHttp`]: the reqwest client of every streamable-HTTP session, with the URL taken out
//! of its errors.
//!
//! reqwest's errors display the request's URL (`error sending request for url (…)`), and a
//! server's URL may carry a secret (`?api_key=…`). rmcp logs such errors at `ERROR` (a failed
//! session delete at close, a failed event stream), and its errors reach ours: without the URL
//! neither can quote the secret.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// A pooled reqwest client whose errors do not name the URL.
#[derive(Clone, Debug, Default)]
pub(crate) struct UrlFreeHttp(pub(crate) reqwest::Client);

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

/// `result` with the URL taken out of a reqwest error.
fn url_free<T>(result: HttpResult<T>) -> HttpResult<T> {
    result.map_err(|e| match e {
        StreamableHttpError::Client(e) => StreamableHttpError::Client(e.without_url()),
        other => other,
    })
}

impl StreamableHttpClient for UrlFreeHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        url_free(
            self.0
                .post_message(uri, message, session_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        url_free(
            self.0
                .post_message_with_max_sse_event_size(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await,
        )
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        url_free(
            self.0
                .post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits)
                .await,
        )
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        url_free(
            self.0
                .delete_session(uri, session_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        url_free(
            self.0
                .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        url_free(
            self.0
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await,
        )
    }
}
