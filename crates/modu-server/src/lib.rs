#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod agui;
mod agui_events;
pub mod auth;
mod error;
mod mount;
mod openai;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use modu_core::Agent;
use serde::Serialize;

pub use auth::{AuthError, AuthLayer, Authenticator, BearerTokens, Principal};
pub use error::ServerError;

use mount::{Mounted, Served};

/// The largest request body accepted by default: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// Serves agents by name over HTTP; [`ModuServer::router`] gives the axum [`Router`].
///
/// Routes (relative to wherever the router is nested):
///
/// | route | what |
/// |---|---|
/// | `POST /v1/chat/completions` | OpenAI chat completions, streamed (`"stream": true`, SSE) or not; `model` names the agent |
/// | `GET /v1/models` | the mounted agents, as OpenAI models |
/// | `POST /agui/{agent}` | an AG-UI `RunAgentInput`, answered with an SSE stream of AG-UI events |
///
/// Without [`ModuServer::auth`] every request runs as [`Principal::anonymous`] (no user, no
/// roles), unless a layer of the application put a [`Principal`] in the request's extensions.
pub struct ModuServer {
    agents: BTreeMap<String, Arc<dyn Served>>,
    auth: Option<AuthLayer>,
    body_limit: usize,
}

impl Default for ModuServer {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ModuServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuServer")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .field("auth", &self.auth.is_some())
            .field("body_limit", &self.body_limit)
            .finish()
    }
}

/// What the handlers share.
pub(crate) struct AppState {
    pub agents: BTreeMap<String, Arc<dyn Served>>,
    /// When the router was built (the `created` of `/v1/models`), in Unix seconds.
    pub created: u64,
}

impl AppState {
    pub(crate) fn agent(&self, name: &str) -> Result<&Arc<dyn Served>, ServerError> {
        self.agents
            .get(name)
            .ok_or_else(|| ServerError::UnknownAgent { name: name.to_owned() })
    }
}

/// Now, in Unix seconds.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl ModuServer {
    /// A server with no agents, no authentication and a 1 MiB body limit.
    pub fn new() -> Self {
        ModuServer {
            agents: BTreeMap::new(),
            auth: None,
            body_limit: DEFAULT_BODY_LIMIT,
        }
    }

    /// Serves `agent` as `name`; each run gets a fresh `C::default()` as its context.
    ///
    /// A second agent with the same name replaces the first.
    pub fn agent<C, O>(self, name: impl Into<String>, agent: Agent<C, O>) -> Self
    where
        C: Default + Send + Sync + 'static,
        O: Serialize + Send + 'static,
    {
        self.agent_with_context(name, agent, |_| C::default())
    }

    /// Serves `agent` as `name`, building each run's context from the caller's principal.
    pub fn agent_with_context<C, O>(
        mut self,
        name: impl Into<String>,
        agent: Agent<C, O>,
        context: impl Fn(&Principal) -> C + Send + Sync + 'static,
    ) -> Self
    where
        C: Send + Sync + 'static,
        O: Serialize + Send + 'static,
    {
        let mounted = Mounted {
            agent,
            context: Arc::new(context),
        };
        self.agents.insert(name.into(), Arc::new(mounted));
        self
    }

    /// Authenticates every request with `authenticator` (for example [`BearerTokens`]);
    /// requests without a principal are answered with 401.
    pub fn auth(mut self, authenticator: impl Authenticator) -> Self {
        self.auth = Some(AuthLayer::new(authenticator));
        self
    }

    /// The largest request body accepted (413 above it). Default [`DEFAULT_BODY_LIMIT`].
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// The names of the mounted agents.
    pub fn agent_names(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(String::as_str)
    }

    /// The routes, ready to serve or to nest in an application's router.
    pub fn router(self) -> Router {
        let state = Arc::new(AppState {
            agents: self.agents,
            created: unix_now(),
        });
        let router = Router::new()
            .route("/v1/chat/completions", post(openai::chat_completions))
            .route("/v1/models", get(openai::models))
            .route("/agui/{agent}", post(agui::run))
            .with_state(state)
            .layer(DefaultBodyLimit::max(self.body_limit));
        match self.auth {
            Some(auth) => router.layer(auth),
            None => router,
        }
    }
}
