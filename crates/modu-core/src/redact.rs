//! Masking a client's own credentials in everything it formats (for provider crates: modu-openai and modu-ollama use it; a provider of your own can too).
//!
//! The secrets of a client are its API key, the value of every header it was configured with
//! (and, for a value in the form `Scheme token` such as `Bearer xyz`, the token alone), and the
//! user name and password of its base URL (with the `Basic` credentials reqwest sends for them).
//! Every [`ModelError`] the client returns has each occurrence of a secret replaced by
//! [`MASK`], error bodies included; `Debug` shows header names and `***` values; URLs are shown
//! with their user info replaced by `***`.
//!
//! The short-value rule: a value shorter than [`MIN_SECRET_LEN`] bytes is still hidden in
//! `Debug` output, but is not searched for in texts (error bodies, messages): replacing every
//! `1` or `on` of a body would make it unreadable, and a value that short is no credential.
//! Longer values are replaced wherever they occur, longest first (so no part of a longer secret
//! is left around a shorter one), raw and in their JSON-escaped form (a server echoing a value
//! inside a JSON string escapes `"`, `\` and sometimes `/`).

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;

use crate::{BoxError, ModelError};

/// What a secret is replaced by.
pub const MASK: &str = "***";

/// Values shorter than this (in bytes) are not searched for in texts.
pub const MIN_SECRET_LEN: usize = 4;

/// The secrets of one client, longest first.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// The redactor of a client with this key, these header values and this base URL.
    pub fn new<'a>(api_key: Option<&str>, header_values: impl IntoIterator<Item = &'a str>, base_url: &str) -> Self {
        let mut r = Redactor::default();
        if let Some(key) = api_key {
            r.add(key);
        }
        for value in header_values {
            r.add(value);
            let value = value.trim();
            if let Some((scheme, token)) = value.split_once(' ')
                && !scheme.is_empty()
                && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                r.add(token);
            }
        }
        if let Some((user, password)) = userinfo(base_url) {
            let user_decoded = percent_decode(user);
            r.add(user);
            r.add(&user_decoded);
            let mut basic = format!("{user_decoded}:");
            if let Some(password) = password {
                let decoded = percent_decode(password);
                r.add(password);
                r.add(&decoded);
                basic.push_str(&decoded);
            }
            r.add(&base64(basic.as_bytes()));
        }
        r.secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        r.secrets.dedup();
        r
    }

    fn add(&mut self, value: &str) {
        let value = value.trim();
        if value.len() < MIN_SECRET_LEN {
            return;
        }
        self.secrets.push(value.to_owned());
        if let Ok(json) = serde_json::to_string(value) {
            let escaped = json.get(1..json.len().saturating_sub(1)).unwrap_or_default();
            if escaped != value {
                self.secrets.push(escaped.to_owned());
            }
            if escaped.contains('/') {
                self.secrets.push(escaped.replace('/', "\\/"));
            }
        }
    }

    /// Whether `text` holds a secret.
    pub fn leaks(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// `text` with every secret replaced by [`MASK`].
    pub fn text<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if !self.leaks(text) {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        Cow::Owned(out)
    }

    fn string(&self, text: String) -> String {
        match self.text(&text) {
            Cow::Borrowed(_) => text,
            Cow::Owned(s) => s,
        }
    }

    /// The error with every secret masked in its texts, and its source replaced by a text copy
    /// (masked) when the source's own texts hold one.
    pub fn error(&self, err: ModelError) -> ModelError {
        if self.secrets.is_empty() {
            return err;
        }
        match err {
            ModelError::Transport { message, source } => ModelError::Transport {
                message: self.string(message),
                source: source.map(|s| self.source(s)),
            },
            ModelError::Authentication { status, message } => ModelError::Authentication {
                status,
                message: self.string(message),
            },
            ModelError::ModelNotFound { model, message } => ModelError::ModelNotFound {
                model,
                message: self.string(message),
            },
            ModelError::ContextLengthExceeded { message } => ModelError::ContextLengthExceeded {
                message: self.string(message),
            },
            ModelError::Status {
                status,
                body,
                retry_after,
            } => ModelError::Status {
                status,
                body: self.string(body),
                retry_after,
            },
            ModelError::InvalidResponse { message } => ModelError::InvalidResponse {
                message: self.string(message),
            },
            ModelError::InvalidRequest { message } => ModelError::InvalidRequest {
                message: self.string(message),
            },
            other => other,
        }
    }

    fn source(&self, source: BoxError) -> BoxError {
        let mut current: Option<&(dyn StdError + 'static)> = Some(&*source);
        let mut leaks = false;
        while let Some(e) = current {
            if self.leaks(&e.to_string()) || self.leaks(&format!("{e:?}")) {
                leaks = true;
                break;
            }
            current = e.source();
        }
        if !leaks {
            return source;
        }
        Box::new(RedactedError::of(self, &*source))
    }
}

/// A copy of an error chain whose texts had a secret: the texts, masked.
#[derive(Clone)]
struct RedactedError {
    display: String,
    debug: String,
    source: Option<Box<RedactedError>>,
}

impl RedactedError {
    fn of(redactor: &Redactor, err: &(dyn StdError + 'static)) -> Self {
        RedactedError {
            display: redactor.text(&err.to_string()).into_owned(),
            debug: redactor.text(&format!("{err:?}")).into_owned(),
            source: err.source().map(|s| Box::new(RedactedError::of(redactor, s))),
        }
    }
}

impl fmt::Display for RedactedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl fmt::Debug for RedactedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.debug)
    }
}

impl StdError for RedactedError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn StdError + 'static))
    }
}

/// Where the user info of a URL is: the bytes after `://` up to the last `@` before the first
/// `?` or `#` (a wrongly encoded password may hold a `/`, so the path is not excluded).
///
/// A wrongly encoded password may hold a `?` or a `#` too (`http://u:pa#ss@host/v1`, which no
/// URL parser takes, and which the clients then quote in their error): when a `?` or `#` comes
/// before any `/` and after a `:` (`user:pass…`), the user info runs to the last `@` before the
/// first `/` after it. A query after a path or a host (`http://host/v1?mail=a@b`,
/// `http://host?mail=a@b`) holds no user info.
///
/// A URL without a scheme (`user:pw@host/v1`, which the clients refuse, and then quote in
/// their error) has its user info from the start, unless a space comes before the `@` (then
/// it is a sentence, not a URL).
fn userinfo_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let at = match rest[..end].rfind('@') {
        Some(at) => at,
        None if end < rest.len() && !rest[..end].contains('/') && rest[..end].contains(':') => {
            let authority_end = rest[end..].find('/').map_or(rest.len(), |n| end + n);
            rest[..authority_end].rfind('@')?
        }
        None => return None,
    };
    if start == 0 && rest[..at].contains(char::is_whitespace) {
        return None;
    }
    Some((start, start + at))
}

/// The user name and password of a URL, as written (percent-encoded).
fn userinfo(url: &str) -> Option<(&str, Option<&str>)> {
    let (start, end) = userinfo_span(url)?;
    let info = &url[start..end];
    Some(match info.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (info, None),
    })
}

/// The URL with its user info (if any) replaced by `***`, and the value of every query
/// parameter with a secret name ([`SecretMasker`](crate::mask::SecretMasker)'s default keys:
/// `password`, `sslpassword`, `api_key`, `token`, …) too:
/// `postgres://***@db/app?password=***&sslmode=disable`. `url` is one URL (it may hold spaces,
/// as a wrongly written password does).
pub fn display_url(url: &str) -> Cow<'_, str> {
    let shown = match userinfo_span(url) {
        Some((start, end)) => Cow::Owned(format!("{}{MASK}{}", &url[..start], &url[end..])),
        None => Cow::Borrowed(url),
    };
    match mask_secret_params(&shown) {
        Some(masked) => Cow::Owned(masked),
        None => shown,
    }
}

/// `url` with the values of its secret-named query parameters replaced by `***`; `None` when
/// it has none.
fn mask_secret_params(url: &str) -> Option<String> {
    let after_userinfo = url.find(MASK).map_or(0, |i| i + MASK.len());
    let q = after_userinfo + url[after_userinfo..].find('?')?;
    let end = url[q..].find('#').map_or(url.len(), |n| q + n);
    let masker = crate::mask::SecretMasker::default();
    let mut changed = false;
    let params: Vec<String> = url[q + 1..end]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !value.is_empty() && masker.is_secret_key(&percent_decode(key)) => {
                changed = true;
                format!("{key}={MASK}")
            }
            _ => pair.to_owned(),
        })
        .collect();
    changed.then(|| format!("{}?{}{}", &url[..q], params.join("&"), &url[end..]))
}

/// Every URL in `text` (from its `scheme://` to the next whitespace, quote or `)`) as
/// [`display_url`] shows it: for error messages and logs that may quote a connection URL.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')'))
            .unwrap_or(tail.len());
        let url = &tail[..end];
        // The scheme is already out; masked as if it were there.
        let shown = display_url_after_scheme(url);
        out.push_str(&shown);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// [`display_url`] of `scheme://` + `rest`, without the scheme.
fn display_url_after_scheme(rest: &str) -> String {
    let full = format!("x://{rest}");
    display_url(&full)[4..].to_owned()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding (what an HTTP `Basic` header holds).
fn base64(input: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b0 = u32::from(chunk[0]);
        let b1 = u32::from(chunk.get(1).copied().unwrap_or(0));
        let b2 = u32::from(chunk.get(2).copied().unwrap_or(0));
        let n = (b0 << 16) | (b1 << 8) | b2;
        let sextet = |shift: u32| char::from(TABLE[((n >> shift) & 63) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// Header names with masked values, for `Debug`: `{"authorization": "***"}`.
pub struct MaskedHeaders(pub Vec<String>);

impl fmt::Debug for MaskedHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter().map(|name| (name, MASK))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_userinfo_is_masked_and_its_basic_form_too() {
        assert_eq!(display_url("http://user:p%40ss@host:1/v1"), "http://***@host:1/v1");
        assert_eq!(display_url("https://host/v1?x=a@b"), "https://host/v1?x=a@b");
        // A password with an unencoded `#` or `?` (no URL parser takes it; the clients quote it).
        assert_eq!(
            display_url("http://admin:pa#ss-PW@127.0.0.1:8000/v1"),
            "http://***@127.0.0.1:8000/v1"
        );
        assert_eq!(
            display_url("http://admin:pa?ss-PW@host/v1?q=1"),
            "http://***@host/v1?q=1"
        );
        assert_eq!(display_url("admin:pa#ss-PW@host/v1"), "***@host/v1");
        assert_eq!(display_url("https://host?x=a@b"), "https://host?x=a@b");
        // Secret-named query parameters.
        assert_eq!(
            display_url("postgres://u@db/app?sslmode=disable&password=p1&sslpassword=p2#x"),
            "postgres://***@db/app?sslmode=disable&password=***&sslpassword=***#x"
        );
        assert_eq!(
            display_url("http://h/v1?api-version=2024"),
            "http://h/v1?api-version=2024"
        );
        // Every URL of a text, ending at whitespace, a quote or `)`.
        assert_eq!(
            redact_urls("a postgres://u:p/q@db/app?password=x (and 'redis://:pw@h/1') done"),
            "a postgres://***@db/app?password=*** (and 'redis://***@h/1') done"
        );
        assert_eq!(redact_urls("no url at all"), "no url at all");
        assert_eq!(display_url("reading the stream"), "reading the stream");
        // Without a scheme (a base URL the clients refuse, quoted in their error).
        assert_eq!(display_url("alice:s3cret@localhost:8000/v1"), "***@localhost:8000/v1");
        assert_eq!(display_url("localhost:8000/v1"), "localhost:8000/v1");
        assert_eq!(
            display_url("mail the owner at ops@example.com"),
            "mail the owner at ops@example.com"
        );
        let r = Redactor::new(None, [], "http://Aladdin:open%20sesame@host/v1");
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(
            r.text("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ== open sesame open%20sesame Aladdin"),
            "Basic *** *** *** ***"
        );
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
    }
}
