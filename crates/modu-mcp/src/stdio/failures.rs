//! The requests the transport failed itself because their answers could not be decoded.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use rmcp::model::RequestId;

/// Why a request failed without a decodable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DecodeFailure {
    /// `true` when the session ended (the answer could not be attributed, or the server's
    /// output ended); `false` when only this request's answer was undecodable.
    pub(crate) session_broken: bool,
    /// What happened, for the error message (may contain server text: redact before use).
    pub(crate) message: String,
}

/// The requests the transport failed itself, by id: the session looks a JSON-RPC error up
/// here to tell a made-up error from one the server sent.
#[derive(Debug, Default)]
pub(crate) struct DecodeFailures(Mutex<HashMap<RequestId, DecodeFailure>>);

impl DecodeFailures {
    /// Never more than this many unclaimed entries (failures of requests nobody looks up,
    /// such as `tools/list`, would otherwise pile up).
    const MAX_ENTRIES: usize = 256;

    pub(super) fn record(&self, id: RequestId, failure: DecodeFailure) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= Self::MAX_ENTRIES {
            map.clear();
        }
        map.insert(id, failure);
    }

    /// Removes and returns one failure, whichever (before `initialize` is answered, the only
    /// request in flight is `initialize`).
    pub(crate) fn take_any(&self) -> Option<DecodeFailure> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let id = map.keys().next()?.clone();
        map.remove(&id)
    }

    /// Removes and returns the failure recorded for `id`.
    pub(crate) fn take(&self, id: &RequestId) -> Option<DecodeFailure> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_failures_are_taken_once() {
        let failures = DecodeFailures::default();
        let failure = DecodeFailure {
            session_broken: false,
            message: "bad".into(),
        };
        failures.record(RequestId::Number(1), failure.clone());
        assert_eq!(failures.take(&RequestId::Number(1)), Some(failure));
        assert_eq!(failures.take(&RequestId::Number(1)), None);
    }
}
