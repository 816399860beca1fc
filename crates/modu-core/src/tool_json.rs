//! A request's tool list as wire JSON, encoded once per shared list: [`ToolJsonCache`].

use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde_json::value::RawValue;

use crate::model::ToolDefinition;

/// How many shared lists a cache remembers (an agent's list, its planner's, a few agents on
/// one client).
const ENTRIES: usize = 4;

/// The wire JSON of the tool lists a provider client sent lately, for a provider crate to
/// encode an agent's tool list once instead of once per request.
///
/// An agent offers the same list ([`ChatRequest::tools`](crate::ChatRequest::tools), an `Arc`)
/// in every request of every run, and its schemas are most of a request body's JSON that is
/// not the conversation. The cache keeps the JSON of the last four shared lists, keyed by the
/// list's allocation: it holds a [`Weak`] to each, so an address it knows cannot be reused by
/// another list while the entry lives, and a list cannot change in place while a `Weak` to it
/// exists (`Arc::get_mut` refuses, `Arc::make_mut` moves the list to a new allocation).
///
/// A list only the request holds (built for it) and an empty list are not cached: the caller
/// encodes them in place, as a cached copy would never be reused.
///
/// One cache serves one wire format: every call of [`get_or_encode`](Self::get_or_encode) on a
/// cache must encode the same way (a client keeps one cache per format it sends).
///
/// ```
/// use std::sync::Arc;
/// use modu_core::ToolDefinition;
/// use modu_core::tool_json::ToolJsonCache;
///
/// # fn main() -> Result<(), serde_json::Error> {
/// let cache = ToolJsonCache::new();
/// let tools = Arc::new(vec![ToolDefinition::new("add", "Add two integers", serde_json::json!({"type": "object"}))]);
/// let offered = Arc::clone(&tools); // as a request holds the agent's list
/// let encode = |tools: &[ToolDefinition]| serde_json::value::to_raw_value(tools);
/// let first = cache.get_or_encode(&offered, encode)?.expect("a shared list is cached");
/// let again = cache.get_or_encode(&offered, encode)?.expect("a shared list is cached");
/// assert!(Arc::ptr_eq(&first, &again)); // encoded once
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct ToolJsonCache {
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    list: Weak<Vec<ToolDefinition>>,
    json: Arc<RawValue>,
}

impl std::fmt::Debug for ToolJsonCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("ToolJsonCache")
            .field("entries", &entries.len())
            .finish()
    }
}

impl ToolJsonCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The JSON of `tools` as `encode` writes it, when the list is shared beyond this request:
    /// from the cache, or encoded now and remembered. `None` for an empty list or one only
    /// this request holds (the caller encodes those in place).
    pub fn get_or_encode<F>(
        &self,
        tools: &Arc<Vec<ToolDefinition>>,
        encode: F,
    ) -> Result<Option<Arc<RawValue>>, serde_json::Error>
    where
        F: FnOnce(&[ToolDefinition]) -> Result<Box<RawValue>, serde_json::Error>,
    {
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
        // Encoded outside the lock: another request may do the same meanwhile, and the later
        // of the two entries is dropped below.
        let json: Arc<RawValue> = Arc::from(encode(tools)?);
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

    fn encode(tools: &[ToolDefinition]) -> Result<Box<RawValue>, serde_json::Error> {
        serde_json::value::to_raw_value(tools)
    }

    fn encoded(tools: &[ToolDefinition]) -> String {
        serde_json::to_string(tools).unwrap_or_default()
    }

    #[test]
    fn a_shared_list_is_encoded_once_and_reads_as_the_list() -> Result<(), serde_json::Error> {
        let cache = ToolJsonCache::new();
        let tools = list(&["add", "sub"]);
        let held = Arc::clone(&tools);
        let first = cache.get_or_encode(&tools, encode)?.map(|j| j.get().to_owned());
        assert_eq!(first.as_deref(), Some(encoded(&tools).as_str()));
        let mut calls = 0;
        let again = cache.get_or_encode(&held, |t| {
            calls += 1;
            encode(t)
        })?;
        assert_eq!(calls, 0, "the second request does not encode the list again");
        let (Some(a), Some(b)) = (cache.get_or_encode(&tools, encode)?, again) else {
            panic!("a shared list is cached");
        };
        assert!(Arc::ptr_eq(&a, &b), "the second request reuses the first one's JSON");
        Ok(())
    }

    #[test]
    fn a_list_only_the_request_holds_and_an_empty_one_are_not_cached() -> Result<(), serde_json::Error> {
        let cache = ToolJsonCache::new();
        assert!(cache.get_or_encode(&list(&["add"]), encode)?.is_none());
        let empty = list(&[]);
        let _held = Arc::clone(&empty);
        assert!(cache.get_or_encode(&empty, encode)?.is_none());
        Ok(())
    }

    #[test]
    fn a_changed_list_is_encoded_anew() -> Result<(), serde_json::Error> {
        let cache = ToolJsonCache::new();
        let mut tools = list(&["add"]);
        let held = Arc::clone(&tools);
        assert!(cache.get_or_encode(&tools, encode)?.is_some());
        drop(held);
        // The cache's Weak makes make_mut move the list, so its address is a new key.
        Arc::make_mut(&mut tools).push(ToolDefinition::new("sub", "a tool", serde_json::json!({})));
        let _held = Arc::clone(&tools);
        let json = cache.get_or_encode(&tools, encode)?.map(|j| j.get().to_owned());
        assert_eq!(json.as_deref(), Some(encoded(&tools).as_str()));
        Ok(())
    }

    #[test]
    fn an_encoding_error_is_returned_and_not_cached() {
        let cache = ToolJsonCache::new();
        let tools = list(&["add"]);
        let _held = Arc::clone(&tools);
        let failed = cache.get_or_encode(&tools, |_| Err(serde::ser::Error::custom("cannot encode")));
        assert!(failed.is_err());
        let entries = cache.entries.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(entries.is_empty());
    }

    #[test]
    fn the_cache_keeps_the_latest_lists() -> Result<(), serde_json::Error> {
        let cache = ToolJsonCache::new();
        let lists: Vec<_> = (0..ENTRIES + 2).map(|i| list(&[&format!("t{i}")])).collect();
        let _held: Vec<_> = lists.iter().map(Arc::clone).collect();
        for l in &lists {
            cache.get_or_encode(l, encode)?;
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
