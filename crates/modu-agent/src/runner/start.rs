//! How a run starts: fresh or resumed, both through the agent stack (built once with the
//! agent), both into [`execute_from`], which sets up the [`Run`].

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::Either;

use tokio::time::Instant;

use super::emitter::Emitter;
use super::lease;
use super::state::RunState;
use super::state::{Checkpoint, Resume};
use super::{Env, Run, chat};
use crate::agent::{AgentInner, AgentRequest};
use crate::context::{RunContext, RunParts};
use crate::error::AgentError;
use crate::lease::Fence;
use crate::message::Usage;
use crate::middleware::AgentService;
use crate::outcome::RunOutcome;
use crate::store::CheckpointStatus;

/// How a run starts. Built and taken apart at once (never stored), so the request is not
/// boxed: a box would be one allocation per run for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Start<C> {
    Fresh(AgentRequest<C>),
    Resume {
        checkpoint: Box<Checkpoint>,
        context: Arc<C>,
        cancel: Option<tokio_util::sync::CancellationToken>,
        /// For a nested run resumed by its parent: shared approvals and the pause slot.
        nested: Option<(
            Arc<std::sync::Mutex<crate::context::SharedApprovals>>,
            crate::agent::PauseSlot,
        )>,
    },
}

/// A run (fresh or resumed), through the agent stack when the agent has layers.
///
/// This and [`run_raw`] and [`start`] are plain functions that do their part at once and
/// return the next future, not `async fn`s: each `async fn` level would keep its own copy of
/// the request in its state, and every in-flight run would carry them all.
pub(crate) fn run_through_layers<C, O>(
    inner: &Arc<AgentInner<C, O>>,
    request: AgentRequest<C>,
) -> impl Future<Output = RunOutcome<O>> + Send + 'static
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    let given = match &request.resume {
        Some(resume) => Some(resume.checkpoint.run_id.clone()),
        None => request.run_id.clone(),
    };
    let run = match &inner.agent_service {
        None => Either::Left(run_raw(Arc::clone(inner), request)),
        Some(service) => Either::Right(tower::ServiceExt::oneshot(service.clone(), request).map(
            |result| match result {
                Ok(result) => result,
                Err(never) => match never {},
            },
        )),
    };
    // A panic (a tool's closure, a user's model or layer) ends the run as a failure naming it:
    // it never unwinds into the caller, nor into the other runs of a `recover_orphans`. Sinks
    // hear `RunFailed Panicked` from the run's drop.
    super::panics::Caught::new(run, given, Arc::clone(inner))
}

/// The agent stack, built once with the agent: its layers around the innermost [`RunService`].
pub(crate) fn agent_stack<C, O>(
    inner: &std::sync::Weak<AgentInner<C, O>>,
    layers: &[crate::middleware::AgentLayerFn<C, O>],
) -> Option<AgentService<C, O>>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    (!layers.is_empty()).then(|| {
        crate::middleware::apply(
            AgentService::new(RunService {
                inner: std::sync::Weak::clone(inner),
            }),
            layers,
        )
    })
}

/// One run, after the agent middleware: a fresh one, or the resumed one the request carries.
fn run_raw<C, O>(
    inner: Arc<AgentInner<C, O>>,
    mut request: AgentRequest<C>,
) -> impl Future<Output = RunOutcome<O>> + Send + 'static
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    let emitter = Emitter {
        sink: inner.sink.clone(),
        stream: request.stream.take(),
    };
    match (&inner.leases, request.session_id.as_deref()) {
        // Boxed: the leased path's future (the lease, a checkpoint reload, the run) would
        // otherwise size every run's.
        (Some(_), Some(_)) => Either::Left(Box::pin(run_leased(inner, request, emitter))),
        _ => Either::Right(start(inner, request, emitter, None)),
    }
}

/// [`run_raw`] under the session's lease.
async fn run_leased<C, O>(inner: Arc<AgentInner<C, O>>, mut request: AgentRequest<C>, emitter: Emitter) -> RunOutcome<O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    let (Some(leases), Some(session)) = (&inner.leases, request.session_id.as_deref()) else {
        return start(inner, request, emitter, None).await;
    };
    let run_id = request
        .run_id
        .get_or_insert_with(|| uuid::Uuid::new_v4().to_string())
        .clone();
    let wait = if request.claim {
        lease::Wait::No
    } else {
        lease::Wait::Configured
    };
    let held = match lease::take(leases, session, wait).await {
        Ok(held) => held,
        Err(e) => return RunOutcome::failed(run_id, inner.name.clone(), e),
    };
    // Under the lease, a resume reads its checkpoint again: the last holder may have moved the
    // run on since it was loaded.
    if let Some(resume) = request.resume.as_mut() {
        let run_id = resume.checkpoint.run_id.clone();
        let agent = crate::agent::Agent {
            inner: Arc::clone(&inner),
        };
        let fresh = match agent.load_checkpoint(&run_id).await {
            Ok(fresh) if !request.claim || fresh.state.status() == CheckpointStatus::Running => Ok(fresh),
            // Another claimer finished, paused or failed it: not an orphan any more.
            Ok(_) => Err(AgentError::CheckpointNotFound { run_id: run_id.clone() }),
            Err(e) => Err(e),
        };
        let fresh = match fresh {
            Ok(fresh) => already_stored(&inner, fresh, &held.fence()).await,
            Err(e) => Err(e),
        };
        match fresh {
            Ok(fresh) => resume.checkpoint = fresh,
            Err(e) => {
                held.release().await;
                return RunOutcome::failed(run_id, inner.name.clone(), e);
            }
        }
    }
    let fence = held.fence();
    let result = start(inner, request, emitter, Some(fence)).await;
    held.release().await;
    result
}

/// A leased run that died after it appended its messages and before it removed its checkpoint
/// is complete: the session holds its messages where it started. Then its checkpoint is
/// removed and `CheckpointNotFound` answered; otherwise the checkpoint comes back to resume.
/// (No other run wrote to the session between that run's load and its append: it held the
/// lease.)
async fn already_stored<C, O>(
    inner: &Arc<AgentInner<C, O>>,
    checkpoint: Checkpoint,
    fence: &Fence,
) -> Result<Checkpoint, AgentError> {
    let (Some(at), Some(session), Some(conversations), Some(checkpoints)) = (
        checkpoint.state.history_len,
        checkpoint.session_id.as_deref(),
        &inner.conversations,
        &inner.checkpoints,
    ) else {
        return Ok(checkpoint);
    };
    if checkpoint.state.status() != CheckpointStatus::Running {
        // A paused or failed run stopped on purpose; it appended nothing.
        return Ok(checkpoint);
    }
    let stored = conversations
        .load(session)
        .await
        .map_err(|e| AgentError::from_store("conversation.load", &e))?;
    let mine = &checkpoint.state.messages;
    if mine.is_empty() || stored.get(at..at + mine.len()) != Some(mine.as_slice()) {
        return Ok(checkpoint);
    }
    checkpoints
        .delete_fenced(&checkpoint.run_id, fence)
        .await
        .map_err(|e| AgentError::from_store("checkpoint.delete", &e))?;
    Err(AgentError::CheckpointNotFound {
        run_id: checkpoint.run_id,
    })
}

/// A run whose lease (if any) is held: fresh, or resuming the checkpoint the request carries.
fn start<C, O>(
    inner: Arc<AgentInner<C, O>>,
    mut request: AgentRequest<C>,
    emitter: Emitter,
    fence: Option<Fence>,
) -> impl Future<Output = RunOutcome<O>> + Send + 'static
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    // One `execute_from` future, whichever way the run starts.
    let (start, started) = match request.resume.take() {
        None => (Start::Fresh(request), Instant::now()),
        Some(resume) => {
            let Resume {
                mut checkpoint,
                started,
            } = *resume;
            // The request may have been changed by agent middleware on its way in.
            checkpoint.session_id = request.session_id;
            checkpoint.user = request.user;
            checkpoint.metadata = request.metadata;
            let nested = request.approvals.zip(request.nested_pause);
            let start = Start::Resume {
                checkpoint: Box::new(checkpoint),
                context: request.context,
                cancel: request.cancel,
                nested,
            };
            (start, started)
        }
    };
    execute_from(inner, start, emitter, started, fence)
}

/// The request that resumes `checkpoint`: its run id, session, user and metadata, no input.
pub(crate) fn resume_request<C>(mut checkpoint: Checkpoint, context: Arc<C>, started: Instant) -> AgentRequest<C> {
    let mut request = AgentRequest::new(context, "");
    request.input = Vec::new();
    request.run_id = Some(checkpoint.run_id.clone());
    request.session_id = checkpoint.session_id.take();
    request.user = std::mem::take(&mut checkpoint.user);
    request.metadata = std::mem::take(&mut checkpoint.metadata);
    request.resume = Some(Box::new(Resume { checkpoint, started }));
    request
}

/// The innermost agent service: one run. It holds its agent weakly (the agent holds the stack).
struct RunService<C, O> {
    inner: std::sync::Weak<AgentInner<C, O>>,
}

impl<C, O> Clone for RunService<C, O> {
    fn clone(&self) -> Self {
        RunService {
            inner: std::sync::Weak::clone(&self.inner),
        }
    }
}

impl<C, O> tower::Service<AgentRequest<C>> for RunService<C, O>
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    type Response = RunOutcome<O>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<RunOutcome<O>, std::convert::Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: AgentRequest<C>) -> Self::Future {
        let inner = self.inner.upgrade();
        Box::pin(async move {
            Ok(match inner {
                Some(inner) => run_raw(inner, request).await,
                // Only reachable by a layer that keeps the stack after the agent was dropped.
                None => RunOutcome::failed(
                    request.run_id.unwrap_or_default(),
                    String::new(),
                    AgentError::Configuration {
                        message: "the agent was dropped while its middleware still held a run".into(),
                    },
                ),
            })
        })
    }
}

/// A run set up from `start`, boxed, with its span: what [`execute_from`] awaits.
fn new_run<C, O>(
    agent: Arc<AgentInner<C, O>>,
    start: Start<C>,
    emitter: Emitter,
    started: Instant,
    fence: Option<Fence>,
) -> (Box<Run<C, O>>, tracing::Span)
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    let deadline = agent.limits.timeout.map(|t| started + t);
    let (ctx, state, resumed, parent_run_id, nested_pause, cancel) = match start {
        Start::Fresh(req) => {
            let cancel = req.cancel;
            let parts = RunParts {
                run_id: req.run_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                session_id: req.session_id,
                agent_name: agent.name.clone(),
                user: req.user,
                usage: Usage::default(),
                usage_by_model: Default::default(),
                tool_input: req.tool_input,
                metadata: req.metadata,
                approvals: req.approvals,
                model: Some(Arc::clone(&agent.model)),
                events: reports(&emitter),
            };
            let ctx = RunContext::for_run(req.context, parts);
            let mut state = RunState::new(req.input);
            state.settings = req.model_settings;
            state.input_unchecked = !agent.guardrails.input.is_empty();
            (ctx, state, false, req.parent_run_id, req.nested_pause, cancel)
        }
        Start::Resume {
            checkpoint,
            context,
            cancel,
            nested,
        } => {
            let cp = *checkpoint;
            let (approvals, nested_pause) = nested.unzip();
            let parts = RunParts {
                run_id: cp.run_id,
                session_id: cp.session_id,
                agent_name: agent.name.clone(),
                user: cp.user,
                usage: cp.state.usage,
                usage_by_model: cp.state.usage_by_model.clone(),
                tool_input: None,
                metadata: cp.metadata,
                approvals,
                model: Some(Arc::clone(&agent.model)),
                events: reports(&emitter),
            };
            let ctx = RunContext::for_run(context, parts);
            (ctx, cp.state, true, None, nested_pause, cancel)
        }
    };
    let fingerprint = Arc::clone(&agent.fingerprint);
    let run_id = ctx.shared_run_id();
    let span = super::spans::run(&agent.name, &run_id, ctx.session_id(), resumed);
    let attempts = chat::AttemptLog::new(
        emitter.clone(),
        Arc::clone(&run_id),
        ctx.usage_handle(),
        state.model_calls,
        agent.retry.max_attempts,
        span.clone(),
    );
    let (tools, definitions) = super::tools::own_index(&agent);
    let run = Run {
        env: Env {
            root: Arc::clone(&agent),
            agent,
            ctx,
            run_id,
            attempts,
            tools,
            definitions,
            emitter,
            deadline,
            cancel,
            started,
            fingerprint,
            history: Vec::new(),
            parent_run_id,
            nested_pause,
            fence,
        },
        offered: state.offered.clone(),
        allowed: state.admitted.clone(),
        state,
        sessions: Vec::new(),
        retired: Default::default(),
        resumed,
        cut: false,
        summary: Default::default(),
        kept: Default::default(),
    };
    (Box::new(run), span)
}

/// A run, with its clock started at `started` (a resume starts it before it loads the
/// checkpoint, so the load counts toward the run's one timeout) and its writes fenced by the
/// session's lease when it holds one.
///
/// The run is set up here, at once ([`new_run`]); the returned future only awaits it (boxed,
/// so the futures above stay small) and records the outcome on the run's span.
pub(super) fn execute_from<C, O>(
    agent: Arc<AgentInner<C, O>>,
    start: Start<C>,
    emitter: Emitter,
    started: Instant,
    fence: Option<Fence>,
) -> impl Future<Output = RunOutcome<O>> + Send + 'static
where
    C: Send + Sync + 'static,
    O: Send + 'static,
{
    let (run, span) = new_run(agent, start, emitter, started, fence);
    let execute = tracing::Instrument::instrument(Box::pin(run.execute()), span.clone());
    async move {
        let result = execute.await;
        if !span.is_disabled() {
            super::spans::record_usage(&span, *result.usage());
            if let Some(kind) = result.error().and_then(AgentError::type_tag) {
                super::spans::record_error(&span, &kind);
            }
        }
        result
    }
}

/// Where a run's tool calls report to: its emitter, when anyone listens (else nothing is
/// allocated for it).
fn reports(emitter: &Emitter) -> Option<Arc<dyn crate::context::CallReports>> {
    emitter
        .active()
        .then(|| Arc::new(emitter.clone()) as Arc<dyn crate::context::CallReports>)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every in-flight run holds this future, boxed: the run's state between its steps, with
    /// room for its largest step (a model request, a tool batch). Its size is memory each
    /// concurrent run takes, and beyond glibc's per-thread cache (1,032 bytes) an allocation
    /// of it is slower. The rare steps (a guarded request, a corrective request, a concurrent
    /// batch, the strict policy) are boxed or in functions of their own for that reason.
    /// (2,200 bytes until serde_json's `preserve_order` made a `serde_json::Value` 72 bytes
    /// instead of 32: a tool call's arguments are held across its awaits.)
    #[test]
    fn a_standard_runs_future_stays_small() {
        let agent = crate::Agent::builder(modu_testing::ScriptedModel::new().text("done"))
            .build()
            .unwrap();
        let emitter = Emitter {
            sink: None,
            stream: None,
        };
        let start = Start::Fresh(AgentRequest::from("hello"));
        let (run, _span) = new_run(Arc::clone(&agent.inner), start, emitter, Instant::now(), None);
        let future = run.execute();
        let size = std::mem::size_of_val(&future);
        assert!(size <= 2_500, "a standard run's future is {size} bytes");
    }
}
