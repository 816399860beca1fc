//! Who each session belongs to: a session (AG-UI `threadId`, A2A `contextId`) is bound to the
//! principal that first used it; anyone else is answered as if it did not exist.
//!
//! The bindings live in the server's memory, at most [`DEFAULT_SESSION_OWNERS`] of them (or
//! [`crate::ModuServer::session_owner_limit`]): past that, the binding used longest ago is
//! forgotten. A forgotten binding is what a restart leaves: the stored session then belongs to
//! the first principal that continues it, and until then its history is nobody's to read.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::auth::Principal;

/// How many session bindings a server keeps by default.
pub const DEFAULT_SESSION_OWNERS: usize = 100_000;

/// The owner of each session the server has seen, by session id (one namespace for all the
/// agents of a server, since agents may share a conversation store).
#[derive(Debug)]
pub(crate) struct SessionOwners {
    limit: usize,
    inner: Mutex<Bindings>,
}

#[derive(Debug, Default)]
struct Bindings {
    /// Session id → (owner, when it was last used).
    map: HashMap<String, (Option<String>, u64)>,
    /// When last used → session id: the oldest first.
    by_use: BTreeMap<u64, String>,
    clock: u64,
}

impl Bindings {
    /// Marks the session as just used.
    fn touch(&mut self, session_id: &str) {
        self.clock += 1;
        let now = self.clock;
        if let Some((_, used)) = self.map.get_mut(session_id) {
            self.by_use.remove(used);
            *used = now;
            self.by_use.insert(now, session_id.to_owned());
        }
    }
}

impl Default for SessionOwners {
    fn default() -> Self {
        SessionOwners::new(DEFAULT_SESSION_OWNERS)
    }
}

impl SessionOwners {
    /// Keeps at most `limit` bindings (at least one).
    pub(crate) fn new(limit: usize) -> Self {
        SessionOwners {
            limit: limit.max(1),
            inner: Mutex::new(Bindings::default()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Bindings) -> R) -> R {
        let mut guard = match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Binds the session to the caller when it is new; whether it is the caller's.
    pub(crate) fn claim(&self, session_id: &str, principal: &Principal) -> bool {
        let limit = self.limit;
        self.with(|b| {
            if let Some((owner, _)) = b.map.get(session_id) {
                let mine = owner == &principal.user;
                if mine {
                    b.touch(session_id);
                }
                return mine;
            }
            while b.map.len() >= limit {
                let Some((_, oldest)) = b.by_use.pop_first() else { break };
                b.map.remove(&oldest);
            }
            b.clock += 1;
            let now = b.clock;
            b.map.insert(session_id.to_owned(), (principal.user.clone(), now));
            b.by_use.insert(now, session_id.to_owned());
            true
        })
    }

    /// Whether the session is bound to the caller (an unbound session is no one's).
    pub(crate) fn owned_by(&self, session_id: &str, principal: &Principal) -> bool {
        self.with(|b| {
            let mine = b.map.get(session_id).is_some_and(|(owner, _)| owner == &principal.user);
            if mine {
                b.touch(session_id);
            }
            mine
        })
    }

    /// How many bindings are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.with(|b| b.map.len())
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

    #[test]
    fn past_the_limit_the_binding_used_longest_ago_is_forgotten() {
        let owners = SessionOwners::new(3);
        let (erin, mallory) = (Principal::new("erin", ["a"]), Principal::new("mallory", ["a"]));
        for s in ["s1", "s2", "s3"] {
            assert!(owners.claim(s, &erin));
        }
        // s1 is used again, so s2 is now the oldest.
        assert!(owners.owned_by("s1", &erin));
        assert!(owners.claim("s4", &erin));
        assert_eq!(owners.len(), 3);
        assert!(owners.owned_by("s1", &erin) && owners.owned_by("s3", &erin) && owners.owned_by("s4", &erin));
        assert!(!owners.owned_by("s2", &erin), "s2 was forgotten");
        // A refused claim does not count as a use by the owner, and binds nothing.
        assert!(!owners.claim("s3", &mallory));
        assert_eq!(owners.len(), 3);
        // Forgotten, s2 is the next claimant's (as after a restart).
        assert!(owners.claim("s2", &mallory));
        assert_eq!(owners.len(), 3);
        // That claim forgot s1, used longest ago (s3 and s4 were read after it above).
        assert!(!owners.owned_by("s1", &erin));
        assert!(owners.owned_by("s3", &erin) && owners.owned_by("s4", &erin) && owners.owned_by("s2", &mallory));
    }
}
