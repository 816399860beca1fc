//! Input modalities: the kinds of content a model takes (text, images, audio, files), a
//! model's declaration of which it accepts, and where a medium's bytes are ([`MediaSource`]).

use serde::{Deserialize, Serialize};

/// A kind of content a model may take as input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Modality {
    /// Text (and reasoning).
    Text,
    /// Images.
    Image,
    /// Audio.
    Audio,
    /// Files.
    File,
}

impl Modality {
    /// The lowercase name (`"text"`, `"image"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Modality::Text => "text",
            Modality::Image => "image",
            Modality::Audio => "audio",
            Modality::File => "file",
        }
    }
}

impl std::fmt::Display for Modality {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds of input a model takes, as its provider declares them
/// (`ChatModel::input_modalities`). Text is always
/// accepted. The default, [`InputModalities::all`], means "all, or unknown": nothing is
/// refused before the request, and the server decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InputModalities {
    image: bool,
    audio: bool,
    file: bool,
}

impl Default for InputModalities {
    fn default() -> Self {
        Self::all()
    }
}

impl InputModalities {
    /// Every modality (or unknown).
    pub const fn all() -> Self {
        InputModalities {
            image: true,
            audio: true,
            file: true,
        }
    }

    /// Text only: a request with an image, audio or file part fails before it is sent.
    pub const fn text_only() -> Self {
        InputModalities {
            image: false,
            audio: false,
            file: false,
        }
    }

    /// The same set with `modality` accepted too.
    pub const fn with(mut self, modality: Modality) -> Self {
        match modality {
            Modality::Text => {}
            Modality::Image => self.image = true,
            Modality::Audio => self.audio = true,
            Modality::File => self.file = true,
        }
        self
    }

    /// What either set accepts (a chain of models takes what any of them takes).
    pub const fn union(self, other: InputModalities) -> Self {
        InputModalities {
            image: self.image || other.image,
            audio: self.audio || other.audio,
            file: self.file || other.file,
        }
    }

    /// Whether the model takes `modality`.
    pub const fn accepts(self, modality: Modality) -> bool {
        match modality {
            Modality::Text => true,
            Modality::Image => self.image,
            Modality::Audio => self.audio,
            Modality::File => self.file,
        }
    }
}

/// Where a medium's bytes are: a URL the model server fetches, or inline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum MediaSource {
    /// A URL (`https://…`, or a `data:` URL).
    Url {
        /// The URL.
        url: String,
    },
    /// Inline bytes, base64-encoded.
    Base64 {
        /// The MIME type (`image/png`, `application/pdf`, …).
        mime_type: String,
        /// The bytes, base64-encoded (standard alphabet, with padding).
        data: String,
    },
}

impl MediaSource {
    /// The medium as one URL: the URL itself, or a `data:{mime};base64,{data}` URL.
    pub fn to_url(&self) -> String {
        match self {
            MediaSource::Url { url } => url.clone(),
            MediaSource::Base64 { mime_type, data } => format!("data:{mime_type};base64,{data}"),
        }
    }

    /// The base64 text held inline: the data of a [`MediaSource::Base64`], or of a
    /// `data:…;base64,…` URL (the bytes are in the message either way, so the inline-size cap
    /// applies to both); `None` for a URL the server fetches.
    pub fn inline_data(&self) -> Option<&str> {
        match self {
            MediaSource::Url { url } => url.strip_prefix("data:")?.split_once(";base64,").map(|(_, data)| data),
            MediaSource::Base64 { data, .. } => Some(data),
        }
    }
}
