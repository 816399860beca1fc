//! The decoding of a streamed answer: the state that splits Ollama's NDJSON body into lines
//! and turns them into [`ChatEvent`]s, up to the `done: true` line.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use modu_core::{ChatEvent, ModelError};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, Decoder};

use crate::error::{Timeouts, stream_error, transport_error};
use crate::wire::{self, LineState, WireLine};
use modu_core::redact::Redactor;

/// The longest NDJSON line read (16 MiB; a line is one token, or a whole tool call): a server
/// that sends more without a newline fails the answer instead of filling the memory.
const MAX_LINE_BYTES: usize = 16 << 20;

struct NdjsonState<S> {
    bytes: Pin<Box<S>>,
    buffer: BytesMut,
    /// Splits the buffer at newlines (it remembers how far it searched, and the length cap).
    framing: AnyDelimiterCodec,
    pending: VecDeque<ChatEvent>,
    lines: LineState,
    finished: bool,
    model: String,
    timeouts: Timeouts,
    /// When the request was sent (for naming the timeout that fired).
    started: Instant,
    redactor: Arc<Redactor>,
}

enum Step {
    Event(ChatEvent),
    Fail(ModelError),
    End,
}

impl<S> NdjsonState<S> {
    /// Parses every complete line in the buffer, up to the `done: true` line (what follows it is
    /// ignored, as when it arrives in a later chunk).
    fn drain_lines(&mut self) -> Option<ModelError> {
        while !self.lines.done {
            let line = match self.framing.decode(&mut self.buffer) {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                    return Some(ModelError::invalid_response(format!(
                        "an NDJSON line is longer than {MAX_LINE_BYTES} bytes"
                    )));
                }
                Err(AnyDelimiterCodecError::Io(e)) => return Some(ModelError::invalid_response(e.to_string())),
            };
            if let Some(e) = self.parse_line(&line) {
                return Some(e);
            }
        }
        None
    }

    fn parse_line(&mut self, raw: &[u8]) -> Option<ModelError> {
        let text = String::from_utf8_lossy(raw);
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        let line: WireLine = match serde_json::from_str(text) {
            Ok(l) => l,
            Err(e) => {
                // Masked before the cut: a cut secret would leak its first part.
                let shown: String = self.redactor.text(text).chars().take(200).collect();
                return Some(ModelError::invalid_response(format!(
                    "invalid JSON in an NDJSON line ({e}): {shown}"
                )));
            }
        };
        if let Some(error) = &line.error {
            return Some(stream_error(error, &self.model, &self.redactor));
        }
        let mut out = Vec::new();
        wire::line_events(line, &mut self.lines, &mut out);
        self.pending.extend(out);
        None
    }
}

/// Reads NDJSON lines until the `done: true` line. A body that ends before it is a
/// [`ModelError::Transport`]; a line that is not JSON, or longer than [`MAX_LINE_BYTES`], an
/// [`ModelError::InvalidResponse`]. Lines are decoded lossily (invalid UTF-8 becomes U+FFFD).
pub(crate) fn ndjson_stream<S>(
    bytes: Pin<Box<S>>,
    model: String,
    timeouts: Timeouts,
    started: Instant,
    redactor: Arc<Redactor>,
) -> impl Stream<Item = Result<ChatEvent, ModelError>> + Send
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    let state = NdjsonState {
        bytes,
        buffer: BytesMut::new(),
        framing: AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), b"\n".to_vec(), MAX_LINE_BYTES),
        pending: VecDeque::new(),
        lines: LineState::default(),
        finished: false,
        model,
        timeouts,
        started,
        redactor,
    };
    futures::stream::unfold(state, |mut st| async move {
        let step = loop {
            if let Some(ev) = st.pending.pop_front() {
                break Step::Event(ev);
            }
            if st.finished || st.lines.done {
                break Step::End;
            }
            match st.bytes.next().await {
                Some(Ok(chunk)) => {
                    st.buffer.extend_from_slice(&chunk);
                    if let Some(e) = st.drain_lines() {
                        break Step::Fail(e);
                    }
                }
                Some(Err(e)) => {
                    break Step::Fail(transport_error(
                        e,
                        &st.timeouts,
                        st.started,
                        "reading the NDJSON stream",
                    ));
                }
                None => {
                    // A last line without a trailing newline.
                    let rest = std::mem::take(&mut st.buffer);
                    if let Some(e) = st.parse_line(&rest) {
                        break Step::Fail(e);
                    }
                    if st.lines.done {
                        continue;
                    }
                    break Step::Fail(ModelError::Transport {
                        message: "the stream ended before the answer finished (no `done: true` line)".into(),
                        source: None,
                    });
                }
            }
        };
        match step {
            Step::Event(ev) => Some((Ok(ev), st)),
            Step::Fail(e) => {
                st.finished = true;
                st.pending.clear();
                Some((Err(e), st))
            }
            Step::End => None,
        }
    })
}
