//! The inverted index behind `mcp_search_tools`: exact names first, then BM25 over the words
//! of tool names and descriptions.
//!
//! Hand-written rather than a search crate: the registry holds at most tens of thousands of
//! short documents in memory, built once per run, and the ranking needs rules a generic engine
//! would need custom scorers for (an exact name first, a name word over a description word,
//! prefix matches below whole words, ties in discovery order). Full-text engines (tantivy,
//! ...) bring segments, threads and a large dependency tree for that; a sorted vocabulary
//! with postings and a BM25 loop is a couple of hundred lines.
//!
//! Scoring. Names (`server__tool`) and descriptions are split into lowercase words at every
//! character that is not a letter or digit and at camelCase boundaries (`getWeather` gives
//! `getweather`, `get` and `weather`). Each query word matches the vocabulary's words equal
//! to it and, at a lower weight ([`PREFIX_WEIGHT`]), the words it starts: name words for a
//! query word of three characters or more, description words for four or more. A tool's
//! score for one query word is BM25F: the word's inverse document frequency (over the tools
//! any of those words match) times the saturated term frequency of the name (weight
//! [`NAME_WEIGHT`]) plus that of the description, each normalised by its field's length. The
//! scores of the query's words add up. The query equal to a tool's external or server-local
//! name (ignoring case) ranks that tool before every other; ties keep discovery order.

use std::collections::HashMap;

/// How much a name word counts next to a description word.
pub(crate) const NAME_WEIGHT: f32 = 3.0;
/// How much a word the query word only starts counts next to the word itself.
pub(crate) const PREFIX_WEIGHT: f32 = 0.3;
/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation for descriptions (the usual 0.75).
const B_DESCRIPTION: f32 = 0.75;
/// Length normalisation for names: weak, so a long name still counts as a name.
const B_NAME: f32 = 0.3;
/// The shortest query word that matches name words it starts.
const MIN_NAME_PREFIX: usize = 3;
/// The shortest query word that matches description words it starts.
const MIN_DESCRIPTION_PREFIX: usize = 4;

/// Splits `text` into lowercase words (see the module docs) and hands each to `push`.
pub(crate) fn tokens(text: &str, mut push: impl FnMut(String)) {
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let parts = camel_parts(word);
        if parts.len() > 1 {
            push(word.to_lowercase());
        }
        for part in parts {
            push(part.to_lowercase());
        }
    }
}

/// `getWeather` → `get`, `Weather`; `HTTPServer` → `HTTP`, `Server`; `srv042` stays whole.
fn camel_parts(word: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (at, c) = chars[i];
        let prev = chars[i - 1].1;
        let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
        let boundary =
            c.is_uppercase() && (prev.is_lowercase() || prev.is_numeric() || (prev.is_uppercase() && next_lower));
        if boundary {
            parts.push(&word[start..at]);
            start = at;
        }
    }
    parts.push(&word[start..]);
    parts
}

/// One tool's occurrences of one word.
#[derive(Clone, Copy)]
struct Posting {
    tool: u32,
    in_name: u16,
    in_description: u16,
    /// The tool's BM25F weight for this word (before the inverse document frequency), for
    /// queries whose word matches this word only.
    weight: f32,
}

/// The index over a registry's tools (by their position in discovery order).
pub(crate) struct SearchIndex {
    /// Words in byte order, each with the tools it occurs in (in discovery order).
    vocabulary: Vec<(Box<str>, Vec<Posting>)>,
    name_len: Vec<u16>,
    description_len: Vec<u16>,
    avg_name_len: f32,
    avg_description_len: f32,
    /// Lowercase external names and server-local names → tools.
    exact: HashMap<String, Vec<u32>>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("tools", &self.name_len.len())
            .field("words", &self.vocabulary.len())
            .finish()
    }
}

/// What [`SearchIndex::build`] reads of a tool.
pub(crate) struct Document<'a> {
    pub(crate) external_name: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) description: &'a str,
}

fn saturating_u16(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

impl SearchIndex {
    /// Indexes `documents`; a tool's number is its position.
    pub(crate) fn build<'a>(documents: impl ExactSizeIterator<Item = Document<'a>>) -> Self {
        let n = documents.len();
        let mut postings: HashMap<String, Vec<Posting>> = HashMap::new();
        let mut exact: HashMap<String, Vec<u32>> = HashMap::new();
        let mut name_len = Vec::with_capacity(n);
        let mut description_len = Vec::with_capacity(n);
        let mut words: Vec<(String, bool)> = Vec::new();
        for (i, doc) in documents.enumerate() {
            let tool = u32::try_from(i).unwrap_or(u32::MAX);
            words.clear();
            tokens(doc.external_name, |w| words.push((w, true)));
            let in_name = words.len();
            tokens(doc.description, |w| words.push((w, false)));
            name_len.push(saturating_u16(in_name));
            description_len.push(saturating_u16(words.len() - in_name));
            words.sort_unstable();
            let mut k = 0;
            while k < words.len() {
                let word = &words[k].0;
                let mut posting = Posting {
                    tool,
                    in_name: 0,
                    in_description: 0,
                    weight: 0.0,
                };
                while k < words.len() && words[k].0 == *word {
                    if words[k].1 {
                        posting.in_name = posting.in_name.saturating_add(1);
                    } else {
                        posting.in_description = posting.in_description.saturating_add(1);
                    }
                    k += 1;
                }
                match postings.get_mut(word.as_str()) {
                    Some(list) => list.push(posting),
                    None => {
                        postings.insert(word.clone(), vec![posting]);
                    }
                }
            }
            let external = doc.external_name.to_lowercase();
            let local = doc.tool.to_lowercase();
            if local != external {
                exact.entry(local).or_default().push(tool);
            }
            exact.entry(external).or_default().push(tool);
        }
        let mut vocabulary: Vec<(Box<str>, Vec<Posting>)> =
            postings.into_iter().map(|(w, p)| (w.into_boxed_str(), p)).collect();
        vocabulary.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let average = |lens: &[u16]| {
            if lens.is_empty() {
                1.0
            } else {
                (lens.iter().map(|&l| f64::from(l)).sum::<f64>() / lens.len() as f64).max(1.0) as f32
            }
        };
        let avg_name_len = average(&name_len);
        let avg_description_len = average(&description_len);
        for (_, list) in &mut vocabulary {
            for p in list {
                let t = p.tool as usize;
                p.weight = NAME_WEIGHT * bm25(f32::from(p.in_name), name_len[t], avg_name_len, B_NAME)
                    + bm25(
                        f32::from(p.in_description),
                        description_len[t],
                        avg_description_len,
                        B_DESCRIPTION,
                    );
            }
        }
        SearchIndex {
            avg_name_len,
            avg_description_len,
            vocabulary,
            name_len,
            description_len,
            exact,
        }
    }

    /// The number of tools indexed.
    pub(crate) fn len(&self) -> usize {
        self.name_len.len()
    }

    /// The tools matching `query` that `visible` accepts, best first (see the module docs):
    /// the first `limit` of them, and how many there are. A query without a word matches
    /// every tool, in discovery order (after a tool it names exactly).
    pub(crate) fn search(&self, query: &str, limit: usize, visible: impl Fn(usize) -> bool) -> (Vec<usize>, usize) {
        let n = self.len();
        let query = query.trim();
        let mut terms = Vec::new();
        tokens(query, |t| terms.push(t));
        terms.sort_unstable();
        terms.dedup();
        let exact: &[u32] = self.exact.get(&query.to_lowercase()).map_or(&[], Vec::as_slice);

        if terms.is_empty() {
            // Every visible tool in discovery order, after the ones named exactly: no ranking.
            let mut named: Vec<usize> = exact.iter().map(|&t| t as usize).filter(|&t| visible(t)).collect();
            named.sort_unstable();
            let mut total = named.len();
            let mut first = named.clone();
            for t in (0..n).filter(|t| named.binary_search(t).is_err()) {
                if visible(t) {
                    total += 1;
                    if first.len() < limit {
                        first.push(t);
                    }
                }
            }
            first.truncate(limit);
            return (first, total);
        }
        // A matched tool's score is positive (every inverse document frequency is).
        let mut score = vec![0f32; n];
        let mut order: Vec<u32> = Vec::new();
        // Per-tool frequencies of the words a query word matches, when it matches several
        // (allocated on the first such word).
        let mut name_tf: Vec<f32> = Vec::new();
        let mut description_tf: Vec<f32> = Vec::new();
        let mut term_tools: Vec<u32> = Vec::new();
        for term in &terms {
            let term_chars = term.chars().count();
            let start = self.vocabulary.partition_point(|(w, _)| **w < **term);
            let words = &self.vocabulary[start..];
            let words = &words[..words.partition_point(|(w, _)| w.starts_with(term.as_str()))];
            // The word only (no word it starts, or too short to match those): its weights
            // are computed already.
            let only_itself = match words {
                [] => true,
                [(word, _)] => **word == **term,
                _ => false,
            };
            if only_itself || term_chars < MIN_NAME_PREFIX {
                if let Some((word, postings)) = words.first()
                    && **word == **term
                {
                    let idf = idf(n, postings.len());
                    for p in postings {
                        let t = p.tool as usize;
                        if score[t] == 0.0 {
                            order.push(p.tool);
                        }
                        score[t] += idf * p.weight;
                    }
                }
                continue;
            }
            if name_tf.is_empty() {
                name_tf = vec![0.0; n];
                description_tf = vec![0.0; n];
            }
            for (word, postings) in words {
                let whole = **word == **term;
                // The word itself sorts first; the rest only extend it.
                if !whole && term_chars < MIN_NAME_PREFIX {
                    break;
                }
                let (name_weight, description_weight) = if whole {
                    (1.0, 1.0)
                } else {
                    (
                        if term_chars >= MIN_NAME_PREFIX {
                            PREFIX_WEIGHT
                        } else {
                            0.0
                        },
                        if term_chars >= MIN_DESCRIPTION_PREFIX {
                            PREFIX_WEIGHT
                        } else {
                            0.0
                        },
                    )
                };
                if name_weight == 0.0 && description_weight == 0.0 {
                    continue;
                }
                for p in postings {
                    let in_name = f32::from(p.in_name) * name_weight;
                    let in_description = f32::from(p.in_description) * description_weight;
                    if in_name == 0.0 && in_description == 0.0 {
                        continue;
                    }
                    let t = p.tool as usize;
                    if name_tf[t] == 0.0 && description_tf[t] == 0.0 {
                        term_tools.push(p.tool);
                    }
                    name_tf[t] += in_name;
                    description_tf[t] += in_description;
                }
            }
            let idf = idf(n, term_tools.len());
            for tool in term_tools.drain(..) {
                let t = tool as usize;
                let s = NAME_WEIGHT * bm25(name_tf[t], self.name_len[t], self.avg_name_len, B_NAME)
                    + bm25(
                        description_tf[t],
                        self.description_len[t],
                        self.avg_description_len,
                        B_DESCRIPTION,
                    );
                if score[t] == 0.0 {
                    order.push(tool);
                }
                score[t] += idf * s;
                name_tf[t] = 0.0;
                description_tf[t] = 0.0;
            }
        }
        for &t in exact {
            if score[t as usize] == 0.0 && !order.contains(&t) {
                order.push(t);
            }
        }
        // The best `limit`, best first, kept while counting: (exact name, score, tool).
        type Hit = (bool, f32, u32);
        let rank = |a: &Hit, b: &Hit| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(&b.2));
        let mut top: Vec<Hit> = Vec::with_capacity(limit.min(order.len()) + 1);
        let mut total = 0;
        for t in order {
            if !visible(t as usize) {
                continue;
            }
            total += 1;
            let hit = (exact.contains(&t), score[t as usize], t);
            if limit == 0 || (top.len() == limit && top.last().is_some_and(|last| rank(&hit, last).is_ge())) {
                continue;
            }
            let at = top.partition_point(|x| rank(x, &hit).is_lt());
            top.insert(at, hit);
            top.truncate(limit);
        }
        (top.into_iter().map(|h| h.2 as usize).collect(), total)
    }
}

/// BM25's inverse document frequency of a word `df` of `n` tools have (always positive).
fn idf(n: usize, df: usize) -> f32 {
    let (n, df) = (n as f32, df as f32);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// BM25's saturated, length-normalised term frequency (0 when the word does not occur).
fn bm25(tf: f32, len: u16, avg_len: f32, b: f32) -> f32 {
    if tf == 0.0 {
        return 0.0;
    }
    tf * (K1 + 1.0) / (tf + K1 * (1.0 - b + b * f32::from(len) / avg_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        tokens(text, |t| out.push(t));
        out
    }

    #[test]
    fn names_split_into_words() {
        assert_eq!(all("github__create_issue"), ["github", "create", "issue"]);
        assert_eq!(
            all("getWeatherForecast"),
            ["getweatherforecast", "get", "weather", "forecast"]
        );
        assert_eq!(all("HTTPServer"), ["httpserver", "http", "server"]);
        assert_eq!(all("srv042__get-item_7"), ["srv042", "get", "item", "7"]);
        assert_eq!(all("Élan über"), ["élan", "über"]);
        assert!(all(" -- ").is_empty());
    }
}
