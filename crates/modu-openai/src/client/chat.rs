//! The [`ChatModel`] impl of [`OpenAiClient`]: encoding a request, then sending it streamed
//! or not.

use std::time::Instant;

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use modu_core::{ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, ChatStream, InputModalities, ModelError};

use super::{OpenAiClient, sse_stream};
use crate::error::stream_error;
use crate::wire::{self, WireCompletion};

#[async_trait]
impl ChatModel for OpenAiClient {
    fn model_name(&self) -> &str {
        &self.inner.model
    }

    fn input_modalities(&self) -> InputModalities {
        self.inner.message_options.modalities
    }

    // `stream` and `complete` encode the request before their future begins (the signatures
    // are `async_trait`'s, written out): the future then keeps the body, not the request, while
    // it waits for the server, and is that much smaller for every request in flight.
    fn stream<'life0, 'async_trait>(
        &'life0 self,
        request: ChatRequest,
    ) -> BoxFuture<'async_trait, Result<ChatStream, ModelError>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let body = self.encode(&request, true);
        drop(request);
        Box::pin(async move {
            let started = Instant::now();
            let resp = self.post_chat(body?, true, started).await.map_err(|e| self.redact(e))?;
            Ok(Box::pin(sse_stream(Box::pin(resp.bytes_stream()), self.clone(), started)) as ChatStream)
        })
    }

    fn complete<'life0, 'async_trait>(
        &'life0 self,
        request: ChatRequest,
    ) -> BoxFuture<'async_trait, Result<ChatResponse, ModelError>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        if self.inner.always_stream {
            let stream = self.stream(request);
            return Box::pin(async move {
                // The stream's errors are masked already.
                let mut stream = stream.await?;
                let mut builder = ChatResponseBuilder::default();
                while let Some(event) = stream.next().await {
                    builder.push(event?);
                }
                builder.finish()
            });
        }
        let body = self.encode(&request, false);
        drop(request);
        Box::pin(async move { self.complete_raw(body?).await.map_err(|e| self.redact(e)) })
    }
}

impl OpenAiClient {
    /// The body of a chat request (errors masked).
    fn encode(&self, request: &ChatRequest, stream: bool) -> Result<Vec<u8>, ModelError> {
        let i = &self.inner;
        wire::encode_request(&i.model, request, stream, i.message_options, &i.tool_json).map_err(|e| self.redact(e))
    }

    async fn complete_raw(&self, body: Vec<u8>) -> Result<ChatResponse, ModelError> {
        let i = &self.inner;
        let started = Instant::now();
        let resp = self.post_chat(body, false, started).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| self.transport_error(e, started, &i.chat_url))?;
        let completion: WireCompletion = serde_json::from_slice(&bytes)
            .map_err(|e| ModelError::invalid_response(format!("invalid chat.completion JSON: {e}")))?;
        // OpenRouter: `{"error": {"code": 502, "message": …}}` with status 200. Only an answer
        // without choices is the error: a proxy's empty `"error"` beside a real answer is not.
        if let Some(error) = completion.error.as_ref().filter(|_| completion.choices.is_empty()) {
            return Err(stream_error(error, &i.model, &i.redactor, &i.chat_url));
        }
        wire::completion_response(completion)
    }
}
