#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::time::Duration;

mod client;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod wire;

pub use client::{DEFAULT_BASE_URL, OllamaClient, OllamaClientBuilder, OllamaModel, OllamaModelDetails};
pub use error::OllamaConfigError;
pub use modu_core::ReasoningReplay;

/// The HTTP client crate, for [`OllamaClientBuilder::http_client`].
pub use reqwest;

/// The default time allowed to open a TCP connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default longest silence while reading an answer.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(300);
