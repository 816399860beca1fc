//! Elicitation: a server's `elicitation/create` during a tool call becomes the run's ask for
//! input ([`modu_core::input`]).
//!
//! While a run's MCP call is in flight, the call registers its context here. An elicitation
//! that arrives then is asked through [`modu_core::RunContext::request_input`]: with an answer
//! recorded for the call (after a person answered and the run resumed), the elicitation is
//! accepted with it, or declined if the person declined; without one, the ask is recorded and
//! the elicitation is cancelled, so the server ends the call; the run then pauses with the
//! request (its prompt is the server's message, its schema the requested schema, metadata
//! `mcp_server`), discarding what the call returned. On resume the call is made again and the
//! server's elicitation gets the answer.
//!
//! Limits: the call is made again, so a server's work before its elicitation runs twice. An
//! elicitation that arrives while no call or more than one call of the session is in flight
//! cannot be attributed to a call and is declined. URL-mode elicitation is declined. A paused
//! run holds no connection: a stdio server is restarted with the resumed run's session, so a
//! server that keeps state between calls loses it across the pause (and across a process
//! restart).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use modu_core::{InputAnswer, InputSpec, RunContext};
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};

type Asker = Arc<dyn Fn(InputSpec) -> Option<InputAnswer> + Send + Sync>;
/// Reports a model call made for the call ([`RunContext::report_model_call`]).
type Reporter = Arc<dyn Fn(String, modu_core::Usage) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// A run's tool call in flight on a session: how to ask its person, and its run's model.
#[derive(Clone)]
pub(crate) struct InFlight {
    /// Asks the call's person ([`RunContext::request_input`]).
    pub(crate) ask: Asker,
    /// The run's agent's model ([`RunContext::model`]).
    pub(crate) model: Option<Arc<dyn modu_core::ChatModel>>,
    /// Reports a sampling request served for the call, as the run's event.
    pub(crate) report: Reporter,
}

/// The run calls of a session that may be asked for input (or whose model may serve a
/// sampling request), in flight now.
#[derive(Default)]
pub(crate) struct Elicitations {
    askers: Mutex<Vec<(u64, InFlight)>>,
    next: AtomicU64,
}

impl std::fmt::Debug for Elicitations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.askers.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("Elicitations").field("in_flight", &n).finish()
    }
}

/// Keeps a call registered until it is dropped.
pub(crate) struct Registration<'a> {
    elicitations: &'a Elicitations,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.elicitations
            .askers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(id, _)| *id != self.id);
    }
}

impl Elicitations {
    /// Registers a run's tool call (a context with a call id) for the time of its MCP call.
    pub(crate) fn register<C: Send + Sync + 'static>(&self, ctx: &RunContext<C>) -> Option<Registration<'_>> {
        ctx.call_id()?;
        let model = ctx.model().cloned();
        let reporting = ctx.clone();
        let report: Reporter = Arc::new(move |model, usage| {
            let ctx = reporting.clone();
            Box::pin(async move { ctx.report_model_call(&model, usage, "mcp_sampling").await })
        });
        let ctx = ctx.clone();
        let ask: Asker = Arc::new(move |spec| ctx.request_input(spec));
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.askers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, InFlight { ask, model, report }));
        Some(Registration { elicitations: self, id })
    }

    /// The session's one call in flight (`None` when none or several are: a server's request
    /// cannot be attributed then).
    pub(crate) fn single(&self) -> Option<InFlight> {
        match self.askers.lock().unwrap_or_else(PoisonError::into_inner).as_slice() {
            [(_, call)] => Some(call.clone()),
            _ => None,
        }
    }

    /// Answers a server's elicitation from the call in flight.
    pub(crate) fn answer(&self, server: &str, request: ElicitRequestParams) -> ElicitResult {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return ElicitResult::new(ElicitationAction::Decline);
        };
        let asker = {
            let askers = self.askers.lock().unwrap_or_else(PoisonError::into_inner);
            match askers.as_slice() {
                [(_, call)] => Arc::clone(&call.ask),
                _ => {
                    tracing::debug!(
                        server,
                        in_flight = askers.len(),
                        "an elicitation no single call can take: declined"
                    );
                    return ElicitResult::new(ElicitationAction::Decline);
                }
            }
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or_else(|_| serde_json::json!({"type": "object"}));
        let spec = InputSpec::new(message, schema).with_metadata("mcp_server", server);
        match asker(spec) {
            Some(InputAnswer::Given { value }) => ElicitResult::new(ElicitationAction::Accept).with_content(value),
            Some(InputAnswer::Declined { .. }) => ElicitResult::new(ElicitationAction::Decline),
            // The ask is recorded: the server ends the call, and the run pauses.
            None => ElicitResult::new(ElicitationAction::Cancel),
        }
    }
}
