//! A run that panics ends as its failure, [`AgentError::Panicked`] naming the run, however it
//! was started (`Agent::run`, `resume`, `recover_orphans`, the streams): the panic never
//! unwinds into the caller.
//!
//! The run names itself as it unwinds (`Drop for Run` while panicking sets [`PANICKED_RUN`]),
//! and the catch around its future ([`Caught`]) takes the name right after: a panic unwinds and
//! is caught within one poll on one thread, and the slot is cleared at every poll, so the name
//! found is the run's own. Nothing is kept per run for this.

use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;

use crate::agent::AgentInner;
use crate::error::AgentError;
use crate::outcome::RunOutcome;

std::thread_local! {
    /// The id of the run that last unwound on this thread.
    static PANICKED_RUN: Cell<Option<String>> = const { Cell::new(None) };
}

/// Called by a run dropped while a panic unwinds: the catch above it names the failure `run_id`.
pub(super) fn unwinding(run_id: &str) {
    PANICKED_RUN.set(Some(run_id.to_owned()));
}

/// A panic's message (what [`AgentError::Panicked`] carries): its text payload, or a word that
/// it had none. For runtimes that catch a run's panics themselves, such as modu-restate's
/// journal.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a text payload".to_owned())
}

/// `work` (a store call made before a run starts, such as loading its checkpoint), with a
/// panic as [`AgentError::Panicked`].
pub(crate) fn unwound<T>(
    work: impl Future<Output = Result<T, AgentError>>,
) -> impl Future<Output = Result<T, AgentError>> {
    AssertUnwindSafe(work).catch_unwind().map(|done| {
        done.unwrap_or_else(|panic| {
            Err(AgentError::Panicked {
                message: panic_message(&*panic),
            })
        })
    })
}

pin_project_lite::pin_project! {
    /// A run's future whose panic ends it as the run's failure.
    pub(crate) struct Caught<F, C, O> {
        #[pin]
        run: F,
        // The id the request gave its run (a resumed run's, the caller's), for a panic before
        // the run existed (in an agent layer); a new run names itself.
        given: Option<String>,
        inner: Arc<AgentInner<C, O>>,
    }
}

impl<F, C, O> Caught<F, C, O> {
    pub(crate) fn new(run: F, given: Option<String>, inner: Arc<AgentInner<C, O>>) -> Self {
        Self { run, given, inner }
    }
}

impl<F, C, O> Future for Caught<F, C, O>
where
    F: Future<Output = RunOutcome<O>>,
{
    type Output = RunOutcome<O>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RunOutcome<O>> {
        let this = self.project();
        // A name left by a run that unwound outside any catch of ours is not this run's.
        PANICKED_RUN.take();
        let run = this.run;
        match std::panic::catch_unwind(AssertUnwindSafe(|| run.poll(cx))) {
            Ok(polled) => polled,
            Err(panic) => {
                let message = panic_message(&*panic);
                let run_id = PANICKED_RUN.take().or_else(|| this.given.take()).unwrap_or_default();
                Poll::Ready(RunOutcome::failed(
                    run_id,
                    this.inner.name.clone(),
                    AgentError::Panicked { message },
                ))
            }
        }
    }
}
