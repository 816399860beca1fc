//! The hand-written baseline of the load benchmark: what a good engineer writes without a
//! framework (one `reqwest::Client`, typed serde request and response structs, the tool schema
//! serialised once, a tool-call loop).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::AddArgs;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One client, the URL and the tool schema, made once.
pub struct Baseline {
    http: reqwest::Client,
    url: String,
    model: String,
    tools: Box<RawValue>,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: &'a [Msg],
    tools: &'a RawValue,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Msg {
    User { content: String },
    Assistant { content: String, tool_calls: Vec<ToolCall> },
    Tool { tool_call_id: String, content: String },
}

#[derive(Serialize, Deserialize)]
struct ToolCall {
    id: String,
    #[serde(rename = "type", default = "function")]
    kind: String,
    function: Function,
}

fn function() -> String {
    "function".to_owned()
}

#[derive(Serialize, Deserialize, Default)]
struct Function {
    name: String,
    arguments: String,
}

#[derive(Deserialize, Default, Clone, Copy)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

// stream: false
#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: AnswerMessage,
}

#[derive(Deserialize)]
struct AnswerMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
}

// stream: true
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Delta,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<CallDelta>,
}

#[derive(Deserialize)]
struct CallDelta {
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// One answer: its text and tool calls.
struct Answer {
    text: String,
    tool_calls: Vec<ToolCall>,
    usage: Usage,
}

impl Baseline {
    pub fn new(base_url: &str, model: &str) -> Self {
        let tools = serde_json::json!([{"type": "function", "function": {
            "name": "add",
            "description": "Add two integers",
            "parameters": {"type": "object",
                "properties": {"a": {"type": "integer", "format": "int64"},
                               "b": {"type": "integer", "format": "int64"}},
                "required": ["a", "b"]},
        }}]);
        Baseline {
            http: reqwest::Client::builder().tcp_nodelay(true).build().unwrap(),
            url: format!("{base_url}/chat/completions"),
            model: model.to_owned(),
            tools: RawValue::from_string(tools.to_string()).unwrap(),
        }
    }

    /// The agent job: ask, run the tool calls the model asks for, ask again, until the
    /// model answers in text. Returns the answer and the tokens used.
    pub async fn run(&self, question: &str, stream: bool) -> Result<(String, Usage), Error> {
        let mut messages = vec![Msg::User {
            content: question.to_owned(),
        }];
        let mut total = Usage::default();
        for _ in 0..8 {
            let answer = if stream {
                self.ask_streamed(&messages).await?
            } else {
                self.ask(&messages).await?
            };
            total.prompt_tokens += answer.usage.prompt_tokens;
            total.completion_tokens += answer.usage.completion_tokens;
            if answer.tool_calls.is_empty() {
                return Ok((answer.text, total));
            }
            let mut results = Vec::with_capacity(answer.tool_calls.len());
            for call in &answer.tool_calls {
                let content = match call.function.name.as_str() {
                    "add" => match serde_json::from_str::<AddArgs>(&call.function.arguments) {
                        Ok(a) => (a.a + a.b).to_string(),
                        Err(e) => format!("invalid arguments: {e}"),
                    },
                    other => format!("unknown tool {other}"),
                };
                results.push(Msg::Tool {
                    tool_call_id: call.id.clone(),
                    content,
                });
            }
            messages.push(Msg::Assistant {
                content: answer.text,
                tool_calls: answer.tool_calls,
            });
            messages.extend(results);
        }
        Err("no answer after 8 turns".into())
    }

    fn body(&self, messages: &[Msg], stream: bool) -> Result<Vec<u8>, Error> {
        Ok(serde_json::to_vec(&Request {
            model: &self.model,
            messages,
            tools: &self.tools,
            stream,
            stream_options: stream.then_some(StreamOptions { include_usage: true }),
        })?)
    }

    async fn post(&self, body: Vec<u8>) -> Result<reqwest::Response, Error> {
        let resp = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await?;
        if !resp.status().is_success() {
            return Err(format!("status {}", resp.status()).into());
        }
        Ok(resp)
    }

    async fn ask(&self, messages: &[Msg]) -> Result<Answer, Error> {
        let resp = self.post(self.body(messages, false)?).await?;
        let bytes = resp.bytes().await?;
        let completion: Completion = serde_json::from_slice(&bytes)?;
        let choice = completion.choices.into_iter().next().ok_or("no choice")?;
        Ok(Answer {
            text: choice.message.content.unwrap_or_default(),
            tool_calls: choice.message.tool_calls,
            usage: completion.usage.unwrap_or_default(),
        })
    }

    async fn ask_streamed(&self, messages: &[Msg]) -> Result<Answer, Error> {
        let mut resp = self.post(self.body(messages, true)?).await?;
        let mut answer = Answer {
            text: String::new(),
            tool_calls: Vec::new(),
            usage: Usage::default(),
        };
        let mut buf: Vec<u8> = Vec::new();
        let mut done = false;
        while !done && let Some(bytes) = resp.chunk().await? {
            buf.extend_from_slice(&bytes);
            let mut start = 0;
            while let Some(nl) = buf[start..].iter().position(|&b| b == b'\n') {
                let line = &buf[start..start + nl];
                start += nl + 1;
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let Some(data) = line.strip_prefix(b"data:") else {
                    continue;
                };
                let data = data.trim_ascii_start();
                if data == b"[DONE]" {
                    done = true;
                    break;
                }
                fold(&mut answer, serde_json::from_slice(data)?);
            }
            buf.drain(..start);
        }
        if !done {
            return Err("the stream ended without [DONE]".into());
        }
        // Read the body to its end: hyper pools a connection only after its response body
        // ended; a body dropped before its last chunk closes the connection.
        while resp.chunk().await?.is_some() {}
        Ok(answer)
    }
}

fn fold(answer: &mut Answer, chunk: Chunk) {
    if let Some(u) = chunk.usage {
        answer.usage = u;
    }
    for choice in chunk.choices {
        if let Some(t) = choice.delta.content {
            answer.text.push_str(&t);
        }
        for d in choice.delta.tool_calls {
            if answer.tool_calls.len() <= d.index {
                answer.tool_calls.resize_with(d.index + 1, || ToolCall {
                    id: String::new(),
                    kind: function(),
                    function: Function::default(),
                });
            }
            let call = &mut answer.tool_calls[d.index];
            if let Some(id) = d.id {
                call.id = id;
            }
            if let Some(f) = d.function {
                if let Some(name) = f.name {
                    call.function.name = name;
                }
                if let Some(args) = f.arguments {
                    call.function.arguments.push_str(&args);
                }
            }
        }
    }
}
