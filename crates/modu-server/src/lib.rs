#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod a2a;
mod a2a_rpc;
mod a2a_tasks;
mod a2a_wire;
mod agui;
mod agui_events;
pub mod auth;
mod control;
mod error;
mod inputs;
mod live;
mod mount;
mod openai;
mod openai_params;
mod owners;
mod ui;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use modu_agent::Agent;
use serde::Serialize;

pub use auth::{AuthError, AuthLayer, Authenticator, BearerTokens, Principal};
pub use error::ServerError;
pub use live::{EVENT_BUFFER, KEEP_FINISHED};
pub use owners::DEFAULT_SESSION_OWNERS;
/// tower-http's CORS layer, for [`ModuServer::cors`] (re-exported so its version is ours).
pub use tower_http::cors;

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
/// | `GET /v1/models` | the mounted agents, as OpenAI models (a structured agent's with the `response_format` it answers in) |
/// | `GET /v1/models/{model}` | one agent, as an OpenAI model (404 `model_not_found` for another name) |
/// | `POST /agui/{agent}` | an AG-UI `RunAgentInput`, answered with an SSE stream of AG-UI events; its `resume` answers a paused run's interrupts |
/// | `POST /a2a/{agent}` | A2A 1.0 JSON-RPC: `SendMessage`, `SendStreamingMessage` (SSE), `SubscribeToTask` (SSE), `GetTask`, `CancelTask`, `ListTasks` |
/// | `GET /a2a/{agent}/.well-known/agent-card.json` | the agent's A2A card (also `/.well-known/agent-card.json` when one agent is served); a structured agent's carries its output schema in an extension |
/// | `GET /agents/{agent}/runs/{run}/approvals` | a paused run's waiting calls |
/// | `POST /agents/{agent}/runs/{run}/approve`, `/reject` | a decision on one call: `{"callId", "always"?}`, `{"callId", "message"?}` |
/// | `GET /agents/{agent}/runs/{run}/inputs` | a paused run's asks for a person's input (`RunContext::ask_user`) that wait for an answer |
/// | `POST /agents/{agent}/runs/{run}/answer`, `/decline` | an answer to one ask: `{"callId", "value"}` (400 when the value does not fit the ask's schema), `{"callId", "message"?}` |
/// | `POST /agents/{agent}/runs/{run}/resume` | continues a paused or cancelled run: JSON, or AG-UI events with `Accept: text/event-stream` |
/// | `POST /agents/{agent}/runs/{run}/cancel` | cancels a running run (it stops at its next boundary, its checkpoint kept) |
/// | `GET /agents/{agent}/runs/{run}/events` | follows a streamed run: its buffered events after `Last-Event-ID`, then the rest live |
/// | `GET /agents/{agent}/sessions` | the caller's stored sessions, most recently used first |
/// | `GET /agents/{agent}/sessions/{session}/approvals` | the session's paused runs and their waiting calls |
/// | `GET /agents/{agent}/sessions/{session}/messages` | the session's stored history |
/// | `GET /` | the dev UI, with [`ModuServer::dev_ui`] |
///
/// Runs (paused or running), their approvals and events, and A2A tasks are their owner's
/// only: a run is the caller's when it runs for the principal's user (others get 404). A
/// session (AG-UI `threadId`, A2A `contextId`) belongs to the principal that first used it:
/// anyone else gets 404 for its history and its approvals and cannot continue it, and the
/// session list shows the caller's sessions only. The bindings are kept in the server's
/// memory (see the crate docs for what a restart does).
///
/// Without [`ModuServer::auth`] every request runs as [`Principal::anonymous`] (no user, no
/// roles), unless a layer of the application put a [`Principal`] in the request's extensions.
///
/// Errors, including a path no route has (404), a method a route does not take (405) and a
/// path parameter that cannot be read (400), are answered in [`ServerError`]'s shape.
pub struct ModuServer {
    agents: BTreeMap<String, Arc<dyn Served>>,
    metadata: BTreeMap<String, Metadata>,
    auth: Option<AuthLayer>,
    body_limit: usize,
    public_url: Option<String>,
    dev_ui: bool,
    cancel_on_disconnect: bool,
    session_owners: usize,
    cors: Option<cors::CorsLayer>,
}

/// Run metadata.
pub(crate) type Metadata = serde_json::Map<String, serde_json::Value>;

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
    /// Metadata each agent's runs start with, by agent name.
    pub metadata: BTreeMap<String, Metadata>,
    /// When the router was built (the `created` of `/v1/models`), in Unix seconds.
    pub created: u64,
    /// The A2A tasks of this server.
    pub tasks: a2a::Tasks,
    /// The URL the router is reachable at, for the A2A agent cards.
    pub public_url: Option<String>,
    /// The runs in flight.
    pub live: live::LiveRuns,
    /// Whether a run whose last client went away is cancelled.
    pub cancel_on_disconnect: bool,
    /// Who each session belongs to.
    pub sessions: owners::SessionOwners,
}

impl AppState {
    /// A new run's metadata: the agent's configured metadata, then the request's.
    pub(crate) fn run_metadata(&self, name: &str, request: Metadata) -> Metadata {
        let mut metadata = self.metadata.get(name).cloned().unwrap_or_default();
        metadata.extend(request);
        metadata
    }

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
            metadata: BTreeMap::new(),
            auth: None,
            body_limit: DEFAULT_BODY_LIMIT,
            public_url: None,
            dev_ui: false,
            cancel_on_disconnect: false,
            session_owners: owners::DEFAULT_SESSION_OWNERS,
            cors: None,
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

    /// Starts every run of the agent `name` with this metadata entry (for example the
    /// `skills` to activate); a key the request sets itself (`mcp`) wins.
    pub fn run_metadata(mut self, name: impl Into<String>, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.metadata.entry(name.into()).or_default().insert(key.into(), value);
        self
    }

    /// The URL the router is reachable at from outside (`https://example.com/ai`), for the
    /// A2A agent cards. Without it a card names the URL the request for it came to (its
    /// `Host` header and path, over `http`).
    pub fn public_url(mut self, url: impl Into<String>) -> Self {
        self.public_url = Some(url.into().trim_end_matches('/').to_owned());
        self
    }

    /// Serves the dev UI at `/`: a page that chats with the agents over AG-UI, shows tool
    /// calls as they happen and answers approvals (off by default; the page itself needs no
    /// credentials, its requests carry the token typed into it).
    pub fn dev_ui(mut self, on: bool) -> Self {
        self.dev_ui = on;
        self
    }

    /// Cancels a run when the last client following it goes away before it ended (off by
    /// default: a run is driven by its own task and goes on without its client, which can
    /// reconnect with `Last-Event-ID`). A cancelled run stops at its next boundary, its
    /// checkpoint kept when the agent has a checkpoint store. A client the server disconnects
    /// because it fell more than [`EVENT_BUFFER`] events behind is told the run goes on, and
    /// it does: that disconnect cancels nothing.
    pub fn cancel_on_disconnect(mut self, on: bool) -> Self {
        self.cancel_on_disconnect = on;
        self
    }

    /// How many session bindings (which principal owns which session) the server keeps in
    /// memory; past that, the binding used longest ago is forgotten, and that session then
    /// belongs to the next principal that continues it, as after a restart. Defaults to
    /// [`DEFAULT_SESSION_OWNERS`] (100,000; about 100 bytes each).
    pub fn session_owner_limit(mut self, limit: usize) -> Self {
        self.session_owners = limit;
        self
    }

    /// Answers browsers from other origins as `layer` allows (off by default: the routes send
    /// no CORS headers, so a page from another origin cannot read them). The layer wraps the
    /// auth layer, so preflight requests are answered without credentials and refusals carry
    /// CORS headers too.
    ///
    /// ```
    /// use modu_server::ModuServer;
    /// use modu_server::cors::{AllowHeaders, AllowMethods, CorsLayer};
    ///
    /// let origin = "https://app.example".parse().unwrap();
    /// let server = ModuServer::new().cors(
    ///     CorsLayer::new()
    ///         .allow_origin([origin])
    ///         .allow_methods(AllowMethods::mirror_request())
    ///         .allow_headers(AllowHeaders::mirror_request()),
    /// );
    /// # let _ = server;
    /// ```
    pub fn cors(mut self, layer: cors::CorsLayer) -> Self {
        self.cors = Some(layer);
        self
    }

    /// The names of the mounted agents.
    pub fn agent_names(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(String::as_str)
    }

    /// The routes, ready to serve or to nest in an application's router.
    ///
    /// The router has a fallback (a path no route has is answered with 404 in
    /// [`ServerError`]'s shape), which a nested router keeps under its prefix. axum refuses to
    /// [`merge`](Router::merge) two routers that both have a fallback: to merge this one into an
    /// application's router that has its own, call [`Router::reset_fallback`] on this one first.
    pub fn router(self) -> Router {
        let state = Arc::new(AppState {
            agents: self.agents,
            metadata: self.metadata,
            created: unix_now(),
            tasks: a2a::Tasks::default(),
            public_url: self.public_url,
            live: live::LiveRuns::default(),
            cancel_on_disconnect: self.cancel_on_disconnect,
            sessions: owners::SessionOwners::new(self.session_owners),
        });
        let router = Router::new()
            .route("/v1/chat/completions", post(openai::chat_completions))
            .route("/v1/models", get(openai::models))
            .route("/v1/models/{model}", get(openai::model))
            .route("/agui/{agent}", post(agui::run))
            .route("/a2a/{agent}", post(a2a_rpc::rpc))
            .route("/a2a/{agent}/.well-known/agent-card.json", get(a2a::card))
            .route("/.well-known/agent-card.json", get(a2a::root_card))
            .route("/agents/{agent}/runs/{run_id}/approvals", get(control::approvals))
            .route("/agents/{agent}/runs/{run_id}/approve", post(control::approve))
            .route("/agents/{agent}/runs/{run_id}/reject", post(control::reject))
            .route("/agents/{agent}/runs/{run_id}/inputs", get(inputs::inputs))
            .route("/agents/{agent}/runs/{run_id}/answer", post(inputs::answer))
            .route("/agents/{agent}/runs/{run_id}/decline", post(inputs::decline))
            .route("/agents/{agent}/runs/{run_id}/resume", post(control::resume))
            .route("/agents/{agent}/runs/{run_id}/cancel", post(control::cancel))
            .route("/agents/{agent}/runs/{run_id}/events", get(control::events))
            .route("/agents/{agent}/sessions", get(control::sessions))
            .route("/agents/{agent}/sessions/{session_id}/messages", get(control::history))
            .route(
                "/agents/{agent}/sessions/{session_id}/approvals",
                get(control::session_approvals),
            )
            .fallback(error::no_route)
            .method_not_allowed_fallback(error::no_method)
            .with_state(state)
            .layer(DefaultBodyLimit::max(self.body_limit));
        let router = match self.auth {
            Some(auth) => router.layer(auth),
            None => router,
        };
        let router = match self.cors {
            Some(cors) => router.layer(cors),
            None => router,
        };
        if self.dev_ui {
            Router::new()
                .route("/", get(ui::index))
                .method_not_allowed_fallback(error::no_method)
                .merge(router)
        } else {
            router
        }
    }
}
