//! The stdio transport: a child process in its own process group speaking newline-delimited
//! JSON-RPC over stdin/stdout.
//!
//! rmcp's own child-process transport drops a line it cannot decode (invalid UTF-8, JSON
//! nested deeper than serde_json's recursion limit, a line over its 16 MiB cap, a shape that
//! is not a JSON-RPC message) after logging it, so the request that line answered waits for
//! its timeout. This transport reads the lines itself and, when one cannot be decoded, finds
//! the request it answers with [`IdScanner`] (a byte scanner that needs neither valid UTF-8
//! nor bounded nesting, and works on a line too large to keep) and fails that request at once
//! with an error response it makes up; [`DecodeFailures`] tells the session which errors are
//! such made-up ones. An answer that names no request it can find, or the end of the server's
//! output, fails every request in flight and ends the session.

use std::collections::{HashMap, HashSet, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

/// The largest message (one line) read from a stdio server: 16 MiB, rmcp's own limit for
/// stdio lines and for streamable-HTTP messages. A longer answer fails its request.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How long closing waits for the server to exit after stdin is closed, and again after
/// SIGTERM, before killing its process group.
const EXIT_WAIT: Duration = Duration::from_secs(3);

/// SIGTERM (15 on every Unix this crate runs on).
#[cfg(unix)]
const SIGTERM: i32 = 15;

/// How long the end of a server's output waits for the server to exit, to report its exit
/// status.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(250);

/// The last lines a stdio server wrote to its stderr, redacted: what an error shows when the
/// server dies before it answers `initialize`.
#[derive(Debug, Default)]
pub(crate) struct StderrTail(Mutex<VecDeque<String>>);

impl StderrTail {
    /// At most this many lines are kept...
    pub(crate) const MAX_LINES: usize = 20;
    /// ... and at most this many bytes of them (the newest first).
    pub(crate) const MAX_BYTES: usize = 2048;

    /// Adds a line (already redacted); drops the oldest lines beyond the limits.
    pub(crate) fn push(&self, line: &str) {
        let line = line.trim_end();
        if line.is_empty() {
            return;
        }
        let mut line = line.to_owned();
        if line.len() > Self::MAX_BYTES {
            let mut cut = Self::MAX_BYTES - '…'.len_utf8();
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push('…');
        }
        let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        lines.push_back(line);
        while lines.len() > Self::MAX_LINES || lines.iter().map(|l| l.len() + 1).sum::<usize>() > Self::MAX_BYTES + 1 {
            lines.pop_front();
        }
    }

    /// The lines kept, one per line; `None` when the server wrote nothing.
    pub(crate) fn text(&self) -> Option<String> {
        let lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        (!lines.is_empty()).then(|| lines.iter().map(String::as_str).collect::<Vec<_>>().join("\n"))
    }
}

/// Why a request failed without a decodable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DecodeFailure {
    /// `true` when the session ended (the answer could not be attributed, or the server's
    /// output ended); `false` when only this request's answer was undecodable.
    pub(crate) session_broken: bool,
    /// What happened, for the error message (may contain server text: redact before use).
    pub(crate) message: String,
}

/// The requests the transport failed itself, by id: the session looks a JSON-RPC error up
/// here to tell a made-up error from one the server sent.
#[derive(Debug, Default)]
pub(crate) struct DecodeFailures(Mutex<HashMap<RequestId, DecodeFailure>>);

impl DecodeFailures {
    /// Never more than this many unclaimed entries (failures of requests nobody looks up,
    /// such as `tools/list`, would otherwise pile up).
    const MAX_ENTRIES: usize = 256;

    fn record(&self, id: RequestId, failure: DecodeFailure) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= Self::MAX_ENTRIES {
            map.clear();
        }
        map.insert(id, failure);
    }

    /// Removes and returns one failure, whichever (before `initialize` is answered, the only
    /// request in flight is `initialize`).
    pub(crate) fn take_any(&self) -> Option<DecodeFailure> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let id = map.keys().next()?.clone();
        map.remove(&id)
    }

    /// Removes and returns the failure recorded for `id`.
    pub(crate) fn take(&self, id: &RequestId) -> Option<DecodeFailure> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(id)
    }
}

/// Where the transport leaves the server's exit status when it sees the server exit (at the
/// end of its output, or when the transport is dropped after it exited).
pub(crate) type ExitStatusSlot = Arc<Mutex<Option<std::process::ExitStatus>>>;

/// Kills the server's process group when dropped without a graceful close.
struct ChildGuard(Option<Box<dyn ChildWrapper>>, ExitStatusSlot);

impl ChildGuard {
    fn record(&self, status: std::process::ExitStatus) {
        *self.1.lock().unwrap_or_else(PoisonError::into_inner) = Some(status);
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            // A server that exited by itself: keep its status for the error that follows.
            if let Ok(Some(status)) = child.try_wait() {
                self.record(status);
            }
            if let Err(e) = child.start_kill() {
                tracing::debug!(error = %e, "killing an MCP server process group failed");
            }
            // Reap it (and its group) so no zombie stays behind.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let _ = child.wait().await;
                });
            }
        }
    }
}

/// Waits up to [`EXIT_WAIT`] for the child to exit; `true` when it did.
async fn exited(child: &mut Box<dyn ChildWrapper>) -> bool {
    matches!(tokio::time::timeout(EXIT_WAIT, child.wait()).await, Ok(Ok(_)))
}

enum ReadOutcome {
    /// A whole line is read: in `line`, or scanned in `oversized`.
    Line,
    /// An oversized line's answer is identified before its end: report it now.
    OversizedIdentified,
    Eof,
    Io(std::io::Error),
}

/// The state of a line longer than the limit: its bytes are scanned, not kept.
struct Oversized {
    scan: IdScanner,
    reported: bool,
}

/// A stdio MCP server process and its JSON-RPC stream.
pub(crate) struct StdioTransport {
    server: Arc<str>,
    child: ChildGuard,
    stdout: BufReader<ChildStdout>,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    line: Vec<u8>,
    max_line: usize,
    oversized: Option<Oversized>,
    /// Requests sent and not answered yet.
    pending: Arc<Mutex<HashSet<RequestId>>>,
    failures: Arc<DecodeFailures>,
    /// Made-up error responses still to hand to rmcp.
    outbox: VecDeque<ServerJsonRpcMessage>,
    ended: bool,
}

impl StdioTransport {
    /// Spawns `command` with piped stdin, stdout and stderr; returns the transport, the child's
    /// process id and its stderr.
    pub(crate) fn spawn(
        mut command: CommandWrap,
        server: &str,
        failures: Arc<DecodeFailures>,
        exit: ExitStatusSlot,
    ) -> std::io::Result<(Self, Option<u32>, Option<ChildStderr>)> {
        command
            .command_mut()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn()?;
        let pid = child.id();
        let (Some(stdin), Some(stdout)) = (child.stdin().take(), child.stdout().take()) else {
            let _ = child.start_kill();
            return Err(std::io::Error::other("the server's stdin or stdout is not piped"));
        };
        let stderr = child.stderr().take();
        let transport = StdioTransport {
            server: Arc::from(server),
            child: ChildGuard(Some(child), exit),
            stdout: BufReader::with_capacity(64 * 1024, stdout),
            stdin: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            line: Vec::new(),
            max_line: MAX_MESSAGE_BYTES,
            oversized: None,
            pending: Arc::new(Mutex::new(HashSet::new())),
            failures,
            outbox: VecDeque::new(),
            ended: false,
        };
        Ok((transport, pid, stderr))
    }

    /// Sets the largest line accepted (tests).
    #[cfg(test)]
    fn with_max_line(mut self, bytes: usize) -> Self {
        self.max_line = bytes;
        self
    }

    /// The server's exit status, when it exits within [`EXIT_STATUS_WAIT`].
    async fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.child.0.as_mut()?;
        match tokio::time::timeout(EXIT_STATUS_WAIT, child.wait()).await {
            Ok(Ok(status)) => {
                self.child.record(status);
                Some(status)
            }
            _ => None,
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads up to the end of a line. Cancel-safe: bytes move from the reader into `line` (or
    /// the scanner) with no await in between, so a cancelled read resumes where it stopped.
    async fn read_line(&mut self) -> ReadOutcome {
        loop {
            let (consumed, line_done) = {
                let available = match self.stdout.fill_buf().await {
                    Ok(available) => available,
                    Err(e) => return ReadOutcome::Io(e),
                };
                if available.is_empty() {
                    return ReadOutcome::Eof;
                }
                let newline = find_newline(available);
                let chunk = &available[..newline.unwrap_or(available.len())];
                match &mut self.oversized {
                    // Identified already: the rest is only skipped.
                    Some(o) if o.reported => {}
                    Some(o) => o.scan.feed_until_identified(chunk),
                    None if self.line.len().saturating_add(chunk.len()) > self.max_line => {
                        let mut scan = IdScanner::default();
                        scan.feed_until_identified(&self.line);
                        scan.feed_until_identified(chunk);
                        self.line = Vec::new();
                        self.oversized = Some(Oversized { scan, reported: false });
                    }
                    None => self.line.extend_from_slice(chunk),
                }
                (newline.map_or(available.len(), |i| i + 1), newline.is_some())
            };
            self.stdout.consume(consumed);
            if line_done {
                return ReadOutcome::Line;
            }
            if let Some(o) = &mut self.oversized
                && !o.reported
                && o.scan.answers_a_request()
            {
                o.reported = true;
                return ReadOutcome::OversizedIdentified;
            }
        }
    }

    /// Decodes one complete line; undecodable lines fail their request (or the session).
    fn decode(&mut self, line: &[u8]) -> Option<ServerJsonRpcMessage> {
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(line) {
            Ok(message) => {
                let answered = match &message {
                    JsonRpcMessage::Response(r) => Some(&r.id),
                    JsonRpcMessage::Error(e) => e.id.as_ref(),
                    _ => None,
                };
                if let Some(id) = answered {
                    self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
                }
                Some(message)
            }
            Err(e) => {
                let mut scan = IdScanner::default();
                scan.feed(line);
                let problem = if std::str::from_utf8(line).is_err() {
                    "is not valid UTF-8".to_owned()
                } else if e.to_string().starts_with("recursion limit exceeded") {
                    "is nested more than 128 levels deep".to_owned()
                } else {
                    let mut detail = e.to_string();
                    if detail.len() > 200 {
                        let mut cut = 200;
                        while !detail.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        detail.truncate(cut);
                    }
                    format!("is not a valid JSON-RPC message ({detail})")
                };
                self.undecodable(&scan, &problem, line.len());
                None
            }
        }
    }

    /// Handles a line that could not be decoded.
    fn undecodable(&mut self, scan: &IdScanner, problem: &str, bytes: usize) {
        let server = &*self.server;
        if !scan.is_object() {
            // Noise on stdout (a banner, a stray print): the other SDKs ignore it too.
            tracing::warn!(server, bytes, "MCP server wrote a line that is not JSON-RPC; ignored");
            return;
        }
        if scan.has_method() {
            tracing::warn!(
                server,
                bytes,
                "MCP server sent a request or notification that {problem}; ignored"
            );
            return;
        }
        match scan.id() {
            Some(id) => {
                if self.pending().remove(&id) {
                    tracing::warn!(server, %id, bytes, "MCP server's answer {problem}; failing the request");
                    self.fail(id, false, format!("the server's answer {problem}"));
                } else {
                    tracing::warn!(server, %id, bytes, "MCP server's answer to a request nobody waits for {problem}; ignored");
                }
            }
            None => {
                tracing::error!(
                    server,
                    bytes,
                    "MCP server sent an answer that {problem} and names no request; closing the session"
                );
                self.end(format!(
                    "the server sent an answer that {problem} and names no request, so the session was closed"
                ));
            }
        }
    }

    /// Fails request `id` with a made-up error response.
    fn fail(&mut self, id: RequestId, session_broken: bool, message: String) {
        self.failures.record(
            id.clone(),
            DecodeFailure {
                session_broken,
                message: message.clone(),
            },
        );
        self.outbox.push_back(ServerJsonRpcMessage::error(
            ErrorData::internal_error(message, None),
            Some(id),
        ));
    }

    /// Fails every request in flight and ends the stream.
    fn end(&mut self, message: String) {
        let pending: Vec<RequestId> = self.pending().drain().collect();
        for id in pending {
            self.fail(id, true, message.clone());
        }
        self.ended = true;
    }
}

impl Transport<RoleClient> for StdioTransport {
    type Error = std::io::Error;

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            JsonRpcMessage::Request(request) => {
                self.pending().insert(request.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(cancelled) = &n.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.pending().remove(id);
                }
            }
            _ => {}
        }
        let stdin = Arc::clone(&self.stdin);
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            let mut guard = stdin.lock().await;
            let Some(writer) = guard.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the server's stdin is closed",
                ));
            };
            writer.write_all(&bytes).await?;
            writer.flush().await
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            if let Some(message) = self.outbox.pop_front() {
                return Some(message);
            }
            if self.ended {
                return None;
            }
            match self.read_line().await {
                ReadOutcome::Line => match self.oversized.take() {
                    Some(o) if o.reported => {}
                    Some(o) => self.undecodable(&o.scan, &too_large(self.max_line), o.scan.bytes),
                    None => {
                        let mut line = std::mem::take(&mut self.line);
                        let decoded = self.decode(&line);
                        // Keep the buffer for the next line, unless a large message grew it.
                        if line.capacity() <= 1024 * 1024 {
                            line.clear();
                            self.line = line;
                        }
                        if let Some(message) = decoded {
                            return Some(message);
                        }
                    }
                },
                ReadOutcome::OversizedIdentified => {
                    if let Some(o) = self.oversized.take() {
                        let problem = too_large(self.max_line);
                        self.undecodable(&o.scan, &problem, o.scan.bytes);
                        // Keep discarding the rest of the line.
                        self.oversized = Some(o);
                    }
                }
                ReadOutcome::Eof => {
                    let message = match self.exit_status().await {
                        Some(status) => format!("the server closed its output and exited ({status})"),
                        None => "the server closed its output (it may have exited)".to_owned(),
                    };
                    self.end(message);
                }
                ReadOutcome::Io(e) => {
                    tracing::warn!(server = &*self.server, error = %e, "reading from an MCP server failed");
                    self.end(format!("reading from the server failed: {e}"));
                }
            }
        }
    }

    /// Closes stdin, waits for the server to exit, then sends SIGTERM to its process group,
    /// waits again, then kills the group.
    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.stdin.lock().await.take());
        let Some(child) = self.child.0.as_mut() else {
            return Ok(());
        };
        if exited(child).await {
            self.child.0 = None;
            return Ok(());
        }
        #[cfg(unix)]
        match child.signal(SIGTERM) {
            Ok(()) => {
                if exited(child).await {
                    self.child.0 = None;
                    return Ok(());
                }
            }
            Err(e) => tracing::debug!(error = %e, "SIGTERM to an MCP server failed"),
        }
        let result = Box::into_pin(child.kill()).await;
        self.child.0 = None;
        result
    }
}

/// The index of the first `\n` (a plain loop: fast even in unoptimised test builds).
fn find_newline(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn too_large(max: usize) -> String {
    format!("is larger than the {} MiB message limit", max / (1024 * 1024))
}

/// What a top-level key of a JSON-RPC message is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Key {
    #[default]
    Other,
    Id,
}

/// Finds, in the bytes of one JSON-RPC message fed in any number of pieces, the top-level
/// `id` and whether the message has a top-level `method` (a request or notification) or
/// `result`/`error` (an answer). It keeps a few bytes of state whatever the size of the
/// message, needs neither valid UTF-8 nor bounded nesting, and tolerates a message that is
/// not well-formed JSON elsewhere.
#[derive(Clone, Debug, Default)]
pub(crate) struct IdScanner {
    /// Bytes fed so far.
    bytes: usize,
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
        // A key that merely starts with "id" is not the id.
        let idx = scan_in_pieces(br#"{"idx":3,"result":{}}"#, 1);
        assert_eq!(idx.id(), None);
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_lines_within_its_limits() {
        let tail = StderrTail::default();
        assert_eq!(tail.text(), None);
        for i in 0..100 {
            tail.push(&format!("line {i}\r\n"));
        }
        tail.push("   ");
        let text = tail.text().unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), StderrTail::MAX_LINES);
        assert_eq!((lines[0], lines[19]), ("line 80", "line 99"));
        // A long line is cut; long lines push the older ones out by bytes.
        tail.push(&"é".repeat(3000));
        let text = tail.text().unwrap();
        assert!(text.len() <= StderrTail::MAX_BYTES, "{}", text.len());
        assert!(text.ends_with('…') && !text.contains("line"), "{text}");
        tail.push("after");
        assert_eq!(tail.text().unwrap(), "after");
    }

    #[test]
    fn decode_failures_are_taken_once() {
        let failures = DecodeFailures::default();
        let failure = DecodeFailure {
            session_broken: false,
            message: "bad".into(),
        };
        failures.record(RequestId::Number(1), failure.clone());
        assert_eq!(failures.take(&RequestId::Number(1)), Some(failure));
        assert_eq!(failures.take(&RequestId::Number(1)), None);
    }

    /// A transport over `sh -c script` that prints lines; the requests `ids` are in flight.
    async fn transport_printing(script: &str, max_line: usize, ids: &[i64]) -> StdioTransport {
        let mut command = tokio::process::Command::new("sh");
        command.args(["-c", script]).kill_on_drop(true);
        let (transport, _, _) = StdioTransport::spawn(
            CommandWrap::from(command),
            "test",
            Arc::new(DecodeFailures::default()),
            ExitStatusSlot::default(),
        )
        .unwrap();
        let transport = transport.with_max_line(max_line);
        transport.pending().extend(ids.iter().map(|&i| RequestId::Number(i)));
        transport
    }

    fn error_id(message: Option<ServerJsonRpcMessage>) -> Option<RequestId> {
        match message {
            Some(JsonRpcMessage::Error(e)) => e.id,
            other => panic!("expected an error response, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn undecodable_answers_fail_their_request_and_the_stream_goes_on() {
        let script = r#"
            printf 'not json at all\n'
            printf '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\377"}]}}\n'
            printf '{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"%0200d"}]},"id":2}\n' 0
            printf '{"jsonrpc":"2.0","id":3,"result":{"content":[]}}\n'
            cat >/dev/null
        "#;
        let mut t = transport_printing(script, 100, &[1, 2, 3]).await;
        assert_eq!(error_id(t.receive().await), Some(RequestId::Number(1)));
        let f = t.failures.take(&RequestId::Number(1)).unwrap();
        assert!(!f.session_broken && f.message.contains("not valid UTF-8"), "{f:?}");
        assert_eq!(error_id(t.receive().await), Some(RequestId::Number(2)));
        let f = t.failures.take(&RequestId::Number(2)).unwrap();
        assert!(f.message.contains("larger than"), "{f:?}");
        match t.receive().await {
            Some(JsonRpcMessage::Response(r)) => assert_eq!(r.id, RequestId::Number(3)),
            other => panic!("{other:?}"),
        }
        assert!(t.pending().is_empty());
        t.close().await.unwrap();
    }

    #[tokio::test]
    async fn an_oversized_answer_fails_before_its_end_and_an_unattributable_one_ends_the_session() {
        // Request 1's answer never ends; request 2 waits; then an answer naming no request.
        let script = r#"
            printf '{"jsonrpc":"2.0","id":1,"result":{"t":"'
            head -c 5000 /dev/zero | tr '\0' x
            cat >/dev/null
        "#;
        let mut t = transport_printing(script, 1000, &[1, 2]).await;
        let started = std::time::Instant::now();
        assert_eq!(error_id(t.receive().await), Some(RequestId::Number(1)));
        assert!(started.elapsed() < Duration::from_secs(3));
        t.close().await.unwrap();

        let script = r#"printf '{"jsonrpc":"2.0","result":{},"x":}\n'; cat >/dev/null"#;
        let mut t = transport_printing(script, 1000, &[4, 5]).await;
        let mut failed = vec![error_id(t.receive().await), error_id(t.receive().await)];
        failed.sort_by_key(|id| id.as_ref().map(ToString::to_string));
        assert_eq!(failed, [Some(RequestId::Number(4)), Some(RequestId::Number(5))]);
        assert!(t.receive().await.is_none(), "the session ends");
        assert!(t.failures.take(&RequestId::Number(4)).unwrap().session_broken);
        t.close().await.unwrap();
    }

    #[tokio::test]
    async fn the_end_of_output_fails_requests_in_flight() {
        let mut t = transport_printing("exec 1>&-; cat >/dev/null", 1000, &[8]).await;
        assert_eq!(error_id(t.receive().await), Some(RequestId::Number(8)));
        assert!(t.receive().await.is_none());
        let f = t.failures.take(&RequestId::Number(8)).unwrap();
        assert!(f.session_broken && f.message.contains("closed its output"), "{f:?}");
        t.close().await.unwrap();
    }
}
