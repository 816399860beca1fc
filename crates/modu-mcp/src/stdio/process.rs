//! The server process's lifecycle: its process group killed when the transport is dropped,
//! the timings of a graceful close, its exit status, and the tail of its stderr.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use process_wrap::tokio::ChildWrapper;

/// How long closing waits for the server to exit after stdin is closed, and again after
/// SIGTERM, before killing its process group.
const EXIT_WAIT: Duration = Duration::from_secs(3);

/// SIGTERM (15 on every Unix this crate runs on).
#[cfg(unix)]
pub(super) const SIGTERM: i32 = 15;

/// How long the end of a server's output waits for the server to exit, to report its exit
/// status.
pub(super) const EXIT_STATUS_WAIT: Duration = Duration::from_millis(250);

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

/// Where the transport leaves the server's exit status when it sees the server exit (at the
/// end of its output, or when the transport is dropped after it exited).
pub(crate) type ExitStatusSlot = Arc<Mutex<Option<std::process::ExitStatus>>>;

/// Kills the server's process group when dropped without a graceful close.
pub(super) struct ChildGuard(pub(super) Option<Box<dyn ChildWrapper>>, pub(super) ExitStatusSlot);

impl ChildGuard {
    pub(super) fn record(&self, status: std::process::ExitStatus) {
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
pub(super) async fn exited(child: &mut Box<dyn ChildWrapper>) -> bool {
    matches!(tokio::time::timeout(EXIT_WAIT, child.wait()).await, Ok(Ok(_)))
}

/// Kills what is left of the process group of a server that has exited: the helpers it
/// started and left running (the group outlives its leader while they run). Nothing left is
/// the usual case (the signal then finds no process).
pub(super) fn kill_the_rest(child: &mut Box<dyn ChildWrapper>) {
    match child.start_kill() {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(ESRCH) => {}
        Err(e) => tracing::debug!(error = %e, "killing what is left of an MCP server's process group failed"),
    }
}

/// "No such process" (3 on every Unix this crate runs on).
const ESRCH: i32 = 3;

#[cfg(test)]
mod tests {
    use super::*;

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
}
