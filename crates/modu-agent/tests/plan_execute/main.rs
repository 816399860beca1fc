//! Strict Plan-and-Execute: every transition, limit and recovery path, driven by `ScriptedModel`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fallback;
mod leaks;
mod limits;
mod recovery;
mod resume;
mod streaming;
mod support;
mod transitions;
