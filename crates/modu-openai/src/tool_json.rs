//! A request's tool list as JSON, serialised once per shared list.
//!
//! An agent offers the same list ([`ChatRequest::tools`](modu_core::ChatRequest), an `Arc`) in
//! every request of every run, and its schemas are most of a request body's JSON that is not
//! the conversation. [`ToolJsonCache`] keeps the JSON of the last few shared lists, keyed by the
//! list's allocation: it holds a [`Weak`] to each, so an address it knows cannot be reused by
//! another list while the entry lives, and a list cannot change in place while a `Weak` to it
//! exists (`Arc::get_mut` refuses, `Arc::make_mut` moves the list to a new allocation).
//!
//! A list only this request holds (built for it) is serialised in place, as before: caching it
//! would cost a copy that no later request reuses.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use modu_core::ToolDefinition;
use serde_json::value::RawValue;

use crate::wire::WireTools;

/// How many shared lists a client remembers (an agent's list, its planner's, a few agents on
/// one client).
const ENTRIES: usize = 4;

/// The JSON of the shared tool lists a client sent lately.
#[derive(Default)]
pub(crate) struct ToolJsonCache {
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    list: Weak<Vec<ToolDefinition>>,
    json: Arc<RawValue>,
}

impl ToolJsonCache {
    /// The JSON of `tools` when the list is shared beyond this request: from the cache, or
    /// serialised and remembered. `None` for an empty list or one only this request holds.
    pub(crate) fn get(&self, tools: &Arc<Vec<ToolDefinition>>) -> Result<Option<Arc<RawValue>>, serde_json::Error> {
        if tools.is_empty() || Arc::strong_count(tools) < 2 {
            return Ok(None);
        }
        let key = Arc::as_ptr(tools);
        {
            let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = entries.iter().find(|e| std::ptr::eq(e.list.as_ptr(), key)) {
                return Ok(Some(Arc::clone(&entry.json)));
            }
        }
        // Serialised outside the lock: another request may do the same meanwhile, and the later
        // of the two entries is dropped below.
        let json: Arc<RawValue> = Arc::from(serde_json::value::to_raw_value(&WireTools::new(tools))?);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if !entries.iter().any(|e| std::ptr::eq(e.list.as_ptr(), key)) {
            // Lists no longer alive go first, then the oldest.
            entries.retain(|e| e.list.strong_count() > 0);
            if entries.len() == ENTRIES {
                entries.remove(0);
            }
            entries.push(Entry {
                list: Arc::downgrade(tools),
                json: Arc::clone(&json),
            });
        }
        Ok(Some(json))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Arc<Vec<ToolDefinition>> {
        Arc::new(
            names
                .iter()
                .map(|n| ToolDefinition::new(*n, "a tool", serde_json::json!({"type": "object"})))
                .collect(),
        )
    }

    fn encoded(tools: &[ToolDefinition]) -> String {
        serde_json::to_string(&WireTools::new(tools)).unwrap_or_default()
    }

    #[test]
    fn a_shared_list_is_serialised_once_and_reads_as_the_list() -> Result<(), serde_json::Error> {
        let cache = ToolJsonCache::default();
        let tools = list(&["add", "sub"]);
        let held = Arc::clone(&tools);
        let first = cache.get(&tools)?.map(|j| j.get().to_owned());
        assert_eq!(first.as_deref(), Some(encoded(&tools).as_str()));
        let again = cache.get(&held)?;
        let (Some(a), Some(b)) = (cache.get(&tools)?, again) else {
            panic!("a shared list is cached");
        };
        assert!(Arc::ptr_eq(&a, &b), "the second request reuses the first one's JSON");
        Ok(())
    }

    #[test]
    fn a_list_only_the_request_holds_and_an_empty_one_are_not_cached() -> Result<(), serde_json::Error> {
        let cache = ToolJsonCache::default();
        assert!(cache.get(&list(&["add"]))?.is_none());
        let empty = list(&[]);
        let _held = Arc::clone(&empty);
        assert!(cache.get(&empty)?.is_none());
        Ok(())
    }

    #[test]
    fn a_changed_list_is_serialised_anew() -> Result<(), serde_json::Error> {
        let cache = ToolJsonCache::default();
        let mut tools = list(&["add"]);
        let held = Arc::clone(&tools);
        assert!(cache.get(&tools)?.is_some());
        drop(held);
        // The cache's Weak makes make_mut move the list, so its address is a new key.
        Arc::make_mut(&mut tools).push(ToolDefinition::new("sub", "a tool", serde_json::json!({})));
        let _held = Arc::clone(&tools);
        let json = cache.get(&tools)?.map(|j| j.get().to_owned());
        assert_eq!(json.as_deref(), Some(encoded(&tools).as_str()));
        Ok(())
    }

    #[test]
    fn the_cache_keeps_the_latest_lists() -> Result<(), serde_json::Error> {
        let cache = ToolJsonCache::default();
        let lists: Vec<_> = (0..ENTRIES + 2).map(|i| list(&[&format!("t{i}")])).collect();
        let _held: Vec<_> = lists.iter().map(Arc::clone).collect();
        for l in &lists {
            cache.get(l)?;
        }
        let entries = cache.entries.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(entries.len(), ENTRIES);
        assert!(std::ptr::eq(
            entries[ENTRIES - 1].list.as_ptr(),
            Arc::as_ptr(&lists[ENTRIES + 1])
        ));
        Ok(())
    }
}
