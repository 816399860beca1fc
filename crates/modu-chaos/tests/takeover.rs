//! A worker whose session lease was taken over cannot write: its run pauses (its runtime
//! blocked, so renewal starves) past the lease's ttl, another worker takes the session and
//! completes a run, and the paused run ends with `AgentError::LeaseLost`, its checkpoint
//! unchanged and none of its messages in the session. On real stores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use modu_chaos::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_taken_over_worker_cannot_write() {
    let Some(url) = modu_testing::service_env("REDIS_URL") else {
        return;
    };
    support::taken_over_lease_cannot_write(Backend::Redis, &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_taken_over_worker_cannot_write() {
    let Some(url) = modu_testing::service_env("MODU_POSTGRES_URL") else {
        return;
    };
    support::taken_over_lease_cannot_write(Backend::Postgres, &url).await;
}
