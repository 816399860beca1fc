//! The models a server offers (`GET /models`): [`ModelInfo`] and
//! [`OpenAiClient::list_models`].

use modu_core::ModelError;
use serde::Deserialize;

use super::OpenAiClient;
use crate::error::status_error;

/// A model the server offers (`GET /v1/models`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct ModelInfo {
    /// The model's name, as requests must send it.
    pub id: String,
    /// Who owns it, when the server says.
    #[serde(default)]
    pub owned_by: Option<String>,
    /// The model's maximum context length, when the server says (vLLM: `max_model_len`).
    #[serde(default)]
    pub max_model_len: Option<u64>,
}

#[derive(Deserialize)]
struct ModelList {
    #[serde(default)]
    data: Vec<ModelInfo>,
}

impl OpenAiClient {
    /// The models the server offers (`GET {base_url}/models`), for health checks and a
    /// `doctor` command. A 401 here means the key is wrong, a connection error that the
    /// server is down.
    pub async fn list_models(&self) -> Result<Vec<ModelInfo>, ModelError> {
        self.list_models_raw().await.map_err(|e| self.redact(e))
    }

    async fn list_models_raw(&self) -> Result<Vec<ModelInfo>, ModelError> {
        let i = &self.inner;
        let started = std::time::Instant::now();
        let mut rb = i.http.get(&i.models_url).headers(i.headers.clone());
        if let Some(t) = i.request_timeout {
            rb = rb.timeout(t);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| self.transport_error(e, started, &i.models_url))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp
            .text()
            .await
            .map_err(|e| self.transport_error(e, started, &i.models_url))?;
        if !status.is_success() {
            return Err(status_error(
                status,
                &headers,
                &text,
                &i.model,
                &i.redactor,
                &i.models_url,
            ));
        }
        let list: ModelList = serde_json::from_str(&text)
            .map_err(|e| ModelError::invalid_response(format!("invalid model list: {e}")))?;
        Ok(list.data)
    }
}
