//! Wire tests: `OpenAiClient` against `MockOpenAiServer` (and a few hand-made servers), one
//! test per shape a real server sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod errors;
mod raw_sse;
mod reasoning;
mod refusal;
mod requests;
mod streaming;
mod strict;
mod support;
mod tokenize;
mod usage;
