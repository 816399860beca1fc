//! What the agents that handed a run over leave behind ([`Retired`]): kept apart from the
//! runner's other files so that `Run` can hold it without an import circle.

use std::sync::Arc;

use crate::agent::AgentInner;
use crate::tool_provider::ToolSession;

/// What the agents that handed a run over leave behind: their tool sessions (closed with the
/// run's) and themselves (their context providers hear that the run ended).
pub(super) struct Retired<C, O> {
    pub(super) sessions: Vec<(String, Box<dyn ToolSession<C>>)>,
    pub(super) agents: Vec<Arc<AgentInner<C, O>>>,
}

impl<C, O> Default for Retired<C, O> {
    fn default() -> Self {
        Retired {
            sessions: Vec::new(),
            agents: Vec::new(),
        }
    }
}
