//! The A2A tasks a server keeps: in memory, the newest [`MAX_TASKS`], each seen by its owner
//! only; and a task's run as A2A stream responses ([`StreamTranslator`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::a2a_wire::{RpcError, TaskState, agent_message, artifact_update, outcome, status_update};
use crate::auth::Principal;
use crate::mount::{Finished, Item};
use modu_core::AgentEvent;

/// The most tasks kept; the oldest go first.
pub(crate) const MAX_TASKS: usize = 10_000;

/// One task as the server keeps it.
#[derive(Clone, Debug)]
pub(crate) struct TaskRecord {
    pub agent: String,
    pub owner: Option<String>,
    pub context_id: String,
    pub state: TaskState,
    pub status_message: Option<Value>,
    pub artifacts: Vec<Value>,
    pub history: Vec<Value>,
    /// When it last changed, as a sequence number of the server's task changes (set by
    /// [`Tasks`]): `ListTasks` lists the most recently changed first.
    pub changed: u64,
    /// Whether its run was last resumed through run control or AG-UI ([`ResumedTask`]): that
    /// run's event log holds no A2A stream responses (AG-UI events, or none).
    pub resumed_elsewhere: bool,
}

/// The tasks of a server.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    inner: Mutex<TaskMap>,
}

#[derive(Debug, Default)]
struct TaskMap {
    map: HashMap<String, TaskRecord>,
    order: VecDeque<String>,
    /// The last change's sequence number.
    clock: u64,
}

impl TaskMap {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

impl Tasks {
    fn with<R>(&self, f: impl FnOnce(&mut TaskMap) -> R) -> R {
        let mut guard = match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    pub(crate) fn insert(&self, id: &str, record: TaskRecord) {
        self.with(|tasks| {
            while tasks.map.len() >= MAX_TASKS {
                let Some(oldest) = tasks.order.pop_front() else { break };
                tasks.map.remove(&oldest);
            }
            tasks.order.push_back(id.to_owned());
            let mut record = record;
            record.changed = tasks.tick();
            tasks.map.insert(id.to_owned(), record);
        });
    }

    /// The task, if it exists, belongs to `agent` and is the caller's.
    pub(crate) fn get(&self, id: &str, agent: &str, principal: &Principal) -> Result<TaskRecord, RpcError> {
        self.with(|tasks| {
            tasks
                .map
                .get(id)
                .filter(|t| t.agent == agent && t.owner == principal.user)
                .cloned()
                .ok_or_else(RpcError::task_not_found)
        })
    }

    pub(crate) fn update(&self, id: &str, f: impl FnOnce(&mut TaskRecord)) {
        self.with(|tasks| {
            let now = tasks.tick();
            if let Some(task) = tasks.map.get_mut(id) {
                f(task);
                task.changed = now;
            }
        });
    }

    /// Moves a task from `from` to `to`; false when it is not in `from`.
    pub(crate) fn transition(&self, id: &str, from: TaskState, to: TaskState) -> bool {
        self.with(|tasks| {
            let now = tasks.tick();
            match tasks.map.get_mut(id) {
                Some(task) if task.state == from => {
                    task.state = to;
                    task.changed = now;
                    true
                }
                _ => false,
            }
        })
    }

    /// Records a run's end on its task.
    pub(crate) fn finish(&self, id: &str, finished: &Finished) -> (TaskState, Value) {
        let mut result = (TaskState::Failed, Value::Null);
        self.update(id, |task| {
            if task.state == TaskState::Canceled {
                // Cancelled while it ran: it stays cancelled, whatever the run's end.
                result = (TaskState::Canceled, task.status_message.clone().unwrap_or(Value::Null));
                return;
            }
            let end = outcome(id, &task.context_id, finished);
            task.state = end.state;
            task.history.push(end.message.clone());
            task.status_message = Some(end.message.clone());
            if let Some(artifact) = end.artifact {
                task.artifacts = vec![artifact];
            }
            result = (end.state, end.message);
        });
        result
    }
}

/// A paused run resumed through run control or AG-UI that is an A2A task waiting for input (an
/// A2A task's run has the task's id): the task is `WORKING` from [`ResumedTask::of`] on, and
/// the run's end is recorded on it (as A2A's own resume does), so an A2A client polling the
/// task sees the run it follows.
pub(crate) struct ResumedTask {
    state: Arc<AppState>,
    task_id: String,
}

impl ResumedTask {
    /// The task of the paused run `run_id`, moved to `WORKING`; `None` when the run is no A2A
    /// task waiting for input.
    pub(crate) fn of(state: &Arc<AppState>, run_id: &str) -> Option<Self> {
        // Moved and marked under one lock: a `SubscribeToTask` in between would take the
        // task's working state for an A2A run's and relay another protocol's events.
        let moved = state.tasks.with(|tasks| {
            let now = tasks.tick();
            match tasks.map.get_mut(run_id) {
                Some(task) if task.state == TaskState::InputRequired => {
                    task.state = TaskState::Working;
                    task.resumed_elsewhere = true;
                    task.changed = now;
                    true
                }
                _ => false,
            }
        });
        if !moved {
            return None;
        }
        Some(ResumedTask {
            state: Arc::clone(state),
            task_id: run_id.to_owned(),
        })
    }

    /// `SubscribeToTask` on a working task whose run was resumed through run control or AG-UI
    /// (`live`, the run that continues it): that run's events are not A2A's, so the stream is
    /// `first` (the task as it stands), then, once the run has ended, the task's end as A2A's
    /// own stream ends (the answer artifact of a completed task, then the last status update).
    pub(crate) fn subscribe(
        state: Arc<AppState>,
        live: Arc<crate::live::LiveRun>,
        task_id: String,
        rpc_id: Value,
        first: String,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        use axum::response::sse::{Event, KeepAlive, Sse};
        use futures::StreamExt;
        let end = async move {
            live.ended().await;
            let Some(task) = state.tasks.with(|tasks| tasks.map.get(&task_id).cloned()) else {
                return Vec::new();
            };
            let mut out = Vec::new();
            if task.state == TaskState::Completed
                && let Some(parts) = task
                    .artifacts
                    .last()
                    .and_then(|a| a.get("parts"))
                    .and_then(Value::as_array)
            {
                out.push(artifact_update(&task_id, &task.context_id, parts.clone(), false, true));
            }
            out.push(status_update(
                &task_id,
                &task.context_id,
                task.state,
                task.status_message.as_ref(),
            ));
            out.into_iter()
                .map(|update| crate::a2a_wire::success(&rpc_id, update).to_string())
                .collect()
        };
        let body = futures::stream::once(async move { first })
            .chain(futures::stream::once(end).flat_map(futures::stream::iter))
            .map(|data| Ok::<Event, std::convert::Infallible>(Event::default().data(data)));
        Sse::new(body).keep_alive(KeepAlive::default()).into_response()
    }

    /// The resumed run's items, recording its end on the task.
    pub(crate) fn follow(
        task: Option<Self>,
        items: futures::stream::BoxStream<'static, Item>,
    ) -> futures::stream::BoxStream<'static, Item> {
        use futures::StreamExt;
        match task {
            None => items,
            Some(task) => items
                .inspect(move |item| {
                    if let Item::Done(finished) = item {
                        task.state.tasks.finish(&task.task_id, finished);
                    }
                })
                .boxed(),
        }
    }

    /// The resumed run, recording its end on the task.
    pub(crate) fn follow_run(
        task: Option<Self>,
        run: futures::future::BoxFuture<'static, Finished>,
    ) -> futures::future::BoxFuture<'static, Finished> {
        use futures::FutureExt;
        match task {
            None => run,
            Some(task) => run
                .map(move |finished| {
                    task.state.tasks.finish(&task.task_id, &finished);
                    finished
                })
                .boxed(),
        }
    }
}

/// `ListTasksRequest` (the fields the server reads).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListParams {
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    page_size: Option<i64>,
    #[serde(default)]
    page_token: Option<String>,
    #[serde(default)]
    history_length: Option<usize>,
    #[serde(default)]
    status_timestamp_after: Option<Value>,
    #[serde(default)]
    include_artifacts: Option<bool>,
}

/// How many tasks a `ListTasks` page holds when the request names no size.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 50;
/// The largest `ListTasks` page.
pub(crate) const MAX_PAGE_SIZE: usize = 100;

/// `ListTasks`: the caller's tasks of this agent, most recently changed first, filtered by
/// context and state, a page at a time (the page token is the offset of the next page).
/// Artifacts are left out unless `includeArtifacts`. `statusTimestampAfter` is refused: the
/// server keeps no status times.
pub(crate) fn list_tasks(tasks: &Tasks, agent: &str, principal: &Principal, params: Value) -> Result<Value, RpcError> {
    let params: ListParams = serde_json::from_value(if params.is_null() { json!({}) } else { params })
        .map_err(|e| RpcError::invalid_params(e.to_string()))?;
    if params.status_timestamp_after.is_some() {
        return Err(RpcError::invalid_params(
            "statusTimestampAfter is not supported: the server keeps no status times",
        ));
    }
    let status = match params.status.as_deref() {
        None | Some("") | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(wire) => Some(
            TaskState::from_wire(wire)
                .ok_or_else(|| RpcError::invalid_params(format!("unknown task state {wire:?}")))?,
        ),
    };
    let page_size = match params.page_size {
        None | Some(0) => DEFAULT_PAGE_SIZE,
        Some(n) if (1..=MAX_PAGE_SIZE as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(RpcError::invalid_params(format!(
                "pageSize must be between 1 and {MAX_PAGE_SIZE}, not {n}"
            )));
        }
    };
    // The page token is where the last page ended: the change number of its last task. The
    // next page lists the tasks that changed before it, so a task created or changed between
    // two pages is not listed twice (it is first in a new listing).
    let before = match params.page_token.as_deref() {
        None | Some("") => u64::MAX,
        Some(token) => token
            .parse::<u64>()
            .map_err(|_| RpcError::invalid_params("the pageToken is not one this server gave"))?,
    };
    let mut mine: Vec<(String, TaskRecord)> = tasks.with(|tasks| {
        tasks
            .map
            .iter()
            .filter(|(_, t)| t.agent == agent && t.owner == principal.user)
            .filter(|(_, t)| params.context_id.as_ref().is_none_or(|c| *c == t.context_id))
            .filter(|(_, t)| status.is_none_or(|s| s == t.state))
            .map(|(id, t)| (id.clone(), t.clone()))
            .collect()
    });
    let total = mine.len();
    mine.retain(|(_, task)| task.changed < before);
    mine.sort_by_key(|(_, task)| std::cmp::Reverse(task.changed));
    let more = mine.len() > page_size;
    let last = mine
        .get(page_size.min(mine.len()).saturating_sub(1))
        .map(|(_, t)| t.changed);
    let page: Vec<Value> = mine
        .iter()
        .take(page_size)
        .map(|(id, task)| {
            let mut json = task_json(id, task, params.history_length);
            if !params.include_artifacts.unwrap_or(false)
                && let Some(fields) = json.as_object_mut()
            {
                fields.remove("artifacts");
            }
            json
        })
        .collect();
    let next = match last {
        Some(last) if more => last.to_string(),
        _ => String::new(),
    };
    Ok(json!({
        "tasks": page,
        "nextPageToken": next,
        "pageSize": page_size,
        "totalSize": total,
    }))
}

pub(crate) fn task_json(id: &str, task: &TaskRecord, history_length: Option<usize>) -> Value {
    let mut status = json!({"state": task.state.wire()});
    if let Some(message) = &task.status_message {
        status["message"] = message.clone();
    }
    let skip = history_length.map_or(0, |n| task.history.len().saturating_sub(n));
    json!({
        "id": id,
        "contextId": task.context_id,
        "status": status,
        "artifacts": task.artifacts,
        "history": task.history[skip..],
    })
}

/// Marks a task cancelled when its run is dropped before it ended (the client went away).
pub(crate) struct TaskGuard {
    pub state: Arc<AppState>,
    pub id: String,
    pub armed: bool,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if self.armed {
            self.state
                .tasks
                .transition(&self.id, TaskState::Working, TaskState::Canceled);
        }
    }
}

/// A run's items as A2A stream responses.
pub(crate) struct StreamTranslator {
    pub(crate) guard: TaskGuard,
    pub(crate) task_id: String,
    pub(crate) context_id: String,
    /// Whether the next text starts the answer artifact over (a new model call).
    pub(crate) fresh: bool,
}

impl StreamTranslator {
    pub(crate) fn on(&mut self, item: Item) -> Vec<Value> {
        match item {
            Item::Event(event) if event.run_id() != self.task_id => Vec::new(),
            Item::Event(AgentEvent::ModelCallStarted { .. } | AgentEvent::ModelCallFailed { .. }) => {
                self.fresh = true;
                Vec::new()
            }
            Item::Event(AgentEvent::ModelDelta { text, .. } | AgentEvent::FinalDelta { text, .. })
                if !text.is_empty() =>
            {
                let append = !std::mem::replace(&mut self.fresh, false);
                vec![artifact_update(
                    &self.task_id,
                    &self.context_id,
                    vec![json!({"text": text})],
                    append,
                    false,
                )]
            }
            Item::Event(AgentEvent::ToolCallStarted {
                call_id,
                tool,
                arguments,
                ..
            }) => {
                let part = json!({"data": {"toolCall": {"id": call_id, "name": tool, "arguments": arguments}}});
                let message = agent_message(&self.task_id, &self.context_id, vec![part]);
                vec![status_update(
                    &self.task_id,
                    &self.context_id,
                    TaskState::Working,
                    Some(&message),
                )]
            }
            Item::Event(_) => Vec::new(),
            Item::Done(finished) => {
                self.guard.armed = false;
                let tasks = &self.guard.state.tasks;
                let (state, message) = tasks.finish(&self.task_id, &finished);
                let mut out = Vec::new();
                if state == TaskState::Completed {
                    // The whole answer, replacing what streamed, so the artifact is exactly it.
                    let parts = crate::a2a_wire::output_parts(&finished);
                    if !parts.is_empty() {
                        out.push(artifact_update(&self.task_id, &self.context_id, parts, false, true));
                    }
                }
                out.push(status_update(&self.task_id, &self.context_id, state, Some(&message)));
                out
            }
        }
    }
}
