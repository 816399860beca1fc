//! [`StdioTransport`]: spawns the server, writes requests to its stdin, reads and decodes the
//! lines of its stdout, and fails the requests whose answers cannot be decoded.

use std::collections::{HashSet, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use process_wrap::tokio::CommandWrap;
use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

#[cfg(unix)]
use super::process::SIGTERM;
use super::process::{ChildGuard, EXIT_STATUS_WAIT, exited, kill_the_rest};
use super::{DecodeFailure, DecodeFailures, ExitStatusSlot, IdScanner, MAX_MESSAGE_BYTES};

/// How long a cancellation waits for stdin when another write holds it.
const CANCELLATION_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// Set when closing starts: a write blocked on a server that does not read its stdin
    /// gives up, so closing can close stdin and go on.
    closing: tokio::sync::watch::Sender<bool>,
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
            closing: tokio::sync::watch::Sender::new(false),
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
        if !scan.is_json_rpc() {
            // JSON that is no JSON-RPC message (no `jsonrpc`, `method`, `result` or `error`):
            // a structured logger's line such as `{"level":"info","msg":"…"}`. Noise too, not an
            // answer naming no request.
            tracing::warn!(
                server,
                bytes,
                "MCP server wrote a JSON line that is not a JSON-RPC message (a log line?); ignored"
            );
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
        let mut cancellation = false;
        match &item {
            JsonRpcMessage::Request(request) => {
                self.pending().insert(request.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(cancelled) = &n.notification {
                    cancellation = true;
                    if let Some(id) = &cancelled.params.request_id {
                        self.pending().remove(id);
                    }
                }
            }
            _ => {}
        }
        let stdin = Arc::clone(&self.stdin);
        let mut closing = self.closing.subscribe();
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            let write = async {
                // A cancellation is best effort: when another write holds stdin (blocked on a
                // server that does not read it), waiting for it would hold the cancelled
                // call past its timeout (rmcp returns the timeout once this is sent).
                let mut guard = if cancellation {
                    match tokio::time::timeout(CANCELLATION_WAIT, stdin.lock()).await {
                        Ok(guard) => guard,
                        Err(_) => {
                            tracing::debug!("the MCP server does not read its stdin; cancellation not sent");
                            return Ok(());
                        }
                    }
                } else {
                    stdin.lock().await
                };
                let Some(writer) = guard.as_mut() else {
                    return Err(stdin_closed());
                };
                writer.write_all(&bytes).await?;
                writer.flush().await
            };
            tokio::select! {
                result = write => result,
                _ = closing.wait_for(|closing| *closing) => Err(stdin_closed()),
            }
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
    /// waits again, then kills the group. Once the server has exited, what is left of its
    /// process group (the helpers it started and did not end) is killed too.
    async fn close(&mut self) -> Result<(), Self::Error> {
        // Writes under way give up (one blocked on a server that stopped reading would hold
        // stdin forever), then stdin is closed.
        self.closing.send_replace(true);
        drop(self.stdin.lock().await.take());
        // The child stays in its guard while this waits: a close cancelled midway still kills
        // the group.
        let Some(child) = self.child.0.as_mut() else {
            return Ok(());
        };
        if exited(child).await {
            kill_the_rest(child);
            self.child.0 = None;
            return Ok(());
        }
        #[cfg(unix)]
        match child.signal(SIGTERM) {
            Ok(()) => {
                if exited(child).await {
                    kill_the_rest(child);
                    self.child.0 = None;
                    return Ok(());
                }
            }
            Err(e) => tracing::debug!(error = %e, "SIGTERM to an MCP server failed"),
        }
        // SIGKILL to the whole group.
        let result = Box::into_pin(child.kill()).await;
        self.child.0 = None;
        result
    }
}

fn stdin_closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotConnected, "the server's stdin is closed")
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
    async fn json_lines_that_are_not_json_rpc_are_skipped_and_the_stream_goes_on() {
        // Structured log lines (with an "id" of their own too), a JSON array, a JSON string,
        // then the answer.
        let script = r#"
            printf '{"level":"info","msg":"server started"}\n'
            printf '{"level":"debug","id":1,"msg":"handling request 1"}\n'
            printf '[1,2,3]\n'
            printf '"just a string"\n'
            printf '{"jsonrpc":"2.0","id":1,"result":{"content":[]}}\n'
            cat >/dev/null
        "#;
        let mut t = transport_printing(script, 1000, &[1, 2]).await;
        match t.receive().await {
            Some(JsonRpcMessage::Response(r)) => assert_eq!(r.id, RequestId::Number(1)),
            other => panic!("expected the answer to request 1, got {other:?}"),
        }
        assert!(!t.ended, "the session goes on");
        assert!(t.failures.take(&RequestId::Number(1)).is_none());
        assert!(t.failures.take(&RequestId::Number(2)).is_none());
        assert_eq!(t.pending().iter().cloned().collect::<Vec<_>>(), [RequestId::Number(2)]);
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
