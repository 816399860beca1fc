//! [`ScriptedModel`]: a chat model that answers from a script.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use modu_core::{
    ChatEvent, ChatModel, ChatRequest, ChatResponse, ChatResponseBuilder, ChatStream, FinishReason, ModelError, Usage,
};

type ErrorFactory = Arc<dyn Fn() -> ModelError + Send + Sync>;
type Responder = Arc<dyn Fn(&ChatRequest) -> Vec<ChatEvent> + Send + Sync>;

#[derive(Clone)]
enum Step {
    Events {
        events: Vec<ChatEvent>,
        delay: Duration,
    },
    Error(ErrorFactory),
    FailMidStream {
        events: Vec<ChatEvent>,
        error: ErrorFactory,
    },
    Respond(Responder),
}

struct Inner {
    name: String,
    steps: Mutex<VecDeque<Step>>,
    cycle: bool,
    script: Vec<Step>,
    requests: Mutex<Vec<ChatRequest>>,
    record: bool,
    usage: Usage,
}

/// A [`ChatModel`] answering from a script, one step per request, and recording the requests.
///
/// Clones share the script and the record, so a test can keep a clone after handing one to an
/// agent. When the script runs out, requests fail with an `InvalidResponse` error saying so
/// (unless [`ScriptedModel::cycle`] was called).
///
/// ```
/// use modu_testing::ScriptedModel;
/// use serde_json::json;
/// let model = ScriptedModel::new()
///     .tool_calls([("add", json!({"a": 1, "b": 2})), ("mul", json!({"a": 3, "b": 4}))])
///     .text_deltas(["The answers ", "are 3 and 12."]);
/// # let _ = model;
/// ```
#[derive(Clone)]
pub struct ScriptedModel {
    inner: Arc<Inner>,
    pending: Vec<Step>,
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptedModel {
    /// An empty script.
    pub fn new() -> Self {
        ScriptedModel {
            inner: Arc::new(Inner {
                name: "scripted".into(),
                steps: Mutex::new(VecDeque::new()),
                cycle: false,
                script: Vec::new(),
                requests: Mutex::new(Vec::new()),
                record: true,
                usage: Usage::new(10, 5),
            }),
            pending: Vec::new(),
        }
    }

    fn push(mut self, step: Step) -> Self {
        // Builder methods run before the model is shared; rebuild the inner state.
        self.pending.push(step);
        let inner = Arc::new(Inner {
            name: self.inner.name.clone(),
            steps: Mutex::new(self.pending.iter().cloned().collect()),
            cycle: self.inner.cycle,
            script: self.pending.clone(),
            requests: Mutex::new(Vec::new()),
            record: self.inner.record,
            usage: self.inner.usage,
        });
        self.inner = inner;
        self
    }

    fn rebuild(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Inner {
            name: self.inner.name.clone(),
            steps: Mutex::new(self.pending.iter().cloned().collect()),
            cycle: self.inner.cycle,
            script: self.pending.clone(),
            requests: Mutex::new(Vec::new()),
            record: self.inner.record,
            usage: self.inner.usage,
        };
        f(&mut inner);
        self.inner = Arc::new(inner);
        self
    }

    fn usage_events(&self, finish: FinishReason) -> [ChatEvent; 2] {
        [
            ChatEvent::Usage {
                usage: self.inner.usage,
            },
            ChatEvent::Finish { reason: finish },
        ]
    }

    /// The model's name (default `"scripted"`).
    pub fn named(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.rebuild(|i| i.name = name)
    }

    /// The usage every answer reports (default 10 in, 5 out).
    pub fn with_usage(self, input: u64, output: u64) -> Self {
        self.rebuild(|i| i.usage = Usage::new(input, output))
    }

    /// Start the script again when it runs out (for benchmarks).
    pub fn cycle(self) -> Self {
        self.rebuild(|i| i.cycle = true)
    }

    /// Do not record requests (for benchmarks).
    pub fn without_recording(self) -> Self {
        self.rebuild(|i| i.record = false)
    }

    /// Answer with this text, as one delta.
    pub fn text(self, text: impl Into<String>) -> Self {
        let [u, f] = self.usage_events(FinishReason::Stop);
        self.push(Step::Events {
            events: vec![ChatEvent::TextDelta { text: text.into() }, u, f],
            delay: Duration::ZERO,
        })
    }

    /// Answer with text streamed as these deltas.
    pub fn text_deltas<I, S>(self, deltas: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut events: Vec<ChatEvent> = deltas
            .into_iter()
            .map(|d| ChatEvent::TextDelta { text: d.into() })
            .collect();
        events.extend(self.usage_events(FinishReason::Stop));
        self.push(Step::Events {
            events,
            delay: Duration::ZERO,
        })
    }

    /// Answer with text after a delay (for timeout tests).
    pub fn delayed_text(self, delay: Duration, text: impl Into<String>) -> Self {
        let [u, f] = self.usage_events(FinishReason::Stop);
        self.push(Step::Events {
            events: vec![ChatEvent::TextDelta { text: text.into() }, u, f],
            delay,
        })
    }

    /// Call one tool with these arguments.
    pub fn tool_call(self, name: impl Into<String>, arguments: serde_json::Value) -> Self {
        self.tool_calls([(name.into(), arguments)])
    }

    /// Call several tools in one answer (ids `call_<n>_<i>`), arguments streamed in fragments.
    pub fn tool_calls<I, S>(self, calls: I) -> Self
    where
        I: IntoIterator<Item = (S, serde_json::Value)>,
        S: Into<String>,
    {
        let raw: Vec<(String, String)> = calls.into_iter().map(|(n, a)| (n.into(), a.to_string())).collect();
        self.raw_tool_calls(raw)
    }

    /// Call one tool with arguments given as raw text (which may be invalid JSON).
    pub fn raw_tool_call(self, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        self.raw_tool_calls([(name.into(), arguments.into())])
    }

    /// Call several tools with raw argument texts.
    pub fn raw_tool_calls<I>(self, calls: I) -> Self
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let step_no = self.pending.len();
        let calls: Vec<(Option<String>, String, String)> = calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, args))| (Some(format!("call_{step_no}_{i}")), name, args))
            .collect();
        self.tool_calls_with_ids(calls)
    }

    /// Call several tools with the ids given (`None`: the call is sent without an id, as some
    /// servers do), so missing and repeated ids can be scripted.
    pub fn tool_calls_with_ids<I, Id, N>(self, calls: I) -> Self
    where
        I: IntoIterator<Item = (Option<Id>, N, String)>,
        Id: Into<String>,
        N: Into<String>,
    {
        let mut events = Vec::new();
        for (i, (id, name, args)) in calls.into_iter().enumerate() {
            let name: String = name.into();
            events.push(ChatEvent::ToolCallDelta {
                index: i,
                id: id.map(Into::into),
                name: Some(name),
                arguments: String::new(),
            });
            // Split the arguments in two fragments, as servers do.
            let mid = (0..=args.len() / 2)
                .rev()
                .find(|&k| args.is_char_boundary(k))
                .unwrap_or(0);
            events.push(ChatEvent::ToolCallDelta {
                index: i,
                id: None,
                name: None,
                arguments: args[..mid].to_owned(),
            });
            events.push(ChatEvent::ToolCallDelta {
                index: i,
                id: None,
                name: None,
                arguments: args[mid..].to_owned(),
            });
        }
        events.extend(self.usage_events(FinishReason::ToolCalls));
        self.push(Step::Events {
            events,
            delay: Duration::ZERO,
        })
    }

    /// Fail the request with the error `f` builds.
    pub fn error(self, f: impl Fn() -> ModelError + Send + Sync + 'static) -> Self {
        self.push(Step::Error(Arc::new(f)))
    }

    /// Stream some text, then fail mid-stream.
    pub fn fail_mid_stream(self, text: impl Into<String>, f: impl Fn() -> ModelError + Send + Sync + 'static) -> Self {
        self.push(Step::FailMidStream {
            events: vec![ChatEvent::TextDelta { text: text.into() }],
            error: Arc::new(f),
        })
    }

    /// Answer with whatever `f` computes from the request.
    pub fn respond(self, f: impl Fn(&ChatRequest) -> Vec<ChatEvent> + Send + Sync + 'static) -> Self {
        self.push(Step::Respond(Arc::new(f)))
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.inner
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many script steps are left.
    pub fn remaining(&self) -> usize {
        self.inner.steps.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// What one scripted step answers.
enum Reply {
    Events(Vec<ChatEvent>, Duration),
    FailMidStream(Vec<ChatEvent>, ModelError),
}

impl ScriptedModel {
    /// Takes the next step of the script (refilling a cycling script) and records the request.
    fn take_step(&self, request: ChatRequest) -> Result<Reply, ModelError> {
        let step = {
            let mut steps = self.inner.steps.lock().unwrap_or_else(PoisonError::into_inner);
            if steps.is_empty() && self.inner.cycle {
                steps.extend(self.inner.script.iter().cloned());
            }
            steps.pop_front()
        };
        let reply = match step {
            None => Err(ModelError::invalid_response("the ScriptedModel's script is exhausted")),
            Some(Step::Error(f)) => Err(f()),
            Some(Step::FailMidStream { events, error }) => Ok(Reply::FailMidStream(events, error())),
            Some(Step::Respond(f)) => Ok(Reply::Events(f(&request), Duration::ZERO)),
            Some(Step::Events { events, delay }) => Ok(Reply::Events(events, delay)),
        };
        if self.inner.record {
            self.inner
                .requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request);
        }
        reply
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn model_name(&self) -> &str {
        &self.inner.name
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        match self.take_step(request)? {
            Reply::FailMidStream(events, error) => {
                let mut items: Vec<Result<ChatEvent, ModelError>> = events.into_iter().map(Ok).collect();
                items.push(Err(error));
                Ok(Box::pin(futures::stream::iter(items)))
            }
            Reply::Events(events, delay) => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
            }
        }
    }

    /// The same answer as the stream folded, without building a stream.
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let (events, delay, error) = match self.take_step(request)? {
            Reply::FailMidStream(events, error) => (events, Duration::ZERO, Some(error)),
            Reply::Events(events, delay) => (events, delay, None),
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Some(error) = error {
            return Err(error);
        }
        let mut builder = ChatResponseBuilder::default();
        for event in events {
            builder.push(event);
        }
        builder.finish()
    }
}
