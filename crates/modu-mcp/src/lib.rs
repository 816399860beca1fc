#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod auth;
mod client;
pub mod config;
mod describe;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod index;
mod provider;
pub mod registry;
pub mod resolver;
mod stdio;
pub mod tools;

pub use client::{McpConnector, McpSession, ModuClientHandler};
pub use config::{McpAuthConfig, McpConfig, McpServerConfig, McpTransport, OAuthClientCredentialsConfig};
pub use error::{
    InvocationFailure, McpAuthError, McpError, McpServerConfigurationError, McpToolDiscoveryError,
    McpToolInvocationError, McpTransportError,
};
pub use provider::{McpToolProvider, McpToolSession};
pub use registry::{McpToolDescriptor, McpToolRegistry};
pub use resolver::{DefaultServerResolver, McpRuntimeServerResolver, McpSelectionRequest, selection_from_metadata};
pub use tools::{
    CALL_TOOL_NAME, McpApprovalDescription, McpApprovalPolicy, McpCallTool, McpDirectTool, McpSearchTool,
    McpToolFilter, SEARCH_TOOL_NAME, approval_description,
};

/// The rmcp version this crate is built on, re-exported for raw calls next to the connector.
pub use rmcp;
