//! Token counting through the server's tokenizer.

use modu_core::{Message, ModelError, ToolDefinition};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::OpenAiClient;
use crate::wire::{self, WireMessages, WireTools};

/// Which tokenize API the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenizeApi {
    /// vLLM: `POST /tokenize` with `{model, messages, tools}` applies the chat template and
    /// answers `{count, max_model_len, tokens}`.
    Vllm,
    /// llama.cpp's server: `POST /apply-template` with `{messages, tools}` renders the prompt,
    /// then `POST /tokenize` with `{"content": prompt}` answers `{tokens: [...]}`. When
    /// `/apply-template` is missing (older servers) the message texts are tokenized joined,
    /// without the template.
    LlamaCpp,
}

/// Counts a request's tokens with the server's own tokenizer and chat template.
///
/// The tokenize endpoints live at the server's root, not under `/v1`: the URL is the client's
/// base URL without a trailing `/v1`, unless set with [`VllmTokenCounter::with_root_url`].
#[derive(Clone)]
pub struct VllmTokenCounter {
    client: OpenAiClient,
    root_url: String,
    api: TokenizeApi,
}

impl std::fmt::Debug for VllmTokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VllmTokenCounter")
            .field("client", &self.client)
            .field("root_url", &modu_core::redact::display_url(&self.root_url))
            .field("api", &self.api)
            .finish()
    }
}

#[derive(Serialize)]
struct VllmTokenize<'a> {
    model: &'a str,
    messages: WireMessages<'a>,
    #[serde(skip_serializing_if = "WireTools::is_empty")]
    tools: WireTools<'a>,
    add_generation_prompt: bool,
}

#[derive(Deserialize)]
struct VllmTokenizeResponse {
    count: Option<u64>,
    #[serde(default)]
    tokens: Vec<Value>,
}

#[derive(Serialize)]
struct ApplyTemplate<'a> {
    messages: WireMessages<'a>,
    #[serde(skip_serializing_if = "WireTools::is_empty")]
    tools: WireTools<'a>,
}

#[derive(Deserialize)]
struct ApplyTemplateResponse {
    prompt: String,
}

#[derive(Serialize)]
struct LlamaTokenize<'a> {
    content: &'a str,
}

#[derive(Deserialize)]
struct LlamaTokenizeResponse {
    tokens: Vec<Value>,
}

impl VllmTokenCounter {
    /// A counter using vLLM's `/tokenize` on the client's server.
    pub fn new(client: &OpenAiClient) -> Self {
        Self::with_api(client, TokenizeApi::Vllm)
    }

    /// A counter using llama.cpp's `/apply-template` and `/tokenize` on the client's server.
    pub fn llama_cpp(client: &OpenAiClient) -> Self {
        Self::with_api(client, TokenizeApi::LlamaCpp)
    }

    /// A counter speaking `api` to the client's server.
    pub fn with_api(client: &OpenAiClient, api: TokenizeApi) -> Self {
        let base = client.base_url();
        let root = base.strip_suffix("/v1").unwrap_or(base).to_owned();
        VllmTokenCounter {
            client: client.clone(),
            root_url: root,
            api,
        }
    }

    /// Sets the server's root URL (where `/tokenize` lives).
    pub fn with_root_url(mut self, url: impl Into<String>) -> Self {
        self.root_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    /// The API spoken.
    pub fn api(&self) -> TokenizeApi {
        self.api
    }

    /// Tokens of these messages and tool definitions as the model would see them (with the
    /// generation prompt). The signature of `modu_core::TokenCounter::count_tokens`.
    pub async fn count_tokens(&self, messages: &[Message], tools: &[ToolDefinition]) -> Result<u64, ModelError> {
        match self.api {
            TokenizeApi::Vllm => self.count_vllm(messages, tools).await,
            TokenizeApi::LlamaCpp => self.count_llama(messages, tools).await,
        }
    }

    /// Tokens of a request's messages and tools.
    pub async fn count(&self, request: &modu_core::ChatRequest) -> Result<u64, ModelError> {
        self.count_tokens(&request.messages, &request.tools).await
    }

    async fn post<T: Serialize, R: for<'de> Deserialize<'de>>(&self, path: &str, body: &T) -> Result<R, ModelError> {
        self.post_raw(path, body).await.map_err(|e| self.client.redact(e))
    }

    async fn post_raw<T: Serialize, R: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<R, ModelError> {
        let url = format!("{}{path}", self.root_url);
        let bytes = serde_json::to_vec(body).map_err(|e| ModelError::InvalidRequest {
            message: format!("cannot serialise the tokenize request: {e}"),
        })?;
        let started = std::time::Instant::now();
        let resp = self.client.post_json(&url, bytes, false, started).await?;
        let text = resp
            .bytes()
            .await
            .map_err(|e| self.client.transport_error(e, started, &url))?;
        serde_json::from_slice(&text).map_err(|e| {
            let shown = modu_core::redact::display_url(&url);
            ModelError::invalid_response(format!("invalid answer from {shown}: {e}"))
        })
    }

    async fn count_vllm(&self, messages: &[Message], tools: &[ToolDefinition]) -> Result<u64, ModelError> {
        let inner = self.client.inner();
        let body = VllmTokenize {
            model: &inner.model,
            messages: wire::wire_messages(messages, inner.message_options),
            tools: wire::wire_tools(tools),
            add_generation_prompt: true,
        };
        let r: VllmTokenizeResponse = self.post("/tokenize", &body).await?;
        match r.count {
            Some(c) if c > 0 || !r.tokens.is_empty() => Ok(c),
            Some(c) if messages.is_empty() => Ok(c),
            _ => Err(ModelError::invalid_response(
                "the server's /tokenize did not count the chat messages (not vLLM? try TokenizeApi::LlamaCpp)",
            )),
        }
    }

    async fn count_llama(&self, messages: &[Message], tools: &[ToolDefinition]) -> Result<u64, ModelError> {
        let inner = self.client.inner();
        let body = ApplyTemplate {
            messages: wire::wire_messages(messages, inner.message_options),
            tools: wire::wire_tools(tools),
        };
        let prompt = match self.post::<_, ApplyTemplateResponse>("/apply-template", &body).await {
            Ok(r) => r.prompt,
            Err(ModelError::Status { status: 404, .. } | ModelError::ModelNotFound { .. }) => {
                // No /apply-template (404): count the texts without the template.
                let mut text = String::new();
                for m in messages {
                    text.push_str(&m.text());
                    for c in &m.tool_calls {
                        text.push_str(&c.name);
                        text.push_str(&c.arguments);
                    }
                    text.push('\n');
                }
                for t in tools {
                    text.push_str(
                        &serde_json::to_string(&wire::wire_tools(std::slice::from_ref(t))).unwrap_or_default(),
                    );
                }
                text
            }
            Err(e) => return Err(e),
        };
        let r: LlamaTokenizeResponse = self.post("/tokenize", &LlamaTokenize { content: &prompt }).await?;
        Ok(r.tokens.len() as u64)
    }
}

#[async_trait::async_trait]
impl modu_core::tokens::TokenCounter for VllmTokenCounter {
    async fn count_tokens(&self, messages: &[Message], tools: &[ToolDefinition]) -> Result<u64, ModelError> {
        VllmTokenCounter::count_tokens(self, messages, tools).await
    }
}
