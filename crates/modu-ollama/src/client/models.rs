//! The models Ollama has pulled (`GET /api/tags`): [`OllamaModel`] and
//! [`OllamaClient::list_models`].

use modu_core::ModelError;
use serde::Deserialize;

use super::OllamaClient;
use crate::error::{status_error, transport_error};

/// A model Ollama has pulled (`GET /api/tags`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct OllamaModel {
    /// The name requests use (`llama3.2:latest`).
    pub name: String,
    /// Size on disk, in bytes.
    #[serde(default)]
    pub size: u64,
    /// The content digest.
    #[serde(default)]
    pub digest: String,
    /// Format, family, parameter size and quantisation.
    #[serde(default)]
    pub details: OllamaModelDetails,
}

/// Details of a pulled model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct OllamaModelDetails {
    /// `gguf`.
    #[serde(default)]
    pub format: String,
    /// `llama`, `qwen2`, …
    #[serde(default)]
    pub family: String,
    /// `3.2B`.
    #[serde(default)]
    pub parameter_size: String,
    /// `Q4_K_M`.
    #[serde(default)]
    pub quantization_level: String,
}

#[derive(Deserialize)]
struct Tags {
    #[serde(default)]
    models: Vec<OllamaModel>,
}

impl OllamaClient {
    /// The models Ollama has pulled (`GET /api/tags`).
    pub async fn list_models(&self) -> Result<Vec<OllamaModel>, ModelError> {
        self.list_models_raw().await.map_err(|e| self.inner.redactor.error(e))
    }

    async fn list_models_raw(&self) -> Result<Vec<OllamaModel>, ModelError> {
        let i = &self.inner;
        let started = std::time::Instant::now();
        let mut rb = i.http.get(&i.tags_url).headers(i.headers.clone());
        if let Some(t) = i.request_timeout {
            rb = rb.timeout(t);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| transport_error(e, &i.timeouts, started, &i.tags_url))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp
            .text()
            .await
            .map_err(|e| transport_error(e, &i.timeouts, started, &i.tags_url))?;
        if !status.is_success() {
            return Err(status_error(
                status,
                &headers,
                &text,
                &i.model,
                &i.redactor,
                &i.tags_url,
            ));
        }
        let tags: Tags =
            serde_json::from_str(&text).map_err(|e| ModelError::invalid_response(format!("invalid /api/tags: {e}")))?;
        Ok(tags.models)
    }
}
