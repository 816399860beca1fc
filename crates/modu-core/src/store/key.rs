//! The ids and keys every store accepts ([`MAX_ID_BYTES`], [`MAX_MEMORY_KEY_BYTES`], no NUL),
//! checked before a backend is touched ([`StoreError::InvalidId`]).

use super::{MAX_ID_BYTES, MAX_MEMORY_KEY_BYTES, StoreError};

/// How much of a refused id [`StoreError::InvalidId`] quotes.
const PREVIEW_BYTES: usize = 64;

impl StoreError {
    /// `Ok` for an id every store accepts as a session id, run id or lease key: at most
    /// [`MAX_ID_BYTES`] bytes and without a NUL character (which PostgreSQL text cannot hold).
    /// The empty id is accepted. Store implementations call this before touching their backend.
    pub fn check_id(id: &str) -> Result<(), StoreError> {
        check(id, MAX_ID_BYTES)
    }

    /// [`StoreError::check_id`] for a memory-state key: at most [`MAX_MEMORY_KEY_BYTES`] bytes.
    pub fn check_memory_key(key: &str) -> Result<(), StoreError> {
        check(key, MAX_MEMORY_KEY_BYTES)
    }
}

fn check(id: &str, max: usize) -> Result<(), StoreError> {
    let reason = if id.len() > max {
        if max == MAX_ID_BYTES {
            "longer than MAX_ID_BYTES (1024 bytes)"
        } else {
            "longer than MAX_MEMORY_KEY_BYTES (2048 bytes)"
        }
    } else if id.contains('\0') {
        "contains a NUL character"
    } else {
        return Ok(());
    };
    let mut end = id.len().min(PREVIEW_BYTES);
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    Err(StoreError::InvalidId {
        preview: id[..end].to_owned(),
        len: id.len(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_up_to_the_limit_without_nul_are_accepted() {
        assert!(StoreError::check_id("").is_ok());
        assert!(StoreError::check_id(&"é".repeat(MAX_ID_BYTES / 2)).is_ok());
        assert!(StoreError::check_memory_key(&"k".repeat(MAX_MEMORY_KEY_BYTES)).is_ok());
    }

    #[test]
    fn long_or_nul_ids_are_refused_with_a_short_preview() {
        let long = "세".repeat(3000);
        let Err(StoreError::InvalidId { preview, len, reason }) = StoreError::check_id(&long) else {
            panic!("a 9000-byte id was accepted");
        };
        assert_eq!(len, 9000);
        assert!(preview.len() <= PREVIEW_BYTES && long.starts_with(&preview));
        assert!(reason.contains("1024"), "{reason}");
        assert!(StoreError::check_memory_key(&"k".repeat(MAX_MEMORY_KEY_BYTES + 1)).is_err());
        let err = StoreError::check_id("a\0b").map(|()| "accepted").unwrap_or_else(|e| {
            assert!(e.to_string().contains("NUL"), "{e}");
            "refused"
        });
        assert_eq!(err, "refused");
    }
}
