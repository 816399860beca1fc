//! The unit tests of `modu_core::media` (kept out of the crate's sources).

use modu_core::media::*;
use modu_core::tool::truncate_result;
#[allow(unused_imports)]
use modu_core::*;
use serde_json::json;

#[test]
fn the_envelope_round_trips_and_only_it_is_one() -> Result<(), Box<dyn std::error::Error>> {
    let content = ToolContent::new(vec![
        ContentPart::text("dot"),
        ContentPart::image_base64("image/png", "AAAA"),
    ]);
    let value = content.clone().into_value();
    assert_eq!(
        value,
        json!({"$modu_tool_content": [{"type":"text","text":"dot"},
            {"type":"image","source":{"type":"base64","mime_type":"image/png","data":"AAAA"}}]})
    );
    assert_eq!(serde_json::to_value(&content)?, value);
    assert_eq!(ToolContent::from_value(&value).transpose()?, Some(content));
    // A tool's own objects are not envelopes, even with the key among others.
    assert!(ToolContent::from_value(&json!({"$modu_tool_content": [], "x": 1})).is_none());
    assert!(ToolContent::from_value(&json!({"parts": []})).is_none());
    assert!(matches!(
        ToolContent::from_value(&json!({"$modu_tool_content": [{"type":"video"}]})),
        Some(Err(_))
    ));
    Ok(())
}

#[test]
fn ordinary_results_become_the_same_text_as_before() {
    assert_eq!(result_parts(json!("5"), None), vec![ContentPart::text("5")]);
    assert_eq!(
        result_parts(json!({"a": 1}), None),
        vec![ContentPart::text(r#"{"a":1}"#)]
    );
    let cut = result_parts(json!("abcdef"), Some(2));
    assert_eq!(cut, vec![ContentPart::text(truncate_result("abcdef".into(), Some(2)))]);
}

#[test]
fn envelope_text_is_cut_and_media_kept_whole() {
    let big = "x".repeat(100);
    let value = ToolContent::new(vec![
        ContentPart::text("abcdef"),
        ContentPart::image_base64("image/png", &big),
    ])
    .into_value();
    let parts = result_parts(value, Some(3));
    assert_eq!(parts[0], ContentPart::text(truncate_result("abcdef".into(), Some(3))));
    assert_eq!(parts[1], ContentPart::image_base64("image/png", big));
}

#[test]
fn inline_media_over_the_limit_are_refused() {
    let parts = [ContentPart::image_base64("image/png", "x".repeat(11))];
    assert_eq!(
        check_parts(&parts, InputModalities::all(), 10),
        Err(ContentError::TooLarge {
            modality: Modality::Image,
            bytes: 11,
            limit: 10
        })
    );
    assert_eq!(check_parts(&parts, InputModalities::all(), 11), Ok(()));
    // A URL is a reference: no size.
    assert_eq!(
        check_parts(
            &[ContentPart::image_url("https://example.com/a.png")],
            InputModalities::all(),
            0
        ),
        Ok(())
    );
    let over = ToolContent::new(vec![ContentPart::audio_base64(
        "audio/wav",
        "x".repeat(DEFAULT_MAX_INLINE_MEDIA_BYTES + 1),
    )]);
    let refused = check_tool_value(over.into_value(), modu_core::InputModalities::all());
    assert_eq!(refused.err().map(|e| e.reason), Some("media_too_large".to_owned()));
}

#[test]
fn a_data_url_holds_its_bytes_inline_and_is_capped_like_base64() {
    let url = format!("data:image/png;base64,{}", "x".repeat(11));
    let parts = [ContentPart::image_url(url)];
    assert_eq!(
        check_parts(&parts, InputModalities::all(), 10),
        Err(ContentError::TooLarge {
            modality: Modality::Image,
            bytes: 11,
            limit: 10
        })
    );
    assert_eq!(check_parts(&parts, InputModalities::all(), 11), Ok(()));
}

#[test]
fn a_text_only_model_refuses_media_but_not_text() {
    let text_only = InputModalities::text_only();
    assert_eq!(check_parts(&[ContentPart::text("hi")], text_only, 0), Ok(()));
    let err = check_parts(&[ContentPart::file_url("https://x/a.pdf", None)], text_only, 0);
    assert_eq!(err.err().map(|e| e.modality()), Some(Modality::File));
    let images = text_only.with(Modality::Image);
    assert!(images.accepts(Modality::Image) && !images.accepts(Modality::Audio));
    let m = Message::user_parts(vec![ContentPart::image_url("https://x/a.png")]);
    let e = check_messages("m", &[m], text_only, 10);
    assert!(matches!(
        e,
        Err(ModelError::UnsupportedContent {
            modality: Some(Modality::Image),
            ..
        })
    ));
}
