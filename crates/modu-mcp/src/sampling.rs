//! Sampling: a server's `sampling/createMessage` answered by a model the application chose.
//!
//! Configure it with [`McpSampling`] on [`crate::McpToolProvider::with_sampling`] (or
//! [`crate::McpSessionOptions::with_sampling`]): the connection then declares the `sampling`
//! capability, and each request a server sends during the run is
//!
//! - refused when the policy is [`McpSamplingPolicy::Deny`], or when the run already served
//!   its [`McpSampling::with_max_calls`] requests;
//! - with [`McpSamplingPolicy::Ask`], asked of a person first, through the run's asks for
//!   input (as an elicitation is): the run pauses with an
//!   [`modu_core::InputRequest`] whose schema is a boolean and whose metadata holds
//!   `mcp_server` and `mcp_sampling` (the request's messages); answered `true`, the resumed
//!   run's call is made again and its sampling request served; declined or answered `false`,
//!   refused;
//! - otherwise sent to the model as the server's system prompt and text messages, with the
//!   server's `maxTokens` cut to [`McpSampling::with_max_tokens`], and the model's text
//!   returned to the server. The model is the one given to [`McpSampling::new`], or, with
//!   [`McpSampling::agent_model`], the model of the run's agent ([`modu_core::RunContext::model`]).
//!
//! Requests with content other than text (images, audio, tool use) are refused. What the
//! served requests used is counted in [`McpSamplingUsage`] ([`crate::McpSession::sampling_usage`]),
//! and, through the provider, added to the run's usage ([`modu_core::RunContext::add_usage`]);
//! a request served during a run's tool call is also in the run's usage by model and its
//! `AgentEvent::ToolModelCall` event (purpose `mcp_sampling`).
//!
//! ```
//! use std::sync::Arc;
//! use modu_mcp::{McpSampling, McpSamplingPolicy};
//! use modu_testing::ScriptedModel;
//!
//! let sampling = McpSampling::new(Arc::new(ScriptedModel::new().text("a haiku")))
//!     .with_max_tokens(256)
//!     .with_max_calls(3);
//! assert_eq!(sampling.policy(), McpSamplingPolicy::Auto);
//! let denied = sampling.clone().with_policy(McpSamplingPolicy::Deny);
//! assert_eq!(denied.policy(), McpSamplingPolicy::Deny);
//! // The agent's own model, each request approved by a person first.
//! let asked = McpSampling::agent_model().with_policy(McpSamplingPolicy::Ask);
//! assert_eq!(asked.policy(), McpSamplingPolicy::Ask);
//! ```
// Sampling is deprecated by SEP-2577 in rmcp; servers still send it.
#![allow(deprecated)]

use std::sync::{Arc, Mutex, PoisonError};

use modu_core::{ChatModel, ChatRequest, FinishReason, Message, Usage};

use crate::elicitation::InFlight;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ErrorCode, ErrorData, Role, SamplingMessage,
    SamplingMessageContentBlock,
};

/// Whether sampling requests are served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpSamplingPolicy {
    /// Served by the model, within the limits.
    #[default]
    Auto,
    /// Asked of a person first (the run pauses for the answer), then served within the
    /// limits. A request that arrives while no single call of the session is in flight has
    /// no one to ask, and is refused.
    Ask,
    /// Refused (the server gets an error; the capability is still declared).
    Deny,
}

/// How a run answers sampling requests: the model, the policy and the limits.
#[derive(Clone)]
pub struct McpSampling {
    /// `None`: the run's agent's model.
    model: Option<Arc<dyn ChatModel>>,
    policy: McpSamplingPolicy,
    max_tokens: Option<u32>,
    max_calls: Option<u64>,
}

impl std::fmt::Debug for McpSampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSampling")
            .field(
                "model",
                &self.model.as_ref().map_or("(the agent's)", |m| m.model_name()),
            )
            .field("policy", &self.policy)
            .field("max_tokens", &self.max_tokens)
            .field("max_calls", &self.max_calls)
            .finish()
    }
}

impl McpSampling {
    /// Sampling served by `model` ([`McpSamplingPolicy::Auto`], no limits).
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        McpSampling {
            model: Some(model),
            policy: McpSamplingPolicy::Auto,
            max_tokens: None,
            max_calls: None,
        }
    }

    /// Sampling served by the model of the run's agent ([`modu_core::RunContext::model`],
    /// the agent's own model without its chat layers; [`McpSamplingPolicy::Auto`], no
    /// limits). A request that arrives while no single call of the session is in flight, or
    /// in a run without a model, is refused.
    pub fn agent_model() -> Self {
        McpSampling {
            model: None,
            policy: McpSamplingPolicy::Auto,
            max_tokens: None,
            max_calls: None,
        }
    }

    /// Sets the policy.
    pub fn with_policy(mut self, policy: McpSamplingPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The most tokens one answer may take: a server asking for more gets at most this many.
    pub fn with_max_tokens(mut self, tokens: u32) -> Self {
        self.max_tokens = Some(tokens.max(1));
        self
    }

    /// The most sampling requests served per run (per session), over all its servers; later
    /// ones are refused.
    pub fn with_max_calls(mut self, calls: u64) -> Self {
        self.max_calls = Some(calls);
        self
    }

    /// The policy.
    pub fn policy(&self) -> McpSamplingPolicy {
        self.policy
    }
}

/// What a session's sampling requests used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpSamplingUsage {
    /// Requests the model answered.
    pub served: u64,
    /// Requests refused (policy, limit, unsupported content, model failure).
    pub refused: u64,
    /// The model's usage over the served requests.
    pub usage: Usage,
}

/// Adds sampling usage to a run's usage.
pub(crate) type UsageSink = Arc<dyn Fn(Usage) + Send + Sync>;

/// One session's sampling state, shared by its connections.
pub(crate) struct Sampler {
    config: McpSampling,
    usage: Mutex<McpSamplingUsage>,
    sink: Option<UsageSink>,
}

impl Sampler {
    pub(crate) fn new(config: McpSampling, sink: Option<UsageSink>) -> Self {
        Sampler {
            config,
            usage: Mutex::new(McpSamplingUsage::default()),
            sink,
        }
    }

    pub(crate) fn usage(&self) -> McpSamplingUsage {
        *self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn refuse(&self, server: &str, message: String) -> ErrorData {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner).refused += 1;
        tracing::info!(server, reason = %message, "MCP sampling request refused");
        // -1: the code the specification's examples use for a refused sampling request.
        ErrorData::new(ErrorCode(-1), message, None)
    }

    /// Serves one `sampling/createMessage` request of `server`; `call` is the session's one
    /// tool call in flight, if there is one.
    pub(crate) async fn create_message(
        &self,
        server: &str,
        params: CreateMessageRequestParams,
        call: Option<InFlight>,
    ) -> Result<CreateMessageResult, ErrorData> {
        if self.config.policy == McpSamplingPolicy::Deny {
            return Err(self.refuse(server, "the client does not serve sampling requests".into()));
        }
        // Count the request before it runs, so concurrent requests cannot pass the limit.
        {
            let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(max) = self.config.max_calls
                && usage.served >= max
            {
                drop(usage);
                return Err(self.refuse(
                    server,
                    format!("the client's limit of {max} sampling requests per run is reached"),
                ));
            }
            usage.served += 1;
        }
        let request = match to_chat_request(&params, self.config.max_tokens) {
            Ok(request) => request,
            Err(message) => {
                self.unserve();
                return Err(self.refuse(server, message));
            }
        };
        if self.config.policy == McpSamplingPolicy::Ask
            && let Err(message) = ask(server, &params, &request, call.as_ref())
        {
            self.unserve();
            return Err(self.refuse(server, message));
        }
        let Some(model) = self
            .config
            .model
            .clone()
            .or_else(|| call.as_ref().and_then(|c| c.model.clone()))
        else {
            self.unserve();
            return Err(self.refuse(
                server,
                "no model serves sampling requests outside a run's single tool call".into(),
            ));
        };
        let response = match model.complete(request).await {
            Ok(response) => response,
            Err(e) => {
                self.unserve();
                return Err(self.refuse(server, format!("the model failed: {e}")));
            }
        };
        {
            let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
            usage.usage += response.usage;
        }
        if let Some(sink) = &self.sink {
            sink(response.usage);
        }
        if let Some(call) = &call {
            (call.report)(model.model_name().to_owned(), response.usage).await;
        }
        let stop = match response.finish_reason {
            Some(FinishReason::Length) => CreateMessageResult::STOP_REASON_END_MAX_TOKEN.to_owned(),
            Some(FinishReason::Other(other)) => other,
            _ => CreateMessageResult::STOP_REASON_END_TURN.to_owned(),
        };
        let text = response.message.text();
        Ok(CreateMessageResult::new(
            SamplingMessage::new(Role::Assistant, SamplingMessageContentBlock::text(text)),
            model.model_name().to_owned(),
        )
        .with_stop_reason(stop))
    }

    /// Takes back the count of a request that was not served after all.
    fn unserve(&self) {
        let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        usage.served = usage.served.saturating_sub(1);
    }
}

/// Asks the call's person whether `server` may sample the model; `Ok` when they said yes.
fn ask(
    server: &str,
    params: &CreateMessageRequestParams,
    request: &ChatRequest,
    call: Option<&InFlight>,
) -> Result<(), String> {
    let Some(call) = call else {
        return Err("no single call of the session is in flight to ask about the sampling request".into());
    };
    // What the person sees is what the model would be sent (its system prompt apart).
    let messages: Vec<serde_json::Value> = request
        .messages
        .iter()
        .filter(|m| m.role != modu_core::Role::System)
        .map(|m| {
            let role = if m.role == modu_core::Role::User {
                "user"
            } else {
                "assistant"
            };
            serde_json::json!({"role": role, "text": m.text()})
        })
        .collect();
    let spec = modu_core::InputSpec::new(
        format!("The MCP server {server:?} asks to use the model. Allow it?"),
        serde_json::json!({"type": "boolean"}),
    )
    .with_metadata("mcp_server", server)
    .with_metadata(
        "mcp_sampling",
        serde_json::json!({"systemPrompt": params.system_prompt, "messages": messages, "maxTokens": params.max_tokens}),
    );
    match (call.ask)(spec) {
        Some(modu_core::InputAnswer::Given {
            value: serde_json::Value::Bool(true),
        }) => Ok(()),
        Some(_) => Err("a person refused the sampling request".into()),
        // The ask is recorded: the run pauses after the call, and asks again on resume.
        None => Err("the sampling request waits for a person's answer".into()),
    }
}

/// The model request for a sampling request: the system prompt, then the text messages.
fn to_chat_request(params: &CreateMessageRequestParams, max_tokens: Option<u32>) -> Result<ChatRequest, String> {
    let mut messages = Vec::with_capacity(params.messages.len() + 1);
    if let Some(system) = params.system_prompt.as_deref().filter(|s| !s.trim().is_empty()) {
        messages.push(Message::system(system));
    }
    for message in &params.messages {
        let mut text = String::new();
        for block in message.content.clone().into_vec() {
            match block {
                SamplingMessageContentBlock::Text(t) => {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&t.text);
                }
                _ => return Err("the client serves text-only sampling requests".into()),
            }
        }
        messages.push(match message.role {
            Role::User => Message::user(text),
            Role::Assistant => Message::assistant(text),
        });
    }
    if messages.iter().all(|m| m.role != modu_core::Role::User) {
        return Err("a sampling request needs at least one user message".into());
    }
    let mut request = ChatRequest::new(messages);
    let tokens = match max_tokens {
        Some(max) => params.max_tokens.min(max),
        None => params.max_tokens,
    };
    request = request.with_max_tokens(tokens.max(1));
    if let Some(t) = params.temperature {
        request = request.with_temperature(t);
    }
    if let Some(stop) = &params.stop_sequences {
        request.stop = stop.clone();
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(max_tokens: u32) -> CreateMessageRequestParams {
        serde_json::from_value(serde_json::json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}],
            "systemPrompt": "be brief",
            "maxTokens": max_tokens,
            "temperature": 0.5,
            "stopSequences": ["END"]
        }))
        .unwrap()
    }

    #[test]
    fn the_request_carries_the_system_prompt_text_and_a_capped_budget() {
        let request = to_chat_request(&params(500), Some(100)).unwrap();
        assert_eq!(request.messages[0].role, modu_core::Role::System);
        assert_eq!(request.messages[0].text(), "be brief");
        assert_eq!(request.messages[1].text(), "hello");
        assert_eq!(request.max_tokens, Some(100));
        assert_eq!(request.temperature, Some(0.5));
        assert_eq!(request.stop, vec!["END".to_owned()]);
        assert_eq!(to_chat_request(&params(50), Some(100)).unwrap().max_tokens, Some(50));
    }

    #[test]
    fn non_text_content_is_refused() {
        let params: CreateMessageRequestParams = serde_json::from_value(serde_json::json!({
            "messages": [{"role": "user", "content": {"type": "image", "data": "AAAA", "mimeType": "image/png"}}],
            "maxTokens": 10
        }))
        .unwrap();
        assert!(to_chat_request(&params, None).unwrap_err().contains("text-only"));
    }
}
