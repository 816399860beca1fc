//! What a server says without being asked: list changes and progress.
//!
//! [`Watched`] wraps a connection's transport and looks at every notification as it is read,
//! before rmcp dispatches it: a `notifications/tools/list_changed` bumps the server's tool
//! generation, a `notifications/progress` reaches the listener of its token. Seen there, in
//! the order the server wrote them, a change the server announced before it answered a call is
//! known by the time that call's answer is (rmcp's own handler callbacks run on spawned tasks,
//! in no set order).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, NumberOrString, ServerJsonRpcMessage, ServerNotification};
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

/// The signals of one server connection.
#[derive(Default)]
pub(crate) struct ServerSignals {
    tools: AtomicU64,
    progress: Mutex<HashMap<String, ProgressRoute>>,
    next_token: AtomicU64,
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

    /// Registers a route for a new progress token; the token is unregistered when the guard
    /// drops.
    pub(crate) fn subscribe(self: &Arc<Self>, route: ProgressRoute) -> ProgressGuard {
        let token = format!("modu-{}", self.next_token.fetch_add(1, Ordering::Relaxed));
        self.progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.clone(), route);
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
                let token = match &n.params.progress_token.0 {
                    NumberOrString::String(s) => s.to_string(),
                    NumberOrString::Number(n) => n.to_string(),
                };
                let event = {
                    let routes = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
                    routes.get(&token).map(|route| {
                        let mut event = route.template.clone();
                        event.progress = n.params.progress;
                        event.total = n.params.total;
                        event.message = n.params.message.clone();
                        (event, Arc::clone(&route.listener))
                    })
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

impl ProgressGuard {
    /// The token to send as `_meta.progressToken`.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        let route = self
            .signals
            .progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
