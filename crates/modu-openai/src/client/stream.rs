//! The decoding of a streamed answer: the state that turns server-sent events
//! (`chat.completion.chunk`s) into [`ChatEvent`]s, and the drain of the body after `[DONE]`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use modu_core::{ChatEvent, ModelError};

use super::OpenAiClient;
use crate::error::stream_error;
use crate::sse::{Field, Flow, SseDecoder};
use crate::wire::{self, WireChunk};

/// How long a stream waits, after `[DONE]`, for the end of its body (normally already on its
/// way: the end of the chunked encoding), and how much more it reads while waiting.
const DRAIN_WAIT: Duration = Duration::from_millis(200);
const DRAIN_BYTES: usize = 64 * 1024;

enum Phase {
    Reading,
    /// `[DONE]` was read: drain the rest of the body, then end.
    Draining,
    Over,
}

/// Why the decoding of a chunk stopped.
enum Stop {
    Done,
    Failed(ModelError),
}

struct SseState<S> {
    bytes: Pin<Box<S>>,
    decoder: SseDecoder,
    pending: VecDeque<ChatEvent>,
    /// An error to return once the events decoded before it are out.
    failed: Option<ModelError>,
    saw_finish: bool,
    phase: Phase,
    client: OpenAiClient,
    /// When the request was sent (for naming the timeout that fired).
    started: Instant,
}

/// Reads `chat.completion.chunk` events until `[DONE]`, then reads what is left of the body
/// (a bounded drain: [`DRAIN_BYTES`], [`DRAIN_WAIT`]) so the connection returns to the pool.
///
/// - An event that is not valid JSON ends the stream with [`ModelError::InvalidResponse`].
/// - An `{"error": …}` event ends it with the mapped error, and so does an `error:` field
///   (llama.cpp's server before 2025), even when `[DONE]` follows it.
/// - A broken connection ends it with [`ModelError::Transport`].
/// - A body that ends without `[DONE]` is accepted when a `finish_reason` was seen (the answer
///   is complete; only the terminator is missing) and is a [`ModelError::Transport`] otherwise
///   (the answer was cut).
///
/// Its errors have the client's secrets masked.
pub(crate) fn sse_stream<S, B>(
    bytes: Pin<Box<S>>,
    client: OpenAiClient,
    started: Instant,
) -> impl Stream<Item = Result<ChatEvent, ModelError>> + Send
where
    S: Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
    B: AsRef<[u8]>,
{
    let state = SseState {
        bytes,
        decoder: SseDecoder::default(),
        pending: VecDeque::new(),
        failed: None,
        saw_finish: false,
        phase: Phase::Reading,
        client,
        started,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(ev) = st.pending.pop_front() {
                return Some((Ok(ev), st));
            }
            if let Some(err) = st.failed.take() {
                st.phase = Phase::Over;
                let err = st.client.redact(err);
                return Some((Err(err), st));
            }
            match st.phase {
                Phase::Reading => {}
                Phase::Draining => {
                    st.phase = Phase::Over;
                    drain(st.bytes.as_mut()).await;
                    return None;
                }
                Phase::Over => return None,
            }
            let err = match st.bytes.next().await {
                None => {
                    st.phase = Phase::Over;
                    if st.saw_finish {
                        tracing::debug!("SSE stream ended without [DONE] after a finish_reason; accepted");
                        return None;
                    }
                    ModelError::Transport {
                        message: "the stream ended before the answer finished (no finish_reason, no [DONE])".into(),
                        source: None,
                    }
                }
                Some(Err(e)) => {
                    st.phase = Phase::Over;
                    st.client.transport_error(e, st.started, "reading the event stream")
                }
                Some(Ok(chunk)) => {
                    let SseState {
                        decoder,
                        pending,
                        saw_finish,
                        client,
                        ..
                    } = &mut st;
                    match decoder.feed(chunk.as_ref(), |field, data| {
                        on_event(field, data, pending, saw_finish, client)
                    }) {
                        None => continue,
                        Some(Stop::Done) => {
                            st.phase = Phase::Draining;
                            continue;
                        }
                        Some(Stop::Failed(err)) => {
                            st.failed = Some(err);
                            continue;
                        }
                    }
                }
            };
            let err = st.client.redact(err);
            return Some((Err(err), st));
        }
    })
}

/// One event's data: a chunk's events into `pending`, or why the stream stops.
fn on_event(
    field: Field,
    data: &[u8],
    pending: &mut VecDeque<ChatEvent>,
    saw_finish: &mut bool,
    client: &OpenAiClient,
) -> Flow<Stop> {
    let data = data.trim_ascii();
    let i = client.inner();
    if field == Field::Error {
        // llama.cpp: `error: {"code":500,"message":…,"type":"server_error"}`; a value that is
        // not JSON is the message.
        let error = match serde_json::from_slice::<serde_json::Value>(data) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            _ if data.is_empty() => serde_json::Value::from("the server reported an error in the stream"),
            _ => serde_json::Value::from(String::from_utf8_lossy(data)),
        };
        return Flow::Stop(Stop::Failed(stream_error(&error, &i.model, &i.redactor, &i.chat_url)));
    }
    if data.is_empty() {
        return Flow::Continue;
    }
    if data == b"[DONE]" {
        return Flow::Stop(Stop::Done);
    }
    let chunk: WireChunk = match serde_json::from_slice(data) {
        Ok(c) => c,
        Err(e) => {
            // Masked before the cut: a cut secret would leak its first part.
            let shown: String = i
                .redactor
                .text(&String::from_utf8_lossy(data))
                .chars()
                .take(200)
                .collect();
            return Flow::Stop(Stop::Failed(ModelError::invalid_response(format!(
                "invalid JSON in a stream chunk ({e}): {shown}"
            ))));
        }
    };
    if let Some(error) = &chunk.error {
        return Flow::Stop(Stop::Failed(stream_error(error, &i.model, &i.redactor, &i.chat_url)));
    }
    if chunk.is_error_object {
        // vLLM: {"object": "error", "message": …, "type": …, "code": 400}
        let value: serde_json::Value = serde_json::from_slice(data).unwrap_or_default();
        return Flow::Stop(Stop::Failed(stream_error(&value, &i.model, &i.redactor, &i.chat_url)));
    }
    wire::chunk_events(chunk, pending, saw_finish);
    Flow::Continue
}

/// Reads what is left of a body after `[DONE]`: hyper returns a connection to the pool only
/// once its response body has ended, and a body dropped before its end closes the connection
/// (a new TCP connection for every streamed request). The end is normally already there; the
/// wait is bounded ([`DRAIN_WAIT`], [`DRAIN_BYTES`]) for servers that keep the body open.
async fn drain<S, B>(mut bytes: Pin<&mut S>)
where
    S: Stream<Item = Result<B, reqwest::Error>>,
    B: AsRef<[u8]>,
{
    let mut read = 0usize;
    let mut yielded = false;
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        loop {
            match bytes.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(b))) => {
                    read += b.as_ref().len();
                    if read > DRAIN_BYTES {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(()),
                Poll::Pending => {
                    if timer.is_none() && tokio::runtime::Handle::try_current().is_err() {
                        return Poll::Ready(()); // no runtime to time the wait
                    }
                    // The end is usually one step of the connection's task away (this poll
                    // woke it): let that task run once before arming the timer. Registering a
                    // timer wakes the runtime's driver (a syscall, and one more park of the
                    // worker), which every streamed request would otherwise pay.
                    if !yielded {
                        yielded = true;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(DRAIN_WAIT)));
                    return t.as_mut().poll(cx);
                }
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use modu_core::{ChatResponse, ChatResponseBuilder, FinishReason};

    /// Polls a future that never waits (the bytes are in memory): no runtime needed, as the
    /// fuzz targets run it.
    fn block_on<F: std::future::Future>(fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    fn decode(pieces: Vec<Vec<u8>>) -> Result<ChatResponse, ModelError> {
        let client = OpenAiClient::new("http://127.0.0.1:9/v1", "m").unwrap();
        let bytes = futures::stream::iter(pieces.into_iter().map(Ok::<Vec<u8>, reqwest::Error>));
        block_on(async move {
            let mut stream = Box::pin(sse_stream(Box::pin(bytes), client, Instant::now()));
            let mut builder = ChatResponseBuilder::default();
            while let Some(event) = stream.next().await {
                builder.push(event?);
            }
            builder.finish()
        })
    }

    #[test]
    fn a_stream_decodes_the_same_wherever_the_network_cuts_it() {
        let chunk = |delta: &str, finish: &str| {
            format!(
                r#"{{"id":"c","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
            )
        };
        let body = format!(
            "\u{feff}data: {}\n\ndata: {}\r\n\r\n: keep-alive\n\ndata: {}\r\rdata: {}\n\ndata: [DONE]\n\ndata: ignored\n\n",
            chunk(r#"{"role":"assistant","content":""}"#, "null"),
            chunk(r#"{"content":"héllo"}"#, "null"),
            chunk(r#"{"content":" wörld"}"#, r#""stop""#),
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
        )
        .into_bytes();
        let whole = decode(vec![body.clone()]).unwrap();
        assert_eq!(whole.message.text(), "héllo wörld");
        assert_eq!(whole.finish_reason, Some(FinishReason::Stop));
        assert_eq!(whole.usage.total_tokens, 5);
        for cut in 0..=body.len() {
            let split = decode(vec![body[..cut].to_vec(), body[cut..].to_vec()]).unwrap();
            assert_eq!(split, whole, "cut at {cut}");
        }
    }

    #[test]
    fn events_before_a_bad_chunk_come_first_then_the_error() {
        let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {not json\n\n".to_vec();
        let client = OpenAiClient::new("http://127.0.0.1:9/v1", "m").unwrap();
        let bytes = futures::stream::iter([Ok::<Vec<u8>, reqwest::Error>(body)]);
        let items: Vec<_> = block_on(sse_stream(Box::pin(bytes), client, Instant::now()).collect());
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].as_ref().unwrap(), &ChatEvent::TextDelta { text: "a".into() });
        assert!(
            matches!(items[1], Err(ModelError::InvalidResponse { .. })),
            "{:?}",
            items[1]
        );
    }
}
