//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`). Not a stable API.
//!
//! They run the client's real decoding paths on bytes instead of an HTTP body: the NDJSON
//! framing, the line decoding and the fold into [`ChatResponseBuilder`] that the run loop does.

use bytes::Bytes;
use futures::StreamExt;
use modu_core::{ChatResponse, ChatResponseBuilder, ModelError};

/// Decodes `pieces` as the body of a streamed `/api/chat` answer, delivered in these pieces
/// (so chunk boundaries fall where the caller puts them), and folds the events as the run
/// loop does: the first error ends the fold.
pub async fn decode_ndjson_stream(pieces: Vec<Vec<u8>>) -> Result<ChatResponse, ModelError> {
    let bytes = futures::stream::iter(pieces.into_iter().map(|p| Ok::<Bytes, reqwest::Error>(Bytes::from(p))));
    let mut stream = Box::pin(crate::client::ndjson_stream(
        Box::pin(bytes),
        "fuzz".to_owned(),
        crate::error::Timeouts::default(),
        std::time::Instant::now(),
        std::sync::Arc::default(),
    ));
    let mut builder = ChatResponseBuilder::default();
    while let Some(event) = stream.next().await {
        builder.push(event?);
    }
    builder.finish()
}
