//! Structured output and the finalization request.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use modu_agent::{Agent, FinalizationMode};
use modu_core::AgentError;
use modu_testing::ScriptedModel;
use serde_json::json;

use crate::support::add_tool;

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Capital {
    country: String,
    city: String,
}

#[tokio::test]
async fn structured_output_without_tools_is_one_request_with_the_schema() {
    let model = ScriptedModel::new().text(r#"{"country": "Korea", "city": "Seoul"}"#);
    let agent = Agent::builder(model.clone()).output::<Capital>().build().unwrap();
    let result = agent.run("Capital of Korea?").await;
    assert_eq!(
        result.output(),
        Some(&Capital {
            country: "Korea".into(),
            city: "Seoul".into()
        })
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].tools.is_empty());
    let format = requests[0].response_format.as_ref().unwrap();
    assert_eq!(format.schema["properties"]["city"]["type"], "string");
    assert!(format.strict);
}

#[tokio::test]
async fn structured_output_with_tools_separates_tool_and_schema_requests() {
    let model = ScriptedModel::new()
        .tool_call("add", json!({"a": 1, "b": 2}))
        .text("The capital is Seoul.")
        .text(r#"{"country": "Korea", "city": "Seoul"}"#);
    let agent = Agent::builder(model.clone())
        .output::<Capital>()
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .build()
        .unwrap();
    let result = agent.run("Capital of Korea?").await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert_eq!(result.output().unwrap().city, "Seoul");
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    for act in &requests[..2] {
        assert!(!act.tools.is_empty(), "tool requests carry tools");
        assert!(
            act.response_format.is_none(),
            "tool requests never carry the output schema"
        );
    }
    let fin = &requests[2];
    assert!(fin.tools.is_empty(), "the finalization request carries no tools");
    assert!(
        fin.response_format.is_some(),
        "the finalization request carries the schema"
    );
    // The draft answer is context for the final request, and the stored answer is the JSON.
    assert!(fin.messages.iter().any(|m| m.text() == "The capital is Seoul."));
    assert!(result.messages().last().unwrap().text().contains("Seoul"));
    assert!(!result.messages().iter().any(|m| m.text() == "The capital is Seoul."));
}

#[tokio::test]
async fn finalization_modes_always_and_disabled() {
    // always: a text agent also gets a separate final request without tools.
    let model = ScriptedModel::new().text("draft").text("final");
    let agent = Agent::builder(model.clone())
        .finalization_mode(FinalizationMode::Always)
        .build()
        .unwrap();
    assert_eq!(agent.run("q").await.output().map(String::as_str), Some("final"));
    assert_eq!(model.requests().len(), 2);
    // disabled: structured output with tools parses the tool loop's last answer directly.
    let model = ScriptedModel::new().text(r#"{"country": "Korea", "city": "Seoul"}"#);
    let agent = Agent::builder(model.clone())
        .output::<Capital>()
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .finalization_mode(FinalizationMode::Disabled)
        .build()
        .unwrap();
    assert_eq!(agent.run("q").await.output().unwrap().city, "Seoul");
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].response_format.is_none() && !requests[0].tools.is_empty());
}

#[tokio::test]
async fn unparsable_output_gets_one_corrective_request_then_a_typed_error() {
    let model = ScriptedModel::new()
        .text("Seoul, I think")
        .text(r#"{"country":"Korea","city":"Seoul"}"#);
    let agent = Agent::builder(model.clone()).output::<Capital>().build().unwrap();
    let result = agent.run("q").await;
    assert_eq!(result.output().unwrap().city, "Seoul");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]
            .messages
            .last()
            .unwrap()
            .text()
            .contains("could not be parsed")
    );

    let model = ScriptedModel::new().text("no").text("still no");
    let agent = Agent::builder(model).output::<Capital>().build().unwrap();
    let result = agent.run("q").await;
    assert!(
        matches!(result.error(), Some(AgentError::Output { .. })),
        "{:?}",
        result.error()
    );
}

/// A JSON answer with more around it, as models write it when nothing constrains their
/// decoding: a reasoning model's thinking left in the text (with or without its opening tag,
/// which some templates put in the prompt), prose around a fenced block. Each parses at once,
/// without a corrective request.
#[tokio::test]
async fn a_json_answer_after_thinking_or_amid_prose_parses_without_a_correction() {
    let json = r#"{"country": "Korea", "city": "Seoul"}"#;
    for answer in [
        format!("<think>The user wants JSON {{ with a brace.</think>\n\n{json}"),
        format!("Korea's capital. Check the schema.</think>\n{json}"),
        format!("Here is the answer:\n```json\n{json}\n```\nLet me know if you need more."),
        format!("<think>ok</think>\n```json\n{json}\n```"),
    ] {
        let model = ScriptedModel::new().text(answer.clone());
        let agent = Agent::builder(model.clone()).output::<Capital>().build().unwrap();
        let result = agent.run("Capital of Korea?").await;
        assert_eq!(result.output().map(|c| c.city.as_str()), Some("Seoul"), "{answer}");
        assert_eq!(model.requests().len(), 1, "no corrective request for {answer}");
    }
    // What the model meant is what the correction names: the JSON's own problem.
    let model = ScriptedModel::new()
        .text("<think>hmm</think>{\"country\": \"Korea\"}")
        .text(json);
    let agent = Agent::builder(model.clone()).output::<Capital>().build().unwrap();
    assert_eq!(agent.run("q").await.output().map(|c| c.city.as_str()), Some("Seoul"));
    let correction = model.requests()[1].messages.last().unwrap().text();
    assert!(correction.contains("missing field `city`"), "{correction}");
}

/// An answer cut at the output token limit (`finish_reason: length`, as a server sends it when
/// `max_tokens` ends the answer mid-JSON) fails with an error that says so, not only with the
/// parser's "EOF while parsing".
#[tokio::test]
async fn a_corrective_answer_cut_at_the_token_limit_says_so() {
    use modu_core::{ChatEvent, FinishReason};
    let cut = |text: &str| {
        let text = text.to_owned();
        move |_: &modu_core::ChatRequest| {
            vec![
                ChatEvent::TextDelta { text: text.clone() },
                ChatEvent::Finish {
                    reason: FinishReason::Length,
                },
            ]
        }
    };
    let model = ScriptedModel::new()
        .respond(cut(r#"{"country": "Ko"#))
        .respond(cut(r#"{"country": "Korea", "ci"#));
    let agent = Agent::builder(model.clone()).output::<Capital>().build().unwrap();
    let result = agent.run("q").await;
    let Some(AgentError::Output { message }) = result.error() else {
        panic!("{:?}", result.error());
    };
    assert!(
        message.contains("EOF while parsing"),
        "the parser's reason stays: {message}"
    );
    assert!(
        message.contains("cut at the output token limit") && message.contains("max_tokens"),
        "{message}"
    );
    assert_eq!(
        model.requests().len(),
        2,
        "one corrective request, as for any unparsable answer"
    );

    // An answer that ended on its own and does not parse says nothing of a limit.
    let model = ScriptedModel::new().text("no").text("still no");
    let agent = Agent::builder(model).output::<Capital>().build().unwrap();
    let result = agent.run("q").await;
    let Some(AgentError::Output { message }) = result.error() else {
        panic!("{:?}", result.error());
    };
    assert!(!message.contains("token limit"), "{message}");
}

/// A plain-text answer cut at the output limit (`max_tokens`, or a server's context window)
/// still completes with what the model wrote, and the run's stats say it was cut; an answer
/// that ended on its own, or a cut structured answer whose corrective answer was whole, does
/// not say so.
#[tokio::test]
async fn an_answer_cut_at_the_output_limit_completes_and_the_stats_say_so() {
    use modu_core::{ChatEvent, FinishReason};
    let answer = |text: &'static str, reason: FinishReason| {
        move |_: &modu_core::ChatRequest| {
            vec![
                ChatEvent::TextDelta { text: text.into() },
                ChatEvent::Finish { reason: reason.clone() },
            ]
        }
    };
    let model = ScriptedModel::new().respond(answer("The capital of Korea is", FinishReason::Length));
    let agent = Agent::builder(model).build().unwrap();
    let result = agent.run("q").await;
    assert_eq!(result.output().map(String::as_str), Some("The capital of Korea is"));
    assert!(result.stats().answer_cut, "{:?}", result.stats());
    let json = serde_json::to_value(result.report()).unwrap();
    assert_eq!(json["stats"]["answer_cut"], json!(true), "{json}");

    let model = ScriptedModel::new().respond(answer("Seoul.", FinishReason::Stop));
    let result = Agent::builder(model).build().unwrap().run("q").await;
    assert_eq!(result.output().map(String::as_str), Some("Seoul."));
    assert!(!result.stats().answer_cut);

    // Streamed, the last item carries it too.
    let model = ScriptedModel::new().respond(answer("Seoul is", FinishReason::Length));
    let agent = Agent::builder(model).build().unwrap();
    let mut stream = agent.stream("q");
    let mut last = None;
    while let Some(item) = futures::StreamExt::next(&mut stream).await {
        last = item.into_outcome().or(last);
    }
    assert!(last.expect("the stream ends with the outcome").stats().answer_cut);

    let model = ScriptedModel::new()
        .respond(answer(r#"{"country": "Ko"#, FinishReason::Length))
        .respond(answer(r#"{"country": "Korea", "city": "Seoul"}"#, FinishReason::Stop));
    let agent = Agent::builder(model).output::<Capital>().build().unwrap();
    let result = agent.run("q").await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert!(!result.stats().answer_cut, "the answer that counts was whole");
}

/// A context provider that puts a tool definition into every request, whatever the stage
/// offers (`ModelContext::tools` is for narrowing; this one misuses it).
struct AddsTools(modu_core::ToolDefinition);

#[async_trait::async_trait]
impl modu_core::ContextProvider<()> for AddsTools {
    fn name(&self) -> &str {
        "adds-tools"
    }
    async fn invoking(
        &self,
        _ctx: &modu_core::RunContext<()>,
        context: &mut modu_core::ModelContext,
    ) -> Result<(), modu_core::ContextProviderError> {
        context.tools.retain(|t| t.name != self.0.name);
        context.tools.push(self.0.clone());
        Ok(())
    }
}

#[tokio::test]
async fn a_context_provider_cannot_put_tools_into_the_request_with_the_schema() {
    let model = ScriptedModel::new()
        .text("The capital is Seoul.")
        .text(r#"{"country": "Korea", "city": "Seoul"}"#);
    let add = add_tool(Arc::new(AtomicUsize::new(0)));
    let definition = modu_core::Tool::<()>::spec(&add).definition();
    let agent = Agent::builder(model.clone())
        .output::<Capital>()
        .tool(add)
        .context_provider(Arc::new(AddsTools(definition)))
        .build()
        .unwrap();
    let result = agent.run("Capital of Korea?").await;
    assert!(result.is_completed(), "{:?}", result.error());
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].tools.len(), 1, "the acting request offers the tool");
    let fin = &requests[1];
    assert!(fin.response_format.is_some());
    assert!(fin.tools.is_empty(), "a provider may narrow the offer, never widen it");
}

/// Every assistant message with tool calls in `messages` is followed by a result for each.
fn every_call_answered(messages: &[modu_core::Message]) -> bool {
    messages.iter().enumerate().all(|(i, m)| {
        m.tool_calls.iter().all(|c| {
            messages[i + 1..]
                .iter()
                .any(|r| r.role == modu_core::Role::Tool && r.tool_call_id.as_deref() == Some(c.id.as_str()))
        })
    })
}

/// A model that calls a tool in answer to the final request (which offers none) does not leave
/// a call without a result in the run's messages or the session: the calls cannot run, and
/// OpenAI refuses a conversation that holds one.
#[tokio::test]
async fn a_final_answers_tool_calls_are_dropped() {
    let store = Arc::new(modu_core::InMemoryConversationStore::new());
    let model = ScriptedModel::new()
        .text("draft")
        .tool_call("add", json!({"a": 1, "b": 2}))
        .text("next draft")
        .text("next answer");
    let agent = Agent::builder(model.clone())
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .finalization_mode(FinalizationMode::Always)
        .conversation_store(store.clone())
        .build()
        .unwrap();
    let result = agent.run(modu_agent::AgentRequest::new((), "q").session("s")).await;
    assert!(result.is_completed(), "{:?}", result.error());
    assert!(every_call_answered(result.messages()), "{:?}", result.messages());
    assert!(!result.messages().iter().any(|m| m.has_tool_calls()));
    let stored = modu_core::ConversationStore::load(store.as_ref(), "s").await.unwrap();
    assert!(every_call_answered(&stored), "{stored:?}");
    // The session's next request is a valid conversation.
    let next = agent.run(modu_agent::AgentRequest::new((), "again").session("s")).await;
    assert!(next.is_completed(), "{:?}", next.error());
    let sent = model.requests();
    assert!(every_call_answered(&sent[2].messages), "{:?}", sent[2].messages);

    // Structured output: the corrective request does not carry the dropped calls either.
    let model = ScriptedModel::new()
        .text("The capital is Seoul.")
        .tool_call("add", json!({"a": 1, "b": 2}))
        .text(r#"{"country": "Korea", "city": "Seoul"}"#);
    let agent = Agent::builder(model.clone())
        .output::<Capital>()
        .tool(add_tool(Arc::new(AtomicUsize::new(0))))
        .build()
        .unwrap();
    let result = agent.run("Capital of Korea?").await;
    assert_eq!(
        result.output().map(|c| c.city.as_str()),
        Some("Seoul"),
        "{:?}",
        result.error()
    );
    let sent = model.requests();
    assert_eq!(sent.len(), 3);
    assert!(every_call_answered(&sent[2].messages), "{:?}", sent[2].messages);
    assert!(every_call_answered(result.messages()));
}
