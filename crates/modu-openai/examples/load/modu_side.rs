//! The modu side of the load benchmark: the agent over `OpenAiClient`, and the same job over
//! `OpenAiClient` alone (the "client only" diagnostic).

use std::sync::Arc;

use futures::StreamExt;
use modu_agent::{Agent, StreamItem};
use modu_core::FunctionTool;
use modu_openai::OpenAiClient;

use super::{AddArgs, QUESTION};

pub(crate) fn modu_agent(url: &str) -> Arc<Agent> {
    let model = OpenAiClient::new(url, "mock-model").unwrap();
    let add = FunctionTool::<()>::typed(
        "add",
        "Add two integers",
        |_ctx, a: AddArgs| async move { Ok(a.a + a.b) },
    );
    Arc::new(Agent::builder(model).tool(add).build().unwrap())
}

pub(crate) async fn modu_run(agent: &Agent, stream: bool) {
    if stream {
        let mut s = agent.stream(QUESTION);
        let mut completed = false;
        while let Some(item) = s.next().await {
            match item {
                StreamItem::Event(_) => {}
                StreamItem::Completed(r) => {
                    assert!(!r.output.is_empty());
                    completed = true;
                }
                StreamItem::Failed(r) => panic!("modu run failed: {:?}", r.error),
                StreamItem::Paused(p) => panic!("modu run paused: {:?}", p.approvals),
            }
        }
        assert!(completed);
    } else {
        let r = agent.run(QUESTION).await;
        assert!(r.is_completed(), "modu run failed: {:?}", r.error());
    }
}

/// The baseline's job over `OpenAiClient` alone (`--client modu-client`): what the client costs
/// without the agent. Streamed, the answer is folded with `ChatResponseBuilder`.
pub(crate) async fn client_only(model: &OpenAiClient, tools: Arc<Vec<modu_core::ToolDefinition>>, stream: bool) {
    use modu_core::{ChatModel, ChatRequest, ChatResponseBuilder, Message};
    let mut messages = vec![Message::user(QUESTION)];
    loop {
        let mut request = ChatRequest::new(messages.clone());
        request.tools = Arc::clone(&tools);
        let response = if stream {
            let mut events = model.stream(request).await.unwrap();
            let mut builder = ChatResponseBuilder::default();
            while let Some(event) = events.next().await {
                builder.push(event.unwrap());
            }
            builder.finish().unwrap()
        } else {
            model.complete(request).await.unwrap()
        };
        let calls = response.message.tool_calls.clone();
        messages.push(response.message);
        if calls.is_empty() {
            return;
        }
        for call in calls {
            let a: AddArgs = serde_json::from_str(&call.arguments).unwrap();
            messages.push(Message::tool_result(
                call.id.clone(),
                call.name.clone(),
                (a.a + a.b).to_string(),
                false,
            ));
        }
    }
}
