//! The client half of MCP against server-everything: sampling served by a configured model
//! (policy, limits, usage), progress of a long call, resources (with templates) and prompts,
//! over stdio and streamable HTTP, and through an agent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use modu_agent::Agent;
use modu_core::{Role, Usage};
use modu_mcp::{
    InvocationFailure, McpConfig, McpConnector, McpError, McpProgress, McpSampling, McpSamplingPolicy, McpServerConfig,
    McpSessionOptions, McpToolProvider, RequestFailure,
};
use modu_testing::ScriptedModel;
use serde_json::{Map, Value, json};

const SAMPLE: &str = "everything__trigger-sampling-request";
const LONG: &str = "everything__trigger-long-running-operation";

fn stdio_connector(script: &str, marker: &str) -> McpConnector {
    let config = McpConfig::new(vec![support::everything_stdio("everything", script, marker)]).unwrap();
    McpConnector::new(config).unwrap()
}

fn invocation(e: &McpError) -> &modu_mcp::McpToolInvocationError {
    match e {
        McpError::ToolInvocation(i) => i,
        other => panic!("not an invocation error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_is_served_by_the_configured_model_within_its_limits() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("sampling");
    let model = ScriptedModel::new()
        .named("the-sampler")
        .with_usage(7, 3)
        .text("Autumn moonlight, a worm digs silently.");
    let counted = Arc::new(Mutex::new(Usage::default()));
    let sink = Arc::clone(&counted);
    let options = McpSessionOptions::default()
        .with_sampling(
            McpSampling::new(Arc::new(model.clone()))
                .with_max_tokens(20)
                .with_max_calls(1),
        )
        .with_sampling_usage(move |u| *sink.lock().unwrap() += u);
    let connector = stdio_connector(&script, &marker);
    let config = connector.config().servers.clone();
    let session = connector.open_servers_with(config, options).await.unwrap();
    // The server offers its sampling tool only to a client that declares sampling.
    session.refresh_tools().await;
    assert!(session.registry().get(SAMPLE).is_some());

    let out = session
        .call_tool(SAMPLE, json!({"prompt": "a haiku about worms", "maxTokens": 100}))
        .await
        .unwrap();
    let text = out.as_str().unwrap();
    assert!(text.contains("Autumn moonlight, a worm digs silently."), "{text}");
    assert!(text.contains("the-sampler"), "the model's name goes back: {text}");
    // What the model was asked: the server's system prompt and message, the budget capped.
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].messages[0].role, Role::System);
    assert_eq!(requests[0].messages[0].text(), "You are a helpful test server.");
    assert_eq!(requests[0].messages[1].role, Role::User);
    assert!(requests[0].messages[1].text().contains("a haiku about worms"));
    assert_eq!(requests[0].max_tokens, Some(20), "100 asked, 20 allowed");
    let usage = session.sampling_usage();
    assert_eq!((usage.served, usage.refused), (1, 0));
    assert_eq!((usage.usage.input_tokens, usage.usage.output_tokens), (7, 3));
    assert_eq!(counted.lock().unwrap().output_tokens, 3, "the usage reached the sink");

    // The second request is over the per-run limit: refused without asking the model.
    let e = session
        .call_tool(SAMPLE, json!({"prompt": "another", "maxTokens": 10}))
        .await
        .unwrap_err();
    assert_eq!(invocation(&e).failure, InvocationFailure::ToolError);
    assert!(e.to_string().contains("limit of 1 sampling requests"), "{e}");
    assert_eq!(model.requests().len(), 1);
    assert_eq!(session.sampling_usage().refused, 1);
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_policy_refuses_sampling_and_no_sampling_declares_none() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("sampling-deny");
    let model = ScriptedModel::new().text("never sent");
    let connector = stdio_connector(&script, &marker);
    let options = McpSessionOptions::default()
        .with_sampling(McpSampling::new(Arc::new(model.clone())).with_policy(McpSamplingPolicy::Deny));
    let session = connector
        .open_servers_with(connector.config().servers.clone(), options)
        .await
        .unwrap();
    let e = session
        .call_tool(SAMPLE, json!({"prompt": "hi", "maxTokens": 10}))
        .await
        .unwrap_err();
    assert_eq!(invocation(&e).failure, InvocationFailure::ToolError);
    assert!(e.to_string().contains("does not serve sampling requests"), "{e}");
    assert!(model.requests().is_empty());
    assert_eq!(session.sampling_usage().refused, 1);
    session.close().await;

    // Without sampling the capability is not declared, so the server has no sampling tool.
    let session = connector.open_session(None).await.unwrap();
    session.refresh_tools().await;
    assert!(session.registry().get("everything__echo").is_some());
    assert!(session.registry().get(SAMPLE).is_none());
    let e = session.call_tool(SAMPLE, json!({"prompt": "hi"})).await.unwrap_err();
    assert_eq!(invocation(&e).failure, InvocationFailure::UnknownTool);
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

fn collector() -> (
    Arc<Mutex<Vec<McpProgress>>>,
    impl Fn(&McpProgress) + Send + Sync + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (seen, move |p: &McpProgress| sink.lock().unwrap().push(p.clone()))
}

fn assert_four_steps(seen: &[McpProgress], server: &str) {
    let steps: Vec<(f64, Option<f64>)> = seen.iter().map(|p| (p.progress, p.total)).collect();
    assert_eq!(
        steps,
        [(1.0, Some(4.0)), (2.0, Some(4.0)), (3.0, Some(4.0)), (4.0, Some(4.0))]
    );
    assert!(seen.iter().all(|p| p.server == server));
    assert!(
        seen.iter()
            .all(|p| p.tool == format!("{server}__trigger-long-running-operation"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_of_a_long_call_reaches_the_listener_before_its_result() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("progress");
    let connector = stdio_connector(&script, &marker);
    let (seen, listener) = collector();
    let session = connector
        .open_servers_with(
            connector.config().servers.clone(),
            McpSessionOptions::default().with_progress(listener),
        )
        .await
        .unwrap();
    let args = json!({"duration": 0.8, "steps": 4});
    let out = session.call_tool(LONG, args.clone()).await.unwrap();
    assert!(out.as_str().unwrap().contains("Steps: 4"), "{out}");
    assert_four_steps(&seen.lock().unwrap(), "everything");
    assert!(seen.lock().unwrap().iter().all(|p| p.call_id.is_none()));

    // A per-call listener instead of the session's.
    let (own, listener) = collector();
    session.call_tool_with_progress(LONG, args, listener).await.unwrap();
    assert_four_steps(&own.lock().unwrap(), "everything");
    assert_eq!(
        seen.lock().unwrap().len(),
        4,
        "the session's listener heard nothing more"
    );
    session.close().await;

    // Without a listener the progress goes nowhere, and the call still completes.
    let session = connector.open_session(None).await.unwrap();
    let out = session
        .call_tool(LONG, json!({"duration": 0.2, "steps": 2}))
        .await
        .unwrap();
    assert!(out.as_str().unwrap().contains("Steps: 2"), "{out}");
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_and_progress_over_streamable_http() {
    let Some(script) = support::everything() else { return };
    let server = support::start_everything_http(&script);
    let config = McpConfig::new(vec![McpServerConfig::streamable_http("remote", server.url("/mcp"))]).unwrap();
    let connector = McpConnector::new(config).unwrap();
    let model = ScriptedModel::new().text("sampled over HTTP");
    let (seen, listener) = collector();
    let options = McpSessionOptions::default()
        .with_sampling(McpSampling::new(Arc::new(model.clone())))
        .with_progress(listener);
    let session = connector
        .open_servers_with(connector.config().servers.clone(), options)
        .await
        .unwrap();
    session.refresh_tools().await;
    let out = session
        .call_tool(
            "remote__trigger-sampling-request",
            json!({"prompt": "hello", "maxTokens": 5}),
        )
        .await
        .unwrap();
    assert!(out.as_str().unwrap().contains("sampled over HTTP"), "{out}");
    assert_eq!(model.requests().len(), 1);
    session
        .call_tool(
            "remote__trigger-long-running-operation",
            json!({"duration": 0.8, "steps": 4}),
        )
        .await
        .unwrap();
    assert_four_steps(&seen.lock().unwrap(), "remote");
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_templates_are_listed_and_read() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("resources");
    let session = stdio_connector(&script, &marker).open_session(None).await.unwrap();
    let listed = session.list_resources(None).await.unwrap();
    let resources = listed["resources"].as_array().unwrap();
    let instructions = resources
        .iter()
        .find(|r| r["uri"] == "demo://resource/static/document/instructions.md")
        .unwrap_or_else(|| panic!("{listed:#}"));
    assert_eq!(instructions["server"], "everything");
    assert_eq!(instructions["mimeType"], "text/markdown");
    let templates: Vec<&str> = listed["resource_templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert!(
        templates.contains(&"demo://resource/dynamic/text/{resourceId}"),
        "{templates:?}"
    );
    assert_eq!(session.list_resources(Some("everything")).await.unwrap(), listed);

    // A template filled in.
    let read = session
        .read_resource("everything", "demo://resource/dynamic/text/3")
        .await
        .unwrap();
    let content = &read["contents"][0];
    assert_eq!(content["uri"], "demo://resource/dynamic/text/3");
    assert!(
        content["text"]
            .as_str()
            .unwrap()
            .starts_with("Resource 3: This is a plaintext resource"),
        "{read}"
    );
    // A blob comes as base64.
    let blob = session
        .read_resource("everything", "demo://resource/dynamic/blob/2")
        .await
        .unwrap();
    assert!(
        blob["contents"][0]["blob"].as_str().is_some_and(|b| !b.is_empty()),
        "{blob}"
    );
    // Failures are typed.
    let e = session.read_resource("nowhere", "demo://x").await.unwrap_err();
    assert!(
        matches!(&e, McpError::Request(r) if r.failure == RequestFailure::UnknownServer),
        "{e}"
    );
    let e = session
        .read_resource("everything", "demo://resource/dynamic/text/zero")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, McpError::Request(r) if r.failure == RequestFailure::ProtocolError && r.request == "resources/read"),
        "{e}"
    );
    session.close().await;
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_listed_and_fetched_as_modu_messages() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("prompts");
    let connector = stdio_connector(&script, &marker);
    let session = connector.open_session(None).await.unwrap();
    let prompts = session.list_prompts(None).await.unwrap();
    let args_prompt = prompts.iter().find(|p| p.name == "args-prompt").unwrap();
    assert_eq!(args_prompt.server, "everything");
    let arguments: Vec<(&str, bool)> = args_prompt
        .arguments
        .iter()
        .map(|a| (a.name.as_str(), a.required))
        .collect();
    assert_eq!(arguments, [("city", true), ("state", false)]);

    let mut args = Map::new();
    args.insert("city".into(), json!("Seoul"));
    let prompt = session
        .get_prompt("everything", "args-prompt", args.clone())
        .await
        .unwrap();
    assert_eq!(prompt.messages.len(), 1);
    assert_eq!(prompt.messages[0].role, Role::User);
    assert_eq!(prompt.text(), "What's weather in Seoul?");

    // An embedded text resource becomes its text; a number argument is sent as a string.
    let mut args = Map::new();
    args.insert("resourceType".into(), json!("Text"));
    args.insert("resourceId".into(), json!(2));
    let prompt = session.get_prompt("everything", "resource-prompt", args).await.unwrap();
    assert_eq!(prompt.messages.len(), 2);
    assert!(
        prompt.messages[1]
            .text()
            .starts_with("Resource 2: This is a plaintext resource")
    );

    let e = session
        .get_prompt("everything", "no-such-prompt", Map::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, McpError::Request(r) if r.failure == RequestFailure::ProtocolError),
        "{e}"
    );
    session.close().await;

    // Outside a run: the connector opens the server, fetches, closes.
    let mut args = Map::new();
    args.insert("city".into(), json!("Busan"));
    let prompt = connector.get_prompt("everything", "args-prompt", args).await.unwrap();
    assert_eq!(prompt.text(), "What's weather in Busan?");
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

fn tool_texts(messages: &[modu_core::Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_reads_resources_samples_and_reports_progress_with_run_ids() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("agent-client");
    let connector = Arc::new(stdio_connector(&script, &marker));
    let sampler = ScriptedModel::new().with_usage(11, 4).text("sampled text");
    let (seen, listener) = collector();
    let provider = McpToolProvider::new(connector)
        .with_resource_tools()
        .with_sampling(McpSampling::new(Arc::new(sampler.clone())).with_max_calls(1))
        .with_progress(listener);
    let model = ScriptedModel::new()
        .with_usage(100, 10)
        .tool_call("mcp_list_resources", json!({}))
        .tool_call(
            "mcp_read_resource",
            json!({"server": "everything", "uri": "demo://resource/dynamic/text/5"}),
        )
        .tool_calls_with_ids([(
            Some("call-sample"),
            "mcp_call_tool",
            json!({"tool_name": SAMPLE, "arguments": {"prompt": "p", "maxTokens": 9}}).to_string(),
        )])
        .tool_calls_with_ids([(
            Some("call-long"),
            "mcp_call_tool",
            json!({"tool_name": LONG, "arguments": {"duration": 0.4, "steps": 4}}).to_string(),
        )])
        .text("done");
    let agent: Agent<()> = Agent::builder(model.clone())
        .name("client-agent")
        .tool_provider(provider)
        .build()
        .unwrap();
    let result = agent.run("Use the server.").await;
    assert!(result.is_completed(), "{:?}", result.error());

    let mut offered: Vec<String> = model.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    offered.sort();
    assert_eq!(
        offered,
        [
            "mcp_call_tool",
            "mcp_list_resources",
            "mcp_read_resource",
            "mcp_search_tools"
        ]
    );
    let texts = tool_texts(result.messages());
    assert!(
        texts[0].contains("demo://resource/dynamic/text/{resourceId}"),
        "{}",
        texts[0]
    );
    let read: Value = serde_json::from_str(&texts[1]).unwrap();
    assert!(read["contents"][0]["text"].as_str().unwrap().starts_with("Resource 5:"));
    assert!(texts[2].contains("sampled text"), "{}", texts[2]);
    // The sampling usage is in the run's usage: 5 agent requests and 1 sampling request.
    assert_eq!(result.usage().requests, 6, "{:?}", result.usage());
    assert_eq!(result.usage().input_tokens, 5 * 100 + 11);
    assert_eq!(result.usage().output_tokens, 5 * 10 + 4);
    // Progress carries the run and the tool call.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.iter().all(|p| p.run_id.as_deref() == Some(result.run_id())));
    assert!(
        seen.iter().all(|p| p.call_id.as_deref() == Some("call-long")),
        "{seen:?}"
    );
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_policy_pauses_for_a_person_and_the_agents_own_model_serves_the_sampling() {
    let Some(script) = support::everything() else { return };
    let marker = support::marker("sampling-ask");
    let connector = Arc::new(stdio_connector(&script, &marker));
    let provider =
        McpToolProvider::new(connector).with_sampling(McpSampling::agent_model().with_policy(McpSamplingPolicy::Ask));
    let call = || json!({"tool_name": SAMPLE, "arguments": {"prompt": "a haiku about moss", "maxTokens": 9}});
    // The agent's model: the tool call, then (after the approval) the server's sampling
    // request, then the answer; a second run whose sampling is declined.
    let model = ScriptedModel::new()
        .named("house-model")
        .with_usage(5, 2)
        .tool_calls_with_ids([(Some("call-sample"), "mcp_call_tool", call().to_string())])
        .text("moss on the north side")
        .text("done")
        .tool_calls_with_ids([(Some("call-again"), "mcp_call_tool", call().to_string())])
        .text("understood");
    let sink = Arc::new(modu_core::CollectingEventSink::new());
    let agent: Agent<()> = Agent::builder(model.clone())
        .tool_provider(provider)
        .checkpoint_store(Arc::new(modu_core::InMemoryCheckpointStore::new()))
        .event_sink(Arc::clone(&sink) as Arc<dyn modu_core::EventSink>)
        .build()
        .unwrap();

    let paused = agent.run("Sample something.").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    let request = &paused.inputs()[0];
    assert_eq!(request.call_id, "call-sample");
    assert_eq!(request.schema, json!({"type": "boolean"}));
    assert_eq!(request.metadata["mcp_server"], "everything");
    let asked = &request.metadata["mcp_sampling"];
    assert!(
        asked["messages"][0]["text"]
            .as_str()
            .unwrap()
            .contains("a haiku about moss"),
        "the person sees what the server asks: {asked}"
    );
    assert_eq!(model.requests().len(), 1, "nothing was sampled before the answer");

    agent.answer(paused.run_id(), "call-sample", json!(true)).await.unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(done.output().map(String::as_str), Some("done"), "{:?}", done.error());
    let texts = tool_texts(done.messages());
    assert!(texts[0].contains("moss on the north side"), "{}", texts[0]);
    assert!(
        texts[0].contains("house-model"),
        "the agent's model answered: {}",
        texts[0]
    );
    let sampled = &model.requests()[1];
    assert_eq!(sampled.messages[0].text(), "You are a helpful test server.");
    assert!(sampled.tools.is_empty(), "a sampling request offers no tools");
    assert_eq!(
        done.usage().requests,
        3,
        "two agent requests and the sampling: {:?}",
        done.usage()
    );
    assert_eq!(
        done.report().usage_by_model["house-model"].requests,
        3,
        "{:?}",
        done.report().usage_by_model
    );
    // The served request is the run's event, with the call, the model and its usage.
    let served: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            modu_core::AgentEvent::ToolModelCall {
                call_id,
                model,
                usage,
                purpose,
                ..
            } => Some((call_id, model, usage.output_tokens, purpose)),
            _ => None,
        })
        .collect();
    assert_eq!(
        served,
        [(
            "call-sample".to_owned(),
            "house-model".to_owned(),
            2,
            "mcp_sampling".to_owned()
        )]
    );

    // Declined: the server's request is refused and the model is not asked for it.
    let paused = agent.run("Sample again.").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    agent.decline(paused.run_id(), "call-again", None).await.unwrap();
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("understood"),
        "{:?}",
        done.error()
    );
    let texts = tool_texts(done.messages());
    assert!(texts[0].contains("refused the sampling request"), "{}", texts[0]);
    assert_eq!(model.requests().len(), 5);
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_progress_becomes_the_runs_tool_progress_events() {
    use futures::StreamExt;
    let Some(script) = support::everything() else { return };
    let marker = support::marker("progress-events");
    let connector = Arc::new(stdio_connector(&script, &marker));
    let model = ScriptedModel::new()
        .tool_calls_with_ids([(
            Some("call-long"),
            "mcp_call_tool",
            json!({"tool_name": LONG, "arguments": {"duration": 0.4, "steps": 4}}).to_string(),
        )])
        .text("done");
    let sink = Arc::new(modu_core::CollectingEventSink::new());
    let agent: Agent<()> = Agent::builder(model)
        .tool_provider(McpToolProvider::new(connector))
        .event_sink(Arc::clone(&sink) as Arc<dyn modu_core::EventSink>)
        .build()
        .unwrap();
    let mut stream = agent.stream("Run the long operation.");
    let mut kinds = Vec::new();
    let mut progress = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            modu_agent::StreamItem::Event(event) => {
                kinds.push(event.kind());
                if let modu_core::AgentEvent::ToolProgress {
                    call_id,
                    progress: p,
                    total,
                    ..
                } = event
                {
                    progress.push((call_id, p, total));
                }
            }
            modu_agent::StreamItem::Completed(_) => {}
            modu_agent::StreamItem::Failed(result) => panic!("{:?}", result.error),
            modu_agent::StreamItem::Paused(paused) => panic!("paused: {:?}", paused.approvals),
        }
    }
    // Four reports, in order, for the call, between its start and its end.
    assert_eq!(progress.len(), 4, "{progress:?}");
    assert!(
        progress
            .iter()
            .all(|(call, _, total)| call == "call-long" && *total == Some(4.0))
    );
    assert!(progress.windows(2).all(|w| w[0].1 < w[1].1), "{progress:?}");
    let first = kinds.iter().position(|k| *k == "tool_progress").unwrap();
    let started = kinds.iter().position(|k| *k == "tool_call_started").unwrap();
    let finished = kinds.iter().position(|k| *k == "tool_call_finished").unwrap();
    assert!(
        started < first && kinds.iter().rposition(|k| *k == "tool_progress").unwrap() < finished,
        "{kinds:?}"
    );
    // The agent's event sink gets them too.
    let sunk = sink.events().iter().filter(|e| e.kind() == "tool_progress").count();
    assert_eq!(sunk, 4);
    support::assert_no_children(&marker, Duration::from_secs(2)).await;
}
