//! Behaviour of the standard run loop, driven by `ScriptedModel`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod limits;
mod output;
mod providers;
mod sessions;
mod stream;
mod support;
mod tools;
