//! Elicitation: a server's `elicitation/create` during a tool call.
//!
//! A form elicitation is answered one of two ways:
//!
//! - **Live, by an [`McpElicitationHandler`]** given to the session
//!   ([`crate::McpSessionOptions::with_elicitation`], [`crate::McpToolProvider::with_elicitation`]):
//!   the handler asks its person while the server waits, in a run or outside one, and the same
//!   MCP call goes on with the answer. For interactive programs (a terminal, a chat window open
//!   while the run goes on).
//! - **Through the run's asks for input** ([`modu_core::input`]), when no handler is given.
//!   While a run's MCP call is in flight, the call registers its context here. An elicitation
//!   that arrives then is asked through [`modu_core::RunContext::request_input`]: with an answer
//!   recorded for the call (after a person answered and the run resumed), the elicitation is
//!   accepted with it, or declined if the person declined; without one, the ask is recorded and
//!   the elicitation is cancelled, so the server ends the call; the run then pauses with the
//!   request (its prompt is the server's message, its schema the requested schema, metadata
//!   `mcp_server`), discarding what the call returned. On resume the call is made again and the
//!   server's elicitation gets the answer. For served agents, whose person answers later, maybe
//!   from another process.
//!
//! Either way, an accepted answer gets the schema's defaults for the top-level properties it
//! leaves out ([`apply_defaults`], SEP-1034), so "accept" with an empty form sends the defaults.
//! A live handler's accepted answer that then does not fit the requested schema (a required
//! field missing, a value of the wrong type or outside its enum) is never sent as accepted: the
//! server gets `cancel`, as for a form the person dismissed. (On the run path, an answer is
//! checked against the schema when it is recorded.)
//!
//! Limits of the run path: the call is made again, so a server's work before its elicitation
//! runs twice. An elicitation that arrives while no call or more than one call of the session is
//! in flight cannot be attributed to a call and is declined. URL-mode elicitation is declined on
//! both paths. A paused run holds no connection: a stdio server is restarted with the resumed
//! run's session, so a server that keeps state between calls loses it across the pause (and
//! across a process restart).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use modu_core::{InputAnswer, InputSpec, RunContext};
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use serde_json::{Map, Value};

/// A server's form elicitation, as an [`McpElicitationHandler`] sees it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct McpElicitation {
    /// The server's configured name.
    pub server: String,
    /// What the server asks, for the person.
    pub message: String,
    /// The JSON Schema of the answer (an object schema of primitive properties).
    pub schema: Value,
}

/// A person's answer to an [`McpElicitation`].
#[derive(Clone, Debug, PartialEq)]
pub enum McpElicitationAnswer {
    /// The person filled in the form. Properties left out get the schema's defaults; a form
    /// that then does not fit the requested schema is sent to the server as `cancel`.
    Accept(Map<String, Value>),
    /// The person said no.
    Decline,
    /// The person dismissed the question without choosing.
    Cancel,
}

/// Answers a server's form elicitation while the server waits: the live path (see the module
/// documentation). Implemented for `Arc<T>` too.
///
/// ```
/// use modu_mcp::elicitation::{McpElicitation, McpElicitationAnswer, McpElicitationHandler};
///
/// /// Accepts every form as it is, so the server gets the schema's defaults.
/// struct Defaults;
///
/// #[async_trait::async_trait]
/// impl McpElicitationHandler for Defaults {
///     async fn elicit(&self, request: &McpElicitation) -> McpElicitationAnswer {
///         eprintln!("{} asks: {}", request.server, request.message);
///         McpElicitationAnswer::Accept(Default::default())
///     }
/// }
/// let options = modu_mcp::McpSessionOptions::default().with_elicitation(Defaults);
/// # let _ = options;
/// ```
#[async_trait]
pub trait McpElicitationHandler: Send + Sync {
    /// Asks the person; the server's call waits for the answer (or for its own timeout).
    async fn elicit(&self, request: &McpElicitation) -> McpElicitationAnswer;
}

#[async_trait]
impl<T: McpElicitationHandler + ?Sized> McpElicitationHandler for Arc<T> {
    async fn elicit(&self, request: &McpElicitation) -> McpElicitationAnswer {
        (**self).elicit(request).await
    }
}

/// Fills the top-level properties `answer` leaves out with their `default` in `schema` (an
/// object schema's `properties`), as SEP-1034 asks of a client; a property the answer has is
/// kept as it is, and one without a default stays absent.
///
/// ```
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {
///     "name": {"type": "string", "default": "John Doe"},
///     "age": {"type": "integer", "default": 30},
///     "note": {"type": "string"}
/// }});
/// let mut answer = json!({"age": 41}).as_object().cloned().unwrap();
/// modu_mcp::elicitation::apply_defaults(&schema, &mut answer);
/// assert_eq!(serde_json::Value::Object(answer), json!({"name": "John Doe", "age": 41}));
/// ```
pub fn apply_defaults(schema: &Value, answer: &mut Map<String, Value>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        if let Some(default) = property.get("default")
            && !answer.contains_key(name)
        {
            answer.insert(name.clone(), default.clone());
        }
    }
}

/// The elicitation result for an accepted answer: with the schema's defaults, as an object.
fn accepted(schema: &Value, answer: Value) -> ElicitResult {
    match answer {
        Value::Object(mut fields) => {
            apply_defaults(schema, &mut fields);
            ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(fields))
        }
        other => ElicitResult::new(ElicitationAction::Accept).with_content(other),
    }
}

/// A live handler's accepted answer (with the schema's defaults) when it fits the requested
/// schema; otherwise `cancel`, so the server never takes a form that does not fit as the
/// person's answer (MCP 2025-06-18: clients validate elicitation content against the schema).
fn fitting(server: &str, schema: &Value, fields: Map<String, Value>) -> ElicitResult {
    let result = accepted(schema, Value::Object(fields));
    let problems = match (&result.content, modu_core::ArgumentValidator::new(schema)) {
        (Some(content), Ok(validator)) => validator.problems(content),
        // A schema that does not compile is left to the server.
        _ => Vec::new(),
    };
    if problems.is_empty() {
        return result;
    }
    // The problems quote the person's answer: only at debug level.
    tracing::warn!(
        server,
        "the elicitation handler's answer does not fit the requested schema: cancelled to the server"
    );
    tracing::debug!(server, problems = %problems.join("; "), "elicitation answer rejected");
    ElicitResult::new(ElicitationAction::Cancel)
}

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
    /// The live answerer, when the session was given one.
    live: Option<Arc<dyn McpElicitationHandler>>,
}

impl std::fmt::Debug for Elicitations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.askers.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("Elicitations")
            .field("in_flight", &n)
            .field("live", &self.live.is_some())
            .finish()
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
    /// A session's elicitations, answered live by `live` when given.
    pub(crate) fn new(live: Option<Arc<dyn McpElicitationHandler>>) -> Self {
        Elicitations {
            live,
            ..Elicitations::default()
        }
    }

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

    /// Answers a server's elicitation: live when the session has a handler, otherwise from the
    /// call in flight.
    pub(crate) async fn answer(&self, server: &str, request: ElicitRequestParams) -> ElicitResult {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return ElicitResult::new(ElicitationAction::Decline);
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or_else(|_| serde_json::json!({"type": "object"}));
        if let Some(live) = &self.live {
            let request = McpElicitation {
                server: server.to_owned(),
                message,
                schema,
            };
            return match live.elicit(&request).await {
                McpElicitationAnswer::Accept(fields) => fitting(server, &request.schema, fields),
                McpElicitationAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
                McpElicitationAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
            };
        }
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
        let spec = InputSpec::new(message, schema.clone()).with_metadata("mcp_server", server);
        match asker(spec) {
            Some(InputAnswer::Given { value }) => accepted(&schema, value),
            // A declined ask, or an answer this version does not know: the server hears no.
            Some(InputAnswer::Declined { .. } | _) => ElicitResult::new(ElicitationAction::Decline),
            // The ask is recorded: the server ends the call, and the run pauses.
            None => ElicitResult::new(ElicitationAction::Cancel),
        }
    }
}
