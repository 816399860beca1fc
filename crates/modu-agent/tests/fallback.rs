//! `FallbackModel`: which errors switch to the next model, that an answer already under way is
//! never switched, the error when every model fails, the circuit breaker (tokio paused time),
//! and the run's view: `answered_by` on `ModelCallFinished` and `usage_by_model`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use modu_agent::{Agent, CircuitBreaker, FallbackModel, RetryConfig};
use modu_core::{AgentEvent, ChatEvent, ChatModel, ChatRequest, ChatStream, CollectingEventSink, Message, ModelError};
use modu_testing::ScriptedModel;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn hi() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

fn unavailable() -> ModelError {
    ModelError::Status {
        status: 503,
        body: "overloaded".into(),
        retry_after: None,
    }
}

fn refused() -> ModelError {
    ModelError::Transport {
        message: "connection refused".into(),
        source: None,
    }
}

/// Opens its stream, then fails on the first item.
struct FailsOnFirstItem {
    calls: AtomicUsize,
}

#[async_trait]
impl ChatModel for FailsOnFirstItem {
    fn model_name(&self) -> &str {
        "first-item-fails"
    }
    async fn stream(&self, _request: ChatRequest) -> Result<ChatStream, ModelError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok(Box::pin(futures::stream::iter([Err(refused())])))
    }
}

async fn drain(mut stream: ChatStream) -> Vec<Result<ChatEvent, ModelError>> {
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(item);
    }
    items
}

#[tokio::test]
async fn a_retryable_error_switches_to_the_next_model_streamed_and_whole() -> TestResult {
    let primary = ScriptedModel::new().named("primary").error(unavailable).error(refused);
    let backup = ScriptedModel::new().named("backup").text("from backup").text("again");
    let model = FallbackModel::new(primary.clone()).with_fallback(backup.clone());
    assert_eq!(model.model_name(), "primary");

    let items = drain(model.stream(hi()).await?).await;
    assert!(
        matches!(items.first(), Some(Ok(ChatEvent::Model { name })) if name == "backup"),
        "{items:?}"
    );
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(ChatEvent::TextDelta { text }) if text == "from backup"))
    );

    let whole = model.complete(hi()).await?;
    assert_eq!(whole.message.text(), "again");
    assert_eq!(whole.model.as_deref(), Some("backup"));
    assert_eq!(primary.requests().len(), 2);
    assert_eq!(backup.requests().len(), 2);
    Ok(())
}

#[tokio::test]
async fn the_answer_of_the_primary_names_the_primary() -> TestResult {
    let model = FallbackModel::new(ScriptedModel::new().named("primary").text("ok"))
        .with_fallback(ScriptedModel::new().named("backup").text("unused"));
    let answer = model.complete(hi()).await?;
    assert_eq!(answer.model.as_deref(), Some("primary"));
    Ok(())
}

#[tokio::test]
async fn model_not_found_switches_by_default() -> TestResult {
    let primary = ScriptedModel::new()
        .named("retired")
        .error(|| ModelError::ModelNotFound {
            model: "retired".into(),
            message: "no such model".into(),
        });
    let model = FallbackModel::new(primary).with_fallback(ScriptedModel::new().named("current").text("hi"));
    assert_eq!(model.complete(hi()).await?.model.as_deref(), Some("current"));
    Ok(())
}

/// A 404 that names no model (the server does not serve the endpoint: a path it moved, a
/// server of another kind) cannot be served by that member either: the next one is asked, as
/// for a model the server does not serve.
#[tokio::test]
async fn a_404_for_the_endpoint_switches_by_default() -> TestResult {
    let primary = ScriptedModel::new().named("moved").error(|| ModelError::Status {
        status: 404,
        body: "File Not Found (no such endpoint: http://127.0.0.1:9/v2/chat/completions)".into(),
        retry_after: None,
    });
    let model = FallbackModel::new(primary).with_fallback(ScriptedModel::new().named("current").text("hi"));
    assert_eq!(model.complete(hi()).await?.model.as_deref(), Some("current"));
    Ok(())
}

#[tokio::test]
async fn errors_the_predicate_refuses_end_the_call_without_asking_the_next() -> TestResult {
    let auth = || ModelError::Authentication {
        status: 401,
        message: "bad key".into(),
    };
    let backup = ScriptedModel::new().named("backup").text("unused").text("used");
    let model = FallbackModel::new(ScriptedModel::new().named("primary").error(auth)).with_fallback(backup.clone());
    let err = model.complete(hi()).await.err().ok_or("the call should fail")?;
    assert!(matches!(err, ModelError::Authentication { status: 401, .. }), "{err:?}");
    assert!(backup.requests().is_empty(), "the backup must not be asked");

    // A predicate of one's own: switch on bad credentials too, not on 503.
    let model = FallbackModel::new(ScriptedModel::new().named("primary").error(auth).error(unavailable))
        .with_fallback(backup.clone())
        .switch_when(|e| matches!(e, ModelError::Authentication { .. }));
    assert_eq!(model.complete(hi()).await?.model.as_deref(), Some("backup"));
    let err = model.complete(hi()).await.err().ok_or("503 should not switch")?;
    assert!(matches!(err, ModelError::Status { status: 503, .. }), "{err:?}");
    assert_eq!(backup.requests().len(), 1);
    Ok(())
}

#[tokio::test]
async fn an_answer_under_way_is_never_switched() -> TestResult {
    let primary = ScriptedModel::new()
        .named("primary")
        .fail_mid_stream("half an ans", refused);
    let backup = ScriptedModel::new().named("backup").text("unused");
    let model = FallbackModel::new(primary).with_fallback(backup.clone());
    let items = drain(model.stream(hi()).await?).await;
    assert!(matches!(&items[0], Ok(ChatEvent::Model { name }) if name == "primary"));
    assert!(matches!(&items[1], Ok(ChatEvent::TextDelta { text }) if text == "half an ans"));
    assert!(
        matches!(items.last(), Some(Err(ModelError::Transport { .. }))),
        "{items:?}"
    );
    assert!(backup.requests().is_empty(), "no switch after the first event");
    Ok(())
}

#[tokio::test]
async fn a_stream_failing_on_its_first_item_switches() -> TestResult {
    let primary = Arc::new(FailsOnFirstItem {
        calls: AtomicUsize::new(0),
    });
    let model = FallbackModel::new(Arc::clone(&primary)).with_fallback(ScriptedModel::new().named("backup").text("ok"));
    let items = drain(model.stream(hi()).await?).await;
    assert!(
        matches!(&items[0], Ok(ChatEvent::Model { name }) if name == "backup"),
        "{items:?}"
    );
    assert!(items.iter().all(Result::is_ok));
    assert_eq!(primary.calls.load(Ordering::Relaxed), 1);
    Ok(())
}

#[tokio::test]
async fn when_every_model_fails_the_last_error_comes_back_typed() -> TestResult {
    let model = FallbackModel::new(ScriptedModel::new().named("a").error(refused).error(refused)).with_fallback(
        ScriptedModel::new()
            .named("b")
            .error(|| ModelError::RateLimited {
                retry_after: Some(Duration::from_secs(7)),
            })
            .error(|| ModelError::RateLimited {
                retry_after: Some(Duration::from_secs(7)),
            }),
    );
    let err = model.complete(hi()).await.err().ok_or("every model fails")?;
    assert!(matches!(err, ModelError::RateLimited { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    let err = model.stream(hi()).await.err().ok_or("every model fails, streamed")?;
    assert_eq!(err.kind(), "rate_limited");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_circuit_opens_after_consecutive_failures_and_half_opens_after_the_cool_down() -> TestResult {
    let primary = ScriptedModel::new()
        .named("primary")
        .error(unavailable)
        .error(unavailable)
        .text("primary is back");
    let backup = ScriptedModel::new().named("backup").text("b1").text("b2").text("b3");
    let model = FallbackModel::new(primary.clone())
        .with_fallback(backup.clone())
        .with_circuit_breaker(CircuitBreaker::new(2, Duration::from_secs(10)));
    for _ in 0..3 {
        assert_eq!(model.complete(hi()).await?.model.as_deref(), Some("backup"));
    }
    // Two failures opened the circuit: the third call skipped the primary.
    assert_eq!(primary.requests().len(), 2);
    tokio::time::advance(Duration::from_secs(11)).await;
    let answer = model.complete(hi()).await?;
    assert_eq!(answer.model.as_deref(), Some("primary"));
    assert_eq!(answer.message.text(), "primary is back");
    assert_eq!(primary.requests().len(), 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn retry_after_opens_the_circuit_at_once_for_that_long() -> TestResult {
    let primary = ScriptedModel::new()
        .named("primary")
        .error(|| ModelError::Status {
            status: 503,
            body: "maintenance".into(),
            retry_after: Some(Duration::from_secs(5)),
        })
        .text("back");
    let backup = ScriptedModel::new().named("backup").text("b1").text("b2");
    let model = FallbackModel::new(primary.clone())
        .with_fallback(backup)
        .with_circuit_breaker(CircuitBreaker::default());
    assert_eq!(model.complete(hi()).await?.model.as_deref(), Some("backup"));
    tokio::time::advance(Duration::from_secs(4)).await;
    assert_eq!(model.complete(hi()).await?.model.as_deref(), Some("backup"));
    assert_eq!(primary.requests().len(), 1, "skipped within Retry-After");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(model.complete(hi()).await?.model.as_deref(), Some("primary"));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn when_every_circuit_is_open_all_are_tried_anyway() -> TestResult {
    let slow = || ModelError::Status {
        status: 503,
        body: "later".into(),
        retry_after: Some(Duration::from_secs(60)),
    };
    let a = ScriptedModel::new().named("a").error(slow).text("a answers");
    let b = ScriptedModel::new().named("b").error(slow);
    let model = FallbackModel::new(a.clone())
        .with_fallback(b)
        .with_circuit_breaker(CircuitBreaker::default());
    assert!(model.complete(hi()).await.is_err());
    assert_eq!(model.complete(hi()).await?.model.as_deref(), Some("a"));
    assert_eq!(a.requests().len(), 2);
    Ok(())
}

#[tokio::test]
async fn without_a_breaker_every_call_starts_with_the_primary() -> TestResult {
    let primary = ScriptedModel::new()
        .named("primary")
        .error(unavailable)
        .error(unavailable)
        .error(unavailable)
        .error(unavailable);
    let backup = ScriptedModel::new()
        .named("backup")
        .text("1")
        .text("2")
        .text("3")
        .text("4");
    let model = FallbackModel::new(primary.clone()).with_fallback(backup);
    for _ in 0..4 {
        model.complete(hi()).await?;
    }
    assert_eq!(primary.requests().len(), 4);
    Ok(())
}

#[tokio::test]
async fn a_run_reports_the_answering_model_and_its_usage() -> TestResult {
    let primary = ScriptedModel::new().named("primary").error(refused);
    let backup = ScriptedModel::new().named("backup").with_usage(7, 3).text("done");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(FallbackModel::new(primary).with_fallback(backup))
        .event_sink(sink.clone())
        .build()?;
    let result = agent.run("hi").await;
    assert_eq!(result.output().map(String::as_str), Some("done"));
    assert_eq!(
        result.report().usage_by_model.len(),
        1,
        "{:?}",
        result.report().usage_by_model
    );
    let usage = result
        .report()
        .usage_by_model
        .get("backup")
        .ok_or("no usage for the backup")?;
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.requests), (7, 3, 1));
    let finished: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::ModelCallFinished { model, answered_by, .. } => Some((model, answered_by)),
            _ => None,
        })
        .collect();
    assert_eq!(finished, vec![("primary".to_owned(), Some("backup".to_owned()))]);
    Ok(())
}

#[tokio::test]
async fn a_failed_attempt_counts_for_the_slot_model_and_json_stays_as_it_was() -> TestResult {
    // A plain model: `answered_by` stays absent, usage is keyed by the model's name.
    let model = ScriptedModel::new().named("plain").error(unavailable).text("ok");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model)
        .retry(RetryConfig::new(2).with_backoff(Duration::from_millis(1), Duration::from_millis(1)))
        .event_sink(sink.clone())
        .build()?;
    let result = agent.run("hi").await;
    assert_eq!(result.output().map(String::as_str), Some("ok"));
    let usage = result
        .report()
        .usage_by_model
        .get("plain")
        .ok_or("no usage for the model")?;
    assert_eq!(usage.requests, 2, "the failed attempt counts as a request");
    assert_eq!(
        result.report().usage_by_model.values().map(|u| u.requests).sum::<u64>(),
        result.usage().requests
    );
    let finished = sink
        .events()
        .into_iter()
        .find(|e| matches!(e, AgentEvent::ModelCallFinished { .. }))
        .ok_or("no ModelCallFinished")?;
    let json = serde_json::to_value(&finished)?;
    assert!(json.get("answered_by").is_none(), "{json}");
    // Events written before the field existed still read.
    let mut old = json.clone();
    if let Some(o) = old.as_object_mut() {
        o.remove("answered_by");
    }
    let back: AgentEvent = serde_json::from_value(old)?;
    assert!(matches!(back, AgentEvent::ModelCallFinished { answered_by: None, .. }));
    Ok(())
}

#[tokio::test]
async fn usage_by_model_survives_a_pause_and_old_checkpoints_read() -> TestResult {
    use modu_core::{FunctionTool, InMemoryCheckpointStore, ToolSpec};
    use serde_json::json;
    let build = |primary: ScriptedModel, backup: ScriptedModel| {
        let pay = FunctionTool::<()>::new(
            ToolSpec::new("pay", "Pay", json!({"type": "object"})).needs_approval(true),
            |_c, _a| async { Ok(json!("paid")) },
        );
        Agent::builder(FallbackModel::new(primary).with_fallback(backup))
            .tool(pay)
            .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
            .build()
    };
    // The first call falls back to `backup`; the answer after the pause comes from `primary`.
    let primary = || ScriptedModel::new().named("primary").with_usage(2, 1);
    let backup = || ScriptedModel::new().named("backup").with_usage(5, 4);
    let agent = build(
        primary().error(refused).text("done"),
        backup().tool_call("pay", json!({})),
    )?;
    let paused = agent.run("pay").await;
    assert!(paused.is_paused(), "{:?}", paused.error());
    assert_eq!(
        paused.report().usage_by_model.keys().collect::<Vec<_>>(),
        vec!["backup"]
    );
    let mut state = agent.export_state(paused.run_id()).await?;
    assert!(state.pointer("/state/usage_by_model/backup").is_some(), "{state}");

    let call_id = paused.approvals()[0].call_id.clone();
    agent.approve(paused.run_id(), &call_id).await?;
    let done = agent.resume(paused.run_id(), ()).await;
    assert_eq!(done.output().map(String::as_str), Some("done"), "{:?}", done.error());
    let keys: Vec<_> = done.report().usage_by_model.keys().cloned().collect();
    assert_eq!(keys, vec!["backup".to_owned(), "primary".to_owned()]);
    assert_eq!(done.report().usage_by_model["backup"].input_tokens, 5);
    assert_eq!(done.report().usage_by_model["primary"].input_tokens, 2);

    // A checkpoint written before the breakdown existed still resumes.
    if let Some(s) = state.pointer_mut("/state").and_then(|s| s.as_object_mut()) {
        s.remove("usage_by_model");
    }
    let other = build(primary().text("done again"), backup())?;
    let run_id = other.import_state(state).await?;
    other.approve(&run_id, &call_id).await?;
    let done = other.resume(&run_id, ()).await;
    assert_eq!(
        done.output().map(String::as_str),
        Some("done again"),
        "{:?}",
        done.error()
    );
    assert_eq!(done.report().usage_by_model.keys().collect::<Vec<_>>(), vec!["primary"]);
    Ok(())
}
