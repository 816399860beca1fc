//! Connecting ([`connect`], [`connect_with_config`], [`default_config`]) and sending an
//! operation once more when the connection was lost.

use std::future::Future;
use std::time::Duration;

use modu_core::StoreError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::{backend, error_kind};
use crate::{RedisStoreError, redact_credentials};

/// The connection settings [`connect`] uses: 1 s to connect, 2 retries with a short backoff,
/// 5 s per response. A request made while Redis is down fails after the reconnection attempts
/// (about half a second per try when the port refuses connections) instead of waiting for the
/// server.
///
/// The stores add one retry on top: an operation that fails because the connection was lost
/// (the first request after a Redis restart finds the old connection broken) is sent once
/// more on a new connection. See the crate documentation for what that means for each
/// operation.
pub fn default_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(100))
        .set_max_delay(Duration::from_millis(500))
}

/// Connects to Redis (`redis://[user:password@]host:port/db`, `rediss://…` needs a TLS feature
/// of the `redis` crate) with [`default_config`]. The connection is multiplexed and reconnects
/// by itself; clone it to share it between stores.
pub async fn connect(url: &str) -> Result<ConnectionManager, StoreError> {
    connect_with_config(url, default_config()).await
}

/// [`connect`] with your own connection settings.
pub async fn connect_with_config(url: &str, config: ConnectionManagerConfig) -> Result<ConnectionManager, StoreError> {
    let connect_err = |e: redis::RedisError| {
        let err = RedisStoreError::Connect {
            message: redact_credentials(&e.to_string()),
        };
        StoreError::Backend {
            message: err.to_string(),
            source: Some(Box::new(err)),
        }
    };
    let client = redis::Client::open(url).map_err(connect_err)?;
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(connect_err)
}

/// Whether a failed request may be sent again on a new connection: the connection was lost,
/// refused or unusable (the manager replaces it), not a timeout and not a server error.
fn connection_lost(e: &redis::RedisError) -> bool {
    !e.is_timeout() && (e.is_unrecoverable_error() || e.is_io_error())
}

/// Runs `op` on a clone of `conn`; when it fails because the connection was lost, runs it once
/// more (the connection manager reconnects in between). Only for operations that are safe to
/// repeat: reads, overwrites, deletes, and appends guarded by a batch id.
pub(crate) async fn with_retry<T, F, Fut>(
    conn: &ConnectionManager,
    operation: &'static str,
    op: F,
) -> Result<T, StoreError>
where
    F: Fn(ConnectionManager) -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    match op(conn.clone()).await {
        Ok(v) => Ok(v),
        Err(e) if connection_lost(&e) => {
            tracing::debug!(
                operation,
                kind = %error_kind(&e),
                "redis connection lost; retrying once on a new connection"
            );
            op(conn.clone()).await.map_err(|e| backend(operation, e))
        }
        Err(e) => Err(backend(operation, e)),
    }
}
