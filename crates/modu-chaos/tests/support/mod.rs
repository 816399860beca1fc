//! The chaos driver and the take-over test, for either backend.
//!
//! - `config`: the run's scale and timings ([`Chaos`]), the one-at-a-time lock ([`SERIAL`])
//! - `fleet`: the `chaos-worker` processes
//! - `runs`: the driver's book-keeping of runs, kills and executions
//! - `driver`: the chaos test itself ([`chaos`])
//! - `takeover`: the take-over test ([`taken_over_lease_cannot_write`])
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod config;
mod driver;
mod fleet;
mod runs;
mod takeover;

// Each test binary includes `support` and uses only some of these.
#[allow(unused_imports)]
pub use config::{Chaos, SERIAL};
#[allow(unused_imports)]
pub use driver::chaos;
#[allow(unused_imports)]
pub use takeover::taken_over_lease_cannot_write;
