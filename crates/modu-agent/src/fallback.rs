//! [`FallbackModel`]: an ordered chain of models behind one [`ChatModel`]; when one is down, the
//! next answers.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::time::Instant;

use crate::model::{ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, ModelError};

/// Decides whether an error of one model of a [`FallbackModel`] hands the request to the next.
pub type SwitchPredicate = Arc<dyn Fn(&ModelError) -> bool + Send + Sync>;

/// When a [`FallbackModel`] stops asking a failing model for a while.
///
/// A model's circuit opens after `failures` consecutive failures (errors the switch predicate
/// accepts), or at once when the error says how long to wait ([`ModelError::retry_after`]: a
/// 429 or 503 with `Retry-After`). While it is open the model is skipped; after the cool-down
/// (the server's `retry_after` when it gave one, else `cool_down`) it is tried again
/// (half-open): an answer closes the circuit, one more failure opens it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitBreaker {
    /// Consecutive failures that open the circuit (at least 1).
    pub failures: u32,
    /// How long the circuit stays open when the error does not say.
    pub cool_down: Duration,
}

impl CircuitBreaker {
    /// Opens after `failures` consecutive failures (0 counts as 1), for `cool_down`.
    pub fn new(failures: u32, cool_down: Duration) -> Self {
        CircuitBreaker {
            failures: failures.max(1),
            cool_down,
        }
    }
}

impl Default for CircuitBreaker {
    /// Three consecutive failures, 30 seconds.
    fn default() -> Self {
        CircuitBreaker::new(3, Duration::from_secs(30))
    }
}

/// One model of the chain, with its circuit.
struct Member {
    model: Arc<dyn ChatModel>,
    health: Mutex<Health>,
}

#[derive(Default)]
struct Health {
    /// Consecutive failures.
    failures: u32,
    /// Skipped until then.
    open_until: Option<Instant>,
}

impl Member {
    fn name(&self) -> &str {
        self.model.model_name()
    }

    fn is_open(&self, now: Instant) -> bool {
        let health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        health.open_until.is_some_and(|until| now < until)
    }

    fn answered(&self) {
        *self.health.lock().unwrap_or_else(PoisonError::into_inner) = Health::default();
    }

    fn failed(&self, breaker: Option<CircuitBreaker>, error: &ModelError) {
        let Some(breaker) = breaker else { return };
        let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        health.failures = health.failures.saturating_add(1);
        let wait = match error.retry_after() {
            Some(wait) => Some(wait),
            None if health.failures >= breaker.failures => Some(breaker.cool_down),
            None => None,
        };
        if let Some(wait) = wait {
            health.open_until = Some(Instant::now() + wait);
        }
    }
}

/// A [`ChatModel`] over an ordered list of models: the first answers; when it cannot (it is
/// down, times out, is rate limited, does not know the model), the next is asked, and so on.
///
/// # When it switches
///
/// The next model is asked when a model's error is accepted by the switch predicate: by
/// default [`FallbackModel::default_switch`] (what [`ModelError::is_retryable`] accepts —
/// transport failures such as a refused connection, timeouts, 429, 5xx and 408 — plus
/// [`ModelError::ModelNotFound`], a model the server does not serve, or a 404 naming no model
/// (`Status` 404: an endpoint the server does not serve, such as a wrong base URL path) or a
/// `Status` 429 (a 429 that is no rate limit: an exhausted quota), plus
/// [`ModelError::UnsupportedContent`], a model that cannot take the request's media: a
/// text-only primary hands an image to a vision model behind it). Other errors (bad
/// credentials, a request too long for the context window, an invalid request) end the call
/// with that error, without asking the others; [`FallbackModel::switch_when`] changes this.
///
/// A stream that fails on its first item counts as a model that could not open it, and
/// switches. **A fallback never switches mid-answer**: once a model's stream has yielded an
/// event (text may already have reached the caller), a later error ends the answer with that
/// error; the run's retry layer may then retry the whole request.
///
/// # When every model fails
///
/// The call fails with the last model's error, unchanged, so [`ModelError::is_retryable`] and
/// [`ModelError::retry_after`] keep their meaning for the run's retry layer.
///
/// # Which model answered
///
/// Every answer names the model of the chain that produced it: the stream starts with a
/// [`ChatEvent::Model`], and [`ChatResponse::model`] holds the name. The run reports it as
/// `answered_by` in [`AgentEvent::ModelCallFinished`](crate::AgentEvent::ModelCallFinished)
/// and keys its usage by it ([`RunReport::usage_by_model`](crate::RunReport::usage_by_model)).
/// [`ChatModel::model_name`] is the first model's name (what a request asks for).
///
/// # Circuit breaking
///
/// Off by default: every call starts with the first model. With
/// [`FallbackModel::with_circuit_breaker`], a model that keeps failing, or whose server asked
/// for a pause (`Retry-After`), is skipped for a while ([`CircuitBreaker`]); the state is
/// shared by every call of this `FallbackModel` (and so by every run of an agent holding it).
/// When every model's circuit is open, all are tried in order anyway: a fallback never fails
/// without asking a model. Calls that arrive while a circuit is half-open may all try it.
///
/// # Example
///
/// ```
/// use modu_agent::FallbackModel;
/// use modu_core::{ChatModel, ChatRequest, Message, ModelError};
/// use modu_testing::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ModelError> {
/// let primary = ScriptedModel::new()
///     .named("primary")
///     .error(|| ModelError::Status { status: 503, body: "overloaded".into(), retry_after: None });
/// let backup = ScriptedModel::new().named("backup").text("hello from the backup");
/// let model = FallbackModel::new(primary).with_fallback(backup);
///
/// let answer = model.complete(ChatRequest::new(vec![Message::user("hi")])).await?;
/// assert_eq!(answer.message.text(), "hello from the backup");
/// assert_eq!(answer.model.as_deref(), Some("backup"));
/// assert_eq!(model.model_name(), "primary");
/// # Ok(()) }
/// ```
pub struct FallbackModel {
    members: Vec<Arc<Member>>,
    switch_when: SwitchPredicate,
    breaker: Option<CircuitBreaker>,
}

impl std::fmt::Debug for FallbackModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackModel")
            .field("models", &self.model_names().collect::<Vec<_>>())
            .field("breaker", &self.breaker)
            .finish_non_exhaustive()
    }
}

impl FallbackModel {
    /// A chain whose first model is `primary` (add others with
    /// [`with_fallback`](Self::with_fallback)). Takes any model, an `Arc<dyn ChatModel>` too.
    pub fn new(primary: impl ChatModel + 'static) -> Self {
        FallbackModel {
            members: vec![member(primary)],
            switch_when: Arc::new(Self::default_switch),
            breaker: None,
        }
    }

    /// Adds a model at the end of the chain.
    pub fn with_fallback(mut self, model: impl ChatModel + 'static) -> Self {
        self.members.push(member(model));
        self
    }

    /// Switches to the next model when `predicate` accepts the error (instead of
    /// [`default_switch`](Self::default_switch)). The predicate also decides which failures
    /// count for the circuit breaker.
    pub fn switch_when(mut self, predicate: impl Fn(&ModelError) -> bool + Send + Sync + 'static) -> Self {
        self.switch_when = Arc::new(predicate);
        self
    }

    /// Skips a failing model for a while ([`CircuitBreaker`]; off by default).
    pub fn with_circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// The default switch predicate: [`ModelError::is_retryable`] (transport, timeout, 429,
    /// 5xx, 408), [`ModelError::ModelNotFound`], a 404 naming no model (`Status` 404: an
    /// endpoint the server does not serve), a `Status` 429 (a 429 that waiting does not fix,
    /// such as an exhausted quota) or [`ModelError::UnsupportedContent`].
    pub fn default_switch(error: &ModelError) -> bool {
        error.is_retryable()
            || matches!(
                error,
                ModelError::ModelNotFound { .. }
                    | ModelError::Status { status: 404 | 429, .. }
                    | ModelError::UnsupportedContent { .. }
            )
    }

    /// The chain's model names, in order.
    pub fn model_names(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.name())
    }

    /// The members to ask, in order: those whose circuit is closed (or half-open), or all of
    /// them when every circuit is open.
    fn order(&self) -> Vec<Arc<Member>> {
        if self.breaker.is_none() {
            return self.members.clone();
        }
        let now = Instant::now();
        let closed: Vec<Arc<Member>> = self.members.iter().filter(|m| !m.is_open(now)).cloned().collect();
        if closed.is_empty() {
            self.members.clone()
        } else {
            closed
        }
    }

    /// Records a failure; `Ok` when the next model should be asked.
    fn failed(&self, member: &Member, error: ModelError, next: Option<&Arc<Member>>) -> Result<ModelError, ModelError> {
        if !(self.switch_when)(&error) {
            return Err(error);
        }
        member.failed(self.breaker, &error);
        if let Some(next) = next {
            tracing::warn!(
                from = member.name(),
                to = next.name(),
                error_kind = %error.kind(),
                "model failed; asking the next model of the fallback chain"
            );
        }
        Ok(error)
    }
}

fn member(model: impl ChatModel + 'static) -> Arc<Member> {
    Arc::new(Member {
        model: Arc::new(model),
        health: Mutex::new(Health::default()),
    })
}

#[async_trait]
impl ChatModel for FallbackModel {
    /// The first model's name.
    fn model_name(&self) -> &str {
        self.members.first().map_or("", |m| m.name())
    }

    /// What any model of the chain takes (each refuses what it does not take, and the
    /// default switch predicate then asks the next).
    fn input_modalities(&self) -> crate::modality::InputModalities {
        self.members
            .iter()
            .map(|m| m.model.input_modalities())
            .reduce(crate::modality::InputModalities::union)
            .unwrap_or_default()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let order = self.order();
        let mut last = None;
        for (i, member) in order.iter().enumerate() {
            let opened = match member.model.stream(request.clone()).await {
                Ok(mut stream) => match stream.next().await {
                    Some(Err(e)) => Err(e),
                    first => Ok((stream, first.and_then(Result::ok))),
                },
                Err(e) => Err(e),
            };
            match opened {
                Ok((rest, first)) => {
                    member.answered();
                    return Ok(answer_stream(self, member, rest, first));
                }
                Err(e) => last = Some(self.failed(member, e, order.get(i + 1))?),
            }
        }
        Err(last.unwrap_or_else(|| ModelError::invalid_response("the fallback chain has no model")))
    }

    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let order = self.order();
        let mut last = None;
        for (i, member) in order.iter().enumerate() {
            match member.model.complete(request.clone()).await {
                Ok(mut response) => {
                    member.answered();
                    // A nested chain already named its own answering model.
                    response.model.get_or_insert_with(|| member.name().to_owned());
                    return Ok(response);
                }
                Err(e) => last = Some(self.failed(member, e, order.get(i + 1))?),
            }
        }
        Err(last.unwrap_or_else(|| ModelError::invalid_response("the fallback chain has no model")))
    }
}

/// The answering model's stream: a [`ChatEvent::Model`] naming it (unless its own stream starts
/// with one), the first event, then the rest, whose errors pass through (and count for the
/// circuit breaker).
fn answer_stream(
    chain: &FallbackModel,
    member: &Arc<Member>,
    rest: ChatStream,
    first: Option<ChatEvent>,
) -> ChatStream {
    let named = matches!(first, Some(ChatEvent::Model { .. }));
    let head = (!named).then(|| ChatEvent::Model {
        name: member.name().to_owned(),
    });
    let head = futures::stream::iter(head.into_iter().chain(first).map(Ok));
    let member = Arc::clone(member);
    let switch_when = Arc::clone(&chain.switch_when);
    let breaker = chain.breaker;
    let rest = rest.inspect(move |item| {
        if let Err(e) = item
            && switch_when(e)
        {
            member.failed(breaker, e);
        }
    });
    Box::pin(head.chain(rest))
}
