//! Benchmarks of the MCP connector (run with `cargo bench -p modu-mcp --bench mcp`):
//!
//! 1. `mcp_search_tools` over a registry of 10,000 synthetic tools (p50/p99 per query, and
//!    the time to build the search index).
//! 2. Per-call overhead of `mcp_call_tool` next to a raw rmcp `tools/call` to the same
//!    server-everything process over stdio (`echo`), when `MODU_MCP_EVERYTHING` is set.
//!
//! Prints percentiles; no criterion statistics (they do not give p99). With `-- --test`
//! (`cargo xtask ci`'s bench smoke) each measurement runs a few times only, so the assertions
//! execute quickly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use modu_core::{RunContext, Tool};
use modu_mcp::rmcp::ServiceExt;
use modu_mcp::rmcp::model::CallToolRequestParams;
use modu_mcp::rmcp::transport::TokioChildProcess;
use modu_mcp::{
    McpCallTool, McpConfig, McpConnector, McpSearchTool, McpServerConfig, McpSession, McpToolDescriptor,
    McpToolRegistry,
};
use serde_json::json;

const WORDS: &[&str] = &[
    "account",
    "alert",
    "archive",
    "audit",
    "backup",
    "billing",
    "branch",
    "calendar",
    "cluster",
    "commit",
    "contact",
    "customer",
    "dashboard",
    "database",
    "deploy",
    "document",
    "email",
    "event",
    "export",
    "file",
    "forecast",
    "graph",
    "incident",
    "invoice",
    "issue",
    "ledger",
    "log",
    "message",
    "metric",
    "note",
    "order",
    "payment",
    "pipeline",
    "project",
    "query",
    "record",
    "release",
    "report",
    "repository",
    "schedule",
    "search",
    "secret",
    "service",
    "shipment",
    "ticket",
    "translate",
    "user",
    "vault",
    "weather",
    "workflow",
];
const VERBS: &[&str] = &[
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "sync",
    "export",
    "import",
    "summarize",
];

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99), samples[samples.len() - 1])
}

/// `cargo bench -- --test`: a smoke run, a few iterations each.
fn smoke() -> bool {
    std::env::args().any(|a| a == "--test")
}

fn registry_of(n: usize) -> McpToolRegistry {
    let mut registry = McpToolRegistry::new();
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..n {
        let server = format!("srv{:03}", i / 100);
        let verb = VERBS[(next() % VERBS.len() as u64) as usize];
        let noun = WORDS[(next() % WORDS.len() as u64) as usize];
        let tool = format!("{verb}_{noun}_{i}");
        let description: Vec<&str> = (0..12).map(|_| WORDS[(next() % WORDS.len() as u64) as usize]).collect();
        let description = format!("{} {noun} records. {}", verb, description.join(" "));
        let schema = json!({"type": "object", "properties": {"id": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["id"]});
        registry.insert(McpToolDescriptor::new(server, tool, description, schema));
    }
    registry
}

async fn bench_search() {
    let started = Instant::now();
    let registry = registry_of(10_000);
    println!("registry of {} tools built in {:?}", registry.len(), started.elapsed());
    let started = Instant::now();
    registry.build_index();
    println!(
        "search index over {} tools built in {:?}",
        registry.len(),
        started.elapsed()
    );
    // A name that exists (tool names carry their number, so exactly one tool has it).
    let exact = registry.tools()[4242].external_name.clone();
    let session = Arc::new(McpSession::from_registry(registry));
    let tool: McpSearchTool<()> = McpSearchTool::new(Arc::clone(&session), None);
    let ctx = RunContext::new(Arc::new(()), "bench");
    let queries = [
        "invoice",
        "create payment ledger",
        exact.as_str(),
        "get weather",
        "weather forecast alert",
        "zebra",
        "",
    ];
    let (warm, n) = if smoke() { (1, 5) } else { (50, 2000) };
    for query in queries {
        let args = json!({"query": query, "limit": 10});
        for _ in 0..warm {
            tool.call(&ctx, args.clone()).await.unwrap();
        }
        let mut samples = Vec::with_capacity(n);
        let mut total = 0;
        for _ in 0..n {
            let t = Instant::now();
            let out = tool.call(&ctx, args.clone()).await.unwrap();
            samples.push(t.elapsed());
            total = out["total"].as_u64().unwrap();
        }
        if query == exact {
            let out = tool.call(&ctx, args.clone()).await.unwrap();
            assert_eq!(out["tools"][0]["name"], exact.as_str(), "the exact name ranks first");
        }
        let (p50, p99, max) = percentiles(samples);
        println!(
            "mcp_search_tools over 10,000 tools, query {query:?} (total {total}): p50 {p50:?}  p99 {p99:?}  max {max:?}"
        );
        // The index alone, without the tool call's argument parsing and JSON result.
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let (hits, _) = session.registry().search(query, 10, |_| true);
            samples.push(t.elapsed());
            std::hint::black_box(hits);
        }
        let (p50, p99, max) = percentiles(samples);
        println!("    registry search only:                     p50 {p50:?}  p99 {p99:?}  max {max:?}");
    }
}

async fn bench_call(script: &str) {
    let (warm, n) = if smoke() { (2, 20) } else { (200, 2000) };
    // Raw rmcp client on its own server-everything process.
    let mut cmd = tokio::process::Command::new("node");
    cmd.args([script, "stdio"]);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let raw = ().serve(transport).await.unwrap();
    let params =
        CallToolRequestParams::new("echo").with_arguments(json!({"message": "hi"}).as_object().unwrap().clone());
    // The connector, through the mcp_call_tool meta tool.
    let config = McpConfig::new(vec![
        McpServerConfig::stdio("everything", "node").with_args([script, "stdio"]),
    ])
    .unwrap();
    let connector = McpConnector::new(config).unwrap();
    let started = Instant::now();
    let session = Arc::new(connector.open_session(None).await.unwrap());
    println!(
        "connector open (spawn + initialize + list_all_tools) of server-everything over stdio: {:?}",
        started.elapsed()
    );
    let tool: McpCallTool<()> = McpCallTool::new(Arc::clone(&session), None);
    let ctx = RunContext::new(Arc::new(()), "bench");
    let args = json!({"tool_name": "everything__echo", "arguments": {"message": "hi"}});
    for _ in 0..warm {
        raw.peer().call_tool(params.clone()).await.unwrap();
        tool.call(&ctx, args.clone()).await.unwrap();
    }
    // Interleave so both see the same machine load.
    let mut raw_samples = Vec::with_capacity(n);
    let mut tool_samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        raw.peer().call_tool(params.clone()).await.unwrap();
        raw_samples.push(t.elapsed());
        let t = Instant::now();
        let out = tool.call(&ctx, args.clone()).await.unwrap();
        tool_samples.push(t.elapsed());
        assert_eq!(out, json!("Echo: hi"));
    }
    let (r50, r99, _) = percentiles(raw_samples);
    let (t50, t99, _) = percentiles(tool_samples);
    println!("raw rmcp call_tool(echo) over stdio:     p50 {r50:?}  p99 {r99:?}  (n={n})");
    println!("mcp_call_tool(everything__echo) over stdio: p50 {t50:?}  p99 {t99:?}  (n={n})");
    println!(
        "overhead of mcp_call_tool (lookup, schema validation, timeout, normalisation): p50 {:?}",
        t50.saturating_sub(r50)
    );
    session.close().await;
    let _ = raw.cancel().await;
}

fn main() {
    // `cargo test --benches` runs bench targets with `--bench`-less args; only run on `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        bench_search().await;
        match std::env::var("MODU_MCP_EVERYTHING") {
            Ok(script) if !script.is_empty() => bench_call(&script).await,
            _ => {
                let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
                assert!(
                    !ci,
                    "MODU_MCP_EVERYTHING is not set but CI is: the MCP peer was not started"
                );
                println!("MODU_MCP_EVERYTHING not set: skipping the call-overhead benchmark");
            }
        }
    });
}
