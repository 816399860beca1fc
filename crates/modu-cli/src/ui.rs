//! Terminal output shared by `run`, `chat` and `resume`: streaming a run, the progress
//! indicator, tool-call lines, approval prompts and one-line errors.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use modu::{Agent, AgentRequest, RunStream, StreamItem};
use modu::{
    AgentError, AgentEvent, ApprovalRequest, EventSink, FailedRun, InputRequest, RunOutcome, RunReport, SinkError,
    ToolErrorKind,
};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

use crate::commands::Failure;
pub use crate::time::rfc3339;

/// Whether to draw the progress indicator: only when stdout and stderr are both terminals.
pub fn progress_enabled() -> bool {
    std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

/// The spinner drawing now, if any: lines printed on stderr meanwhile go above it.
static SPINNER: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Runs `print` (which writes whole lines on stderr) with the spinner, if one draws, erased
/// meanwhile; it redraws below.
fn above_spinner(print: impl FnOnce()) {
    let current = SPINNER.lock().unwrap_or_else(PoisonError::into_inner).clone();
    match current {
        Some(bar) => bar.suspend(print),
        None => print(),
    }
}

/// A `⠋ thinking…` spinner on stderr (indicatif), drawn until [`Spinner::stop`] (or drop).
pub struct Spinner {
    bar: Option<ProgressBar>,
}

impl Spinner {
    /// Starts one, or a no-op when `enabled` is false.
    pub fn start(enabled: bool) -> Spinner {
        let bar = enabled.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(ProgressStyle::default_spinner().tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ "));
            bar.set_message("thinking…");
            bar.enable_steady_tick(Duration::from_millis(80));
            *SPINNER.lock().unwrap_or_else(PoisonError::into_inner) = Some(bar.clone());
            bar
        });
        Spinner { bar }
    }

    /// Stops and erases it (idempotent).
    pub fn stop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
            SPINNER.lock().unwrap_or_else(PoisonError::into_inner).take();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What to show while a run streams.
#[derive(Clone, Copy, Debug)]
pub struct Show {
    /// Print the answer's text to stdout as it arrives.
    pub text: bool,
    /// Draw the progress indicator until the first token.
    pub progress: bool,
    /// Print a reasoning model's reasoning to stderr as it arrives (dimmed on a terminal).
    pub reasoning: bool,
}

/// The tool's name, or the external tool's for MCP calls.
fn shown_name(tool: &str, arguments: &Value) -> String {
    if let Some(name) = meta_call_target(tool, arguments) {
        return name.to_owned();
    }
    tool.to_owned()
}

/// The external tool of an MCP meta-tool call: events name it (`Tool::identity`) and carry the
/// meta tool's arguments `{tool_name, arguments}`; older callers pass `mcp_call_tool` itself.
fn meta_call_target<'a>(tool: &str, arguments: &'a Value) -> Option<&'a str> {
    let name = arguments.get("tool_name").and_then(Value::as_str)?;
    (tool == modu::mcp::CALL_TOOL_NAME || tool == name).then_some(name)
}

/// `tool(args)`, naming the external tool for MCP calls, with secret keys of the arguments
/// masked (approval prompts show them whole: the person deciding needs them).
pub fn describe_call(tool: &str, arguments: &Value) -> String {
    let masker = modu::sinks::SecretMasker::default();
    if let Some(name) = meta_call_target(tool, arguments) {
        let args = masker.mask_value(&arguments.get("arguments").cloned().unwrap_or(Value::Null));
        return format!("{name}({args})");
    }
    format!("{tool}({})", masker.mask_value(arguments))
}

/// An [`EventSink`] printing tool calls on stderr as they happen: `→ tool(args)` when a call
/// starts, `✗ tool rejected` or `✗ tool failed: why` when it does not succeed. As a sink it sees
/// every run of the agent, new and resumed, whether or not its caller streams.
#[derive(Debug, Default)]
pub struct ToolCallPrinter {
    /// What each call is shown as, by call id (MCP calls by their external tool).
    names: Mutex<HashMap<String, String>>,
}

impl ToolCallPrinter {
    /// Shows the call `call_id` as `name` (for calls whose approval was asked in another process).
    pub fn remember(&self, call_id: &str, name: String) {
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(call_id.to_owned(), name);
    }

    fn forget(&self, call_id: &str) -> Option<String> {
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(call_id)
    }
}

#[async_trait]
impl EventSink for ToolCallPrinter {
    async fn publish(&self, event: &AgentEvent) -> Result<(), SinkError> {
        match event {
            AgentEvent::ToolCallStarted {
                call_id,
                tool,
                arguments,
                ..
            } => {
                above_spinner(|| eprintln!("→ {}", describe_call(tool, arguments)));
                self.remember(call_id, shown_name(tool, arguments));
            }
            AgentEvent::ApprovalRequested { request, .. } => {
                self.remember(&request.call_id, request.tool_name.clone());
            }
            AgentEvent::ToolCallFinished {
                call_id,
                tool,
                ok,
                error,
                ..
            } => {
                let name = self.forget(call_id).unwrap_or_else(|| tool.clone());
                match error {
                    _ if *ok => {}
                    Some(e) if e.kind == ToolErrorKind::Rejected => above_spinner(|| eprintln!("✗ {name} rejected")),
                    Some(e) => above_spinner(|| eprintln!("✗ {name} failed: {e}")),
                    None => above_spinner(|| eprintln!("✗ {name} failed")),
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// It prints tool lines; the text comes from the run's stream.
    fn wants_deltas(&self) -> bool {
        false
    }
}

/// Streams one run; returns its result. Text goes to stdout (flushed per delta), tool calls to
/// stderr. Stdout that cannot be written stops the run: [`Failure::Output`] (a closed pipe
/// included: its reader wants no more).
pub async fn stream(agent: &Agent<()>, request: AgentRequest<()>, show: Show) -> Result<RunOutcome<String>, Failure> {
    show_run(agent, agent.stream(request), show).await
}

/// Resumes a run, streaming it; returns its result (or stops it as [`stream`] does).
pub async fn resume(agent: &Agent<()>, run_id: &str, show: Show) -> Result<RunOutcome<String>, Failure> {
    show_run(agent, agent.resume_stream(run_id, ()), show).await
}

/// Writes `bytes` to stdout now; an error is the command's ([`Failure::Output`]).
fn put(stdout: &mut std::io::Stdout, bytes: &[u8]) -> Result<(), Failure> {
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map_err(Failure::Output)
}

/// Ends a reasoning line on stderr (and its dimming).
fn end_reasoning(dim: bool) {
    let mut stderr = std::io::stderr();
    let _ = stderr.write_all(if dim { b"\x1b[0m\n".as_slice() } else { b"\n".as_slice() });
    let _ = stderr.flush();
}

/// Shows a streaming run (new or resumed) until its result. Returning early drops `stream`,
/// which stops the run.
async fn show_run(agent: &Agent<()>, mut stream: RunStream<String>, show: Show) -> Result<RunOutcome<String>, Failure> {
    let mut spinner = Spinner::start(show.progress);
    let mut printed = false;
    // Text of the current model call is on screen (a retry after a failure restarts it).
    let mut partial = false;
    let mut at_line_start = true;
    // Reasoning is on stderr now, its line not ended yet.
    let mut thinking = false;
    let dim = std::io::stderr().is_terminal();
    // Tool calls are printed by ToolCallPrinter, the agent's event sink.
    let mut stdout = std::io::stdout();
    while let Some(item) = stream.next().await {
        if thinking && !matches!(item, StreamItem::Event(AgentEvent::ReasoningDelta { .. })) {
            end_reasoning(dim);
            thinking = false;
        }
        match item {
            // A standard run's reasoning (a strict run's `stream` keeps it internal).
            StreamItem::Event(AgentEvent::ReasoningDelta { text, .. }) => {
                spinner.stop();
                if show.reasoning && show.text && !text.is_empty() {
                    let mut stderr = std::io::stderr();
                    if !thinking && dim {
                        let _ = stderr.write_all(b"\x1b[2m");
                    }
                    let _ = stderr.write_all(text.as_bytes());
                    let _ = stderr.flush();
                    thinking = true;
                }
            }
            // The answer's text: every delta of a standard run, the FINALIZE deltas of a strict
            // Plan-and-Execute run (its `stream` hides the internal steps).
            StreamItem::Event(AgentEvent::ModelDelta { text, .. } | AgentEvent::FinalDelta { text, .. }) => {
                spinner.stop();
                if show.text && !text.is_empty() {
                    put(&mut stdout, text.as_bytes())?;
                    printed = true;
                    partial = true;
                    at_line_start = text.ends_with('\n');
                }
            }
            StreamItem::Event(AgentEvent::ModelCallFinished { .. }) => {
                spinner.stop();
                // What the model wrote before it called tools ends its line: the next model
                // call's text starts on a new one.
                if partial && !at_line_start {
                    put(&mut stdout, b"\n")?;
                    at_line_start = true;
                }
                partial = false;
            }
            StreamItem::Event(AgentEvent::ModelCallFailed { will_retry: true, .. }) => {
                // The retried call streams its answer from the start: end the partial line.
                if partial {
                    put(&mut stdout, b"\n")?;
                    eprintln!("(the model server failed mid-answer; retrying)");
                    at_line_start = true;
                    partial = false;
                }
            }
            StreamItem::Event(_) => {}
            StreamItem::Completed(_) | StreamItem::Paused(_) | StreamItem::Failed(_) => {
                let Some(result) = item.into_outcome() else { continue };
                spinner.stop();
                // The run has ended: a reader that has gone leaves its result as it is.
                let ended = |written: Result<(), Failure>| match written {
                    Err(Failure::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                    other => other,
                };
                if printed && !at_line_start {
                    ended(put(&mut stdout, b"\n"))?;
                }
                // An answer that did not stream (a finished Plan-and-Execute run's stored answer,
                // replayed on resume) is printed whole.
                if show.text
                    && !printed
                    && let Some(text) = result.output()
                {
                    ended(put(&mut stdout, format!("{text}\n").as_bytes()))?;
                }
                if result.stats().answer_cut {
                    eprintln!(
                        "(the answer was cut at the model's output limit: raise `max_tokens` under [model] in modu.toml, or the server's context, for a whole one)"
                    );
                }
                return Ok(result);
            }
        }
    }
    spinner.stop();
    Ok(RunOutcome::Failed(FailedRun::new(
        AgentError::Cancelled,
        RunReport::new("", agent.name()),
    )))
}

/// Lines of stdin, shared by prompts and approval answers (works with a pipe).
pub struct Input {
    lines: Lines<BufReader<Stdin>>,
}

impl Input {
    /// Stdin.
    pub fn stdin() -> Input {
        Input {
            lines: BufReader::new(tokio::io::stdin()).lines(),
        }
    }

    /// The next line, `None` at end of input.
    pub async fn line(&mut self) -> Option<String> {
        self.lines.next_line().await.ok().flatten()
    }

    /// The answer to a prompt just printed on stderr. When stdin is not a terminal the answer
    /// is echoed, so a log reads `approve …? [y/N] y`; at end of input the prompt's line ends.
    pub async fn answer(&mut self) -> Option<String> {
        let answer = self.line().await;
        if !std::io::stdin().is_terminal() {
            eprintln!("{}", answer.as_deref().unwrap_or_default());
        }
        answer
    }
}

/// Whether an approval answer is yes (`y` or `yes`, any case); anything else rejects.
pub fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The prompt for one waiting call: `approve <tool>(<args>)? [y/N] `.
pub fn approval_prompt(request: &ApprovalRequest) -> String {
    let args = request.metadata.get("mcp_arguments").unwrap_or(&request.arguments);
    format!("approve {}({args})? [y/N] ", request.tool_name)
}

/// Asks about every waiting call, records the answers and resumes (streaming as `show` says),
/// until the run no longer waits. At end of input the run stays paused (resume it later with
/// `modu resume`). An answer that cannot be recorded is [`Failure::Invalid`]; stdout that
/// cannot be written, [`Failure::Output`].
pub async fn settle(
    agent: &Agent<()>,
    mut result: RunOutcome<String>,
    input: &mut Input,
    show: Show,
) -> Result<RunOutcome<String>, Failure> {
    let invalid = |e: AgentError| Failure::Invalid(e.to_string());
    while result.is_paused() {
        let run_id = result.run_id().to_owned();
        for request in result.approvals() {
            eprint!("{}", approval_prompt(request));
            let _ = std::io::stderr().flush();
            let Some(answer) = input.answer().await else {
                return Ok(result);
            };
            if is_yes(&answer) {
                agent.approve(&run_id, &request.call_id).await.map_err(invalid)?;
            } else {
                agent
                    .reject(&run_id, &request.call_id, Some("the user said no".into()))
                    .await
                    .map_err(invalid)?;
            }
        }
        for request in result.inputs() {
            loop {
                let Some(answer) = ask_input(request, input).await else {
                    return Ok(result);
                };
                let recorded = match answer {
                    Some(value) => agent.answer(&run_id, &request.call_id, value).await,
                    None => {
                        agent
                            .decline(&run_id, &request.call_id, Some("the user declined".into()))
                            .await
                    }
                };
                match recorded {
                    Ok(()) => break,
                    Err(AgentError::InvalidInput { message, .. }) => {
                        eprintln!("  that does not fit: {message}");
                    }
                    Err(e) => return Err(invalid(e)),
                }
            }
        }
        result = show_run(agent, agent.resume_stream(&run_id, ()), show).await?;
    }
    Ok(result)
}

/// Asks a person for the input a call waits for: each field of an object schema on its own
/// line (`  seat (string): `), otherwise one value. A value that does not fit is asked again.
/// `Some(None)`: declined (an empty answer to the first question); `None`: end of input.
async fn ask_input(request: &InputRequest, input: &mut Input) -> Option<Option<serde_json::Value>> {
    eprintln!("{} asks: {}", request.tool_name, request.prompt);
    let fields = request.schema.get("properties").and_then(serde_json::Value::as_object);
    let Some(fields) = fields.filter(|_| request.schema.get("type").is_none_or(|t| t == "object")) else {
        return ask_value("answer", &request.schema, true, input).await;
    };
    let required: Vec<&str> = request
        .schema
        .get("required")
        .and_then(serde_json::Value::as_array)
        .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let mut answer = serde_json::Map::new();
    for (name, schema) in fields {
        let needed = required.contains(&name.as_str());
        match ask_value(name, schema, needed || answer.is_empty(), input).await? {
            Some(value) => {
                answer.insert(name.clone(), value);
            }
            None if answer.is_empty() && needed => return Some(None),
            None => {}
        }
    }
    Some(Some(serde_json::Value::Object(answer)))
}

/// One value for `schema`, read as its type says (a string as typed, a number, yes/no for a
/// boolean, JSON otherwise). `Some(None)` for an empty line, asked again when the value does
/// not parse.
async fn ask_value(
    name: &str,
    schema: &serde_json::Value,
    empty_declines: bool,
    input: &mut Input,
) -> Option<Option<serde_json::Value>> {
    let kind = schema.get("type").and_then(serde_json::Value::as_str).unwrap_or("json");
    let hint = if kind == "boolean" { "y/n" } else { kind };
    let description = schema
        .get("description")
        .or_else(|| schema.get("title"))
        .and_then(serde_json::Value::as_str)
        .map(|d| format!(", {d}"))
        .unwrap_or_default();
    let empty = if empty_declines {
        "; empty declines"
    } else {
        "; empty skips"
    };
    loop {
        eprint!("  {name} ({hint}{description}{empty}): ");
        let _ = std::io::stderr().flush();
        let line = input.answer().await?;
        let line = line.trim();
        if line.is_empty() {
            return Some(None);
        }
        let value = match kind {
            "string" => Some(serde_json::Value::String(line.to_owned())),
            "boolean" => Some(serde_json::Value::Bool(
                is_yes(line) || line.eq_ignore_ascii_case("true"),
            )),
            _ => serde_json::from_str(line).ok(),
        };
        match value {
            Some(value) => return Some(Some(value)),
            None => eprintln!("  not a {kind} value; try again"),
        }
    }
}

/// Errors are one line, whatever a library put in them.
pub fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join("; ")
}

/// One line for a failed run; a model server that cannot be reached names its URL.
pub fn run_error(error: &AgentError, model_url: &str) -> String {
    one_line(&match error {
        AgentError::Model { kind, message, .. } if kind == "transport" => {
            let message = message.strip_prefix("transport error: ").unwrap_or(message);
            format!("cannot reach the model server at {model_url}: {message}")
        }
        AgentError::Model { kind, .. } if kind == "timeout" => {
            format!("the model server at {model_url} did not answer in time: {error}")
        }
        other => other.to_string(),
    })
}

/// A fresh session id.
pub fn new_session_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// How many messages are stored under a session id the user gave (`None` when the store cannot
/// say: the run reports the store's error). A mistyped id would otherwise start a new
/// conversation without a word.
pub async fn stored_messages(stores: &crate::build::Stores, session: &str) -> Option<usize> {
    stores
        .conversations
        .load(session)
        .await
        .ok()
        .map(|history| history.len())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    use serde_json::json;

    #[test]
    fn mcp_calls_are_shown_by_their_external_tool() {
        let args = json!({"tool_name": "weather__forecast", "arguments": {"city": "Oslo"}});
        assert_eq!(
            describe_call("mcp_call_tool", &args),
            r#"weather__forecast({"city":"Oslo"})"#
        );
        assert_eq!(describe_call("add", &json!({"a": 1})), r#"add({"a":1})"#);
        let shown = describe_call("login", &json!({"user": "ann", "password": "hunter2"}));
        assert!(shown.contains("ann") && !shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn approval_prompts_show_the_mcp_arguments() {
        let mut request = ApprovalRequest::new(
            "c1",
            "weather__forecast",
            json!({"tool_name": "weather__forecast", "arguments": {"city": "Oslo"}}),
        );
        request.metadata.insert("mcp_arguments".into(), json!({"city": "Oslo"}));
        assert_eq!(
            approval_prompt(&request),
            r#"approve weather__forecast({"city":"Oslo"})? [y/N] "#
        );
    }

    #[test]
    fn unreachable_model_servers_are_named() {
        let error = AgentError::Model {
            kind: "transport".into(),
            message: "transport error: cannot connect to the model server (http://h/v1/chat/completions)".into(),
            retryable: true,
        };
        assert_eq!(
            run_error(&error, "http://h/v1"),
            "cannot reach the model server at http://h/v1: cannot connect to the model server (http://h/v1/chat/completions)"
        );
        assert_eq!(
            run_error(&AgentError::Cancelled, "http://h/v1"),
            "the run was cancelled"
        );
    }
}
