//! Server-sent events framing (the `text/event-stream` format of the HTML standard), on bytes.
//!
//! Only what a chat completion stream needs: the `data` of each event (several `data:` lines of
//! one event are joined with `\n`); `event`, `id`, `retry` and comments are read and ignored.
//! Beyond the standard, an `error` field is kept too (llama.cpp's server before 2025's
//! `data: {"error": …}` wrote a failure mid-answer as `error: {…}`): an event with one is
//! handed over as [`Field::Error`], its data dropped.
//! Lines end with LF, CRLF or CR; a leading UTF-8 byte order mark is skipped; an event not
//! ended by a blank line when the body ends is dropped (as the standard says). The outcome
//! does not depend on where the body is cut into network chunks.
//!
//! Unlike a general SSE client it allocates nothing per event once its two buffers (the line
//! that straddles two chunks, the data of the current event) have grown to the size of the
//! largest event: the data is handed to the caller as a borrowed slice.

/// What the caller wants after an event's data.
pub(crate) enum Flow<E> {
    /// Read on.
    Continue,
    /// Stop reading this chunk (the stream is over: `[DONE]`, or an error).
    Stop(E),
}

/// Which field an event's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// `data` (the usual event).
    Data,
    /// `error` (the value of the event's `error` lines, joined as `data` lines are).
    Error,
}

/// An incremental SSE decoder: feed it the body's chunks in order.
#[derive(Default)]
pub(crate) struct SseDecoder {
    /// The start of a line whose end has not arrived yet.
    partial: Vec<u8>,
    /// The data of the current event (each `data:` line followed by `\n`).
    data: Vec<u8>,
    /// The `error` lines of the current event, like `data`.
    error: Vec<u8>,
    /// The last chunk ended with CR: an LF starting the next one belongs to that line end.
    skip_lf: bool,
    /// The first line has been read (the byte order mark is only skipped there).
    started: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseDecoder {
    /// Decodes `chunk`, calling `on_data` with the data of every event it completes, until
    /// `on_data` returns [`Flow::Stop`] (whose value is returned; the rest of the chunk is not
    /// read).
    pub(crate) fn feed<E>(&mut self, mut chunk: &[u8], mut on_data: impl FnMut(Field, &[u8]) -> Flow<E>) -> Option<E> {
        if self.skip_lf {
            if chunk.is_empty() {
                return None;
            }
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        // SIMD search for the next line end: a stream's chunks are mostly JSON between them.
        while let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) {
            let rest = self.after_line_end(chunk, end);
            if self.partial.is_empty()
                && self.data.is_empty()
                && self.error.is_empty()
                && self.started
                && let (b"data", value) = field(&chunk[..end])
                && matches!(rest.first(), Some(b'\n' | b'\r'))
            {
                let after = self.after_line_end(rest, 0);
                // The usual event, one `data:` line with its blank line right after it in this
                // chunk: its data is handed over in place, not copied.
                if let Flow::Stop(e) = on_data(Field::Data, value) {
                    return Some(e);
                }
                chunk = after;
                continue;
            }
            let stop = if self.partial.is_empty() {
                self.line(&chunk[..end], &mut on_data)
            } else {
                let mut partial = std::mem::take(&mut self.partial);
                partial.extend_from_slice(&chunk[..end]);
                let stop = self.line(&partial, &mut on_data);
                partial.clear();
                self.partial = partial;
                stop
            };
            if stop.is_some() {
                return stop;
            }
            chunk = rest;
        }
        self.partial.extend_from_slice(chunk);
        None
    }

    /// The bytes after the line end (LF, CRLF or CR) at `chunk[end]`; a CR that ends the
    /// chunk leaves an LF starting the next one to be skipped.
    fn after_line_end<'a>(&mut self, chunk: &'a [u8], end: usize) -> &'a [u8] {
        match chunk.get(end..) {
            Some([b'\r']) => {
                self.skip_lf = true;
                &[]
            }
            Some([b'\r', b'\n', rest @ ..]) => rest,
            Some([_, rest @ ..]) => rest,
            _ => &[],
        }
    }

    fn line<E>(&mut self, mut line: &[u8], on_data: &mut impl FnMut(Field, &[u8]) -> Flow<E>) -> Option<E> {
        if !self.started {
            self.started = true;
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            // The end of an event: dispatch its error or its data, without the last `\n`.
            let (field, value) = if !self.error.is_empty() {
                (Field::Error, &mut self.error)
            } else if !self.data.is_empty() {
                (Field::Data, &mut self.data)
            } else {
                return None;
            };
            value.pop();
            let flow = on_data(field, value);
            self.data.clear();
            self.error.clear();
            return match flow {
                Flow::Continue => None,
                Flow::Stop(e) => Some(e),
            };
        }
        if line[0] == b':' {
            return None; // a comment
        }
        let (name, value) = field(line);
        let buffer = match name {
            b"data" => &mut self.data,
            b"error" => &mut self.error,
            _ => return None,
        };
        buffer.extend_from_slice(value);
        buffer.push(b'\n');
        None
    }
}

/// A line's field name and value (one leading space of the value dropped; no colon: the whole
/// line is the name and the value is empty).
fn field(line: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b':', line) {
        Some(colon) => {
            let value = &line[colon + 1..];
            (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
        }
        None => (line, &b""[..]),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The events of `body` delivered in `pieces` (cut at these byte offsets).
    fn events(body: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
            d.feed::<()>(&body[start..cut], |field, data| {
                let data = String::from_utf8(data.to_vec()).unwrap();
                out.push(match field {
                    Field::Data => data,
                    Field::Error => format!("error {data}"),
                });
                Flow::Continue
            });
            start = cut;
        }
        out
    }

    #[test]
    fn the_standard_examples() {
        let body = b"data: This is the first message.\n\ndata: This is the second message, it\ndata: has two lines.\n\ndata: This is the third message.\n\n";
        assert_eq!(
            events(body, &[]),
            vec![
                "This is the first message.",
                "This is the second message, it\nhas two lines.",
                "This is the third message."
            ]
        );
        let body = b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\n: a comment\nid: 7\nretry: 10\ndata:no space\n\n";
        assert_eq!(events(body, &[]), vec!["73857293", "2153", "no space"]);
        // `data` without a colon is an empty data line; two leading spaces keep one.
        assert_eq!(events(b"data\ndata\n\ndata:  x\n\n", &[]), vec!["\n", " x"]);
        // An event without data is not dispatched; neither is one cut by the end of the body.
        assert_eq!(events(b"event: x\n\ndata: cut", &[]), Vec::<String>::new());
    }

    #[test]
    fn line_ends_and_bom_wherever_the_body_is_cut() {
        let body = b"\xEF\xBB\xBFdata: a\r\n\r\ndata: b\r\rdata: c\n\ndata: d\r\ndata: e\r\n\r\n";
        let want = vec!["a", "b", "c", "d\ne"];
        assert_eq!(events(body, &[]), want);
        for cut in 0..=body.len() {
            assert_eq!(events(body, &[cut]), want, "cut at {cut}");
        }
        for a in 0..body.len() {
            for b in a..=body.len() {
                assert_eq!(events(body, &[a, b]), want, "cut at {a} and {b}");
            }
        }
        // A BOM is only skipped at the start.
        assert_eq!(events(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n", &[]), vec!["a"]);
    }

    #[test]
    fn single_line_events_read_in_place_match_the_copied_ones() {
        // After the first line, a one-line event whose blank line follows in the same chunk is
        // handed over without a copy; cut anywhere, the events are the same.
        let body = b": keep-alive\n\ndata: {\"a\":1}\n\ndata:{\"b\":2}\r\n\r\ndata: x\r\rdata\n\ndata: [DONE]\n\n";
        let want = vec![r#"{"a":1}"#, r#"{"b":2}"#, "x", "", "[DONE]"];
        assert_eq!(events(body, &[]), want);
        for a in 0..body.len() {
            for b in a..=body.len() {
                assert_eq!(events(body, &[a, b]), want, "cut at {a} and {b}");
            }
        }
    }

    #[test]
    fn error_fields_wherever_the_body_is_cut() {
        // llama.cpp's `error: {…}` event between data events; an event with both keeps the error.
        let body = b"data: a\n\nerror: {\"code\":500}\n\ndata: x\nerror: e\r\n\r\ndata: [DONE]\n\n";
        let want = vec!["a", "error {\"code\":500}", "error e", "[DONE]"];
        assert_eq!(events(body, &[]), want);
        for a in 0..body.len() {
            for b in a..=body.len() {
                assert_eq!(events(body, &[a, b]), want, "cut at {a} and {b}");
            }
        }
    }

    #[test]
    fn stop_ends_the_chunk() {
        let mut d = SseDecoder::default();
        let mut seen = Vec::new();
        let stop = d.feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\n", |_, data| {
            seen.push(data.to_vec());
            if data == b"2" {
                Flow::Stop("done")
            } else {
                Flow::Continue
            }
        });
        assert_eq!(stop, Some("done"));
        assert_eq!(seen, vec![b"1".to_vec(), b"2".to_vec()]);
    }
}
