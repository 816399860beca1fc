#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod auth;
mod client;
pub mod config;
mod describe;
pub mod elicitation;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod handler;
mod http_client;
mod index;
mod listing;
pub mod oauth;
pub mod oauth_config;
mod oauth_enterprise;
mod oauth_flow;
mod oauth_http;
mod output;
mod provider;
pub mod registry;
pub mod resolver;
pub mod resource_context;
pub mod resources;
pub mod sampling;
mod secret_args;
mod session;
mod session_options;
mod signals;
mod stdio;
pub mod tools;

pub use client::McpConnector;
pub use config::{McpAuthConfig, McpConfig, McpServerConfig, McpTransport, OAuthClientCredentialsConfig};
pub use elicitation::{McpElicitation, McpElicitationAnswer, McpElicitationHandler};
pub use error::{
    InvocationFailure, McpAuthError, McpError, McpRequestError, McpServerConfigurationError, McpToolDiscoveryError,
    McpToolInvocationError, McpTransportError, RequestFailure,
};
pub use handler::{ModuClientHandler, PROTOCOL_VERSION};
pub use oauth_config::McpOAuthConfig;
pub use provider::{McpToolProvider, McpToolSession};
pub use registry::{McpToolDescriptor, McpToolRegistry};
pub use resolver::{DefaultServerResolver, McpRuntimeServerResolver, McpSelectionRequest, selection_from_metadata};
pub use resource_context::McpResourceContext;
pub use resources::{McpPrompt, McpPromptArgument, McpPromptInfo, McpPromptListing};
pub use sampling::{McpSampling, McpSamplingPolicy, McpSamplingUsage};
pub use session::{McpSession, McpSessionOptions};
pub use signals::{McpProgress, McpProgressListener};
pub use tools::{
    CALL_TOOL_NAME, LIST_RESOURCES_TOOL_NAME, McpApprovalDescription, McpApprovalPolicy, McpCallTool, McpDirectTool,
    McpListResourcesTool, McpReadResourceTool, McpSearchTool, McpToolFilter, READ_RESOURCE_TOOL_NAME, SEARCH_TOOL_NAME,
    approval_description,
};

/// The rmcp version this crate is built on, re-exported for raw calls next to the connector.
pub use rmcp;
