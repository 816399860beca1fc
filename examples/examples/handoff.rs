//! Run with: `cargo run --example handoff`
//!
//! Two agents: triage hands a refund request to billing. `on_handoff` checks the typed input
//! before anything happens; the result names the agent that answered. Scripted model.
#![allow(clippy::print_stdout)]

use modu::{Agent, Handoff};
use modu_testing::ScriptedModel;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Escalation {
    /// Why billing must take over.
    reason: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let billing = Agent::builder(ScriptedModel::new().text("Billing here: your refund of 30 EUR is approved."))
        .name("billing")
        .instructions("You handle refunds and invoices.")
        .build()?;
    let triage = Agent::builder(
        ScriptedModel::new().tool_call("transfer_to_billing", serde_json::json!({"reason": "refund request"})),
    )
    .name("triage")
    .instructions("Route each request to the right team.")
    .handoff(Handoff::to(&billing).on_handoff(|_ctx, e: Escalation| {
        println!("handoff to billing requested: {}", e.reason);
        if e.reason.is_empty() {
            Err("give a reason".into())
        } else {
            Ok(())
        }
    }))
    .build()?;

    let result = triage.run("I was charged twice, I want my money back.").await;
    println!(
        "{} answered: {}",
        result.report().agent,
        result.output().map_or("(nothing)", String::as_str)
    );
    Ok(())
}
