//! [`MockOpenAiServer`]: an OpenAI Chat Completions server on 127.0.0.1 for tests, examples
//! and benchmarks.
//!
//! It speaks the exact wire format: `POST /v1/chat/completions` answers a JSON
//! `chat.completion`, or with `"stream": true` an SSE stream of `chat.completion.chunk`s ending
//! with `data: [DONE]` (and a usage-only chunk when `stream_options.include_usage` is set);
//! `GET /v1/models` lists the model. Replies come from a queue ([`MockReply`]); when the queue
//! is empty a deterministic fallback answers like a well-behaved model: it calls the first
//! offered tool once (arguments synthesised from its schema), then answers in text, or with a
//! JSON instance of the requested schema when the request has a `response_format`.
//!
//! Request bodies up to [`MockOpenAiServer::DEFAULT_BODY_LIMIT`] (32 MiB: room for a 10 MB tool
//! argument even when JSON escaping doubles it) are accepted; a larger one is answered with
//! `413` and an OpenAI error body. [`MockOpenAiServer::body_limit`] changes the limit.
//!
//! Tool-call ids: [`MockReply::ToolCalls`] gives every call a fresh `call_…` id;
//! [`MockReply::ToolCallsWithIds`] sends the ids given (the same id twice, or none at all) to
//! script servers that get them wrong. Streamed, a call's id travels on its first chunk only,
//! with its `type` and name, as OpenAI sends it.

use std::time::Duration;

use serde_json::Value;

mod fallback;
mod reply;
mod server;
mod wire;
pub use fallback::instance_of;
pub use server::MockOpenAiServer;

/// One scripted reply of the mock server.
#[derive(Clone, Debug)]
pub enum MockReply {
    /// A text answer.
    Text(String),
    /// Tool calls: `(name, arguments JSON text)`, each with a fresh unique id.
    ToolCalls(Vec<(String, String)>),
    /// Tool calls with scripted ids: `(id, name, arguments JSON text)`. `None` sends the call
    /// without an `id` field; the same id may be given twice. Streamed, the id is on the first
    /// chunk of each call, as OpenAI sends it.
    ToolCallsWithIds(Vec<(Option<String>, String, String)>),
    /// An error status with a JSON body and extra headers (e.g. `Retry-After`).
    Error {
        /// The HTTP status.
        status: u16,
        /// The body.
        body: Value,
        /// Extra headers.
        headers: Vec<(String, String)>,
    },
    /// A raw SSE body: each entry is sent as `data: <entry>\n\n`, in order. Add `"[DONE]"`
    /// yourself when wanted. With `drop_after`, the connection is cut after that many events.
    RawSse {
        /// The data payloads.
        events: Vec<String>,
        /// Cut the connection after this many events.
        drop_after: Option<usize>,
    },
    /// A raw JSON body with status 200.
    RawJson(Value),
    /// Wait, then answer with the inner reply.
    Delayed(Duration, Box<MockReply>),
}
