//! The A2A tasks a server keeps: in memory, the newest [`MAX_TASKS`], each seen by its owner
//! only.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::AppState;
use crate::a2a_wire::{RpcError, TaskState, outcome};
use crate::auth::Principal;
use crate::mount::Finished;

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
            if let Some(task) = tasks.map.get_mut(id) {
                f(task);
            }
        });
    }

    /// Moves a task from `from` to `to`; false when it is not in `from`.
    pub(crate) fn transition(&self, id: &str, from: TaskState, to: TaskState) -> bool {
        self.with(|tasks| match tasks.map.get_mut(id) {
            Some(task) if task.state == from => {
                task.state = to;
                true
            }
            _ => false,
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
