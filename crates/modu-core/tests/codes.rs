//! Typed codes serialise as the plain strings did, and an unknown code is kept.
#![allow(clippy::unwrap_used)]

use modu_core::{AgentError, AgentEvent, ModelError, ModelErrorKind, PlanFailureCause};
use serde_json::json;

#[test]
fn a_model_error_kind_is_its_snake_case_code() {
    let err = ModelError::RateLimited { retry_after: None };
    assert_eq!(err.kind(), ModelErrorKind::RateLimited);
    assert_eq!(err.kind(), "rate_limited");
    assert_eq!(err.kind().to_string(), "rate_limited");
    let stored = serde_json::to_value(AgentError::from_model(&err)).unwrap();
    assert_eq!(
        stored,
        json!({"type": "model", "kind": "rate_limited", "message": err.to_string(), "retryable": true})
    );
    let back: AgentError = serde_json::from_value(stored).unwrap();
    assert!(matches!(
        back,
        AgentError::Model {
            kind: ModelErrorKind::RateLimited,
            ..
        }
    ));
}

#[test]
fn an_unknown_code_reads_as_other_and_writes_back_unchanged() {
    // A checkpoint written by a newer version, with a cause this one does not know.
    let stored = json!({"type": "plan_failed", "cause": "quota_exhausted", "step_id": "s2"});
    let error: AgentError = serde_json::from_value(stored.clone()).unwrap();
    match &error {
        AgentError::PlanFailed { cause, .. } => {
            assert_eq!(*cause, PlanFailureCause::Other("quota_exhausted".into()));
            assert_eq!(*cause, "quota_exhausted");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(serde_json::to_value(&error).unwrap(), stored);
    let kind: ModelErrorKind = serde_json::from_value(json!("overloaded")).unwrap();
    assert_eq!(kind.as_str(), "overloaded");
    // Codes are equal when their text is: an `Other` holding a known code is that code.
    assert_eq!(ModelErrorKind::Other("timeout".into()), ModelErrorKind::Timeout);
    let set: std::collections::HashSet<_> = [ModelErrorKind::Other("timeout".into()), ModelErrorKind::Timeout].into();
    assert_eq!(set.len(), 1);
}

#[test]
fn every_plan_cause_round_trips_through_its_code() {
    for code in [
        "tool_failed",
        "tool_requested_fail",
        "tool_requested_replan",
        "uncancellable_timeout",
        "partial_batch_failure",
        "replan_limit",
        "repair_not_safe",
        "repair_limit",
        "repair_declined",
        "repair_same_arguments",
        "repair_same_effective_arguments",
        "repair_other_tool",
        "repair_not_single_call",
        "repair_same_call_id",
        "repair_invalid_arguments",
        "step_attempts_exhausted",
        "plan_invalid",
        "max_steps",
        "verify_failed",
        "max_tool_calls",
        "max_turns",
        "output_invalid",
        "model_error",
        "memory_overflow",
        "context_provider",
        "configuration",
        "run_failed",
    ] {
        let cause = PlanFailureCause::from_code(code);
        assert!(!matches!(cause, PlanFailureCause::Other(_)), "{code} is known");
        assert_eq!(cause.as_str(), code);
        let event = AgentEvent::StepFailed {
            run_id: "r".into(),
            step_id: "s1".into(),
            cause,
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["cause"], code);
    }
}
