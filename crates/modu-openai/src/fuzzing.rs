//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`). Not a stable API.
//!
//! They run the client's real decoding paths on bytes instead of an HTTP body: the SSE
//! framing, the chunk decoding and the fold into
//! [`ChatResponseBuilder`] that the run loop does.

use futures::StreamExt;
use modu_core::{ChatResponse, ChatResponseBuilder, ModelError};

use crate::wire::{self, WireCompletion};

/// Decodes `pieces` as the body of a streamed chat completion, delivered in these pieces (so
/// chunk boundaries fall where the caller puts them), and folds the events as the run loop
/// does: the first error ends the fold.
pub async fn decode_sse_stream(pieces: Vec<Vec<u8>>) -> Result<ChatResponse, ModelError> {
    let bytes = futures::stream::iter(pieces.into_iter().map(Ok::<Vec<u8>, reqwest::Error>));
    let client = crate::OpenAiClient::new("http://127.0.0.1:9/v1", "fuzz").map_err(|e| ModelError::InvalidRequest {
        message: format!("fuzz client: {e}"),
    })?;
    let mut stream = Box::pin(crate::client::sse_stream(
        Box::pin(bytes),
        client,
        std::time::Instant::now(),
    ));
    let mut builder = ChatResponseBuilder::default();
    while let Some(event) = stream.next().await {
        builder.push(event?);
    }
    builder.finish()
}

/// Decodes `body` as a non-streamed `chat.completion` answer, as `complete` does.
pub fn decode_completion(body: &[u8]) -> Result<ChatResponse, ModelError> {
    let completion: WireCompletion = serde_json::from_slice(body)
        .map_err(|e| ModelError::invalid_response(format!("invalid chat.completion JSON: {e}")))?;
    wire::completion_response(completion)
}
