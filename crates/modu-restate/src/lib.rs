#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod journal;
mod layers;
mod session;

pub use journal::{Envelope, Outcome, STEP_NAME};
pub use layers::{DurableChat, DurableChatLayer, DurableFunction, DurableFunctionLayer, Retries, durable};
/// The Restate SDK this crate is built on (its `Endpoint`, `HttpServer`, options).
pub use restate_sdk;
pub use session::{
    APPROVALS_KEY, DEFAULT_NAME, Decision, DurableSession, HISTORY_KEY, PendingApproval, RunInput, RunOutput,
};

use std::net::SocketAddr;

/// Why [`serve`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Serves `endpoint` (HTTP/2, as Restate calls deployments) on `addr` until Ctrl-C.
pub async fn serve(endpoint: restate_sdk::endpoint::Endpoint, addr: SocketAddr) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    restate_sdk::http_server::HttpServer::new(endpoint)
        .serve(listener)
        .await;
    Ok(())
}
