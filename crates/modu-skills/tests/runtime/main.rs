//! Skills in agent runs: selection (explicit, auto, hybrid), applies-to stages, skill text kept
//! out of stored messages, allowed-tools narrowing and the resource tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod allowed_tools;
mod instructions;
mod resources;
mod selection;
mod support;
