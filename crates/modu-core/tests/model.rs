//! The unit tests of `modu_core::model` (kept out of the crate's sources).

use modu_core::model::*;
#[allow(unused_imports)]
use modu_core::*;

#[test]
fn assembles_fragments_by_index() -> Result<(), ModelError> {
    let mut b = ChatResponseBuilder::default();
    let frag = |index, id: Option<&str>, name: Option<&str>, args: &str| ChatEvent::ToolCallDelta {
        index,
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        arguments: args.to_owned(),
    };
    b.push(frag(1, Some("b"), Some("mul"), "{\"x\""));
    b.push(frag(0, Some("a"), Some("add"), "{\"a\":"));
    b.push(frag(1, Some("b"), Some("mul"), ":2}"));
    b.push(frag(0, None, None, "1}"));
    b.push(ChatEvent::Usage {
        usage: Usage::new(3, 4),
    });
    let r = b.finish()?;
    assert_eq!(r.message.tool_calls.len(), 2);
    assert_eq!(r.message.tool_calls[0], ToolCall::new("a", "add", "{\"a\":1}"));
    assert_eq!(r.message.tool_calls[1], ToolCall::new("b", "mul", "{\"x\":2}"));
    assert_eq!(r.usage.total_tokens, 7);
    Ok(())
}

/// `push_ref` folds a stream exactly as `push` does (text, reasoning, fragments, usage,
/// finish reason, model), and leaves the deltas to the caller.
#[test]
fn push_ref_folds_like_push() -> Result<(), ModelError> {
    let events = vec![
        ChatEvent::Model { name: "m-1".into() },
        ChatEvent::ReasoningDelta { text: "think".into() },
        ChatEvent::TextDelta { text: "Hel".into() },
        ChatEvent::TextDelta { text: "lo".into() },
        ChatEvent::ToolCallDelta {
            index: 0,
            id: Some("c1".into()),
            name: Some("add".into()),
            arguments: "{\"a\":".into(),
        },
        ChatEvent::ToolCallDelta {
            index: 0,
            id: Some(String::new()),
            name: None,
            arguments: "1}".into(),
        },
        ChatEvent::Usage {
            usage: Usage::new(2, 5),
        },
        ChatEvent::Finish {
            reason: FinishReason::ToolCalls,
        },
    ];
    let (mut owned, mut borrowed) = (ChatResponseBuilder::default(), ChatResponseBuilder::default());
    for event in &events {
        borrowed.push_ref(event);
        owned.push(event.clone());
    }
    assert_eq!(borrowed.text(), "Hello");
    let (owned, borrowed) = (owned.finish()?, borrowed.finish()?);
    assert_eq!(borrowed, owned);
    assert_eq!(
        borrowed.message.tool_calls,
        vec![ToolCall::new("c1", "add", "{\"a\":1}")]
    );
    assert_eq!(borrowed.usage.total_tokens, 7);
    Ok(())
}

#[test]
fn nameless_call_is_invalid() {
    let mut b = ChatResponseBuilder::default();
    b.push(ChatEvent::ToolCallDelta {
        index: 0,
        id: None,
        name: None,
        arguments: "{}".into(),
    });
    assert!(matches!(b.finish(), Err(ModelError::InvalidResponse { .. })));
}
