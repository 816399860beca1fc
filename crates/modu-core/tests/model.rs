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
