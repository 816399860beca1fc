//! Partial structured output: a streamed run with an output type sends snapshots of the
//! output while its JSON arrives, each a prefix of the final value, to the caller's stream only.

use std::sync::Arc;

use futures::StreamExt;
use modu_agent::{Agent, StreamItem};
use modu_core::{AgentEvent, CollectingEventSink};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema, Debug, PartialEq)]
struct Answer {
    result: i64,
    explanation: String,
    steps: Vec<String>,
}

/// The same type, with every field optional: what a UI reads snapshots as.
#[derive(serde::Deserialize, Debug, PartialEq)]
struct PartialAnswer {
    result: Option<i64>,
    explanation: Option<String>,
    #[serde(default)]
    steps: Vec<String>,
}

#[tokio::test]
async fn a_streamed_structured_run_sends_growing_snapshots_of_its_output() -> TestResult {
    let json_text = r#"{"result": 5, "explanation": "2 + 3 is 5", "steps": ["take 2", "add 3"]}"#;
    // Deltas of 7 bytes, as a server would cut them.
    let deltas: Vec<String> = json_text
        .as_bytes()
        .chunks(7)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(ScriptedModel::new().text_deltas(deltas))
        .output::<Answer>()
        .event_sink(sink.clone())
        .build()?;
    let mut stream = agent.stream("2 + 3?");
    let mut snapshots: Vec<Value> = Vec::new();
    let mut typed: Vec<PartialAnswer> = Vec::new();
    let mut output = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(e) => {
                if let AgentEvent::OutputPartial { snapshot, .. } = &e {
                    snapshots.push(snapshot.clone());
                    typed.extend(e.partial_output::<PartialAnswer>());
                }
            }
            StreamItem::Completed(r) => output = Some(r.output),
            StreamItem::Failed(r) => return Err(format!("run failed: {:?}", r.error).into()),
            StreamItem::Paused(p) => return Err(format!("run paused: {:?}", p.approvals).into()),
        }
    }
    let output = output.ok_or("no output")?;
    let full = serde_json::to_value(&output)?;
    assert!(snapshots.len() >= 4, "{snapshots:?}");
    assert_eq!(snapshots.first(), Some(&json!({})));
    assert_eq!(snapshots.last(), Some(&full));
    // No two snapshots in a row are equal, and members once there stay (strings only grow).
    for pair in snapshots.windows(2) {
        assert_ne!(pair[0], pair[1]);
        for (k, v) in pair[0].as_object().into_iter().flatten() {
            let next = &pair[1][k];
            match (v, next) {
                (Value::String(a), Value::String(b)) => assert!(b.starts_with(a.as_str())),
                (Value::Array(a), Value::Array(b)) => assert!(b.len() >= a.len()),
                (a, b) => assert_eq!(a, b),
            }
        }
    }
    // A snapshot where the explanation is half written reads as the partial type.
    assert!(
        typed
            .iter()
            .any(|p| p.result == Some(5) && p.explanation.as_deref().is_some_and(|e| e.len() < 10))
    );
    assert_eq!(
        typed.last(),
        Some(&PartialAnswer {
            result: Some(5),
            explanation: Some("2 + 3 is 5".into()),
            steps: vec!["take 2".into(), "add 3".into()],
        })
    );
    // Sinks never see the raw snapshots.
    assert!(!sink.events().iter().any(|e| e.kind() == "output_partial"));
    Ok(())
}

#[tokio::test]
async fn a_text_run_sends_no_snapshots() -> TestResult {
    let agent = Agent::builder(ScriptedModel::new().text_deltas(["{\"a\": ", "1}"])).build()?;
    let items: Vec<StreamItem<String>> = agent.stream("hi").collect().await;
    assert!(
        !items
            .iter()
            .any(|i| matches!(i, StreamItem::Event(AgentEvent::OutputPartial { .. })))
    );
    Ok(())
}

/// An answer that does not parse gets a corrective request, whose snapshots start over: the
/// `ModelCallStarted` of that request comes between the two series, each series only grows,
/// and the run's last snapshot is the final output.
#[tokio::test]
async fn a_corrective_requests_snapshots_start_a_new_series_after_its_model_call_started() -> TestResult {
    let bad = r#"{"result": "five", "bogus": "not in the answer", "steps": []}"#;
    let good = r#"{"result": 5, "explanation": "2 + 3 is 5", "steps": ["take 2", "add 3"]}"#;
    let cut = |text: &str| -> Vec<String> {
        text.as_bytes()
            .chunks(9)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect()
    };
    let model = ScriptedModel::new().text_deltas(cut(bad)).text_deltas(cut(good));
    let agent = Agent::builder(model.clone()).output::<Answer>().build()?;
    let mut stream = agent.stream("2 + 3?");
    // One series of snapshots per model request.
    let mut series: Vec<Vec<Value>> = Vec::new();
    let mut output = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::ModelCallStarted { .. }) => series.push(Vec::new()),
            StreamItem::Event(AgentEvent::OutputPartial { snapshot, .. }) => {
                series
                    .last_mut()
                    .ok_or("a snapshot before any model call")?
                    .push(snapshot);
            }
            StreamItem::Event(_) => {}
            StreamItem::Completed(r) => output = Some(r.output),
            StreamItem::Failed(r) => return Err(format!("run failed: {:?}", r.error).into()),
            StreamItem::Paused(p) => return Err(format!("run paused: {:?}", p.approvals).into()),
        }
    }
    assert_eq!(model.requests().len(), 2, "one corrective request");
    assert_eq!(series.len(), 2);
    assert!(series[0].iter().any(|s| s.get("bogus").is_some()), "{:?}", series[0]);
    let full = serde_json::to_value(output.ok_or("no output")?)?;
    assert_eq!(series[1].last(), Some(&full));
    // Within the corrective request's series, every member is one the final answer holds.
    for snapshot in &series[1] {
        for (k, v) in snapshot.as_object().into_iter().flatten() {
            match (v, &full[k]) {
                (Value::String(a), Value::String(b)) => assert!(b.starts_with(a.as_str())),
                (Value::Array(a), Value::Array(b)) => assert!(a.len() <= b.len()),
                (a, b) => assert_eq!(a, b),
            }
        }
    }
    Ok(())
}

/// A structured answer written in Korean (or any text of characters longer than one byte),
/// streamed a character at a time as servers send it: every prefix that ends inside a string
/// gives a snapshot, and the run completes with the whole answer.
#[tokio::test]
async fn an_answer_in_korean_streams_its_snapshots_without_panicking() -> TestResult {
    let json_text = r#"{"result": 5, "explanation": "이와 삼을 더하면 오입니다", "steps": ["둘", "셋"]}"#;
    let deltas: Vec<String> = json_text.chars().map(String::from).collect();
    let agent = Agent::builder(ScriptedModel::new().text_deltas(deltas))
        .output::<Answer>()
        .build()?;
    let mut stream = agent.stream("2 + 3?");
    let mut explanations: Vec<String> = Vec::new();
    let mut output = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(AgentEvent::OutputPartial { snapshot, .. }) => {
                explanations.extend(snapshot["explanation"].as_str().map(str::to_owned));
            }
            StreamItem::Event(_) => {}
            StreamItem::Completed(r) => output = Some(r.output),
            StreamItem::Failed(r) => return Err(format!("run failed: {:?}", r.error).into()),
            StreamItem::Paused(p) => return Err(format!("run paused: {:?}", p.approvals).into()),
        }
    }
    let output = output.ok_or("no output")?;
    assert_eq!(output.explanation, "이와 삼을 더하면 오입니다");
    assert!(explanations.iter().any(|e| e == "이와 삼"), "{explanations:?}");
    Ok(())
}

/// The output codec takes a code fence off an answer and reads the JSON after a reasoning
/// model's thinking; the snapshots of such an answer are those of its JSON, and the last one is
/// the final output's.
#[tokio::test]
async fn a_fenced_or_thinking_answer_streams_the_snapshots_of_its_json() -> TestResult {
    let json_text = r#"{"result": 5, "explanation": "2 + 3", "steps": ["add"]}"#;
    for text in [
        format!("```json\n{json_text}\n```"),
        format!("<think>The user wants {{\"result\": 1}}? No.</think>\n\n{json_text}"),
        format!("<think>Fenced, then.</think>\n```\n{json_text}\n```"),
    ] {
        let deltas: Vec<String> = text.chars().map(String::from).collect();
        let agent = Agent::builder(ScriptedModel::new().text_deltas(deltas))
            .output::<Answer>()
            .build()?;
        let mut stream = agent.stream("2 + 3?");
        let mut snapshots: Vec<Value> = Vec::new();
        let mut output = None;
        while let Some(item) = stream.next().await {
            match item {
                StreamItem::Event(AgentEvent::OutputPartial { snapshot, .. }) => snapshots.push(snapshot),
                StreamItem::Event(_) => {}
                StreamItem::Completed(r) => output = Some(r.output),
                StreamItem::Failed(r) => return Err(format!("run failed: {:?}", r.error).into()),
                StreamItem::Paused(p) => return Err(format!("run paused: {:?}", p.approvals).into()),
            }
        }
        let full = serde_json::to_value(output.ok_or("no output")?)?;
        assert_eq!(snapshots.last(), Some(&full), "{text:?}: {snapshots:?}");
        assert!(
            snapshots.iter().all(|s| s.get("result").is_none_or(|r| r == 5)),
            "{text:?}: the thinking is not the answer: {snapshots:?}"
        );
    }
    Ok(())
}
