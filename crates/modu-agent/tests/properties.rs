//! Property tests (proptest) of promises the run loop relies on:
//!
//! - no memory policy ever separates a tool call from its result in what the model sees
//!   (arbitrary histories of turns with single and parallel calls, results in any order);
//! - `canonical_json` (and so the effective-argument hash, a hash of it) is the same for
//!   JSON that differs only in key order or in how a number is spelled (`1`, `1.0`, `1e0`), and
//!   `effective_arguments` keeps that.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use modu_agent::{
    Agent, AgentRequest, ConversationMemoryPolicy, ConversationSummarizer, KeepAll, RecentTurns, SummarizingPolicy,
    TokenBudget, TokenBudgetPolicy,
};
use modu_core::canonical::{canonical_json, effective_arguments};
use modu_core::{
    ApproximateTokenCounter, ConversationStore, InMemoryConversationStore, InMemoryMemoryStateStore, Message,
    ModelError, Role, TokenCounter, ToolCall, Usage,
};
use modu_testing::ScriptedModel;
use proptest::prelude::*;
use serde_json::{Value, json};

// ----- (a) memory policies keep tool calls with their results -----

/// One turn: a user message, rounds of (parallel) tool calls each followed by all their results
/// in some order, and maybe a final answer.
#[derive(Clone, Debug)]
struct TurnSpec {
    question_len: usize,
    /// (calls in the round, a seed for the order of their results)
    rounds: Vec<(usize, u64)>,
    answer: Option<usize>,
}

fn turn_strategy() -> impl Strategy<Value = TurnSpec> {
    (
        0usize..400,
        prop::collection::vec((1usize..=4, any::<u64>()), 0..4),
        prop::option::of(0usize..400),
    )
        .prop_map(|(question_len, rounds, answer)| TurnSpec {
            question_len,
            rounds,
            answer,
        })
}

/// A permutation of `0..n` from `seed`.
fn order(n: usize, mut seed: u64) -> Vec<usize> {
    let mut items: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        items.swap(i, (seed >> 33) as usize % (i + 1));
    }
    items
}

fn history(turns: &[TurnSpec]) -> Vec<Message> {
    let mut out = Vec::new();
    for (t, turn) in turns.iter().enumerate() {
        out.push(Message::user(format!("q{t} {}", "x".repeat(turn.question_len))));
        for (r, &(n, seed)) in turn.rounds.iter().enumerate() {
            let calls: Vec<ToolCall> = (0..n)
                .map(|i| ToolCall::new(format!("c{t}_{r}_{i}"), "lookup", format!("{{\"i\":{i}}}")))
                .collect();
            out.push(Message::assistant_tool_calls("", calls.clone()));
            for i in order(n, seed) {
                out.push(Message::tool_result(calls[i].id.clone(), "lookup", "fact", false));
            }
        }
        if let Some(len) = turn.answer {
            out.push(Message::assistant(format!("a{t} {}", "y".repeat(len))));
        }
    }
    out
}

/// Every tool result follows the assistant message with its call, and every call has its
/// result after it; `Err` names the first broken pair.
fn calls_paired(messages: &[Message]) -> Result<(), String> {
    let mut open: HashSet<&str> = HashSet::new();
    let mut called: HashSet<&str> = HashSet::new();
    for m in messages {
        for c in &m.tool_calls {
            open.insert(&c.id);
            called.insert(&c.id);
        }
        if m.role == Role::Tool {
            let id = m.tool_call_id.as_deref().unwrap_or_default();
            if !called.contains(id) {
                return Err(format!("result {id:?} without its call"));
            }
            open.remove(id);
        }
    }
    match open.into_iter().next() {
        Some(id) => Err(format!("call {id:?} without its result")),
        None => Ok(()),
    }
}

/// A summarizer that writes a fixed line, or fails (the policy then falls back).
struct TrivialSummarizer {
    fail: bool,
}

#[async_trait]
impl ConversationSummarizer for TrivialSummarizer {
    async fn summarize(&self, previous: Option<&str>, messages: &[Message]) -> Result<(String, Usage), ModelError> {
        if self.fail {
            return Err(ModelError::transport("summarizer down", "refused"));
        }
        Ok((
            format!("{} + {} messages", previous.unwrap_or("start"), messages.len()),
            Usage::new(1, 1),
        ))
    }
}

#[derive(Clone, Debug)]
enum PolicyKind {
    KeepAll,
    RecentTurns(usize),
    TokenBudget { window: u64, max_turns: Option<usize> },
    Summarizing { window: u64, max_turns: usize, fail: bool },
}

fn policy_strategy() -> impl Strategy<Value = PolicyKind> {
    prop_oneof![
        Just(PolicyKind::KeepAll),
        (0usize..8).prop_map(PolicyKind::RecentTurns),
        (40u64..3000, prop::option::of(0usize..8))
            .prop_map(|(window, max_turns)| PolicyKind::TokenBudget { window, max_turns }),
        (40u64..3000, 0usize..8, any::<bool>()).prop_map(|(window, max_turns, fail)| PolicyKind::Summarizing {
            window,
            max_turns,
            fail
        }),
    ]
}

fn build_policy(kind: &PolicyKind) -> Arc<dyn ConversationMemoryPolicy> {
    let counter: Arc<dyn TokenCounter> = Arc::new(ApproximateTokenCounter::default());
    match *kind {
        PolicyKind::KeepAll => Arc::new(KeepAll),
        PolicyKind::RecentTurns(n) => Arc::new(RecentTurns::new(n)),
        PolicyKind::TokenBudget { window, max_turns } => {
            let p = TokenBudgetPolicy::new(TokenBudget::new(window, 16, 8), counter);
            Arc::new(match max_turns {
                Some(n) => p.max_history_turns(n),
                None => p,
            })
        }
        PolicyKind::Summarizing {
            window,
            max_turns,
            fail,
        } => Arc::new(SummarizingPolicy {
            budget: TokenBudget::new(window, 16, 8),
            counter,
            summarizer: Arc::new(TrivialSummarizer { fail }),
            state_store: Arc::new(InMemoryMemoryStateStore::new()),
            max_history_turns: max_turns,
        }),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// What the model sees (instructions, the policy's view of the history, the new input) never
    /// holds a tool call without its result or a result without its call, for every policy.
    #[test]
    fn no_memory_policy_separates_a_tool_call_from_its_result(
        turns in prop::collection::vec(turn_strategy(), 0..10),
        kind in policy_strategy(),
        runs in 1usize..3,
    ) {
        let rt = runtime();
        let stored = history(&turns);
        prop_assert!(calls_paired(&stored).is_ok(), "the generator made a broken history");
        rt.block_on(async {
            let store = Arc::new(InMemoryConversationStore::new());
            store.append("s", &stored).await.unwrap();
            let model = ScriptedModel::new().text("ok").text("ok again");
            let agent = Agent::builder(model.clone())
                .instructions("Be brief.")
                .conversation_store(store.clone())
                .memory_policy(build_policy(&kind))
                .build()
                .unwrap();
            // A second run sees the first run's messages too (and a cached summary).
            for _ in 0..runs {
                let _ = agent.run(AgentRequest::new((), "next").session("s")).await;
            }
            for request in model.requests() {
                if let Err(e) = calls_paired(&request.messages) {
                    return Err(TestCaseError::fail(format!("{kind:?}: {e}")));
                }
                prop_assert_eq!(request.messages.last().map(Message::text), Some("next".to_owned()));
            }
            Ok(())
        })?;
    }
}

// ----- (b) canonical JSON and effective arguments -----

/// An i64 a double holds exactly (m × 2^s): spelled as a float (`k.0`, `ke0`) it is still `k`.
/// Other integers round when serde_json reads a float spelling, so that spelling names another
/// number and no canonical form could agree with it.
fn exact_i64() -> impl Strategy<Value = i64> {
    (any::<i32>(), 0u32..=31).prop_map(|(m, s)| i64::from(m) << s)
}

/// The same for u64, up to 2^64 - 2^32.
fn exact_u64() -> impl Strategy<Value = u64> {
    (any::<u32>(), 0u32..=32).prop_map(|(m, s)| u64::from(m) << s)
}

/// JSON values with integer, fractional and string leaves (no floats that JSON cannot spell).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        exact_i64().prop_map(Value::from),
        exact_u64().prop_map(Value::from),
        (-1_000_000i64..1_000_000, -6i32..6).prop_map(|(m, e)| decimal(m, e)),
        "[a-z\u{e9}\"\\\\ ]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-e]{1,3}", inner, 0..6)
                .prop_map(|m: BTreeMap<String, Value>| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The number m × 10^e, as serde_json reads its shortest spelling.
fn decimal(m: i64, e: i32) -> Value {
    serde_json::from_str(&format!("{m}e{e}")).unwrap()
}

/// Ways to spell the same decimal number `digits` × 10^`exp` (digits with an optional sign).
fn spellings(digits: &str, exp: i32) -> Vec<String> {
    let (sign, digits) = match digits.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", digits),
    };
    let mut out = vec![
        format!("{sign}{digits}e{exp}"),
        format!("{sign}{digits}E+{exp}").replace("+-", "-"),
        format!("{sign}{digits}0e{}", exp - 1),
        format!("{sign}{digits}.000e{exp}"),
    ];
    // A point moved into the digits: d.ddd e(exp + n).
    if digits.len() > 1 {
        let n = digits.len() - 1;
        out.push(format!("{sign}{}.{}e{}", &digits[..1], &digits[1..], exp + n as i32));
    }
    // Plain positional spelling (with a point) when the exponent is small.
    if (0..6).contains(&exp) {
        out.push(format!("{sign}{digits}{}.0", "0".repeat(exp as usize)));
    } else if exp < 0 && (-exp as usize) < 12 {
        let k = (-exp) as usize;
        let padded = format!("{}{digits}", "0".repeat(k.saturating_sub(digits.len()) + 1));
        let (int, frac) = padded.split_at(padded.len() - k);
        let int = int.trim_start_matches('0');
        out.push(format!("{sign}{}.{frac}", if int.is_empty() { "0" } else { int }));
    }
    out
}

/// `value` as JSON text with every object's keys in an order picked by `seed` and every number
/// spelled in one of its equivalent spellings (picked by `seed` too).
fn respell(value: &Value, seed: &mut u64) -> String {
    let mut next = || {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*seed >> 33) as usize
    };
    fn go(value: &Value, next: &mut dyn FnMut() -> usize, out: &mut String) {
        match value {
            Value::Number(n) => {
                let text = n.to_string();
                let (mantissa, exp) = split_number(&text);
                let options = spellings(&mantissa, exp);
                out.push_str(&options[next() % options.len()]);
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    go(item, next, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                for i in (1..entries.len()).rev() {
                    entries.swap(i, next() % (i + 1));
                }
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push_str(": ");
                    go(v, next, out);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    go(value, &mut next, &mut out);
    out
}

/// A number's text (as serde_json writes it) as (signed digits, exponent): `-1.25e3` → ("-125", 1).
fn split_number(text: &str) -> (String, i32) {
    let (base, exp) = match text.split_once(['e', 'E']) {
        Some((b, e)) => (b, e.parse::<i32>().unwrap()),
        None => (text, 0),
    };
    let (sign, base) = match base.strip_prefix('-') {
        Some(b) => ("-", b),
        None => ("", base),
    };
    let (int, frac) = base.split_once('.').unwrap_or((base, ""));
    let digits = format!("{int}{frac}");
    let trimmed = digits.trim_start_matches('0');
    let digits = if trimmed.is_empty() { "0" } else { trimmed };
    (format!("{sign}{digits}"), exp - frac.len() as i32)
}

/// Whether `k` is exactly a double (so `k.0` and `ke0` denote the value `k` itself).
fn exact_f64_i64(k: i64) -> bool {
    // 2^63 as a double: `as` saturates at i64::MAX, so compare against the bound first.
    let f = k as f64;
    f < 2f64.powi(63) && f as i64 == k
}

fn exact_f64_u64(k: u64) -> bool {
    let f = k as f64;
    f < 2f64.powi(64) && f as u64 == k
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// The same JSON with its keys in another order and its numbers spelled otherwise has the
    /// same canonical form.
    #[test]
    fn canonical_json_ignores_key_order_and_number_spelling(value in json_value(), seed in any::<u64>()) {
        let mut s = seed;
        let text = respell(&value, &mut s);
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(canonical_json(&value), canonical_json(&reparsed), "respelled as {}", text);
    }

    /// An integer `k` and its spellings `k.0`, `ke0`, `k0e-1`, `k.000e0` agree, wherever the
    /// spellings denote `k` exactly (every integer of the i64 range that is a double).
    #[test]
    fn canonical_json_spells_integral_i64_numbers_as_integers(k in exact_i64()) {
        prop_assert!(exact_f64_i64(k));
        let integer = canonical_json(&json!({"n": k}));
        prop_assert_eq!(&integer, &format!("{{\"n\":{k}}}"));
        for spelled in [format!("{k}.0"), format!("{k}e0"), format!("{k}0e-1"), format!("{k}.000e0")] {
            let v: Value = serde_json::from_str(&format!("{{\"n\": {spelled}}}")).unwrap();
            prop_assert_eq!(&canonical_json(&v), &integer, "{} vs {}", spelled, k);
        }
    }

    /// The same for integers above i64::MAX (u64).
    #[test]
    fn canonical_json_spells_integral_u64_numbers_as_integers(k in exact_u64()) {
        prop_assert!(exact_f64_u64(k));
        let integer = canonical_json(&json!({"n": k}));
        for spelled in [format!("{k}.0"), format!("{k}e0")] {
            let v: Value = serde_json::from_str(&format!("{{\"n\": {spelled}}}")).unwrap();
            prop_assert_eq!(&canonical_json(&v), &integer, "{} vs {}", spelled, k);
        }
    }

    /// Effective arguments (schema defaults filled in, nulls dropped) keep the canonical form
    /// stable too: respelled and reordered arguments, and arguments that spell out a default
    /// (in any spelling) or send a null, have the same effective form and so the same hash.
    #[test]
    fn effective_arguments_are_stable_under_key_order_spelling_and_defaults(
        extra in prop::collection::btree_map("[f-h]{1,2}", json_value(), 0..4),
        query in "[a-z]{0,8}",
        limit_spelling in 0usize..4,
        send_exact in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let schema = json!({
            "type": "object",
            "$defs": {"Opts": {"type": "object", "properties": {
                "exact": {"type": "boolean", "default": false},
                "depth": {"type": "integer", "default": 3}
            }}},
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "default": 100},
                "opts": {"$ref": "#/$defs/Opts"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}
            },
            "required": ["query"]
        });
        let mut short = serde_json::Map::new();
        short.insert("query".into(), json!(query));
        short.insert("opts".into(), json!({}));
        for (k, v) in &extra {
            short.insert(k.clone(), v.clone());
        }
        let short = Value::Object(short);
        // The same call with the defaults spelled out (and a null), keys shuffled, numbers respelled.
        let mut long = short.clone();
        let limit = ["100", "100.0", "1e2", "1000e-1"][limit_spelling];
        long["limit"] = serde_json::from_str(limit).unwrap();
        long["note"] = Value::Null;
        if send_exact {
            long["opts"] = json!({"exact": false, "depth": 3.0});
        }
        let mut s = seed;
        let long: Value = serde_json::from_str(&respell(&long, &mut s)).unwrap();
        let a = canonical_json(&effective_arguments(&schema, &short));
        let b = canonical_json(&effective_arguments(&schema, &long));
        prop_assert_eq!(a, b, "{} vs {}", short, long);
    }
}
