//! A run's usage as its context keeps it: the total ([`RunContext::usage`](crate::RunContext::usage))
//! and the share by model ([`RunContext::usage_by_model`](crate::RunContext::usage_by_model)),
//! under one lock.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::message::Usage;

/// A run's usage: its total and its model calls' share by model, kept under one lock (the
/// chat stack adds each attempt's usage to both at once).
#[doc(hidden)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunUsage {
    /// The run's total ([`RunContext::usage`](crate::RunContext::usage)).
    pub total: Usage,
    /// The usage of its model calls, by model.
    pub by_model: ModelUsage,
}

impl RunUsage {
    /// Adds a model call's usage to the total and to `model`'s share.
    pub fn add_model_call(&mut self, model: &str, usage: Usage) {
        self.total += usage;
        self.by_model.add(model, usage);
    }
}

/// Adds a model call's usage to the run's total and to `model`'s share.
#[doc(hidden)]
pub fn add_model_call(run: &Mutex<RunUsage>, model: &str, usage: Usage) {
    run.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .add_model_call(model, usage);
}

/// A run's usage by model, as [`RunContext::usage_by_model`] reports it. A run asks one model,
/// or a few (a fallback chain), so the entries are kept in a vector: a map's first node is
/// about 800 bytes, and every run that calls a model would allocate one.
#[doc(hidden)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelUsage(Vec<(String, Usage)>);

impl ModelUsage {
    /// Adds `usage` to `model`'s entry (its name is copied only for a new entry).
    pub fn add(&mut self, model: &str, usage: Usage) {
        match self.0.iter_mut().find(|(name, _)| name == model) {
            Some((_, entry)) => *entry += usage,
            None => self.0.push((model.to_owned(), usage)),
        }
    }

    /// The usage by model, as a map.
    pub fn to_map(&self) -> BTreeMap<String, Usage> {
        // Inserted one by one: `collect` would gather the entries in a vector to sort first.
        let mut map = BTreeMap::new();
        for (model, usage) in &self.0 {
            map.insert(model.clone(), *usage);
        }
        map
    }
}

impl From<BTreeMap<String, Usage>> for ModelUsage {
    fn from(map: BTreeMap<String, Usage>) -> Self {
        ModelUsage(map.into_iter().collect())
    }
}
