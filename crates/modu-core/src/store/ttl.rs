//! The map behind the in-memory stores: entries that expire a time to live after they were
//! last touched.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

pub(super) struct Entry<T> {
    pub(super) value: T,
    pub(super) touched: Instant,
}

pub(super) struct TtlMap<T> {
    ttl: Option<Duration>,
    map: Mutex<HashMap<String, Entry<T>>>,
}

impl<T> TtlMap<T> {
    pub(super) fn new(ttl: Option<Duration>) -> Self {
        TtlMap {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, Entry<T>>) -> R) -> R {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ttl) = self.ttl {
            let now = Instant::now();
            map.retain(|_, e| now.duration_since(e.touched) < ttl);
        }
        f(&mut map)
    }

    /// Removes the expired entries; how many.
    pub(super) fn purge(&self) -> u64 {
        let Some(ttl) = self.ttl else { return 0 };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let before = map.len();
        let now = Instant::now();
        map.retain(|_, e| now.duration_since(e.touched) < ttl);
        (before - map.len()) as u64
    }
}
