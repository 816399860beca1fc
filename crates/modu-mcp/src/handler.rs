//! [`ModuClientHandler`]: the client side of every connection (sampling, elicitation).

// Sampling is deprecated by SEP-2577 in rmcp; servers still send it.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationCapability, ErrorData, Implementation, ProtocolVersion, SamplingCapability,
};
use rmcp::service::RequestContext;
use rmcp::{ClientHandler, RoleClient};

use crate::elicitation::Elicitations;
use crate::sampling::Sampler;

/// The MCP revision the client asks for in `initialize`: the latest one that has the
/// `initialize` handshake. rmcp's own default is a draft without it (`2026-07-28`), which
/// servers of the current revisions refuse or answer oddly.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Whether the client speaks `version`, one a server answered `initialize` with: a
/// published revision up to [`PROTOCOL_VERSION`].
pub(crate) fn speaks(version: &ProtocolVersion) -> bool {
    ProtocolVersion::known_up_to(&PROTOCOL_VERSION).contains(version)
}

/// The client side of every connection: announces itself as `modu-mcp`, asks for protocol
/// revision [`PROTOCOL_VERSION`], and declares and serves sampling when the session was
/// opened with [`crate::McpSampling`].
#[derive(Clone, Default)]
pub struct ModuClientHandler {
    server: Arc<str>,
    sampler: Option<Arc<Sampler>>,
    elicitations: Arc<Elicitations>,
}

impl std::fmt::Debug for ModuClientHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuClientHandler")
            .field("server", &self.server)
            .field("sampling", &self.sampler.is_some())
            .finish()
    }
}

impl ModuClientHandler {
    pub(crate) fn new(server: &str, sampler: Option<Arc<Sampler>>, elicitations: Arc<Elicitations>) -> Self {
        ModuClientHandler {
            server: Arc::from(server),
            sampler,
            elicitations,
        }
    }
}

impl ClientHandler for ModuClientHandler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.sampler.is_some() {
            capabilities.sampling = Some(SamplingCapability::default());
        }
        // Form elicitation: live or through the run's asks for input (`crate::elicitation`).
        capabilities.elicitation = Some(ElicitationCapability::default());
        ClientConfig::new(capabilities, Implementation::new("modu-mcp", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(PROTOCOL_VERSION)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        // A server that cancels its request (or gives up waiting) needs no answer.
        tokio::select! {
            result = self.elicitations.answer(&self.server, request) => Ok(result),
            () = context.ct.cancelled() => Ok(ElicitResult::new(rmcp::model::ElicitationAction::Cancel)),
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let Some(sampler) = &self.sampler else {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "the client does not serve sampling requests",
                None,
            ));
        };
        // The server may cancel its request; the model call is dropped then.
        tokio::select! {
            result = sampler.create_message(&self.server, params, self.elicitations.single()) => result,
            () = context.ct.cancelled() => Err(ErrorData::new(
                rmcp::model::ErrorCode(-1),
                "the sampling request was cancelled",
                None,
            )),
        }
    }
}
