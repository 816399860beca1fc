//! The chat and function layers that make every model call and every tool call of a run a
//! journaled step, and [`durable`], which adds both to an agent builder.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use modu_agent::middleware::{ChatService, FunctionService, ToolInvocation};
use modu_agent::{AgentBuilder, Fixed};
use modu_core::{ChatRequest, ChatResponse, ModelError, ModelErrorKind, ToolError, ToolErrorKind};
use restate_sdk::context::RunRetryPolicy;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tower::{Layer, Service, ServiceExt};

use crate::journal::{self, Attempt, Outcome, StepWork};

/// Who retries a failed model or tool call inside its journaled step.
///
/// - [`Retries::Agent`] (the default): the agent's [`modu_agent::RetryConfig`] retries inside the
///   step (the agent's backoff, its per-attempt events), and the step journals the final
///   outcome, success or error. Restate never retries the step itself.
/// - [`Retries::Restate`]: a transient failure (a retryable [`ModelError`] or [`ToolError`])
///   fails the attempt, and Restate retries the step with this policy (durably: the wait
///   survives a worker's death); when the policy gives up, the last error is journaled and the
///   run sees it. Give the agent `RetryConfig::none()` then, so that only one policy retries.
#[derive(Clone, Debug, Default)]
pub enum Retries {
    /// The agent's `RetryConfig` retries; Restate journals the outcome.
    #[default]
    Agent,
    /// Restate retries transient failures with this policy.
    Restate(RunRetryPolicy),
}

impl Retries {
    /// Restate retries: `max_attempts` attempts in all, waits from `initial` doubling up to
    /// `max_delay`.
    pub fn restate(max_attempts: u32, initial: Duration, max_delay: Duration) -> Self {
        Retries::Restate(
            RunRetryPolicy::new()
                .initial_delay(initial)
                .exponentiation_factor(2.0)
                .max_delay(max_delay)
                .max_attempts(max_attempts.max(1)),
        )
    }

    fn policy(&self) -> Option<RunRetryPolicy> {
        match self {
            Retries::Agent => None,
            Retries::Restate(p) => Some(p.clone()),
        }
    }
}

/// Adds [`DurableChatLayer`] and [`DurableFunctionLayer`] to an agent builder, as its
/// outermost chat and function layers (call it before adding layers of your own, so that
/// yours run inside the steps and are journaled with them).
///
/// Outside a durable run (an agent run by hand, or a nested agent's calls inside a tool step)
/// the layers pass calls through unchanged.
pub fn durable<C, O, S>(builder: AgentBuilder<C, O, S>, retries: Retries) -> AgentBuilder<C, O, Fixed>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    builder
        .chat_layer(DurableChatLayer::new(retries.clone()))
        .function_layer(DurableFunctionLayer::new(retries))
}

/// A chat layer: each model request (with the agent's retries, per [`Retries`]) is one
/// journaled step, keyed by a hash of the request.
#[derive(Clone, Debug, Default)]
pub struct DurableChatLayer {
    retries: Retries,
}

impl DurableChatLayer {
    /// A layer with this retry mapping.
    pub fn new(retries: Retries) -> Self {
        DurableChatLayer { retries }
    }
}

impl Layer<ChatService> for DurableChatLayer {
    type Service = DurableChat;
    fn layer(&self, inner: ChatService) -> DurableChat {
        DurableChat {
            inner,
            retries: self.retries.clone(),
        }
    }
}

/// The service of [`DurableChatLayer`].
#[derive(Clone)]
pub struct DurableChat {
    inner: ChatService,
    retries: Retries,
}

impl Service<ChatRequest> for DurableChat {
    type Response = ChatResponse;
    type Error = ModelError;
    type Future = BoxFuture<'static, Result<ChatResponse, ModelError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ModelError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let inner = self.inner.clone();
        let retry = self.retries.policy();
        Box::pin(async move {
            let Some(journal) = journal::current() else {
                return inner.oneshot(request).await;
            };
            let base = format!("model:{}", request_hash(&request));
            let restate_retries = retry.is_some();
            let work: StepWork = Arc::new(move || {
                let inner = inner.clone();
                let request = request.clone();
                Box::pin(async move {
                    match inner.oneshot(request).await {
                        Ok(response) => match serde_json::to_value(&response) {
                            Ok(v) => Attempt::Done(Outcome::Ok(v)),
                            Err(e) => Attempt::Done(Outcome::Err(model_error_json(&ModelError::invalid_response(
                                format!("cannot journal the model's answer: {e}"),
                            )))),
                        },
                        Err(e) if restate_retries && e.is_retryable() => Attempt::Retry(e.to_string()),
                        Err(e) => Attempt::Done(Outcome::Err(model_error_json(&e))),
                    }
                })
            });
            match journal.step(base, retry, work).await {
                Ok(Outcome::Ok(v)) => serde_json::from_value(v)
                    .map_err(|e| ModelError::invalid_response(format!("cannot read a journaled model answer: {e}"))),
                Ok(Outcome::Err(e)) => Err(model_error_from_json(e)),
                Err(closed) => Err(ModelError::Transport {
                    message: closed,
                    source: None,
                }),
            }
        })
    }
}

/// A function layer: each tool call (with its retries per [`Retries`] and its timeout) is one
/// journaled step, keyed by the run id and the call id.
#[derive(Clone, Debug, Default)]
pub struct DurableFunctionLayer {
    retries: Retries,
}

impl DurableFunctionLayer {
    /// A layer with this retry mapping.
    pub fn new(retries: Retries) -> Self {
        DurableFunctionLayer { retries }
    }
}

impl<C: Send + Sync + 'static> Layer<FunctionService<C>> for DurableFunctionLayer {
    type Service = DurableFunction<C>;
    fn layer(&self, inner: FunctionService<C>) -> DurableFunction<C> {
        DurableFunction {
            inner,
            retries: self.retries.clone(),
        }
    }
}

/// The service of [`DurableFunctionLayer`].
pub struct DurableFunction<C> {
    inner: FunctionService<C>,
    retries: Retries,
}

impl<C> Clone for DurableFunction<C> {
    fn clone(&self) -> Self {
        DurableFunction {
            inner: self.inner.clone(),
            retries: self.retries.clone(),
        }
    }
}

impl<C: Send + Sync + 'static> Service<ToolInvocation<C>> for DurableFunction<C> {
    type Response = serde_json::Value;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<serde_json::Value, ToolError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, invocation: ToolInvocation<C>) -> Self::Future {
        let inner = self.inner.clone();
        let retry = self.retries.policy();
        Box::pin(async move {
            let Some(journal) = journal::current() else {
                return inner.oneshot(invocation).await;
            };
            let base = format!("tool:{}/{}", invocation.ctx.run_id(), invocation.call_id);
            let restate_retries = retry.is_some();
            let work: StepWork = Arc::new(move || {
                let inner = inner.clone();
                let invocation = invocation.clone();
                Box::pin(async move {
                    let scope = invocation.ctx.call_scope().cloned();
                    let result = inner.oneshot(invocation).await;
                    // An ask for a person's input cannot wait inside a journaled step: nothing
                    // answers it (the run resumed itself and asked again, forever), and a replay
                    // would not ask again. The call fails with a typed error instead.
                    if scope.is_some_and(|scope| scope.take_input().is_some()) {
                        return Attempt::Done(Outcome::Err(
                            serde_json::to_value(input_not_durable()).unwrap_or(serde_json::Value::Null),
                        ));
                    }
                    match result {
                        Ok(v) => Attempt::Done(Outcome::Ok(v)),
                        Err(e) if restate_retries && e.retryable => Attempt::Retry(e.to_string()),
                        Err(e) => Attempt::Done(Outcome::Err(
                            serde_json::to_value(&e).unwrap_or(serde_json::Value::Null),
                        )),
                    }
                })
            });
            match journal.step(base, retry, work).await {
                Ok(Outcome::Ok(v)) => Ok(v),
                Ok(Outcome::Err(serde_json::Value::String(message))) => {
                    Err(ToolError::execution("restate_retries_exhausted").with_message(message))
                }
                Ok(Outcome::Err(e)) => {
                    Err(serde_json::from_value(e)
                        .unwrap_or_else(|_| ToolError::execution("unreadable_journaled_error")))
                }
                Err(_closed) => Err(ToolError::new(ToolErrorKind::Execution, "journal_closed")),
            }
        })
    }
}

/// The tool error of a call that asked a person for input (`RunContext::ask_user`) in a
/// durable run: asks are not journaled and nothing answers them, so the model is told.
fn input_not_durable() -> ToolError {
    ToolError::execution("input_not_durable").with_message(
        "asking a person for input is not supported in a durable run on Restate; \
         a tool that needs a person's approval is",
    )
}

/// A step key for a model request: the SHA-256 of its JSON (what is sent; extensions are not
/// part of it), 128 bits in hex. The JSON values inside it (tool schemas, the output schema,
/// extras) are written with their keys sorted, as serde_json wrote every map before
/// `preserve_order`: keys journaled by earlier versions still match, and a value built from a
/// `HashMap` gives every worker's replay the same key.
fn request_hash(request: &ChatRequest) -> String {
    let mut sorted = request.clone();
    sorted.tools = Arc::new(
        request
            .tools
            .iter()
            .map(|tool| {
                let mut tool = tool.clone();
                let mut parameters = (*tool.parameters).clone();
                parameters.sort_all_objects();
                tool.parameters = Arc::new(parameters);
                tool
            })
            .collect(),
    );
    if let Some(format) = &mut sorted.response_format {
        format.schema.sort_all_objects();
    }
    for value in sorted.extras.values_mut() {
        value.sort_all_objects();
    }
    let bytes = serde_json::to_vec(&sorted).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A model error as it is journaled.
#[derive(Serialize, Deserialize)]
struct JournaledModelError {
    kind: ModelErrorKind,
    message: String,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    retry_after_ms: Option<u64>,
    /// The model a `ModelNotFound` or `UnsupportedContent` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    /// The modality an `UnsupportedContent` refused. One this version does not know (written
    /// by a newer worker during a rolling deploy) reads as none rather than failing the entry.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_modality"
    )]
    modality: Option<modu_core::Modality>,
    /// How long a `Timeout` waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_ns: Option<u64>,
}

/// A journaled modality, or none when this version does not know it.
fn lenient_modality<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<modu_core::Modality>, D::Error> {
    let value = <Option<serde_json::Value> as serde::Deserialize>::deserialize(d)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

fn model_error_json(e: &ModelError) -> serde_json::Value {
    let (mut model, mut modality, mut timeout_ns) = (None, None, None);
    let (message, status) = match e {
        ModelError::Transport { message, .. } => (message.clone(), None),
        ModelError::Authentication { status, message } => (message.clone(), Some(*status)),
        ModelError::ModelNotFound { model: name, message } => {
            model = Some(name.clone());
            (message.clone(), None)
        }
        ModelError::UnsupportedContent {
            model: name,
            modality: refused,
            message,
        } => {
            (model, modality) = (Some(name.clone()), *refused);
            (message.clone(), None)
        }
        ModelError::ContextLengthExceeded { message }
        | ModelError::InvalidResponse { message }
        | ModelError::InvalidRequest { message } => (message.clone(), None),
        ModelError::Status { status, body, .. } => (body.clone(), Some(*status)),
        ModelError::Timeout(waited) => {
            timeout_ns = Some(u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX));
            (e.to_string(), None)
        }
        other => (other.to_string(), None),
    };
    let journaled = JournaledModelError {
        kind: e.kind(),
        message,
        status,
        retry_after_ms: e.retry_after().map(|d| d.as_millis() as u64),
        model,
        modality,
        timeout_ns,
    };
    serde_json::to_value(journaled).unwrap_or(serde_json::Value::Null)
}

fn model_error_from_json(value: serde_json::Value) -> ModelError {
    let e = match value {
        serde_json::Value::String(message) => {
            // Restate gave up retrying: the last attempt's message.
            return ModelError::Transport { message, source: None };
        }
        other => match serde_json::from_value::<JournaledModelError>(other) {
            Ok(e) => e,
            Err(_) => return ModelError::invalid_response("unreadable journaled model error"),
        },
    };
    let retry_after = e.retry_after_ms.map(Duration::from_millis);
    match e.kind {
        ModelErrorKind::Transport => ModelError::Transport {
            message: e.message,
            source: None,
        },
        ModelErrorKind::Timeout => ModelError::Timeout(Duration::from_nanos(e.timeout_ns.unwrap_or(0))),
        ModelErrorKind::RateLimited => ModelError::RateLimited { retry_after },
        ModelErrorKind::Authentication => ModelError::Authentication {
            status: e.status.unwrap_or(401),
            message: e.message,
        },
        ModelErrorKind::ModelNotFound => ModelError::ModelNotFound {
            model: e.model.unwrap_or_default(),
            message: e.message,
        },
        ModelErrorKind::UnsupportedContent => ModelError::UnsupportedContent {
            model: e.model.unwrap_or_default(),
            modality: e.modality,
            message: e.message,
        },
        ModelErrorKind::ContextLengthExceeded => ModelError::ContextLengthExceeded { message: e.message },
        ModelErrorKind::Status => ModelError::Status {
            status: e.status.unwrap_or(500),
            body: e.message,
            retry_after,
        },
        ModelErrorKind::InvalidResponse => ModelError::InvalidResponse { message: e.message },
        _ => ModelError::InvalidRequest { message: e.message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model error read back from the journal is the error the model call returned: the
    /// same kind and the same text (what the run's error and its events show).
    #[test]
    fn a_journaled_model_error_reads_back_as_the_same_error() {
        let errors = [
            ModelError::Transport {
                message: "connection reset".into(),
                source: None,
            },
            ModelError::Timeout(Duration::from_secs(60)),
            ModelError::Timeout(Duration::from_micros(1500)),
            ModelError::RateLimited {
                retry_after: Some(Duration::from_secs(3)),
            },
            ModelError::Authentication {
                status: 403,
                message: "bad key".into(),
            },
            ModelError::ModelNotFound {
                model: "gpt-9".into(),
                message: "no such model".into(),
            },
            ModelError::ContextLengthExceeded {
                message: "too long".into(),
            },
            ModelError::Status {
                status: 503,
                body: "overloaded".into(),
                retry_after: Some(Duration::from_millis(1500)),
            },
            ModelError::invalid_response("not JSON"),
            ModelError::InvalidRequest {
                message: "bad field".into(),
            },
            ModelError::UnsupportedContent {
                model: "text-only".into(),
                modality: Some(modu_core::Modality::Image),
                message: "images are not taken".into(),
            },
        ];
        for error in errors {
            let read = model_error_from_json(model_error_json(&error));
            assert_eq!(read.kind(), error.kind(), "{error}");
            assert_eq!(read.to_string(), error.to_string());
            assert_eq!(read.retry_after(), error.retry_after(), "{error}");
            assert_eq!(read.is_retryable(), error.is_retryable(), "{error}");
        }
    }

    /// An entry a newer worker wrote with a modality this version does not know still reads:
    /// the same kind and message, without the modality.
    #[test]
    fn a_journaled_error_with_an_unknown_modality_still_reads() {
        let mut json = model_error_json(&ModelError::UnsupportedContent {
            model: "text-only".into(),
            modality: Some(modu_core::Modality::Image),
            message: "images are not taken".into(),
        });
        json["modality"] = serde_json::json!("hologram");
        let read = model_error_from_json(json);
        assert!(
            matches!(
                &read,
                ModelError::UnsupportedContent { model, modality: None, message }
                    if model == "text-only" && message == "images are not taken"
            ),
            "{read:?}"
        );
    }
}
