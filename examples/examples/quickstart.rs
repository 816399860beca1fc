//! Run with: `cargo run --example quickstart`
//!
//! An agent with a tool and structured output. It talks to the OpenAI-compatible server named by
//! `OPENAI_BASE_URL` and `OPENAI_MODEL` (vLLM, llama.cpp, Ollama's /v1, OpenAI; `OPENAI_API_KEY`
//! if it needs one) when they are set, and otherwise to the mock server bundled in
//! `modu-testing`, started on 127.0.0.1 — it says which on the first line.
#![allow(clippy::print_stdout)]

use futures::StreamExt;
use modu::openai::OpenAiClient;
use modu::{Agent, AgentEvent, RetryConfig, StreamItem, tool};
use modu_testing::MockOpenAiServer;

/// Add two integers and return their sum.
#[tool(idempotent, timeout_seconds = 5)]
async fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// The answer the agent must give.
#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Answer {
    /// The result of the computation.
    result: i64,
    /// One sentence explaining it.
    explanation: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the mock alive for the whole run when it is used.
    let mut _mock = None;
    let client = match (std::env::var("OPENAI_BASE_URL"), std::env::var("OPENAI_MODEL")) {
        (Ok(_), Ok(_)) => {
            let client = OpenAiClient::from_env()?;
            println!(
                "model: {} at {} (from OPENAI_BASE_URL / OPENAI_MODEL)",
                client.model(),
                modu::redact::display_url(client.base_url())
            );
            client
        }
        _ => {
            let mock = MockOpenAiServer::start().await?;
            println!(
                "model: the bundled mock server at {} (set OPENAI_BASE_URL and OPENAI_MODEL to use a real one)",
                mock.base_url()
            );
            let client = OpenAiClient::new(mock.base_url(), "mock-model")?;
            _mock = Some(mock);
            client
        }
    };

    let agent = Agent::builder(client)
        .output::<Answer>()
        .name("calculator")
        .instructions("You are a calculator. Use the add tool for every addition, then answer.")
        .tool(Add)
        .retry(RetryConfig::new(2))
        .build()?;

    let mut stream = agent.stream("What is 20 + 22?");
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::ToolCallStarted { tool, arguments, .. }) => {
                println!("tool call: {tool}({arguments})");
            }
            StreamItem::Event(AgentEvent::ToolCallFinished {
                tool, ok, duration_ms, ..
            }) => {
                println!("tool done: {tool} ok={ok} in {duration_ms} ms");
            }
            StreamItem::Event(_) => {}
            StreamItem::Completed(result) => {
                println!("answer: {:?}", result.output);
                let usage = result.report.usage;
                println!(
                    "usage: {} requests, {} input + {} output tokens",
                    usage.requests, usage.input_tokens, usage.output_tokens
                );
            }
            StreamItem::Failed(result) => {
                return Err(format!("the run failed: {:?}", result.error).into());
            }
            StreamItem::Paused(paused) => {
                return Err(format!("the run waits for approval of {:?}", paused.approvals).into());
            }
        }
    }
    Ok(())
}
