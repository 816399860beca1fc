//! Media on the Chat Completions wire: content parts out, the checks before a request, and
//! servers' refusals of media.
//!
//! A user message with media goes as an array of parts:
//!
//! - text: `{"type":"text","text":…}`;
//! - an image: `{"type":"image_url","image_url":{"url":…}}` (the URL, or a
//!   `data:{mime};base64,…` URL for an inline image);
//! - audio: `{"type":"input_audio","input_audio":{"data":…,"format":"wav"|"mp3"}}` (only WAV
//!   and MP3: other audio types are refused before the request);
//! - a file: `{"type":"file","file":{"file_data":"data:{mime};base64,…","filename":…}}` (only
//!   inline or `data:` files: a file at an `http` URL is refused before the request).
//!
//! Tool messages take only text in Chat Completions: a tool result with media goes as its text
//! in the tool message, and the media follow in one user message after the batch's tool
//! messages (a text part naming the call, then its media).

use modu_core::media::check_messages;
use modu_core::{ContentPart, InputModalities, MediaSource, Message, Modality, ModelError};
use serde::Serialize;
use serde::ser::SerializeMap;

/// The tool message's text of a tool result whose content is only media.
pub(crate) const MEDIA_ONLY_TOOL_TEXT: &str = "(the result is attached in the next message)";

/// What a request's messages must pass before they are sent: the model's modalities and the
/// inline size limit, then what Chat Completions can carry.
pub(crate) fn check_request(
    model: &str,
    messages: &[Message],
    accepts: InputModalities,
    max_inline_bytes: usize,
) -> Result<(), ModelError> {
    check_messages(model, messages, accepts, max_inline_bytes)?;
    let refuse = |modality: Modality, message: String| ModelError::UnsupportedContent {
        model: model.to_owned(),
        modality: Some(modality),
        message,
    };
    for part in messages.iter().flat_map(|m| &m.content) {
        match part {
            ContentPart::Audio { mime_type, .. } if audio_format(mime_type).is_none() => {
                return Err(refuse(
                    Modality::Audio,
                    format!("Chat Completions takes WAV or MP3 audio, not {mime_type:?}"),
                ));
            }
            ContentPart::File {
                source: MediaSource::Url { url },
                ..
            } if !url.starts_with("data:") => {
                return Err(refuse(
                    Modality::File,
                    "Chat Completions takes files inline (base64 or a data: URL), not by URL".to_owned(),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The `format` of `input_audio` for a MIME type.
pub(crate) fn audio_format(mime_type: &str) -> Option<&'static str> {
    match mime_type.to_ascii_lowercase().as_str() {
        "audio/wav" | "audio/x-wav" | "audio/wave" | "audio/vnd.wave" | "wav" => Some("wav"),
        "audio/mpeg" | "audio/mp3" | "audio/mpeg3" | "mp3" => Some("mp3"),
        _ => None,
    }
}

/// A message's parts as the Chat Completions array (reasoning is not sent).
pub(crate) struct WireParts<'a>(pub &'a [ContentPart]);

impl Serialize for WireParts<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().filter(|p| p.as_reasoning().is_none()).map(WirePart))
    }
}

struct WirePart<'a>(&'a ContentPart);

impl Serialize for WirePart<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Url {
            url: String,
        }
        #[derive(Serialize)]
        struct Audio<'a> {
            data: &'a str,
            format: &'static str,
        }
        #[derive(Serialize)]
        struct File<'a> {
            file_data: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            filename: Option<&'a str>,
        }
        let mut map = serializer.serialize_map(Some(2))?;
        match self.0 {
            ContentPart::Image { source } => {
                map.serialize_entry("type", "image_url")?;
                map.serialize_entry("image_url", &Url { url: source.to_url() })?;
            }
            ContentPart::Audio { data, mime_type } => {
                map.serialize_entry("type", "input_audio")?;
                let format = audio_format(mime_type).unwrap_or("wav");
                map.serialize_entry("input_audio", &Audio { data, format })?;
            }
            ContentPart::File { source, filename } => {
                map.serialize_entry("type", "file")?;
                let file = File {
                    file_data: source.to_url(),
                    filename: filename.as_deref(),
                };
                map.serialize_entry("file", &file)?;
            }
            other => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", other.as_text().unwrap_or_default())?;
            }
        }
        map.end()
    }
}

/// The parts of the user message that carries the media of a run of tool messages.
pub(crate) fn tool_media_parts(tools: &[&Message]) -> Vec<ContentPart> {
    let mut parts = Vec::new();
    for m in tools {
        parts.push(ContentPart::text(format!(
            "Attachments of the result of tool call {} ({}):",
            m.tool_call_id.as_deref().unwrap_or("-"),
            m.name.as_deref().unwrap_or("-"),
        )));
        parts.extend(m.content.iter().filter(|p| p.is_media()).cloned());
    }
    parts
}

/// Whether an error body is a server's refusal of a medium, and of which: llama.cpp without a
/// vision/audio projector (`"image input is not supported - hint: … mmproj"`, HTTP 500), vLLM
/// and OpenAI text models.
pub(crate) fn refused_modality(body: &str) -> Option<Option<Modality>> {
    let lower = body.to_ascii_lowercase();
    let refused = [
        "input is not supported",
        "is not a multimodal model",
        "does not support image",
        "does not support audio",
        "image_url is only supported by certain models",
        "multimodal is not supported",
    ]
    .iter()
    .any(|p| lower.contains(p));
    if !refused {
        return None;
    }
    Some(if lower.contains("image") {
        Some(Modality::Image)
    } else if lower.contains("audio") {
        Some(Modality::Audio)
    } else if lower.contains("file") {
        Some(Modality::File)
    } else {
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_refusals_are_recognised() {
        let body = r#"{"error":{"code":500,"message":"image input is not supported - hint: if this is unexpected, you may need to provide the mmproj","type":"server_error"}}"#;
        assert_eq!(refused_modality(body), Some(Some(Modality::Image)));
        let audio = r#"{"error":{"code":500,"message":"audio input is not supported - hint: if this is unexpected, you may need to provide the mmproj","type":"server_error"}}"#;
        assert_eq!(refused_modality(audio), Some(Some(Modality::Audio)));
        assert_eq!(
            refused_modality(r#"{"error":{"message":"Loading model failed"}}"#),
            None
        );
    }

    #[test]
    fn unsendable_media_are_refused_before_the_request() {
        let all = InputModalities::all();
        let ogg = Message::user_parts(vec![ContentPart::audio_base64("audio/ogg", "AAAA")]);
        assert!(matches!(
            check_request("m", &[ogg], all, 100),
            Err(ModelError::UnsupportedContent {
                modality: Some(Modality::Audio),
                ..
            })
        ));
        let remote = Message::user_parts(vec![ContentPart::file_url("https://x/a.pdf", None)]);
        assert!(check_request("m", &[remote], all, 100).is_err());
        let inline = Message::user_parts(vec![ContentPart::file_url("data:application/pdf;base64,AA", None)]);
        assert!(check_request("m", &[inline], all, 100).is_ok());
    }
}
