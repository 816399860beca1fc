//! The per-run registry of discovered tools and the search behind `mcp_search_tools`.
//!
//! Search runs on an inverted index built once per registry (and again after it changes,
//! at the next search):
//! the query equal to a tool's name first, then BM25 over the words of names and
//! descriptions. Over 10,000 tools a search takes tens of microseconds instead of the
//! milliseconds a scan of every tool took (`cargo bench -p modu-mcp --bench mcp`).
//!
//! ```
//! use modu_mcp::{McpToolDescriptor, McpToolRegistry};
//! use serde_json::json;
//!
//! let mut registry = McpToolRegistry::new();
//! let object = || json!({"type": "object"});
//! registry.insert(McpToolDescriptor::new("docs", "lookup", "Look up a page; also shows the weather forecast.", object()));
//! registry.insert(McpToolDescriptor::new("weather", "getForecast", "The sky for a city.", object()));
//! registry.insert(McpToolDescriptor::new("tides", "forecast", "High and low water.", object()));
//! registry.build_index();
//!
//! let (hits, total) = registry.search("forecast", 10, |_| true);
//! let names: Vec<&str> = hits.iter().map(|t| t.external_name.as_str()).collect();
//! // The exact name, then a name word (camelCase splits), then a description word.
//! assert_eq!(names, ["tides__forecast", "weather__getForecast", "docs__lookup"]);
//! assert_eq!(total, 3);
//! ```

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crate::index::{Document, SearchIndex};

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
    /// The tool's output schema, when it declares one.
    pub output_schema: Option<Value>,
    validator: Option<modu_core::ArgumentValidator>,
    output_validator: Option<modu_core::ArgumentValidator>,
}

impl std::fmt::Debug for McpToolDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpToolDescriptor")
            .field("external_name", &self.external_name)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
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
        McpToolDescriptor {
            server,
            tool,
            external_name,
            description,
            input_schema,
            output_schema: None,
            validator,
            output_validator: None,
        }
    }

    /// The same descriptor with the output schema the tool declares; it is compiled for
    /// checking the tool's `structuredContent` (a schema that does not compile is not checked).
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_validator = match modu_core::ArgumentValidator::new(&schema) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::debug!(tool = %self.external_name, error = %e, "output schema does not compile; not validating");
                None
            }
        };
        self.output_schema = Some(schema);
        self
    }

    /// Checks a result's `structuredContent` against the output schema the tool declares
    /// (`Ok` without one); `Err` lists what is wrong.
    pub fn validate_output(&self, structured: &Value) -> Result<(), String> {
        let Some(validator) = &self.output_validator else {
            return Ok(());
        };
        validator.check(structured)
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
}

/// The tools discovered for one run, by external name, in discovery order.
#[derive(Debug, Default)]
pub struct McpToolRegistry {
    tools: Vec<Arc<McpToolDescriptor>>,
    by_name: HashMap<String, usize>,
    /// The search index: built by [`McpToolRegistry::build_index`] or the first search,
    /// dropped by every change.
    index: OnceLock<SearchIndex>,
}

impl McpToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool (a later tool with the same external name replaces the earlier one; the
    /// tools a session lists never replace one another: the first is kept).
    pub fn insert(&mut self, descriptor: McpToolDescriptor) {
        self.insert_shared(Arc::new(descriptor));
    }

    /// Adds a tool unless its external name is taken; `Err` hands back the tool that has it
    /// (and the registry is unchanged).
    pub(crate) fn insert_first(&mut self, descriptor: Arc<McpToolDescriptor>) -> Result<(), Arc<McpToolDescriptor>> {
        if let Some(existing) = self.get(&descriptor.external_name) {
            return Err(Arc::clone(existing));
        }
        self.insert_shared(descriptor);
        Ok(())
    }

    /// Adds a descriptor shared with another registry (same replacement rule as `insert`).
    pub(crate) fn insert_shared(&mut self, descriptor: Arc<McpToolDescriptor>) {
        self.index = OnceLock::new();
        let name = descriptor.external_name.clone();
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

    /// Builds the search index now, so the first search does not (a search builds it when
    /// the registry changed since; without this call the first search builds it).
    pub fn build_index(&self) {
        self.index();
    }

    fn index(&self) -> &SearchIndex {
        self.index.get_or_init(|| {
            let started = std::time::Instant::now();
            let index = SearchIndex::build(self.tools.iter().map(|t| Document {
                external_name: &t.external_name,
                tool: &t.tool,
                description: &t.description,
            }));
            tracing::debug!(tools = self.tools.len(), elapsed = ?started.elapsed(), "MCP tool search index built");
            index
        })
    }

    /// Searches by name and description words, best first, and returns the best `limit`
    /// matches and the number of matches in total. `visible` hides tools (the tool filter).
    ///
    /// The query equal to a tool's external name (`weather__forecast`) or its name on its
    /// server (`forecast`), ignoring case, ranks that tool first. Then every word of the
    /// query scores by BM25 over the words of names and descriptions (split at `_`, `-`,
    /// `__`, camelCase and every other non-alphanumeric character): a word in the name counts
    /// three times a word in the description, rare words more than common ones, a short
    /// description more than a long one; a word the query word only starts (three letters or
    /// more for names, four for descriptions) counts less than the word itself. Ties keep
    /// discovery order. An empty query (or one without a letter or digit) matches every
    /// tool, in discovery order.
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        visible: impl Fn(&McpToolDescriptor) -> bool,
    ) -> (Vec<Arc<McpToolDescriptor>>, usize) {
        let (hits, total) = self.index().search(query, limit, |i| visible(&self.tools[i]));
        (hits.into_iter().map(|i| Arc::clone(&self.tools[i])).collect(), total)
    }
}

/// Splits an external name into (server, tool). Server names never contain `__` and never
/// start or end with `_`, so the first separator is the split point (`a___b` is server `a`,
/// tool `_b`); `None` when the part before it cannot be a server name. Where the tool is in a
/// registry, its descriptor's `server` and `tool` are the authority.
pub fn split_external_name(external_name: &str) -> Option<(&str, &str)> {
    external_name
        .split_once(NAME_SEPARATOR)
        .filter(|(s, t)| !s.is_empty() && !s.starts_with('_') && !t.is_empty())
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

    fn object() -> Value {
        json!({"type": "object"})
    }

    #[test]
    fn an_exact_name_ranks_first_whatever_else_matches() {
        let mut r = McpToolRegistry::new();
        // Discovered first, with "search" in its name twice and its description three times.
        r.insert(McpToolDescriptor::new(
            "archive",
            "search_search",
            "Search, search and search again.",
            object(),
        ));
        r.insert(McpToolDescriptor::new("web", "search", "Fetch pages.", object()));
        let (hits, total) = r.search("search", 10, |_| true);
        assert_eq!(
            (names(&hits), total),
            (vec!["web__search", "archive__search_search"], 2)
        );
        // The external name too, in any case; and an exact name that is not visible is not shown.
        let (hits, _) = r.search("  WEB__Search ", 10, |_| true);
        assert_eq!(names(&hits)[0], "web__search");
        let (hits, total) = r.search("search", 10, |t| t.server != "web");
        assert_eq!((names(&hits), total), (vec!["archive__search_search"], 1));
    }

    #[test]
    fn a_name_word_beats_one_mention_in_a_long_description() {
        let mut r = McpToolRegistry::new();
        r.insert(McpToolDescriptor::new(
            "crm",
            "export",
            "Export every record of the workspace as a CSV file, with the owner, the stage, the \
             amount, the close date and the notes of each deal, and the contacts attached to it, \
             for a spreadsheet or a warehouse load.",
            object(),
        ));
        r.insert(McpToolDescriptor::new(
            "crm",
            "syncContacts",
            "Sync the address book.",
            object(),
        ));
        let (hits, total) = r.search("contacts", 10, |_| true);
        assert_eq!((names(&hits), total), (vec!["crm__syncContacts", "crm__export"], 2));
        // snake_case, camelCase and `server__tool` names all split into words.
        r.insert(McpToolDescriptor::new("weather", "get_forecast", "", object()));
        let (hits, _) = r.search("sync weather", 10, |_| true);
        assert_eq!(names(&hits), ["crm__syncContacts", "weather__get_forecast"]);
    }

    #[test]
    fn ties_are_in_discovery_order_whatever_the_limit() {
        let mut r = McpToolRegistry::new();
        // Same shape, so the same score; discovered in reverse alphabetical order.
        for server in ["zeta", "eta", "delta", "beta", "alpha"] {
            r.insert(McpToolDescriptor::new(server, "ping", "Check the link.", object()));
        }
        let expected = ["zeta__ping", "eta__ping", "delta__ping", "beta__ping", "alpha__ping"];
        for _ in 0..3 {
            let (hits, total) = r.search("link", 10, |_| true);
            assert_eq!((names(&hits), total), (expected.to_vec(), 5));
            // Several exact matches (the local name): discovery order among them too.
            let (hits, total) = r.search("ping", 3, |_| true);
            assert_eq!((names(&hits), total), (expected[..3].to_vec(), 5));
        }
        let (hits, total) = r.search("link", 0, |_| true);
        assert_eq!((hits.len(), total), (0, 5));
    }

    #[test]
    fn the_index_follows_changes_to_the_registry() {
        let mut r = registry();
        r.build_index();
        assert_eq!(r.search("tides", 10, |_| true).1, 0);
        r.insert(McpToolDescriptor::new("ocean", "tides", "Tide tables.", object()));
        let (hits, _) = r.search("tides", 10, |_| true);
        assert_eq!(names(&hits), ["ocean__tides"]);
        // A replaced tool is found by its new words only.
        r.insert(McpToolDescriptor::new(
            "billing",
            "invoice",
            "Refund a payment.",
            object(),
        ));
        assert_eq!(names(&r.search("refund", 10, |_| true).0), ["billing__invoice"]);
        assert_eq!(names(&r.search("office", 10, |_| true).0), Vec::<&str>::new());
        assert_eq!(r.len(), 4);
    }

    #[test]
    fn prefixes_match_below_whole_words_and_short_words_match_whole() {
        let mut r = McpToolRegistry::new();
        r.insert(McpToolDescriptor::new("a", "reports", "Deployment reports.", object()));
        r.insert(McpToolDescriptor::new("b", "deploy", "Ship it.", object()));
        r.insert(McpToolDescriptor::new("c", "go", "Run a report.", object()));
        // "deploy" is b's name, and starts a word of a's description.
        assert_eq!(names(&r.search("deploy", 10, |_| true).0), ["b__deploy", "a__reports"]);
        // "report" is a word of c's description and starts a's name.
        let (hits, _) = r.search("report", 10, |_| true);
        assert_eq!(names(&hits), ["a__reports", "c__go"]);
        // A word only longer words start.
        assert_eq!(names(&r.search("deployme", 10, |_| true).0), ["a__reports"]);
        // Two letters match whole words only.
        assert_eq!(names(&r.search("go", 10, |_| true).0), ["c__go"]);
        assert_eq!(r.search("de", 10, |_| true).1, 0);
    }

    #[test]
    fn a_limit_cuts_the_full_ranking() {
        let words = [
            "user", "users", "report", "reports", "sync", "export", "ledger", "alert",
        ];
        let mut r = McpToolRegistry::new();
        for i in 0..300_usize {
            let w = |k: usize| words[(i * 7 + k * 3) % words.len()];
            r.insert(McpToolDescriptor::new(
                format!("s{}", i % 5),
                format!("{}_{}", w(0), w(1)),
                format!("{} {} {} the {}", w(2), w(3), w(1), w(i % 4)),
                object(),
            ));
        }
        for query in [
            "user",
            "report sync",
            "use",
            "s3__sync_ledger",
            "ledger alert users",
            "the",
        ] {
            let (all, total) = r.search(query, usize::MAX, |_| true);
            assert_eq!(all.len(), total, "{query}");
            assert!(total > 0, "{query}");
            for limit in [1, 2, 10, 50] {
                let (cut, cut_total) = r.search(query, limit, |_| true);
                assert_eq!(cut_total, total);
                assert_eq!(names(&cut), names(&all[..limit.min(total)]), "{query} limit {limit}");
            }
        }
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
        // A server name never ends (or starts) with '_': the first separator is the split.
        assert_eq!(split_external_name("a___b"), Some(("a", "_b")));
        assert_eq!(split_external_name("_a__b"), None);
    }

    #[test]
    fn insert_first_keeps_the_tool_that_has_the_name() {
        let mut r = McpToolRegistry::new();
        let first = Arc::new(McpToolDescriptor::new("a", "_b", "First.", object()));
        assert!(r.insert_first(Arc::clone(&first)).is_ok());
        let second = Arc::new(McpToolDescriptor::new("a_", "b", "Second.", object()));
        assert_eq!(second.external_name, first.external_name);
        let kept = r.insert_first(second).unwrap_err();
        assert!(Arc::ptr_eq(&kept, &first));
        assert_eq!(r.len(), 1);
        let tool = r.get("a___b").unwrap();
        assert_eq!((tool.server.as_str(), tool.tool.as_str()), ("a", "_b"));
    }
}
