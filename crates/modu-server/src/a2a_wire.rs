//! A2A 1.0's JSON (ProtoJSON of `a2a.proto`, as the `a2a-sdk` 1.x clients send and read it):
//! JSON-RPC envelopes and errors, incoming messages and their parts, and tasks, messages and
//! stream events going out.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::agui::mcp_selection;
use crate::control::approval_json;
use crate::mount::{Decision, Finished, public_error};

/// JSON-RPC 2.0 error codes of A2A.
pub(crate) mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const PUSH_NOT_SUPPORTED: i64 = -32003;
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    pub const VERSION_NOT_SUPPORTED: i64 = -32009;
}

/// A JSON-RPC error: its code and the server's own sentence.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(code::INVALID_PARAMS, message)
    }

    /// A `SubscribeToTask` whose `Last-Event-ID` names events the run no longer keeps (or
    /// never sent): the request asks for what cannot be given, not a server failure, so it is
    /// invalid params (A2A has no error of its own for it), with the server's sentence.
    pub(crate) fn events_gone(gone: crate::error::ServerError) -> Self {
        RpcError::invalid_params(format!(
            "Last-Event-ID: {gone}; subscribe without Last-Event-ID for the task as it stands and the updates its run still keeps"
        ))
    }

    pub(crate) fn task_not_found() -> Self {
        RpcError::new(code::TASK_NOT_FOUND, "no task with this id")
    }
}

/// A JSON-RPC success response.
pub(crate) fn success(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error response.
pub(crate) fn failure(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": error.code, "message": error.message}})
}

/// The states of a task, as ProtoJSON names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskState {
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl TaskState {
    pub(crate) fn wire(self) -> &'static str {
        match self {
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
        }
    }

    /// The state a wire name stands for (the states this server gives tasks).
    pub(crate) fn from_wire(wire: &str) -> Option<Self> {
        [
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
        ]
        .into_iter()
        .find(|s| s.wire() == wire)
    }
}

/// `SendMessageRequest` (the fields the server reads).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SendParams {
    pub message: WireMessage,
}

/// An A2A `Message`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireMessage {
    #[serde(default)]
    pub message_id: String,
    #[serde(default)]
    pub context_id: Option<String>,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub parts: Vec<Value>,
}

/// A `SendMessageRequest`'s `configuration.historyLength`: the task it is answered with holds
/// at most this many of its newest messages (`None`: all; 0: none).
pub(crate) fn history_length(params: &Value) -> Result<Option<usize>, RpcError> {
    match params.get("configuration").and_then(|c| c.get("historyLength")) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| RpcError::invalid_params("configuration.historyLength must be 0 or more")),
    }
}

/// A `SendMessageRequest`'s `configuration.returnImmediately` (A2A 1.0; a2a-sdk's polling
/// clients set it): answer with the task as it stands once its run has started, not at its end.
pub(crate) fn return_immediately(params: &Value) -> Result<bool, RpcError> {
    match params.get("configuration").and_then(|c| c.get("returnImmediately")) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(on)) => Ok(*on),
        Some(_) => Err(RpcError::invalid_params(
            "configuration.returnImmediately must be a boolean",
        )),
    }
}

/// Whether a client that accepts `accepted` (a media type, maybe `type/*`, `*/*` or the bare
/// type `text` of older A2A examples, maybe with parameters) takes the media type `mode`.
fn accepts(accepted: &str, mode: &str) -> bool {
    let accepted = accepted
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let (kind, _) = mode.split_once('/').unwrap_or((mode, ""));
    accepted == "*/*" || accepted == "*" || accepted == mode || accepted == kind || accepted == format!("{kind}/*")
}

/// A `SendMessageRequest`'s `configuration.acceptedOutputModes` against the media types the
/// agent answers in (`outputs`): -32005 when the client takes none of them (an empty or
/// missing list takes anything), said before anything runs.
pub(crate) fn check_output_modes(params: &Value, outputs: &[&str]) -> Result<(), RpcError> {
    let accepted = match params.get("configuration").and_then(|c| c.get("acceptedOutputModes")) {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(modes)) => modes,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "configuration.acceptedOutputModes must be a list of media types",
            ));
        }
    };
    let mut modes = Vec::with_capacity(accepted.len());
    for mode in accepted {
        let Some(mode) = mode.as_str() else {
            return Err(RpcError::invalid_params(
                "configuration.acceptedOutputModes must be a list of media types",
            ));
        };
        modes.push(mode);
    }
    if modes.is_empty() || modes.iter().any(|m| outputs.iter().any(|o| accepts(m, o))) {
        return Ok(());
    }
    Err(RpcError::new(
        code::CONTENT_TYPE_NOT_SUPPORTED,
        format!(
            "the agent answers in {}, which configuration.acceptedOutputModes does not accept",
            outputs.join(", ")
        ),
    ))
}

/// `GetTaskRequest` and `CancelTaskRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskParams {
    pub id: String,
    #[serde(default)]
    pub history_length: Option<usize>,
}

/// What an incoming message says.
#[derive(Debug, Default)]
pub(crate) struct Incoming {
    /// Its text parts (and any other data part as compact JSON), one per line.
    pub text: String,
    /// A data part's `mcp` object, checked as AG-UI's `forwardedProps.mcp`.
    pub mcp: Option<Value>,
    /// Decisions on waiting calls: `(call id or None for every waiting call, decision)`.
    pub decisions: Vec<(Option<String>, Decision)>,
}

/// A data part's decision: `{"approved": bool, "always"?: bool, "message"?: string,
/// "callId"?: string}`.
fn data_decision(data: &serde_json::Map<String, Value>) -> Option<(Option<String>, Decision)> {
    let approved = data.get("approved")?.as_bool()?;
    let call = data.get("callId").and_then(Value::as_str).map(str::to_owned);
    let decision = if approved {
        Decision::Approve {
            always: data.get("always").and_then(Value::as_bool).unwrap_or(false),
        }
    } else {
        Decision::Reject {
            message: data.get("message").and_then(Value::as_str).map(str::to_owned),
        }
    };
    Some((call, decision))
}

/// A text answer to an input-required task: `approve` / `yes` or `reject` / `no`.
pub(crate) fn text_decision(text: &str) -> Option<Decision> {
    match text.trim().to_ascii_lowercase().as_str() {
        "approve" | "approved" | "yes" | "y" => Some(Decision::Approve { always: false }),
        "reject" | "rejected" | "no" | "n" => Some(Decision::Reject { message: None }),
        _ => None,
    }
}

/// Reads a message's parts.
pub(crate) fn incoming(message: &WireMessage) -> Result<Incoming, RpcError> {
    if let Some(role) = message.role.as_deref()
        && !matches!(role, "ROLE_USER" | "user" | "ROLE_UNSPECIFIED")
    {
        return Err(RpcError::invalid_params("the message must have the role ROLE_USER"));
    }
    let mut out = Incoming::default();
    let mut lines: Vec<String> = Vec::new();
    for part in &message.parts {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            lines.push(text.to_owned());
        } else if let Some(data) = part.get("data") {
            let Some(fields) = data.as_object() else {
                lines.push(data.to_string());
                continue;
            };
            if fields.contains_key("mcp") {
                if out.mcp.is_some() {
                    return Err(RpcError::invalid_params("the message has more than one mcp selection"));
                }
                out.mcp = mcp_selection(Some(data)).map_err(|e| RpcError::invalid_params(e.to_string()))?;
            } else if let Some(list) = fields.get("decisions").and_then(Value::as_array) {
                for entry in list {
                    let decision = entry.as_object().and_then(data_decision).ok_or_else(|| {
                        RpcError::invalid_params("each decision must be {\"callId\", \"approved\": true|false}")
                    })?;
                    out.decisions.push(decision);
                }
            } else if let Some(decision) = data_decision(fields) {
                out.decisions.push(decision);
            } else {
                lines.push(data.to_string());
            }
        } else {
            return Err(RpcError::new(
                code::CONTENT_TYPE_NOT_SUPPORTED,
                "only text and data parts are supported",
            ));
        }
    }
    out.text = lines.join("\n");
    Ok(out)
}

/// An agent message of a task.
pub(crate) fn agent_message(task_id: &str, context_id: &str, parts: Vec<Value>) -> Value {
    json!({
        "messageId": uuid::Uuid::new_v4().simple().to_string(),
        "contextId": context_id,
        "taskId": task_id,
        "role": "ROLE_AGENT",
        "parts": parts,
    })
}

/// The user message of a task's history, as it came in (with the task's ids).
pub(crate) fn user_message(task_id: &str, context_id: &str, message: &WireMessage) -> Value {
    let id = if message.message_id.is_empty() {
        uuid::Uuid::new_v4().simple().to_string()
    } else {
        message.message_id.clone()
    };
    json!({"messageId": id, "contextId": context_id, "taskId": task_id, "role": "ROLE_USER", "parts": message.parts})
}

/// What a run's end makes of its task: the state, the status message and the answer artifact.
pub(crate) struct Outcome {
    pub state: TaskState,
    pub message: Value,
    pub artifact: Option<Value>,
}

/// The id of the artifact holding a task's answer.
/// The `Last-Event-ID` header of a `SubscribeToTask` (invalid request when it is no event id).
pub(crate) fn last_event_id(headers: &http::HeaderMap) -> Result<Option<u64>, RpcError> {
    crate::control::last_event_id(headers).map_err(|e| RpcError::new(code::INVALID_REQUEST, e.to_string()))
}

/// Why `SubscribeToTask` with `Last-Event-ID` is refused on a task whose paused run was resumed
/// through run control or AG-UI: that run's events are not the task's, and the updates sent for
/// the task (its state, then its end) carry no event ids, so no id names a point in them.
pub(crate) const RESUMED_ELSEWHERE: &str = "Last-Event-ID: this task's run was resumed through run control or AG-UI, and its updates here carry no event ids to continue after; subscribe without Last-Event-ID for the task as it stands and its end, or follow the run's own events at /agents/{agent}/runs/{run}/events";

pub(crate) const ANSWER: &str = "answer";

/// The answer artifact with these parts.
pub(crate) fn answer_artifact(parts: Vec<Value>) -> Value {
    json!({"artifactId": ANSWER, "name": ANSWER, "parts": parts})
}

/// The parts of a run's output: a string output as text, anything else as data.
pub(crate) fn output_parts(finished: &Finished) -> Vec<Value> {
    match &finished.output {
        Some(Value::String(text)) => vec![json!({"text": text})],
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![json!({"data": other})],
    }
}

/// The task a finished (or paused) run leaves.
pub(crate) fn outcome(task_id: &str, context_id: &str, finished: &Finished) -> Outcome {
    if !finished.interruptions.is_empty() {
        let names: Vec<&str> = finished.interruptions.iter().map(|r| r.tool_name.as_str()).collect();
        let approvals: Vec<Value> = finished.interruptions.iter().map(approval_json).collect();
        let text = format!(
            "Waiting for approval of {}. Answer with approve or reject, or a data part {{\"approved\": true|false}}.",
            names.join(", ")
        );
        return Outcome {
            state: TaskState::InputRequired,
            message: agent_message(
                task_id,
                context_id,
                vec![json!({"text": text}), json!({"data": {"approvals": approvals}})],
            ),
            artifact: None,
        };
    }
    if finished.waits_for_input_only() {
        let prompts: Vec<&str> = finished.inputs.iter().map(|r| r.prompt.as_str()).collect();
        let inputs: Vec<Value> = finished.inputs.iter().map(crate::inputs::input_json).collect();
        let text = format!(
            "Waiting for a person's input: {}. Answer each ask on the run-control routes under the run id {task_id} (POST /agents/{{agent}}/runs/{task_id}/answer), then resume the run there (POST .../resume); this task follows it.",
            prompts.join("; ")
        );
        return Outcome {
            state: TaskState::InputRequired,
            message: agent_message(
                task_id,
                context_id,
                vec![json!({"text": text}), json!({"data": {"inputs": inputs}})],
            ),
            artifact: None,
        };
    }
    if let Some(error) = &finished.error {
        tracing::warn!(error = %error, task = %task_id, "A2A task failed");
        let (code, message) = public_error(error);
        return Outcome {
            state: TaskState::Failed,
            message: agent_message(
                task_id,
                context_id,
                vec![json!({"text": message}), json!({"data": {"code": code}})],
            ),
            artifact: None,
        };
    }
    let parts = output_parts(finished);
    Outcome {
        state: TaskState::Completed,
        message: agent_message(task_id, context_id, parts.clone()),
        artifact: (!parts.is_empty()).then(|| answer_artifact(parts)),
    }
}

/// A `TaskStatusUpdateEvent` as a stream response.
pub(crate) fn status_update(task_id: &str, context_id: &str, state: TaskState, message: Option<&Value>) -> Value {
    let mut status = json!({"state": state.wire()});
    if let Some(message) = message {
        status["message"] = message.clone();
    }
    json!({"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": status}})
}

/// A `TaskArtifactUpdateEvent` of the answer artifact as a stream response.
pub(crate) fn artifact_update(task_id: &str, context_id: &str, parts: Vec<Value>, append: bool, last: bool) -> Value {
    json!({"artifactUpdate": {
        "taskId": task_id, "contextId": context_id, "artifact": answer_artifact(parts),
        "append": append, "lastChunk": last,
    }})
}

/// A method's params as `T`; a mismatch is invalid params.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(e.to_string()))
}

/// The JSON-RPC error that tells a stream's reader it fell behind the run's log
/// ([`crate::live::Followed::Behind`]).
pub(crate) fn behind(id: &Value) -> String {
    failure(id, &RpcError::new(code::INTERNAL, crate::live::BEHIND)).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn message(parts: Value) -> WireMessage {
        serde_json::from_value(json!({"messageId": "m", "role": "ROLE_USER", "parts": parts})).unwrap()
    }

    #[test]
    fn a_data_part_carries_the_mcp_selection_and_decisions() {
        let m = message(
            json!([{"text": "hi"}, {"data": {"mcp": {"servers": ["time"]}}}, {"data": {"approved": false, "message": "no"}}]),
        );
        let incoming = incoming(&m).unwrap();
        assert_eq!(incoming.text, "hi");
        assert_eq!(incoming.mcp, Some(json!({"servers": ["time"]})));
        assert_eq!(
            incoming.decisions,
            [(
                None,
                Decision::Reject {
                    message: Some("no".into())
                }
            )]
        );
    }

    #[test]
    fn inline_stdio_and_a_second_selection_are_refused() {
        let stdio = message(json!([{"data": {"mcp": {"servers": [{"name": "x", "command": "sh"}]}}}]));
        assert_eq!(incoming(&stdio).unwrap_err().code, code::INVALID_PARAMS);
        let twice = message(json!([{"data": {"mcp": {"servers": []}}}, {"data": {"mcp": {"servers": []}}}]));
        assert!(incoming(&twice).unwrap_err().message.contains("more than one"));
        let file = message(json!([{"url": "https://example.com/a.png"}]));
        assert_eq!(incoming(&file).unwrap_err().code, code::CONTENT_TYPE_NOT_SUPPORTED);
    }
}
