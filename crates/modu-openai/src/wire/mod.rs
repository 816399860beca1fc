//! The Chat Completions wire format: request bodies out ([`request`]), responses and stream
//! chunks in ([`response`]).

mod request;
mod response;

pub use request::EmptyToolCallContent;
pub(crate) use request::{MessageOptions, WireMessages, WireTools, encode_request, wire_messages, wire_tools};
pub(crate) use response::{WireChunk, WireCompletion, chunk_events, completion_response};
