//! [`McpSessionOptions`]: what a session does besides tools.

use std::sync::Arc;

use modu_core::Usage;

use crate::elicitation::McpElicitationHandler;
use crate::sampling::{McpSampling, UsageSink};
use crate::signals::{McpProgress, McpProgressListener};

/// What a session does besides tools: serve sampling requests, answer elicitations live,
/// report progress.
///
/// ```
/// use std::sync::Arc;
/// use modu_mcp::{McpSampling, McpSessionOptions};
/// use modu_testing::ScriptedModel;
///
/// let options = McpSessionOptions::default()
///     .with_sampling(McpSampling::new(Arc::new(ScriptedModel::new().text("hi"))).with_max_calls(2))
///     .with_progress(|p| println!("{} {}/{:?}", p.tool, p.progress, p.total));
/// # let _ = options;
/// ```
#[derive(Clone, Default)]
pub struct McpSessionOptions {
    pub(crate) sampling: Option<McpSampling>,
    pub(crate) sampling_usage: Option<UsageSink>,
    pub(crate) progress: Option<McpProgressListener>,
    pub(crate) elicitation: Option<Arc<dyn McpElicitationHandler>>,
}

impl std::fmt::Debug for McpSessionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSessionOptions")
            .field("sampling", &self.sampling)
            .field("progress", &self.progress.is_some())
            .field("elicitation", &self.elicitation.is_some())
            .finish_non_exhaustive()
    }
}

impl McpSessionOptions {
    /// Declares sampling and serves servers' `sampling/createMessage` requests (see
    /// [`crate::sampling`]).
    pub fn with_sampling(mut self, sampling: McpSampling) -> Self {
        self.sampling = Some(sampling);
        self
    }

    /// Called with the model usage of every sampling request served (the provider adds it to
    /// the run's usage this way).
    pub fn with_sampling_usage(mut self, sink: impl Fn(Usage) + Send + Sync + 'static) -> Self {
        self.sampling_usage = Some(Arc::new(sink));
        self
    }

    /// Answers the servers' form elicitations with `handler` while they wait, in a run or
    /// outside one, instead of pausing the run (see [`crate::elicitation`]).
    pub fn with_elicitation(mut self, handler: impl McpElicitationHandler + 'static) -> Self {
        self.elicitation = Some(Arc::new(handler));
        self
    }

    /// Passes each progress notification of a tool call (rmcp sends a `_meta.progressToken`
    /// with every request) to `listener`, as it arrives (keep it short).
    pub fn with_progress(mut self, listener: impl Fn(&McpProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(listener));
        self
    }
}
