//! Run with: `cargo run --example approvals`
//!
//! Human approval: the agent wants to delete a file; the run pauses, this program asks you
//! y/n on the terminal (no terminal, or anything but "y", rejects), records the decision and
//! resumes the run. The model is scripted, so the example runs anywhere.
#![allow(clippy::print_stdout)]

use std::io::{BufRead, Write};
use std::sync::Arc;

use modu::{Agent, InMemoryCheckpointStore, tool};
use modu_testing::ScriptedModel;

/// Delete a file from the project.
#[tool(needs_approval)]
async fn delete_file(path: String) -> String {
    format!("deleted {path} (pretend)")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::new()
        .tool_call("delete_file", serde_json::json!({"path": "build/cache.bin"}))
        .respond(|request| {
            // The scripted model reads the tool's answer, as a real one would.
            let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
            let text = if last.contains("rejected") {
                "Understood, I left the file alone."
            } else {
                "The cache file is gone."
            };
            vec![modu::ChatEvent::TextDelta { text: text.into() }]
        });
    let agent = Agent::builder(model)
        .instructions("Tidy the project.")
        .tool(DeleteFile)
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .build()?;

    let paused = agent.run("Remove the build cache.").await;
    for request in paused.approvals() {
        print!(
            "The agent wants to call {}({}). Approve? [y/n] ",
            request.tool_name, request.arguments
        );
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if answer.trim().eq_ignore_ascii_case("y") {
            agent.approve(paused.run_id(), &request.call_id).await?;
        } else {
            agent
                .reject(paused.run_id(), &request.call_id, Some("the user said no".into()))
                .await?;
            println!("rejected");
        }
    }
    let done = agent.resume(paused.run_id(), ()).await;
    println!("answer: {}", done.into_result()?);
    Ok(())
}
