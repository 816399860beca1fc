//! The unit tests of `modu_core::message` (kept out of the crate's sources).

use modu_core::message::*;
#[allow(unused_imports)]
use modu_core::*;

#[test]
fn json_form_is_stable() -> Result<(), serde_json::Error> {
    let m = Message::assistant_tool_calls("", vec![ToolCall::new("c1", "add", "{\"a\":1}")]);
    let json = serde_json::to_string(&m)?;
    assert_eq!(
        json,
        r#"{"role":"assistant","content":[],"tool_calls":[{"id":"c1","name":"add","arguments":"{\"a\":1}"}]}"#
    );
    let back: Message = serde_json::from_str(&json)?;
    assert_eq!(back, m);
    let t = Message::tool_result("c1", "add", "2", false);
    assert_eq!(
        serde_json::to_string(&t)?,
        r#"{"role":"tool","content":[{"type":"text","text":"2"}],"tool_call_id":"c1","name":"add"}"#
    );
    // An old or minimal message still reads.
    let minimal: Message = serde_json::from_str(r#"{"role":"user"}"#)?;
    assert!(minimal.content.is_empty());
    Ok(())
}

#[test]
fn media_parts_have_a_stable_json_form() -> Result<(), serde_json::Error> {
    let m = Message::user_parts(vec![
        ContentPart::text("look"),
        ContentPart::image_url("https://x/a.png"),
        ContentPart::image_base64("image/png", "AAAA"),
        ContentPart::audio_base64("audio/wav", "UklG"),
        ContentPart::file_base64("application/pdf", "JVBE", Some("a.pdf".into())),
        ContentPart::file_url("https://x/b.pdf", None),
    ]);
    let json = serde_json::to_string(&m)?;
    assert_eq!(
        json,
        concat!(
            r#"{"role":"user","content":[{"type":"text","text":"look"},"#,
            r#"{"type":"image","source":{"type":"url","url":"https://x/a.png"}},"#,
            r#"{"type":"image","source":{"type":"base64","mime_type":"image/png","data":"AAAA"}},"#,
            r#"{"type":"audio","data":"UklG","mime_type":"audio/wav"},"#,
            r#"{"type":"file","source":{"type":"base64","mime_type":"application/pdf","data":"JVBE"},"filename":"a.pdf"},"#,
            r#"{"type":"file","source":{"type":"url","url":"https://x/b.pdf"}}]}"#
        )
    );
    let back: Message = serde_json::from_str(&json)?;
    assert_eq!(back, m);
    // Media are not text.
    assert_eq!(back.text(), "look");
    assert!(back.has_media());
    assert_eq!(
        back.content.iter().map(ContentPart::modality).collect::<Vec<_>>(),
        [
            Modality::Text,
            Modality::Image,
            Modality::Image,
            Modality::Audio,
            Modality::File,
            Modality::File
        ]
    );
    // Text-only messages written before media existed read and write the same JSON.
    let old = r#"{"role":"assistant","content":[{"type":"reasoning","text":"hm"},{"type":"text","text":"5"}]}"#;
    let read: Message = serde_json::from_str(old)?;
    assert!(!read.has_media());
    assert_eq!(serde_json::to_string(&read)?, old);
    assert_eq!(
        MediaSource::Base64 {
            mime_type: "image/png".into(),
            data: "AAAA".into()
        }
        .to_url(),
        "data:image/png;base64,AAAA"
    );
    Ok(())
}

#[test]
fn usage_adds() {
    let mut u = Usage::new(10, 5);
    u.cached_input_tokens = 4;
    u += Usage::new(1, 2);
    let mut expected = Usage::default();
    expected.input_tokens = 11;
    expected.output_tokens = 7;
    expected.total_tokens = 18;
    expected.requests = 2;
    expected.cached_input_tokens = 4;
    expected.reasoning_tokens = 0;
    assert_eq!(u, expected);
    // Stored usage without the detail fields reads, and writes none of them.
    let old: Usage = serde_json::from_str(r#"{"input_tokens":1,"output_tokens":2,"total_tokens":3,"requests":1}"#)
        .unwrap_or_default();
    assert_eq!(old, Usage::new(1, 2));
    assert!(!serde_json::to_string(&old).unwrap_or_default().contains("cached"));
}
