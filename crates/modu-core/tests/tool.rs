//! The unit tests of `modu_core::tool` (kept out of the crate's sources).

use std::sync::Arc;

use modu_core::tool::*;
#[allow(unused_imports)]
use modu_core::*;

#[test]
fn truncation_marks_and_respects_char_boundaries() {
    let s = "héllo wörld".to_string();
    let out = truncate_result(s.clone(), Some(2));
    assert!(out.starts_with('h'));
    assert!(out.contains("[truncated: 1 of 13 bytes shown]"), "{out}");
    assert_eq!(truncate_result(s.clone(), Some(100)), s);
}

#[test]
fn mapper_and_passthrough() {
    #[derive(Debug, thiserror::Error)]
    #[error("db password=hunter2 failed")]
    struct DbError;
    let te = ToolError::execution("x").with_recovery(RecoveryAction::Replan);
    assert_eq!(map_tool_error(Box::new(te.clone()), None), te);
    let generic = map_tool_error(Box::new(DbError), None);
    assert_eq!(generic.reason, "unhandled_error");
    assert!(generic.message.is_none());
    let mapper: ErrorMapper = Arc::new(|e| {
        e.downcast_ref::<DbError>()
            .map(|_| ToolError::execution("db").retryable(true))
    });
    assert!(map_tool_error(Box::new(DbError), Some(&mapper)).retryable);
    assert!(
        !ToolError::execution("x")
            .with_message("m")
            .model_content(false)
            .contains('m')
    );
}
