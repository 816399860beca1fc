//! Who each session belongs to: a session (AG-UI `threadId`, A2A `contextId`) is bound to the
//! principal that first used it; anyone else is answered as if it did not exist.
//!
//! The bindings live in the server's memory (one entry per session, never evicted, since
//! forgetting one would hand the session to the next caller). A server that restarts forgets
//! them: a stored session then belongs to the first principal that continues it, and until
//! then its history is nobody's to read.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::auth::Principal;

/// The owner of each session the server has seen, by session id (one namespace for all the
/// agents of a server, since agents may share a conversation store).
#[derive(Debug, Default)]
pub(crate) struct SessionOwners {
    map: Mutex<HashMap<String, Option<String>>>,
}

impl SessionOwners {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, Option<String>>) -> R) -> R {
        let mut guard = match self.map.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Binds the session to the caller when it is new; whether it is the caller's.
    pub(crate) fn claim(&self, session_id: &str, principal: &Principal) -> bool {
        self.with(|map| {
            map.entry(session_id.to_owned())
                .or_insert_with(|| principal.user.clone())
                == &principal.user
        })
    }

    /// Whether the session is bound to the caller (an unbound session is no one's).
    pub(crate) fn owned_by(&self, session_id: &str, principal: &Principal) -> bool {
        self.with(|map| map.get(session_id).is_some_and(|owner| owner == &principal.user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_caller_owns_a_session() {
        let owners = SessionOwners::default();
        let (erin, mallory) = (Principal::new("erin", ["a"]), Principal::new("mallory", ["a"]));
        assert!(!owners.owned_by("s1", &erin), "an unbound session is no one's");
        assert!(owners.claim("s1", &erin));
        assert!(owners.claim("s1", &erin));
        assert!(!owners.claim("s1", &mallory));
        assert!(!owners.owned_by("s1", &mallory));
        assert!(!owners.claim("s1", &Principal::anonymous()));
        assert!(owners.claim("s2", &Principal::anonymous()));
        assert!(!owners.owned_by("s2", &erin));
    }
}
