//! The [`ChatModel`] impl of [`OllamaClient`]: `POST /api/chat`, streamed or not.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use futures::StreamExt;
use modu_core::{ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, ChatStream, ModelError};

use super::{OllamaClient, ndjson_stream};
use crate::error::{stream_error, transport_error};
use crate::wire::{self, LineState, WireLine};

#[async_trait]
impl ChatModel for OllamaClient {
    fn model_name(&self) -> &str {
        &self.inner.model
    }

    fn input_modalities(&self) -> modu_core::InputModalities {
        self.inner.input_modalities
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let redactor = Arc::clone(&self.inner.redactor);
        let started = Instant::now();
        let resp = self
            .post_chat(&request, true, started)
            .await
            .map_err(|e| redactor.error(e))?;
        let bytes = Box::pin(resp.bytes_stream());
        let stream = ndjson_stream(
            bytes,
            self.inner.model.clone(),
            self.inner.timeouts,
            started,
            Arc::clone(&redactor),
        )
        .map(move |item| item.map_err(|e| redactor.error(e)));
        Ok(Box::pin(stream))
    }

    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        if self.inner.always_stream {
            // The stream's errors are masked already.
            let mut stream = self.stream(request).await?;
            let mut builder = ChatResponseBuilder::default();
            while let Some(event) = stream.next().await {
                builder.push(event?);
            }
            return builder.finish();
        }
        self.complete_raw(request)
            .await
            .map_err(|e| self.inner.redactor.error(e))
    }
}

impl OllamaClient {
    async fn complete_raw(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let i = &self.inner;
        let started = Instant::now();
        let resp = self.post_chat(&request, false, started).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| transport_error(e, &i.timeouts, started, &i.chat_url))?;
        let line: WireLine = serde_json::from_slice(&bytes)
            .map_err(|e| ModelError::invalid_response(format!("invalid /api/chat answer: {e}")))?;
        if let Some(error) = &line.error {
            return Err(stream_error(error, &i.model, &i.redactor));
        }
        let mut st = LineState::default();
        let mut events = Vec::new();
        wire::line_events(line, &mut st, &mut events);
        let mut builder = ChatResponseBuilder::default();
        for ev in events {
            builder.push(ev);
        }
        builder.finish()
    }
}
