//! modu's run events as AG-UI events (the JSON of `@ag-ui/core` 1.0's schemas).
//!
//! One assistant message per model call: its reasoning streams as `REASONING_START`,
//! `REASONING_MESSAGE_START / CONTENT / END`, `REASONING_END`; its text as `TEXT_MESSAGE_START /
//! CONTENT / END`; its tool calls as `TOOL_CALL_START / ARGS / END` with that message as
//! `parentMessageId`, the arguments as they stream when the server sends the call's id with its
//! first fragment (else whole, when the call starts). A tool's result goes out as `TOOL_CALL_RESULT` as soon as the
//! call ends (modu's `ToolCallResult`); results the stream did not carry (a handoff's, a call
//! refused before it was announced) go out when the run ends. A structured output is the run's
//! state: `STATE_SNAPSHOT {"output": …}` as it is written (modu's `OutputPartial`), and the
//! whole output last, before `RUN_FINISHED`. A tool call's progress (modu's `ToolProgress`) is
//! `CUSTOM` `{"name": "modu.tool_progress", "value": {"toolCallId", "progress", "total",
//! "message"}}`. A run paused for approvals
//! ends with `RUN_FINISHED` and an `interrupt` outcome; a failed run with `RUN_ERROR`.

use std::collections::{BTreeMap, HashSet};

use modu_core::{AgentError, AgentEvent, ApprovalRequest, Role, Usage};
use serde_json::{Value, json};

use crate::mount::{Finished, Item, public_error};

/// Translates one run's items, in order.
pub(crate) struct Translator {
    thread_id: String,
    /// The AG-UI run id (the request's `runId`).
    run_id: String,
    /// The modu run whose events these are: the run id, or the paused run a resume continues.
    source_run_id: String,
    /// How many leading messages of the result are the run's input (not re-sent).
    input_len: usize,
    /// The assistant message of the current model call.
    message_id: Option<String>,
    /// Whether that message's text is open.
    text_open: bool,
    /// Whether any text went out in this run.
    any_text: bool,
    /// Tool calls already announced.
    started: HashSet<String>,
    /// Tool calls whose result went out.
    resulted: HashSet<String>,
    /// Whether a `STATE_SNAPSHOT` of the structured output went out.
    state_sent: bool,
    /// The reasoning message open in the current model call.
    reasoning: Option<String>,
    /// Tool calls of the current model call streaming their arguments: by fragment index, the
    /// call's id (`None`: not streamed, announced whole when it starts).
    streaming: BTreeMap<usize, Option<String>>,
    model: Option<String>,
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn event(kind: &str, mut fields: Value) -> Value {
    if let Value::Object(map) = &mut fields {
        map.insert("type".into(), Value::String(kind.to_owned()));
        map.insert("timestamp".into(), json!(now_ms()));
    }
    fields
}

impl Translator {
    pub(crate) fn new(thread_id: String, run_id: String, input_len: usize) -> Self {
        Translator {
            thread_id,
            source_run_id: run_id.clone(),
            run_id,
            input_len,
            message_id: None,
            text_open: false,
            any_text: false,
            started: HashSet::new(),
            resulted: HashSet::new(),
            state_sent: false,
            reasoning: None,
            streaming: BTreeMap::new(),
            model: None,
        }
    }

    /// The translator of a run that continues the paused modu run `source_run_id`, whose
    /// tool calls `call_ids` were announced already (their results are still sent).
    pub(crate) fn resuming(mut self, source_run_id: String, call_ids: Vec<String>) -> Self {
        self.source_run_id = source_run_id;
        self.started.extend(call_ids);
        self
    }

    /// `RUN_STARTED`, sent before anything else.
    pub(crate) fn started(&self) -> Value {
        event("RUN_STARTED", json!({"threadId": self.thread_id, "runId": self.run_id}))
    }

    fn message_id(&mut self) -> String {
        self.message_id.get_or_insert_with(|| new_id("msg")).clone()
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        if self.text_open {
            self.text_open = false;
            let id = self.message_id();
            out.push(event("TEXT_MESSAGE_END", json!({"messageId": id})));
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.reasoning.take() {
            out.push(event("REASONING_MESSAGE_END", json!({"messageId": id})));
            out.push(event("REASONING_END", json!({"messageId": id})));
        }
    }

    fn reasoning(&mut self, delta: &str, out: &mut Vec<Value>) {
        if delta.is_empty() {
            return;
        }
        let id = match &self.reasoning {
            Some(id) => id.clone(),
            None => {
                let id = new_id("rsn");
                out.push(event("REASONING_START", json!({"messageId": id})));
                out.push(event(
                    "REASONING_MESSAGE_START",
                    json!({"messageId": id, "role": "reasoning"}),
                ));
                self.reasoning = Some(id.clone());
                id
            }
        };
        out.push(event(
            "REASONING_MESSAGE_CONTENT",
            json!({"messageId": id, "delta": delta}),
        ));
    }

    /// A fragment of a tool call as the model streams it.
    fn tool_fragment(
        &mut self,
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: &str,
        out: &mut Vec<Value>,
    ) {
        let call_id = match self.streaming.get(&index) {
            Some(known) => known.clone(),
            None => {
                // Streamed only when the first fragment names the call, with an id no earlier
                // call of the run had (a repeated id is renamed by the run loop: that call is
                // announced whole when it starts).
                let streamed = match (id, name) {
                    (Some(id), Some(name)) if !id.is_empty() && !self.started.contains(&id) => {
                        self.close_reasoning(out);
                        self.close_text(out);
                        let parent = self.message_id();
                        out.push(event(
                            "TOOL_CALL_START",
                            json!({"toolCallId": id, "toolCallName": name, "parentMessageId": parent}),
                        ));
                        self.started.insert(id.clone());
                        Some(id)
                    }
                    _ => None,
                };
                self.streaming.insert(index, streamed.clone());
                streamed
            }
        };
        if let Some(call_id) = call_id
            && !arguments.is_empty()
        {
            out.push(event(
                "TOOL_CALL_ARGS",
                json!({"toolCallId": call_id, "delta": arguments}),
            ));
        }
    }

    /// Ends the model call's streamed tool calls; returns their ids.
    fn close_streamed_calls(&mut self, out: &mut Vec<Value>) -> Vec<String> {
        let ids: Vec<String> = std::mem::take(&mut self.streaming).into_values().flatten().collect();
        for call_id in &ids {
            out.push(event("TOOL_CALL_END", json!({"toolCallId": call_id})));
        }
        ids
    }

    /// Closes everything the current model call has open; returns the ids of its streamed calls.
    fn close_call(&mut self, out: &mut Vec<Value>) -> Vec<String> {
        self.close_reasoning(out);
        self.close_text(out);
        self.close_streamed_calls(out)
    }

    fn text(&mut self, delta: &str, out: &mut Vec<Value>) {
        if delta.is_empty() {
            return;
        }
        self.close_reasoning(out);
        let id = self.message_id();
        if !self.text_open {
            self.text_open = true;
            out.push(event(
                "TEXT_MESSAGE_START",
                json!({"messageId": id, "role": "assistant"}),
            ));
        }
        self.any_text = true;
        out.push(event("TEXT_MESSAGE_CONTENT", json!({"messageId": id, "delta": delta})));
    }

    fn tool_call(&mut self, call_id: &str, name: &str, arguments: &str, out: &mut Vec<Value>) {
        if !self.started.insert(call_id.to_owned()) {
            return;
        }
        self.close_text(out);
        let parent = self.message_id();
        out.push(event(
            "TOOL_CALL_START",
            json!({"toolCallId": call_id, "toolCallName": name, "parentMessageId": parent}),
        ));
        if !arguments.is_empty() {
            out.push(event(
                "TOOL_CALL_ARGS",
                json!({"toolCallId": call_id, "delta": arguments}),
            ));
        }
        out.push(event("TOOL_CALL_END", json!({"toolCallId": call_id})));
    }

    /// The AG-UI events of one item.
    pub(crate) fn on(&mut self, item: Item) -> Vec<Value> {
        let mut out = Vec::new();
        match item {
            Item::Event(event) if event.run_id() != self.source_run_id => {}
            Item::Event(AgentEvent::ModelCallStarted { model, .. }) => {
                let _ = self.close_call(&mut out);
                self.message_id = None;
                self.model = Some(model);
            }
            // A strict Plan-and-Execute run shows its answer as FinalDelta.
            Item::Event(AgentEvent::ModelDelta { text, .. } | AgentEvent::FinalDelta { text, .. }) => {
                self.text(&text, &mut out)
            }
            // A strict run's step reasoning stays internal, as its step deltas do.
            Item::Event(AgentEvent::ReasoningDelta {
                text, step_id: None, ..
            }) => self.reasoning(&text, &mut out),
            Item::Event(AgentEvent::ToolCallDelta {
                index,
                id,
                tool,
                arguments,
                ..
            }) => self.tool_fragment(index, id, tool, &arguments, &mut out),
            Item::Event(AgentEvent::ModelCallFinished { .. }) => {
                let _ = self.close_call(&mut out);
            }
            Item::Event(AgentEvent::ModelCallFailed { .. }) => {
                // A retried answer streams again from the start, as a new message. Its
                // streamed calls end here, and are announced again by the retry.
                for call_id in self.close_call(&mut out) {
                    self.started.remove(&call_id);
                }
                self.message_id = None;
            }
            Item::Event(AgentEvent::ToolCallStarted {
                call_id,
                tool,
                arguments,
                ..
            }) => self.tool_call(&call_id, &tool, &arguments.to_string(), &mut out),
            Item::Event(AgentEvent::ToolCallResult { call_id, content, .. }) => {
                self.tool_result(&call_id, &content, &mut out)
            }
            // AG-UI has no progress event: a custom one, for an announced call.
            Item::Event(AgentEvent::ToolProgress {
                call_id,
                progress,
                total,
                message,
                ..
            }) if self.started.contains(&call_id) => out.push(event(
                "CUSTOM",
                json!({"name": "modu.tool_progress",
                       "value": {"toolCallId": call_id, "progress": progress, "total": total, "message": message}}),
            )),
            // Structured output as it is written: the run's state.
            Item::Event(AgentEvent::OutputPartial { snapshot, .. }) => {
                self.state_sent = true;
                out.push(event("STATE_SNAPSHOT", json!({"snapshot": {"output": snapshot}})));
            }
            Item::Event(_) => {}
            Item::Done(finished) => self.done(*finished, &mut out),
        }
        out
    }

    /// `TOOL_CALL_RESULT` for an announced call, once.
    fn tool_result(&mut self, call_id: &str, content: &str, out: &mut Vec<Value>) {
        if self.started.contains(call_id) && self.resulted.insert(call_id.to_owned()) {
            out.push(event(
                "TOOL_CALL_RESULT",
                json!({"messageId": new_id("msg"), "toolCallId": call_id, "content": content, "role": "tool"}),
            ));
        }
    }

    fn done(&mut self, finished: Finished, out: &mut Vec<Value>) {
        let _ = self.close_call(out);
        // Calls that never started (refused, or waiting for approval), then every result.
        for message in finished.messages.iter().skip(self.input_len) {
            match message.role {
                Role::Assistant if message.has_tool_calls() => {
                    self.message_id = Some(new_id("msg"));
                    for call in &message.tool_calls {
                        self.tool_call(&call.id, &call.name, &call.arguments, out);
                    }
                }
                Role::Tool => {
                    if let Some(call_id) = message.tool_call_id.as_deref() {
                        self.tool_result(call_id, &message.text(), out);
                    }
                }
                _ => {}
            }
        }
        let usage = self.usage(&finished.usage);
        if !finished.interruptions.is_empty() || matches!(finished.error, Some(AgentError::Interrupted { .. })) {
            let interrupts: Vec<Value> = finished
                .interruptions
                .iter()
                .map(|r| interrupt(&self.source_run_id, r))
                .collect();
            if !interrupts.is_empty() {
                out.push(event(
                    "RUN_FINISHED",
                    json!({"threadId": self.thread_id, "runId": self.run_id,
                           "outcome": {"type": "interrupt", "interrupts": interrupts}, "usage": usage}),
                ));
                return;
            }
        }
        if finished.waits_for_input_only() {
            // AG-UI `resume` answers approvals; an ask for input is answered on run control.
            out.push(event(
                "RUN_ERROR",
                json!({"message": INPUT_REQUIRED, "code": "input_required", "usage": usage}),
            ));
            return;
        }
        if let Some(error) = &finished.error {
            tracing::warn!(error = %error, run_id = %self.run_id, "AG-UI run failed");
            let (code, message) = public_error(error);
            out.push(event(
                "RUN_ERROR",
                json!({"message": message, "code": code, "usage": usage}),
            ));
            return;
        }
        if !self.any_text
            && let Some(text) = finished.text.as_deref().filter(|t| !t.is_empty())
        {
            self.message_id = Some(new_id("msg"));
            self.text(text, out);
            self.close_text(out);
        }
        let mut fields = json!({"threadId": self.thread_id, "runId": self.run_id,
                                "outcome": {"type": "success"}, "usage": usage});
        // The state ends as the whole, checked output (a partial may have been the last).
        if self.state_sent
            && let Some(output) = &finished.output
        {
            out.push(event("STATE_SNAPSHOT", json!({"snapshot": {"output": output}})));
        }
        if let Some(output) = finished.output.filter(|o| !o.is_null()) {
            fields["result"] = output;
        }
        out.push(event("RUN_FINISHED", fields));
    }

    fn usage(&self, usage: &Usage) -> Value {
        let mut entry = json!({"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens,
                               "totalTokens": usage.input_tokens.saturating_add(usage.output_tokens)});
        if let Some(model) = &self.model {
            entry["model"] = json!(model);
        }
        json!([entry])
    }
}

/// The id of the interrupt for a call of a paused run: `{run id}#{call id}` (a run id the
/// AG-UI endpoint accepts has no `#`).
pub(crate) fn interrupt_id(run_id: &str, call_id: &str) -> String {
    format!("{run_id}#{call_id}")
}

/// What a run paused for asks for input alone ends with (AG-UI `RUN_ERROR`, code
/// `input_required`).
pub(crate) const INPUT_REQUIRED: &str = "the run waits for a person's input: list its asks at GET /agents/{agent}/runs/{runId}/inputs, answer each (POST .../answer or .../decline), then POST .../resume";

/// A call waiting for approval as an AG-UI interrupt; a resume entry answers it by its id.
fn interrupt(run_id: &str, request: &ApprovalRequest) -> Value {
    json!({
        "id": interrupt_id(run_id, &request.call_id),
        "reason": "tool_approval",
        "message": format!("the tool {} waits for approval", request.tool_name),
        "toolCallId": request.call_id,
        "metadata": {"tool": request.tool_name, "arguments": request.arguments, "runId": run_id},
        "responseSchema": {
            "type": "object",
            "properties": {
                "approved": {"type": "boolean"},
                "always": {"type": "boolean"},
                "message": {"type": "string"}
            },
            "required": ["approved"]
        },
    })
}
