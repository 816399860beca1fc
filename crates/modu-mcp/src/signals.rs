//! What a server says without being asked: list changes and progress.
//!
//! [`Watched`] wraps a connection's transport and looks at every notification as it is read,
//! before rmcp dispatches it: a `notifications/tools/list_changed` bumps the server's tool
//! generation, a `notifications/progress` reaches the listener of its token. Seen there, in
//! the order the server wrote them, a change the server announced before it answered a call is
//! known by the time that call's answer is (rmcp's own handler callbacks run on spawned tasks,
//! in no set order).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, JsonRpcMessage, NumberOrString, ProgressNotificationParam, ProgressToken,
    ServerJsonRpcMessage, ServerNotification,
};
use rmcp::transport::Transport;
use serde::Serialize;

/// One progress notification of an MCP call in flight.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct McpProgress {
    /// The server.
    pub server: String,
    /// The external name of the tool being called (`server__tool`).
    pub tool: String,
    /// The run the call belongs to, when it runs inside one.
    pub run_id: Option<String>,
    /// The run's tool call id, when the call is one.
    pub call_id: Option<String>,
    /// The progress so far (increases with every notification).
    pub progress: f64,
    /// The total, when the server knows it.
    pub total: Option<f64>,
    /// The server's message, when it sent one.
    pub message: Option<String>,
}

/// Receives the progress of MCP calls. Called on the connection's reader as notifications
/// arrive: keep it short (push to a channel, record, emit an event).
pub type McpProgressListener = Arc<dyn Fn(&McpProgress) + Send + Sync>;

/// Where one call's progress goes.
pub(crate) struct ProgressRoute {
    pub(crate) template: McpProgress,
    pub(crate) listener: McpProgressListener,
}

/// How many progress notifications nobody listens to yet are kept: rmcp gives every request
/// a progress token and the listener is registered once the request is sent, so a server
/// that reports progress at once is not lost.
const UNROUTED_PROGRESS: usize = 64;

#[derive(Default)]
struct Progress {
    routes: HashMap<String, ProgressRoute>,
    unrouted: VecDeque<(String, ProgressNotificationParam)>,
}

/// The signals of one server connection.
#[derive(Default)]
pub(crate) struct ServerSignals {
    tools: AtomicU64,
    progress: Mutex<Progress>,
}

fn token_key(token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::String(s) => format!("s:{s}"),
        NumberOrString::Number(n) => format!("n:{n}"),
    }
}

fn event(route: &ProgressRoute, params: &ProgressNotificationParam) -> McpProgress {
    let mut event = route.template.clone();
    event.progress = params.progress;
    event.total = params.total;
    event.message = params.message.clone();
    event
}

impl std::fmt::Debug for ServerSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSignals")
            .field("tools", &self.tools.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl ServerSignals {
    /// How many `tools/list_changed` notifications the server sent so far.
    pub(crate) fn tools_generation(&self) -> u64 {
        self.tools.load(Ordering::Acquire)
    }

    /// Routes the progress of the request with this token (what arrived already first); the
    /// route is removed when the guard drops.
    pub(crate) fn subscribe(self: &Arc<Self>, token: &ProgressToken, route: ProgressRoute) -> ProgressGuard {
        let token = token_key(token);
        let (early, listener) = {
            let mut progress = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
            let (early, rest): (Vec<_>, Vec<_>) = progress.unrouted.drain(..).partition(|(t, _)| *t == token);
            progress.unrouted = rest.into();
            let early: Vec<McpProgress> = early.iter().map(|(_, params)| event(&route, params)).collect();
            let listener = Arc::clone(&route.listener);
            progress.routes.insert(token.clone(), route);
            (early, listener)
        };
        for e in &early {
            listener(e);
        }
        ProgressGuard {
            signals: Arc::clone(self),
            token,
        }
    }

    fn observe(&self, notification: &ServerNotification) {
        match notification {
            ServerNotification::ToolListChangedNotification(_) => {
                self.tools.fetch_add(1, Ordering::AcqRel);
            }
            ServerNotification::ProgressNotification(n) => {
                let token = token_key(&n.params.progress_token);
                let event = {
                    let mut progress = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
                    match progress.routes.get(&token) {
                        Some(route) => Some((event(route, &n.params), Arc::clone(&route.listener))),
                        None => {
                            if progress.unrouted.len() >= UNROUTED_PROGRESS {
                                progress.unrouted.pop_front();
                            }
                            progress.unrouted.push_back((token, n.params.clone()));
                            None
                        }
                    }
                };
                // The listener runs outside the lock (it may subscribe or drop a guard).
                if let Some((event, listener)) = event {
                    listener(&event);
                }
            }
            _ => {}
        }
    }
}

/// Unregisters a progress token when dropped.
pub(crate) struct ProgressGuard {
    signals: Arc<ServerSignals>,
    token: String,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        let route = self
            .signals
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .routes
            .remove(&self.token);
        drop(route);
    }
}

/// A transport whose incoming notifications update [`ServerSignals`] before rmcp sees them.
pub(crate) struct Watched<T> {
    inner: T,
    signals: Arc<ServerSignals>,
}

impl<T> Watched<T> {
    pub(crate) fn new(inner: T, signals: Arc<ServerSignals>) -> Self {
        Watched { inner, signals }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(n) = &message {
            self.signals.observe(&n.notification);
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
