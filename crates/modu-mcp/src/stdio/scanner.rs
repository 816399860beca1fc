//! [`IdScanner`]: the request an undecodable answer belongs to, found in its raw bytes.

use rmcp::model::RequestId;

/// What a top-level key of a JSON-RPC message is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Key {
    #[default]
    Other,
    Id,
}

/// Finds, in the bytes of one JSON-RPC message fed in any number of pieces, the top-level
/// `id` and whether the message has a top-level `method` (a request or notification),
/// `result`/`error` (an answer) or `jsonrpc` (a JSON-RPC message at all, not a log line). It keeps a few bytes of state whatever the size of the
/// message, needs neither valid UTF-8 nor bounded nesting, and tolerates a message that is
/// not well-formed JSON elsewhere.
#[derive(Clone, Debug, Default)]
pub(crate) struct IdScanner {
    /// Bytes fed so far.
    pub(super) bytes: usize,
    started: bool,
    object: bool,
    done: bool,
    depth: u64,
    in_string: bool,
    escaped: bool,
    expect_key: bool,
    reading_key: bool,
    key: Vec<u8>,
    key_overflow: bool,
    last_key: Key,
    /// The raw bytes of the `id` value while it is being read.
    value: Option<Vec<u8>>,
    value_overflow: bool,
    id_raw: Option<Vec<u8>>,
    has_method: bool,
    has_answer: bool,
    has_jsonrpc: bool,
}

impl IdScanner {
    const MAX_KEY: usize = 8;
    const MAX_ID: usize = 256;

    /// Feeds the next bytes of the message.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.bytes = self.bytes.saturating_add(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if self.done {
                return;
            }
            // Inside a string nothing records (the bulk of a large message): skip to the next
            // quote or backslash.
            if self.in_string && !self.escaped && !self.reading_key && self.value.is_none() {
                while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\\' {
                    i += 1;
                }
                if i == bytes.len() {
                    return;
                }
            }
            let b = bytes[i];
            i += 1;
            if !self.started {
                if b.is_ascii_whitespace() || matches!(b, 0xEF | 0xBB | 0xBF) {
                    continue;
                }
                self.started = true;
                self.object = b == b'{';
                self.done = !self.object;
                self.depth = 1;
                self.expect_key = true;
                continue;
            }
            if self.in_string {
                self.string_byte(b);
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 && self.expect_key {
                        self.expect_key = false;
                        self.reading_key = true;
                        self.key.clear();
                        self.key_overflow = false;
                    } else {
                        self.capture(b);
                    }
                }
                b'{' | b'[' => {
                    self.depth = self.depth.saturating_add(1);
                    self.capture(b);
                }
                b'}' | b']' => {
                    if self.depth <= 1 {
                        self.end_value();
                        self.done = true;
                    } else {
                        self.depth -= 1;
                        self.capture(b);
                    }
                }
                b',' if self.depth == 1 => {
                    self.end_value();
                    self.expect_key = true;
                }
                b':' if self.depth == 1 => {
                    if self.last_key == Key::Id && self.id_raw.is_none() && self.value.is_none() {
                        self.value = Some(Vec::new());
                        self.value_overflow = false;
                    }
                }
                _ => self.capture(b),
            }
        }
    }

    /// Feeds bytes until the message is known to answer a request (see
    /// [`IdScanner::answers_a_request`]); the rest is not looked at.
    pub(crate) fn feed_until_identified(&mut self, bytes: &[u8]) {
        for piece in bytes.chunks(4096) {
            if self.answers_a_request() {
                self.bytes = self.bytes.saturating_add(piece.len());
            } else {
                self.feed(piece);
            }
        }
    }

    fn string_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if self.reading_key {
                self.reading_key = false;
                self.finish_key();
            } else {
                self.capture(b);
            }
            return;
        }
        if self.reading_key {
            if self.key.len() < Self::MAX_KEY {
                self.key.push(b);
            } else {
                self.key_overflow = true;
            }
        } else {
            self.capture(b);
        }
    }

    fn finish_key(&mut self) {
        self.last_key = Key::Other;
        if self.key_overflow {
            return;
        }
        match self.key.as_slice() {
            b"id" => self.last_key = Key::Id,
            b"method" => self.has_method = true,
            b"result" | b"error" => self.has_answer = true,
            b"jsonrpc" => self.has_jsonrpc = true,
            _ => {}
        }
    }

    fn capture(&mut self, b: u8) {
        if let Some(value) = &mut self.value {
            if value.len() < Self::MAX_ID {
                value.push(b);
            } else {
                self.value_overflow = true;
            }
        }
    }

    fn end_value(&mut self) {
        if let Some(value) = self.value.take()
            && !self.value_overflow
        {
            self.id_raw = Some(value);
        }
    }

    /// Whether the message is a JSON object.
    pub(crate) fn is_object(&self) -> bool {
        self.object
    }

    /// Whether it has a top-level `method`.
    pub(crate) fn has_method(&self) -> bool {
        self.has_method
    }

    /// Whether it looks like a JSON-RPC message: a top-level `jsonrpc`, `method`, `result` or
    /// `error` key. Another JSON object (a structured log line such as
    /// `{"level":"info","msg":"…"}`) is noise on stdout, not a message.
    pub(crate) fn is_json_rpc(&self) -> bool {
        self.object && (self.has_jsonrpc || self.has_method || self.has_answer)
    }

    /// The top-level `id`, when one was read whole and is a number or a string.
    pub(crate) fn id(&self) -> Option<RequestId> {
        let raw = self.id_raw.as_deref()?;
        serde_json::from_slice(raw.trim_ascii()).ok()
    }

    /// Whether enough is known to fail the request this message answers: an answer (with
    /// `result` or `error`, no `method`) whose `id` has been read.
    pub(crate) fn answers_a_request(&self) -> bool {
        self.object && self.has_answer && !self.has_method && self.id_raw.is_some() && self.id().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in_pieces(message: &[u8], piece: usize) -> IdScanner {
        let mut s = IdScanner::default();
        for chunk in message.chunks(piece.max(1)) {
            s.feed(chunk);
        }
        s
    }

    fn id_of(message: &[u8]) -> Option<RequestId> {
        let whole = scan_in_pieces(message, message.len());
        for piece in 1..8 {
            assert_eq!(scan_in_pieces(message, piece).id(), whole.id(), "piece size {piece}");
        }
        whole.id()
    }

    #[test]
    fn the_scanner_finds_the_top_level_id_wherever_it_is() {
        assert_eq!(
            id_of(br#"{"jsonrpc":"2.0","id":7,"result":{"id":99}}"#),
            Some(RequestId::Number(7))
        );
        assert_eq!(
            id_of(br#"{"jsonrpc":"2.0","result":{"id":99,"s":"\"id\":5"},"id" : 12 }"#),
            Some(RequestId::Number(12))
        );
        assert_eq!(
            id_of(br#"{"result":[1,{"id":3}],"id":"req-1"}"#),
            Some(RequestId::String("req-1".into()))
        );
        // Invalid UTF-8 and broken JSON elsewhere do not matter.
        assert_eq!(
            id_of(b"{\"id\":4,\"result\":{\"t\":\"\xff\xfe\"},,,"),
            Some(RequestId::Number(4))
        );
        // Nesting far past any recursion limit.
        let mut deep = b"{\"result\":{\"d\":".to_vec();
        deep.extend(std::iter::repeat_n(b'[', 100_000));
        deep.extend(std::iter::repeat_n(b']', 100_000));
        deep.extend(b"},\"id\":5}");
        assert_eq!(id_of(&deep), Some(RequestId::Number(5)));
        // No id, a nested id only, a null id, an id that is an object.
        assert_eq!(id_of(br#"{"result":{"id":1}}"#), None);
        assert_eq!(id_of(br#"{"id":null,"error":{}}"#), None);
        assert_eq!(id_of(br#"{"id":{"x":1},"result":{}}"#), None);
    }

    #[test]
    fn the_scanner_tells_answers_from_requests_and_noise() {
        let answer = scan_in_pieces(br#"{"jsonrpc":"2.0","id":1,"result":{}"#, 3);
        assert!(answer.is_object() && answer.answers_a_request());
        let request = scan_in_pieces(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, 2);
        assert!(request.has_method() && !request.answers_a_request());
        let noise = scan_in_pieces(b"Server started on stdio {\"id\":1}", 4);
        assert!(!noise.is_object() && noise.id().is_none());
        // An answer is identified once its id is read, before the message ends.
        let mut early = IdScanner::default();
        early.feed(br#"{"jsonrpc":"2.0","id":9,"result":{"items":["xxxx"#);
        assert!(early.answers_a_request());
        assert_eq!(early.id(), Some(RequestId::Number(9)));
        // A JSON object with no JSON-RPC key (a structured log line) is not a message; a
        // top-level "jsonrpc", "result" or "error" makes one, a nested one does not.
        let log = scan_in_pieces(br#"{"level":"info","msg":"server started","data":{"jsonrpc":1}}"#, 3);
        assert!(log.is_object() && !log.is_json_rpc() && !log.answers_a_request());
        for message in [
            &br#"{"jsonrpc":"2.0","x":}"#[..],
            br#"{"result":{}}"#,
            br#"{"error":{"code":1}}"#,
            br#"{"method":"ping"}"#,
        ] {
            assert!(
                scan_in_pieces(message, 2).is_json_rpc(),
                "{}",
                String::from_utf8_lossy(message)
            );
        }
        // A key that merely starts with "id" is not the id.
        let idx = scan_in_pieces(br#"{"idx":3,"result":{}}"#, 1);
        assert_eq!(idx.id(), None);
    }
}
