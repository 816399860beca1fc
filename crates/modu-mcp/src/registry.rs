//! The per-run registry of discovered tools and the search behind `mcp_search_tools`.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

/// The separator between server and tool names in external tool names.
pub const NAME_SEPARATOR: &str = "__";

/// One tool a server offers, as the run knows it.
pub struct McpToolDescriptor {
    /// The server's name.
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// The name the model uses: `<server>__<tool>`.
    pub external_name: String,
    /// The tool's description ("" when the server gave none).
    pub description: String,
    /// The tool's input schema.
    pub input_schema: Value,
    validator: Option<modu_core::ArgumentValidator>,
    name_lower: String,
    description_words: Vec<String>,
}

impl std::fmt::Debug for McpToolDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpToolDescriptor")
            .field("external_name", &self.external_name)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

impl McpToolDescriptor {
    /// A descriptor; the input schema is compiled for argument validation (a schema that does
    /// not compile leaves validation to the server).
    pub fn new(
        server: impl Into<String>,
        tool: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        let server = server.into();
        let tool = tool.into();
        let description = description.into();
        let external_name = format!("{server}{NAME_SEPARATOR}{tool}");
        let validator = match modu_core::ArgumentValidator::new(&input_schema) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::debug!(tool = %external_name, error = %e, "input schema does not compile; not validating");
                None
            }
        };
        let name_lower = external_name.to_lowercase();
        let description_words = words(&description).collect();
        McpToolDescriptor {
            server,
            tool,
            external_name,
            description,
            input_schema,
            validator,
            name_lower,
            description_words,
        }
    }

    /// Whether the input schema compiled (a schema that does not is left to the server).
    pub fn has_valid_schema(&self) -> bool {
        self.validator.is_some()
    }

    /// Checks arguments against the input schema; `Err` lists what is wrong.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), String> {
        let Some(validator) = &self.validator else {
            return Ok(());
        };
        validator.check(arguments)
    }

    /// The entry `mcp_search_tools` returns for this tool.
    pub fn search_entry(&self) -> Value {
        json!({
            "name": self.external_name,
            "description": self.description,
            "input_schema": self.input_schema,
        })
    }

    /// How well this tool matches the query terms (0 = not at all).
    fn score(&self, query_lower: &str, terms: &[String]) -> u32 {
        if terms.is_empty() {
            return 1;
        }
        let mut score = 0;
        if self.name_lower == query_lower || self.tool.eq_ignore_ascii_case(query_lower) {
            score += 100;
        }
        for term in terms {
            if self.name_lower.contains(term.as_str()) {
                score += 4;
            }
            if self.description_words.iter().any(|w| w == term) {
                score += 2;
            } else if term.len() >= 4 && self.description_words.iter().any(|w| w.starts_with(term.as_str())) {
                score += 1;
            }
        }
        score
    }
}

/// The tools discovered for one run, by external name, in discovery order.
#[derive(Debug, Default)]
pub struct McpToolRegistry {
    tools: Vec<Arc<McpToolDescriptor>>,
    by_name: HashMap<String, usize>,
}

impl McpToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool (a later tool with the same external name replaces the earlier one).
    pub fn insert(&mut self, descriptor: McpToolDescriptor) {
        let name = descriptor.external_name.clone();
        let descriptor = Arc::new(descriptor);
        match self.by_name.get(&name) {
            Some(&i) => self.tools[i] = descriptor,
            None => {
                self.by_name.insert(name, self.tools.len());
                self.tools.push(descriptor);
            }
        }
    }

    /// The tool with this external name.
    pub fn get(&self, external_name: &str) -> Option<&Arc<McpToolDescriptor>> {
        self.by_name.get(external_name).map(|&i| &self.tools[i])
    }

    /// Every tool, in discovery order.
    pub fn tools(&self) -> &[Arc<McpToolDescriptor>] {
        &self.tools
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Searches by name and description words. Every word of the query scores: a word found
    /// in the external name counts most, a whole description word next, a description word it
    /// starts (four letters or more) least; the exact external or tool name ranks first. An
    /// empty query matches every tool. Ties keep discovery order. Returns the best `limit`
    /// matches and the number of matches in total. `visible` hides tools (the tool filter).
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        visible: impl Fn(&McpToolDescriptor) -> bool,
    ) -> (Vec<Arc<McpToolDescriptor>>, usize) {
        let query_lower = query.trim().to_lowercase();
        let mut terms: Vec<String> = words(&query_lower).collect();
        terms.sort();
        terms.dedup();
        let mut scored: Vec<(u32, usize)> = self
            .tools
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let s = t.score(&query_lower, &terms);
                (s > 0 && visible(t)).then_some((s, i))
            })
            .collect();
        let total = scored.len();
        let limit = limit.min(total);
        if limit < total {
            scored.select_nth_unstable_by(limit, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            scored.truncate(limit);
        }
        scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        (
            scored.into_iter().map(|(_, i)| Arc::clone(&self.tools[i])).collect(),
            total,
        )
    }
}

/// Splits an external name into (server, tool). Server names never contain `__`, so the first
/// separator is the split point.
pub fn split_external_name(external_name: &str) -> Option<(&str, &str)> {
    external_name
        .split_once(NAME_SEPARATOR)
        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> McpToolRegistry {
        let mut r = McpToolRegistry::new();
        r.insert(McpToolDescriptor::new(
            "weather",
            "forecast",
            "Return a forecast for a city.",
            json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}),
        ));
        r.insert(McpToolDescriptor::new(
            "weather",
            "alerts",
            "Severe weather alerts.",
            json!({"type":"object"}),
        ));
        r.insert(McpToolDescriptor::new(
            "billing",
            "invoice",
            "Create an invoice for a city office.",
            json!({"type":"object"}),
        ));
        r
    }

    fn names(hits: &[Arc<McpToolDescriptor>]) -> Vec<&str> {
        hits.iter().map(|t| t.external_name.as_str()).collect()
    }

    #[test]
    fn search_ranks_names_over_descriptions() {
        // Discovered in the opposite order of their rank: ties keep discovery order, so each
        // pair below is ordered by the scoring rule, against the tie rule.
        let mut r = McpToolRegistry::new();
        let object = || json!({"type": "object"});
        // "forecast" starts a description word.
        r.insert(McpToolDescriptor::new(
            "archive",
            "search",
            "Search forecasting archives.",
            object(),
        ));
        // "forecast" is a whole description word.
        r.insert(McpToolDescriptor::new(
            "docs",
            "lookup",
            "Look up the forecast format.",
            object(),
        ));
        // "forecast" is in the name.
        r.insert(McpToolDescriptor::new(
            "weather",
            "daily_forecast",
            "The sky for a city.",
            object(),
        ));
        // "forecast" is the tool's name.
        r.insert(McpToolDescriptor::new(
            "tides",
            "forecast",
            "High and low water.",
            object(),
        ));
        let (hits, total) = r.search("forecast", 10, |_| true);
        assert_eq!(total, 4);
        assert_eq!(
            names(&hits),
            [
                "tides__forecast",
                "weather__daily_forecast",
                "docs__lookup",
                "archive__search"
            ],
            "exact name, then name, then description word, then description prefix"
        );
        // The same order when the limit cuts the list.
        let (hits, total) = r.search("forecast", 2, |_| true);
        assert_eq!(
            (names(&hits), total),
            (vec!["tides__forecast", "weather__daily_forecast"], 4)
        );
        // A name match on one word beats description matches on another.
        let (hits, _) = r.search("format daily", 10, |_| true);
        assert_eq!(names(&hits), ["weather__daily_forecast", "docs__lookup"]);
    }

    #[test]
    fn search_keeps_discovery_order_on_ties_and_honours_limit_and_filter() {
        let r = registry();
        // Both descriptions have the word "city": equal scores, discovery order.
        let (hits, total) = r.search("city", 10, |_| true);
        assert_eq!(
            (names(&hits), total),
            (vec!["weather__forecast", "billing__invoice"], 2)
        );
        // In the name and a description word beats in the name only.
        let (hits, _) = r.search("weather", 10, |_| true);
        assert_eq!(names(&hits), ["weather__alerts", "weather__forecast"]);
        let (hits, total) = r.search("", 2, |_| true);
        assert_eq!((hits.len(), total), (2, 3));
        let (hits, total) = r.search("city", 10, |t| t.server != "weather");
        assert_eq!((names(&hits), total), (vec!["billing__invoice"], 1));
        let (hits, _) = r.search("billing__invoice", 10, |_| true);
        assert_eq!(hits[0].external_name, "billing__invoice");
    }

    #[test]
    fn validation_reports_problems() {
        let r = registry();
        let t = r.get("weather__forecast").unwrap();
        assert!(t.validate_arguments(&json!({"city": "Seoul"})).is_ok());
        let e = t.validate_arguments(&json!({"city": 3})).unwrap_err();
        assert!(e.contains("/city"), "{e}");
        assert!(t.validate_arguments(&json!({})).unwrap_err().contains("city"));
    }

    #[test]
    fn external_names_split_at_the_first_separator() {
        assert_eq!(split_external_name("a__b__c"), Some(("a", "b__c")));
        assert_eq!(split_external_name("ab"), None);
        assert_eq!(split_external_name("__b"), None);
    }
}
