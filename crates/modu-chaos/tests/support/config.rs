//! The scale and timings of a chaos run, and the lock that runs one chaos test at a time.

use std::time::Duration;

/// One chaos test at a time in a test binary (2 cores: the timings would mix).
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The scale and timings of a chaos run.
#[derive(Clone, Debug)]
pub struct Chaos {
    pub workers: usize,
    pub sessions: usize,
    pub runs_per_session: usize,
    /// Runs of one session given to workers at once (they contend for its lease).
    pub in_flight_per_session: usize,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub model_ms: u64,
    pub record_ms: u64,
    pub recover_ms: u64,
    /// A kill every `kill_ms` ± `kill_jitter_ms`.
    pub kill_ms: u64,
    pub kill_jitter_ms: u64,
    pub deadline: Duration,
}

impl Default for Chaos {
    fn default() -> Self {
        Chaos {
            workers: 3,
            sessions: 20,
            runs_per_session: 10,
            in_flight_per_session: 1,
            ttl_ms: 1500,
            wait_ms: 120_000,
            model_ms: 500,
            record_ms: 150,
            recover_ms: 300,
            kill_ms: 2000,
            kill_jitter_ms: 500,
            deadline: Duration::from_secs(150),
        }
    }
}
