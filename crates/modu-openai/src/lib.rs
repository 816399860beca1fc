#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod media;
mod sse;
mod tokens;
mod wire;

pub use client::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, ModelInfo, OpenAiClient, OpenAiClientBuilder};
pub use error::{OpenAiConfigError, is_context_length_error, parse_retry_after};
pub use modu_core::ReasoningReplay;
/// The estimate for servers without a tokenizer endpoint (re-exported from `modu_core`).
pub use modu_core::tokens::{ApproximateTokenCounter, TokenCounter};
pub use tokens::{TokenizeApi, VllmTokenCounter};
pub use wire::EmptyToolCallContent;

/// The HTTP client crate, for [`OpenAiClientBuilder::http_client`].
pub use reqwest;
