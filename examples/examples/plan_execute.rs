//! Run with: `cargo run --example plan_execute`
//!
//! Strict Plan-and-Execute: the model plans three steps, each step may call only its own tools,
//! each step ends with a validated step result, and the final answer is written from the
//! committed results. Talks to `OPENAI_BASE_URL` / `OPENAI_MODEL` when set; otherwise to the
//! bundled mock server, scripted with the answers a well-behaved model gives (the mock speaks
//! the exact OpenAI wire format, so every request really goes over HTTP with SSE).
#![allow(clippy::print_stdout)]

use std::io::Write;

use futures::StreamExt;
use modu::openai::OpenAiClient;
use modu::plan::{LlmPlanGenerator, PlanAndExecutePolicy, ToolTraceMode};
use modu::{Agent, AgentEvent, RunLimits, StreamItem, tool};
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::json;

/// Add two integers.
#[tool(idempotent)]
async fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Multiply two integers.
#[tool(idempotent)]
async fn multiply(a: i64, b: i64) -> i64 {
    a * b
}

/// Subtract b from a.
#[tool(idempotent)]
async fn subtract(a: i64, b: i64) -> i64 {
    a - b
}

/// What a well-behaved model answers to this example's requests, in order.
fn script(mock: &MockOpenAiServer) {
    let text = |v: serde_json::Value| MockReply::Text(v.to_string());
    let call = |name: &str, args: serde_json::Value| MockReply::ToolCalls(vec![(name.to_owned(), args.to_string())]);
    // PLAN (structured output, no tools)
    mock.push(text(json!({"steps": [
        {"description": "Add 12 and 30", "allowed_tools": ["add"]},
        {"description": "Multiply the sum by 2", "allowed_tools": ["multiply"]},
        {"description": "Subtract 4 from the product", "allowed_tools": ["subtract"]}
    ]})));
    // s1: ACT_TOOL, then STEP_RESULT
    mock.push(call("add", json!({"a": 12, "b": 30})));
    mock.push(text(json!({"status": "completed", "result": "12 + 30 = 42"})));
    // s2
    mock.push(call("multiply", json!({"a": 42, "b": 2})));
    mock.push(text(json!({"status": "completed", "result": "42 * 2 = 84"})));
    // s3
    mock.push(call("subtract", json!({"a": 84, "b": 4})));
    mock.push(text(json!({"status": "completed", "result": "84 - 4 = 80"})));
    // FINALIZE (text, no tools)
    mock.push(MockReply::Text("(12 + 30) * 2 - 4 = 80.".into()));
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut _mock = None;
    let client = match (std::env::var("OPENAI_BASE_URL"), std::env::var("OPENAI_MODEL")) {
        (Ok(_), Ok(_)) => {
            let client = OpenAiClient::from_env()?;
            println!(
                "model: {} at {}",
                client.model(),
                modu::redact::display_url(client.base_url())
            );
            client
        }
        _ => {
            let mock = MockOpenAiServer::start().await?;
            println!("model: the bundled mock server at {} (scripted)", mock.base_url());
            script(&mock);
            let client = OpenAiClient::new(mock.base_url(), "mock-model")?;
            _mock = Some(mock);
            client
        }
    };

    let agent = Agent::builder(client)
        .name("planner")
        .instructions("Solve arithmetic step by step with the tools. Use only verified step results.")
        .tool(Add)
        .tool(Multiply)
        .tool(Subtract)
        .limits(RunLimits::default().max_steps(4).max_replans(1))
        .decision_policy(
            PlanAndExecutePolicy::new(LlmPlanGenerator::agent_model().max_steps(4))
                .tool_trace_mode(ToolTraceMode::Arguments),
        )
        .build()?;

    // stream_all shows the internal work; stream() would show only the final answer's tokens.
    let mut stream = agent.stream_all("What is (12 + 30) * 2 - 4?");
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::PlanCreated { plan, .. }) => {
                println!("plan:");
                for step in &plan.steps {
                    println!(
                        "  {} {} (tools: {})",
                        step.id,
                        step.description,
                        step.allowed_tools.join(", ")
                    );
                }
            }
            StreamItem::Event(AgentEvent::ToolCallStarted { tool, arguments, .. }) => {
                println!("  tool: {tool}({arguments})");
            }
            StreamItem::Event(AgentEvent::StepCommitted { step_id, .. }) => println!("  committed {step_id}"),
            StreamItem::Event(AgentEvent::PlanVerified { steps, .. }) => {
                println!("verified {steps} steps");
                print!("answer: ");
            }
            StreamItem::Event(AgentEvent::FinalDelta { text, .. }) => {
                print!("{text}");
                std::io::stdout().flush()?;
            }
            StreamItem::Event(_) => {}
            StreamItem::Completed(result) => {
                println!();
                if let Some(plan) = &result.report.plan {
                    println!("tool trace: {}", serde_json::to_string(&plan.tool_trace)?);
                    println!("plan usage: {:?}", plan.usage);
                }
            }
            StreamItem::Failed(result) => {
                println!();
                println!("failed: {:?}", result.error);
                if let Some(failure) = result.report.plan.as_ref().and_then(|p| p.failure.as_ref()) {
                    println!("failure: {}", serde_json::to_string(failure)?);
                }
                std::process::exit(1);
            }
            StreamItem::Paused(paused) => {
                println!("paused for approval of {:?}", paused.approvals);
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
