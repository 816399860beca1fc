//! Authentication: the [`Principal`] a request runs as, the [`Authenticator`] hook, built-in
//! [`BearerTokens`], and the tower [`AuthLayer`] that puts the principal in the request's
//! extensions.
//!
//! The user and roles a run uses for RBAC come from the principal only; nothing in a request
//! body can set them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use http::HeaderMap;
use modu_core::UserContext;
use sha2::{Digest, Sha256};

use crate::error::ServerError;

/// Who a request is from: the user id and roles its runs get.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Principal {
    /// The user's id (`None` for an anonymous caller).
    pub user: Option<String>,
    /// The user's roles; the agent's RBAC authorizer checks tools against them.
    pub roles: Vec<String>,
}

impl Principal {
    /// A principal with this user id and these roles.
    pub fn new<I, S>(user: impl Into<String>, roles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Principal {
            user: Some(user.into()),
            roles: roles.into_iter().map(Into::into).collect(),
        }
    }

    /// The caller of a server without authentication: no user, no roles.
    pub fn anonymous() -> Self {
        Principal::default()
    }

    /// The run's user context.
    pub fn user_context(&self) -> UserContext {
        let mut user = UserContext::with_roles(self.roles.iter().cloned());
        user.user_id = self.user.clone();
        user
    }
}

/// Why a request was not authenticated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The request carries no credentials.
    #[error("the request has no credentials")]
    Missing,
    /// The credentials are not valid.
    #[error("the credentials are not valid")]
    Invalid,
}

/// Decides who a request is from, from its headers.
///
/// Implement this for your own scheme (sessions, JWTs, mTLS headers set by a proxy) and pass
/// it to [`ModuServer::auth`](crate::ModuServer::auth); [`BearerTokens`] is the built-in one.
#[async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The principal of a request, or why there is none (answered with 401).
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthError>;
}

/// Static bearer tokens (`Authorization: Bearer <token>`), each mapped to a principal.
///
/// Tokens are kept only as SHA-256 digests, looked up by digest, and never shown by `Debug`.
///
/// ```
/// use modu_server::{BearerTokens, Principal};
/// let tokens = BearerTokens::new().token("s3cret-token", Principal::new("alice", ["support"]));
/// assert!(!format!("{tokens:?}").contains("s3cret"));
/// ```
#[derive(Clone, Default)]
pub struct BearerTokens {
    tokens: HashMap<[u8; 32], Principal>,
}

impl BearerTokens {
    /// No tokens: every request is refused until tokens are added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `token` as `principal`.
    pub fn token(mut self, token: impl AsRef<str>, principal: Principal) -> Self {
        self.tokens.insert(digest(token.as_ref()), principal);
        self
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerTokens")
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[async_trait]
impl Authenticator for BearerTokens {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthError> {
        let token = bearer_token(headers).ok_or(AuthError::Missing)?;
        self.tokens.get(&digest(token)).cloned().ok_or(AuthError::Invalid)
    }
}

/// A tower layer that authenticates every request with an [`Authenticator`], puts the
/// [`Principal`] in the request's extensions and answers 401 (a JSON error, with
/// `WWW-Authenticate: Bearer`) when there is none.
#[derive(Clone)]
pub struct AuthLayer {
    authenticator: Arc<dyn Authenticator>,
}

impl AuthLayer {
    /// A layer around this authenticator.
    pub fn new(authenticator: impl Authenticator) -> Self {
        AuthLayer {
            authenticator: Arc::new(authenticator),
        }
    }
}

impl fmt::Debug for AuthLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthLayer").finish_non_exhaustive()
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            authenticator: Arc::clone(&self.authenticator),
        }
    }
}

/// The service [`AuthLayer`] wraps around its inner service.
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    authenticator: Arc<dyn Authenticator>,
}

impl<S> fmt::Debug for AuthService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthService").finish_non_exhaustive()
    }
}

impl<S> tower::Service<Request> for AuthService<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        // The clone is not ready; swap it in and call the one that was polled ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authenticator = Arc::clone(&self.authenticator);
        Box::pin(async move {
            match authenticator.authenticate(request.headers()).await {
                Ok(principal) => {
                    request.extensions_mut().insert(principal);
                    inner.call(request).await
                }
                Err(error) => {
                    tracing::info!(reason = %error, "request refused: not authenticated");
                    Ok(ServerError::Unauthorized.into_response())
                }
            }
        })
    }
}

/// The request's principal: the one an auth layer put in its extensions, or anonymous.
pub(crate) struct Caller(pub Principal);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut http::request::Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Caller(parts.extensions.get::<Principal>().cloned().unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, http::HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_other_schemes_are_not_tokens() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic YWxhZGRpbjpvcGVu")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn a_token_maps_to_its_principal_and_nothing_else_does() {
        let tokens = BearerTokens::new().token("t1", Principal::new("alice", ["a"]));
        assert_eq!(
            tokens
                .authenticate(&headers("Bearer t1"))
                .await
                .unwrap()
                .user
                .as_deref(),
            Some("alice")
        );
        assert_eq!(
            tokens.authenticate(&headers("Bearer t2")).await,
            Err(AuthError::Invalid)
        );
        assert_eq!(tokens.authenticate(&HeaderMap::new()).await, Err(AuthError::Missing));
    }
}
