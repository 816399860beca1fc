//! The chaos test of issue #18 with session leases: 3 `chaos-worker` processes serve 200 runs
//! over 20 sessions, each run given to a random worker, while a random worker is SIGKILLed about
//! every 2 s (1.5 to 2.5 s) and restarted. Leases live 1.5 s; every worker calls
//! `recover_orphans` every 300 ms; the model answers in 500 ms and `record` works 150 ms.
//!
//! Two shapes per backend: a session's runs one at a time (a chat: the next message after the
//! answer; the figures compare with Restate's chaos test), and two runs of a session in flight
//! at once on random workers, so that they contend for its lease across processes.
//!
//! The driver gives each run to a worker and waits for its `done` line. When it kills a worker,
//! each run it had given that worker is, in this order: an **orphan** when its checkpoint is
//! stored (another worker's `recover_orphans` continues it), **done** when the session's
//! history holds its user message (it completed, but died before it said so), or else it never
//! took its lease or wrote its first checkpoint and is **given out again**. The order makes
//! this race-free: a run appends to the history before it deletes its checkpoint.
//!
//! What must hold at the end:
//! - every run completed exactly once in its session's history, and no checkpoint is left;
//! - each history is whole: every run's four messages (user message, the call of `record`, its
//!   result, the answer) contiguous and complete;
//! - no tool call whose result was checkpointed ran again: the execution the history holds is
//!   the call's last in the ledger; every other execution ran on a worker that was SIGKILLed
//!   after it started (or whose run lost the lease there). Those duplicates are counted and
//!   bounded by the interrupted runs. The same for model replies;
//! - every orphan was written again by another worker.
//!
//! Printed: runs/s, run latency p50/p99 (from the first time the driver gave the run out to its
//! end), and the recovery time p50/p99: from the SIGKILL until the orphan's recovered run first
//! writes to a store again (a checkpoint save, the conversation append or the checkpoint's
//! removal, on another worker), besides the time until another worker claims it.
//!
//! Needs `REDIS_URL` / `MODU_POSTGRES_URL` (`cargo xtask services`); skipped without them
//! locally, required under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use modu_chaos::Backend;
use support::{Chaos, SERIAL};

fn contended() -> Chaos {
    Chaos {
        in_flight_per_session: 2,
        ..Chaos::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_leases_keep_sessions_whole_while_workers_are_killed() {
    let Some(url) = modu_testing::service_env("REDIS_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    support::chaos(Backend::Redis, &url, Chaos::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_leases_keep_contended_sessions_whole_while_workers_are_killed() {
    let Some(url) = modu_testing::service_env("REDIS_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    support::chaos(Backend::Redis, &url, contended()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_leases_keep_sessions_whole_while_workers_are_killed() {
    let Some(url) = modu_testing::service_env("MODU_POSTGRES_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    support::chaos(Backend::Postgres, &url, Chaos::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_leases_keep_contended_sessions_whole_while_workers_are_killed() {
    let Some(url) = modu_testing::service_env("MODU_POSTGRES_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    support::chaos(Backend::Postgres, &url, contended()).await;
}
