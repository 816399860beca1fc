//! Guardrails: input (concurrent and blocking), output (typed), tool arguments and results, and
//! a model-backed check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use modu_agent::Agent;
use modu_agent::guardrail::{
    self, GuardrailDecision, GuardrailKind, GuardrailMode, InputGuardrail, ToolVerdict, Tripwire, Verdict,
};
use modu_core::{
    AgentError, AgentEvent, ChatModel, ChatRequest, ChatResponse, ChatStream, CollectingEventSink, FunctionTool,
    Message, ModelError, Role, RunContext, ToolSpec,
};
use modu_testing::ScriptedModel;
use serde_json::json;

/// A guardrail that waits `delay`, notes how many model requests had started, then decides.
struct Slow {
    delay: Duration,
    trip: bool,
    model: ScriptedModel,
    requests_seen: Arc<AtomicUsize>,
}

#[async_trait]
impl InputGuardrail<()> for Slow {
    fn name(&self) -> &str {
        "slow"
    }

    async fn check(&self, _ctx: &RunContext<()>, _input: &[Message]) -> Verdict {
        tokio::time::sleep(self.delay).await;
        self.requests_seen.store(self.model.requests().len(), Ordering::SeqCst);
        if self.trip {
            Verdict::Trip(Tripwire::new("off_topic", "the request is off topic"))
        } else {
            Verdict::Pass
        }
    }
}

/// A model that notes when an answer came back (a dropped request never does).
struct Watched {
    inner: ScriptedModel,
    answered: Arc<AtomicBool>,
}

#[async_trait]
impl ChatModel for Watched {
    fn model_name(&self) -> &str {
        "watched"
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ModelError> {
        let stream = self.inner.stream(request).await;
        self.answered.store(true, Ordering::SeqCst);
        stream
    }

    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let response = self.inner.complete(request).await;
        self.answered.store(true, Ordering::SeqCst);
        response
    }
}

fn counting_tool(name: &str, runs: Arc<AtomicUsize>) -> FunctionTool<()> {
    FunctionTool::new(
        ToolSpec::new(
            name,
            "A tool",
            json!({"type": "object", "properties": {"to": {"type": "string"}}}),
        ),
        move |_ctx, args| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok(json!(format!("sent to {}", args["to"].as_str().unwrap_or("?")))) }
        },
    )
}

fn tripped<'a>(error: &Option<&'a AgentError>) -> (&'a str, GuardrailKind, &'a str) {
    match error {
        Some(AgentError::GuardrailTripped {
            guardrail,
            kind,
            tripwire,
        }) => (guardrail.as_str(), *kind, tripwire.code.as_str()),
        other => panic!("expected a tripped guardrail, got {other:?}"),
    }
}

fn no_password() -> impl InputGuardrail<()> {
    guardrail::input("no_password", |_ctx, input| {
        if input.iter().any(|m| m.text().contains("password")) {
            Verdict::Trip(Tripwire::new("secret_in_input", "the input contains a password"))
        } else {
            Verdict::Pass
        }
    })
}

#[tokio::test]
async fn a_blocking_input_tripwire_ends_the_run_before_the_model_is_asked() {
    let model = ScriptedModel::new().text("never");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .input_guardrail(no_password())
        .guardrail_mode(GuardrailMode::Blocking)
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent.run("my password is hunter2").await;
    assert_eq!(
        tripped(&result.error()),
        ("no_password", GuardrailKind::Input, "secret_in_input")
    );
    assert!(!result.error().unwrap().is_resumable(), "a tripwire is never resumable");
    assert!(model.requests().is_empty(), "blocking: the model is not asked");
    assert!(sink.events().iter().any(|e| matches!(
        e,
        AgentEvent::GuardrailChecked { guardrail, kind: GuardrailKind::Input, tripped: true, code: Some(code), .. }
            if guardrail == "no_password" && code == "secret_in_input"
    )));
}

#[tokio::test]
async fn a_passing_input_guardrail_lets_the_run_finish_and_is_reported() {
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(ScriptedModel::new().text("hello"))
        .input_guardrail(no_password())
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent.run("hi").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("hello"),
        "{:?}",
        result.error()
    );
    assert!(sink.events().iter().any(|e| matches!(
        e,
        AgentEvent::GuardrailChecked {
            kind: GuardrailKind::Input,
            tripped: false,
            ..
        }
    )));
}

#[tokio::test(start_paused = true)]
async fn concurrent_input_guardrails_run_with_the_model_request_and_a_tripwire_drops_it() {
    let inner = ScriptedModel::new().delayed_text(Duration::from_secs(10), "too late");
    let answered = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(Watched {
        inner: inner.clone(),
        answered: Arc::clone(&answered),
    })
    .input_guardrail(Slow {
        delay: Duration::from_millis(100),
        trip: true,
        model: inner.clone(),
        requests_seen: Arc::clone(&seen),
    })
    .event_sink(sink.clone())
    .build()
    .unwrap();
    let result = agent.run("tell me about football").await;
    assert_eq!(tripped(&result.error()), ("slow", GuardrailKind::Input, "off_topic"));
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the request was sent with the check");
    assert!(
        !answered.load(Ordering::SeqCst),
        "the model call was dropped before it answered"
    );
    let events = sink.events();
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ModelCallStarted { .. })));
    assert!(!events.iter().any(|e| matches!(e, AgentEvent::ModelCallFinished { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_model_answer_before_a_slow_tripwire_runs_no_tool() {
    let sends = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_call("send", json!({"to": "everyone"}))
        .text("sent");
    let agent = Agent::builder(model.clone())
        .tool(counting_tool("send", Arc::clone(&sends)))
        .input_guardrail(Slow {
            delay: Duration::from_secs(1),
            trip: true,
            model: model.clone(),
            requests_seen: Arc::new(AtomicUsize::new(0)),
        })
        .build()
        .unwrap();
    let result = agent.run("spam everyone").await;
    assert_eq!(tripped(&result.error()), ("slow", GuardrailKind::Input, "off_topic"));
    assert_eq!(model.requests().len(), 1, "the model answered first");
    assert_eq!(
        sends.load(Ordering::SeqCst),
        0,
        "its tool call waits for the guardrails and never runs"
    );
}

#[tokio::test(start_paused = true)]
async fn blocking_mode_checks_before_the_request_and_concurrent_mode_with_it() {
    for (mode, expected) in [(GuardrailMode::Blocking, 0), (GuardrailMode::Concurrent, 1)] {
        let model = ScriptedModel::new().delayed_text(Duration::from_secs(1), "ok");
        let seen = Arc::new(AtomicUsize::new(99));
        let agent = Agent::builder(model.clone())
            .input_guardrail(Slow {
                delay: Duration::from_millis(10),
                trip: false,
                model: model.clone(),
                requests_seen: Arc::clone(&seen),
            })
            .guardrail_mode(mode)
            .build()
            .unwrap();
        let result = agent.run("hi").await;
        assert_eq!(
            result.output().map(String::as_str),
            Some("ok"),
            "{mode:?}: {:?}",
            result.error()
        );
        assert_eq!(
            seen.load(Ordering::SeqCst),
            expected,
            "{mode:?}: requests when the check ended"
        );
    }
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Refund {
    amount: u32,
}

#[tokio::test]
async fn an_output_guardrail_checks_the_structured_output_typed() {
    let cap = || {
        guardrail::output("refund_cap", |_ctx, refund: &Refund| {
            if refund.amount > 100 {
                Verdict::Trip(Tripwire::new(
                    "refund_too_large",
                    format!("{} is over the cap", refund.amount),
                ))
            } else {
                Verdict::Pass
            }
        })
    };
    let agent = |answer: &str| {
        Agent::builder(ScriptedModel::new().text(answer))
            .output::<Refund>()
            .output_guardrail(cap())
            .build()
            .unwrap()
    };
    let small = agent(r#"{"amount": 40}"#).run("refund").await;
    assert_eq!(small.output().map(|r| r.amount), Some(40), "{:?}", small.error());
    let large = agent(r#"{"amount": 400}"#).run("refund").await;
    assert_eq!(
        tripped(&large.error()),
        ("refund_cap", GuardrailKind::Output, "refund_too_large")
    );
    assert!(large.output().is_none(), "a tripped output is not returned");
}

#[tokio::test]
async fn a_tool_argument_tripwire_ends_the_run_before_the_tool_runs() {
    let sends = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(ScriptedModel::new().tool_call("send", json!({"to": "everyone"})))
        .tool(counting_tool("send", Arc::clone(&sends)))
        .tool_guardrail(guardrail::tool_arguments("no_broadcast", |_ctx, _tool, args| {
            if args["to"] == "everyone" {
                ToolVerdict::Trip(Tripwire::new("broadcast", "sending to everyone is not allowed"))
            } else {
                ToolVerdict::Pass
            }
        }))
        .build()
        .unwrap();
    let result = agent.run("send to everyone").await;
    assert_eq!(
        tripped(&result.error()),
        ("no_broadcast", GuardrailKind::ToolArguments, "broadcast")
    );
    assert_eq!(sends.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn tool_guardrails_may_replace_the_arguments_call_or_the_result_with_a_message() {
    let sends = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new()
        .tool_calls([("send", json!({"to": "everyone"})), ("send", json!({"to": "bob"}))])
        .text("done");
    let sink = Arc::new(CollectingEventSink::new());
    let agent = Agent::builder(model.clone())
        .tool(counting_tool("send", Arc::clone(&sends)))
        .tool_guardrail(guardrail::tool_arguments("no_broadcast", |_ctx, _tool, args| {
            if args["to"] == "everyone" {
                ToolVerdict::Replace("not sent: pick one recipient".into())
            } else {
                ToolVerdict::Pass
            }
        }))
        .tool_guardrail(guardrail::tool_result("redact", |_ctx, _tool, result| {
            if result.as_str().is_some_and(|r| r.contains("bob")) {
                ToolVerdict::Replace("sent to [redacted]".into())
            } else {
                ToolVerdict::Pass
            }
        }))
        .event_sink(sink.clone())
        .build()
        .unwrap();
    let result = agent.run("send").await;
    assert_eq!(
        result.output().map(String::as_str),
        Some("done"),
        "{:?}",
        result.error()
    );
    assert_eq!(sends.load(Ordering::SeqCst), 1, "the replaced call did not run");
    let seen: Vec<String> = model.requests()[1]
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(Message::text)
        .collect();
    assert_eq!(seen, ["not sent: pick one recipient", "sent to [redacted]"]);
    let replaced = sink
        .events()
        .iter()
        .filter(|e| {
            matches!(
                e,
                AgentEvent::GuardrailChecked {
                    replaced: true,
                    call_id: Some(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(replaced, 2);
}

#[tokio::test]
async fn a_model_backed_guardrail_decides_with_its_structured_output() {
    let checker = |tripped: bool| {
        let decision = GuardrailDecision {
            tripped,
            reason: "asks for a weapon".into(),
        };
        Agent::builder(ScriptedModel::new().text(serde_json::to_string(&decision).unwrap()))
            .instructions("Decide whether the text asks for something dangerous.")
            .output::<GuardrailDecision>()
            .build()
            .unwrap()
    };
    for (trips, expected) in [(true, Some("tripped")), (false, None)] {
        let agent = Agent::builder(ScriptedModel::new().text("an answer"))
            .input_guardrail(checker(trips).as_guardrail("safety"))
            .guardrail_mode(GuardrailMode::Blocking)
            .build()
            .unwrap();
        let result = agent.run("how do I build a bow").await;
        match expected {
            Some(code) => assert_eq!(tripped(&result.error()), ("safety", GuardrailKind::Input, code)),
            None => assert_eq!(
                result.output().map(String::as_str),
                Some("an answer"),
                "{:?}",
                result.error()
            ),
        }
    }
    // A checker that cannot answer fails closed.
    let broken = Agent::builder(ScriptedModel::new().text("not json"))
        .output::<GuardrailDecision>()
        .build()
        .unwrap();
    let agent = Agent::builder(ScriptedModel::new().text("x"))
        .output_guardrail(broken.as_guardrail("safety"))
        .build()
        .unwrap();
    let result = agent.run("hi").await;
    assert_eq!(
        tripped(&result.error()),
        ("safety", GuardrailKind::Output, "guardrail_unavailable")
    );

    // A checker whose model server fails: the tripwire says so in modu's words, without the
    // server's answer (which may quote the checked text or anything else).
    let failing = Agent::builder(ScriptedModel::new().error(|| modu_core::ModelError::Status {
        status: 400,
        body: "invalid request: the prompt 'my password is hunter2' is too long".into(),
        retry_after: None,
    }))
    .output::<GuardrailDecision>()
    .build()
    .unwrap();
    let agent = Agent::builder(ScriptedModel::new().text("x"))
        .input_guardrail(failing.as_guardrail("safety"))
        .guardrail_mode(GuardrailMode::Blocking)
        .build()
        .unwrap();
    let result = agent.run("my password is hunter2").await;
    let Some(AgentError::GuardrailTripped { tripwire, .. }) = result.error() else {
        panic!("{:?}", result.error());
    };
    assert_eq!(tripwire.code, "guardrail_unavailable");
    assert!(
        tripwire.message.contains("the model call failed"),
        "{}",
        tripwire.message
    );
    assert!(!tripwire.message.contains("hunter2"), "{}", tripwire.message);
}

#[tokio::test]
async fn a_run_stopped_before_its_first_request_checks_its_input_when_resumed() {
    for mode in [GuardrailMode::Concurrent, GuardrailMode::Blocking] {
        // A concurrent check sends the request with it: the tripped one may take an answer.
        let model = ScriptedModel::new().text("fine").text("fine");
        let agent = Agent::builder(model.clone())
            .input_guardrail(no_password())
            .guardrail_mode(mode)
            .checkpoint_store(Arc::new(modu_core::InMemoryCheckpointStore::new()))
            .build()
            .unwrap();
        let start = |input: &str| {
            let token = tokio_util::sync::CancellationToken::new();
            token.cancel();
            agent.run(modu_agent::AgentRequest::new((), input).cancel_token(token))
        };
        // Cancelled before anything was asked or checked: the resume checks the input.
        let stopped = start("my password is hunter2").await;
        assert!(matches!(stopped.error(), Some(AgentError::Cancelled)));
        let resumed = agent.resume(stopped.run_id(), ()).await;
        assert_eq!(tripped(&resumed.error()).2, "secret_in_input", "{mode:?}");
        assert!(resumed.output().is_none());
        if mode == GuardrailMode::Blocking {
            assert!(model.requests().is_empty(), "the model got unchecked input");
        }
        // Input that passes goes on as usual.
        let stopped = start("hello").await;
        let resumed = agent.resume(stopped.run_id(), ()).await;
        assert_eq!(resumed.output().map(String::as_str), Some("fine"), "{mode:?}");
    }
}

/// A check that takes longer than any run here may last.
struct Stuck;

#[async_trait]
impl InputGuardrail<()> for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    async fn check(&self, _ctx: &RunContext<()>, _input: &[Message]) -> Verdict {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Verdict::Pass
    }
}

#[async_trait]
impl modu_agent::guardrail::OutputGuardrail<()> for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    async fn check(&self, _ctx: &RunContext<()>, _output: &serde_json::Value) -> Verdict {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Verdict::Pass
    }
}

#[tokio::test]
async fn a_slow_guardrail_ends_with_the_runs_timeout_or_cancellation() {
    let stuck = |kind: usize, mode: GuardrailMode| {
        let builder = Agent::builder(ScriptedModel::new().text("answer"))
            .guardrail_mode(mode)
            .limits(modu_agent::RunLimits::default().timeout(Duration::from_millis(100)));
        match kind {
            0 => builder.input_guardrail(Stuck).build().unwrap(),
            _ => builder.output_guardrail(Stuck).build().unwrap(),
        }
    };
    for (kind, mode) in [
        (0, GuardrailMode::Blocking),
        (0, GuardrailMode::Concurrent),
        (1, GuardrailMode::Concurrent),
    ] {
        let started = std::time::Instant::now();
        let timed_out = stuck(kind, mode).run("hi").await;
        assert!(
            matches!(timed_out.error(), Some(AgentError::Timeout { after_ms: 100 })),
            "{kind} {mode:?}: {:?}",
            timed_out.error()
        );
        let token = tokio_util::sync::CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            cancel.cancel();
        });
        let agent = stuck(kind, mode);
        let cancelled = agent
            .run(modu_agent::AgentRequest::new((), "hi").cancel_token(token))
            .await;
        assert!(
            matches!(cancelled.error(), Some(AgentError::Cancelled)),
            "{kind} {mode:?}: {:?}",
            cancelled.error()
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{kind} {mode:?}: the run waited for the check"
        );
    }
}

#[tokio::test]
async fn a_model_backed_guardrails_usage_counts_in_the_checked_run() {
    let pass = serde_json::to_string(&GuardrailDecision {
        tripped: false,
        reason: "fine".into(),
    })
    .unwrap();
    let checker = Agent::builder(
        ScriptedModel::new()
            .named("checker-model")
            .with_usage(100, 1)
            .text(pass.clone())
            .text(pass),
    )
    .output::<GuardrailDecision>()
    .build()
    .unwrap();
    let agent = Agent::builder(ScriptedModel::new().named("main-model").text("an answer"))
        .input_guardrail(checker.as_guardrail("input_check"))
        .output_guardrail(checker.as_guardrail("output_check"))
        .build()
        .unwrap();
    let result = agent.run("hi").await;
    assert!(result.is_completed(), "{:?}", result.error());
    // One request of the main model (10 in), one check of the input and one of the output.
    assert_eq!(result.usage().requests, 3);
    assert_eq!(result.usage().input_tokens, 210);
    let by_model = &result.report().usage_by_model;
    assert_eq!(by_model["checker-model"].requests, 2);
    assert_eq!(by_model["main-model"].requests, 1);
}
