//! Sampling settings and `tool_choice`: the agent's, a run's own over them, the reset after the
//! model's first tool call, and what a resumed run keeps.

use std::sync::Arc;

use modu_agent::{Agent, AgentRequest, ModelSettings};
use modu_core::{FunctionTool, InMemoryCheckpointStore, ToolChoice, ToolSpec};
use modu_testing::ScriptedModel;
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn tool(name: &str) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new(name, "A tool", json!({"type": "object", "properties": {}})),
        |_ctx, _args| async { Ok(json!("ok")) },
    )
}

fn choices(model: &ScriptedModel) -> Vec<Option<ToolChoice>> {
    model.requests().into_iter().map(|r| r.tool_choice).collect()
}

#[tokio::test]
async fn required_is_sent_until_the_first_tool_call_then_reset() -> TestResult {
    let model = ScriptedModel::new().tool_call("add", json!({})).text("done");
    let agent = Agent::builder(model.clone())
        .tool(tool("add"))
        .tool_choice(ToolChoice::Required)
        .build()?;
    let result = agent.run("go").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("done"),
        "{:?}",
        result.error()
    );
    // The second request would force another call and loop: it goes back to the default.
    assert_eq!(choices(&model), vec![Some(ToolChoice::Required), None]);
    Ok(())
}

#[tokio::test]
async fn keep_tool_choice_sends_it_on_every_acting_request() -> TestResult {
    let model = ScriptedModel::new()
        .tool_call("add", json!({}))
        .tool_call("add", json!({}))
        .text("done");
    let agent = Agent::builder(model.clone())
        .tool(tool("add"))
        .model_settings(
            ModelSettings::new()
                .tool_choice(ToolChoice::Required)
                .keep_tool_choice(true),
        )
        .build()?;
    let result = agent.run("go").await;
    assert!(result.error().is_none(), "{:?}", result.error());
    assert_eq!(choices(&model), vec![Some(ToolChoice::Required); 3]);
    Ok(())
}

#[tokio::test]
async fn a_runs_own_settings_win_over_the_agents_and_unset_fields_stay() -> TestResult {
    let model = ScriptedModel::new().tool_call("weather", json!({})).text("sunny");
    let agent = Agent::builder(model.clone())
        .tool(tool("add"))
        .tool(tool("weather"))
        .model_settings(
            ModelSettings::new()
                .temperature(0.5)
                .top_p(0.8)
                .frequency_penalty(0.5)
                .seed(7)
                .tool_choice(ToolChoice::None),
        )
        .build()?;
    let request = AgentRequest::new((), "weather?")
        .model_settings(ModelSettings::new().max_tokens(64).top_p(0.3).presence_penalty(1.0))
        .tool_choice(ToolChoice::Named("weather".into()));
    let result = agent.run(request).await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("sunny"),
        "{:?}",
        result.error()
    );
    let sent = model.requests();
    assert_eq!(sent[0].tool_choice, Some(ToolChoice::Named("weather".into())));
    assert_eq!(sent[0].temperature, Some(0.5));
    assert_eq!(sent[0].seed, Some(7));
    assert_eq!(sent[0].max_tokens, Some(64));
    // Nucleus sampling and the penalties: the run's own over the agent's, the rest the agent's.
    assert_eq!(sent[0].top_p, Some(0.3));
    assert_eq!(sent[0].frequency_penalty, Some(0.5));
    assert_eq!(sent[0].presence_penalty, Some(1.0));
    assert_eq!(sent[1].tool_choice, None, "reset after the forced call");
    assert_eq!(
        sent[1].max_tokens,
        Some(64),
        "the run's settings hold for every request"
    );

    // The next run has only the agent's settings.
    let model2 = ScriptedModel::new().text("hi");
    let agent2 = Agent::builder(model2.clone())
        .tool(tool("add"))
        .temperature(0.5)
        .build()?;
    let _ = agent2.run("hi").await;
    assert_eq!(model2.requests()[0].max_tokens, None);
    Ok(())
}

#[tokio::test]
async fn a_named_tool_that_is_not_offered_is_not_sent_and_no_tools_means_no_choice() -> TestResult {
    let model = ScriptedModel::new().text("hi");
    let agent = Agent::builder(model.clone())
        .tool(tool("add"))
        .tool_choice(ToolChoice::Named("missing".into()))
        .build()?;
    let _ = agent.run("hi").await;
    assert_eq!(choices(&model), vec![None]);

    let model = ScriptedModel::new().text("hi");
    let agent = Agent::builder(model.clone())
        .tool_choice(ToolChoice::Required)
        .build()?;
    let _ = agent.run("hi").await;
    assert_eq!(
        choices(&model),
        vec![None],
        "a request without tools carries no tool_choice"
    );
    Ok(())
}

#[tokio::test]
async fn a_resumed_run_keeps_its_own_settings() -> TestResult {
    let store = Arc::new(InMemoryCheckpointStore::new());
    let model = ScriptedModel::new().tool_call("transfer", json!({})).text("paid");
    let transfer = FunctionTool::new(
        ToolSpec::new("transfer", "Move money", json!({"type": "object", "properties": {}})).needs_approval(true),
        |_ctx, _args| async { Ok(json!("moved")) },
    );
    let agent = Agent::builder(model.clone())
        .tool(transfer)
        .checkpoint_store(store)
        .build()?;
    let paused = agent
        .run(AgentRequest::new((), "pay").model_settings(ModelSettings::new().temperature(0.1).seed(3)))
        .await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let call = paused.approvals()[0].call_id.clone();
    agent.approve(paused.run_id(), &call).await?;
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(done.output().map(String::as_str), Some("paid"), "{:?}", done.error());
    let sent = model.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!((sent[1].temperature, sent[1].seed), (Some(0.1), Some(3)));
    Ok(())
}

/// A transcript given as input (an OpenAI-compatible or AG-UI client's history) with earlier
/// tool calls does not count as the run's first call: the forced choice is sent until the
/// model calls a tool in this run.
#[tokio::test]
async fn a_transcripts_earlier_calls_do_not_end_the_forced_choice() -> TestResult {
    use modu_core::{Message, ToolCall};
    let transcript = vec![
        Message::user("add something"),
        Message::assistant_tool_calls("", vec![ToolCall::new("call_old", "add", "{}")]),
        Message::tool_result("call_old", "add", "ok", false),
        Message::assistant("added"),
        Message::user("now the weather"),
    ];
    let model = ScriptedModel::new().tool_call("weather", json!({})).text("sunny");
    let agent = Agent::builder(model.clone())
        .tool(tool("add"))
        .tool(tool("weather"))
        .tool_choice(ToolChoice::Named("weather".into()))
        .build()?;
    let result = agent.run(AgentRequest::new((), "").messages(transcript)).await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("sunny"),
        "{:?}",
        result.error()
    );
    assert_eq!(
        choices(&model),
        vec![Some(ToolChoice::Named("weather".into())), None],
        "forced until this run's first call, then reset"
    );
    Ok(())
}
