//! Load benchmark: agent runs through `OpenAiClient` versus the same HTTP calls by hand.
//!
//! Run with: `cargo run --release -p modu-openai --example load`
//! (options: `--quick` for a short run; `--runs-scale F` to multiply the run counts).
//!
//! The parent process starts `MockOpenAiServer` (recording off) on 127.0.0.1 and, for each
//! concurrency (1, 64, 1000), starts this binary again as a client process twice: once driving
//! `modu_core::Agent` runs over `OpenAiClient`, once doing the same two streaming HTTP calls
//! by hand with reqwest + serde_json (the baseline). Each run is: request 1 offers one tool and
//! gets a streamed tool call back, the tool runs, request 2 sends the tool result and gets a
//! streamed answer. Client processes are separate so CPU time (utime + stime from
//! `/proc/self/stat`) and peak RSS (`VmHWM` from `/proc/self/status`) are the client's alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use modu_core::{Agent, FunctionTool};
use modu_openai::OpenAiClient;
use modu_testing::MockOpenAiServer;
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

struct Measured {
    runs: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    cpu: Duration,
    peak_rss_kib: u64,
}

fn cpu_time() -> Duration {
    // Fields 14 and 15 of /proc/self/stat: utime and stime in clock ticks (USER_HZ = 100 on
    // Linux). The command name (field 2) may contain spaces, so split after its ')'.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // After ')': state is index 0, so utime (field 14) is index 11 and stime index 12.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn drive<F, Fut>(runs: usize, concurrency: usize, run: F) -> Measured
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // Warm up: connections, allocator, lazy statics.
    futures::stream::iter(0..concurrency.min(64))
        .map(|_| run())
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
    let cpu0 = cpu_time();
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(0..runs)
        .map(|_| {
            let fut = run();
            async move {
                let t = Instant::now();
                fut.await;
                t.elapsed()
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = started.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    latencies.sort();
    Measured {
        runs,
        wall,
        latencies,
        cpu,
        peak_rss_kib: peak_rss_kib(),
    }
}

fn modu_agent(url: &str) -> Arc<Agent> {
    let model = OpenAiClient::new(url, "mock-model").unwrap();
    let add = FunctionTool::<()>::typed(
        "add",
        "Add two integers",
        |_ctx, a: AddArgs| async move { Ok(a.a + a.b) },
    );
    Arc::new(Agent::builder(model).tool(add).build().unwrap())
}

/// The baseline: the same two streaming calls, by hand.
async fn by_hand(http: &reqwest::Client, url: &str) {
    let tools = json!([{"type": "function", "function": {"name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]);
    let user = json!({"role": "user", "content": "What is 2 + 3?"});
    let body = json!({"model": "mock-model", "messages": [user], "tools": tools, "stream": true,
                      "stream_options": {"include_usage": true}});
    let chunks = post_sse(http, url, &body).await;
    let (mut id, mut name, mut args) = (String::new(), String::new(), String::new());
    for c in &chunks {
        if let Some(call) = c.pointer("/choices/0/delta/tool_calls/0") {
            if let Some(v) = call.get("id").and_then(Value::as_str) {
                id = v.to_owned();
            }
            if let Some(v) = call.pointer("/function/name").and_then(Value::as_str) {
                name = v.to_owned();
            }
            if let Some(v) = call.pointer("/function/arguments").and_then(Value::as_str) {
                args.push_str(v);
            }
        }
    }
    assert_eq!(name, "add");
    let a: AddArgs = serde_json::from_str(&args).unwrap();
    let result = (a.a + a.b).to_string();
    let body = json!({"model": "mock-model", "stream": true, "stream_options": {"include_usage": true}, "tools": tools,
        "messages": [user,
            {"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "tool_call_id": id, "content": result}]});
    let chunks = post_sse(http, url, &body).await;
    let mut text = String::new();
    for c in &chunks {
        if let Some(t) = c.pointer("/choices/0/delta/content").and_then(Value::as_str) {
            text.push_str(t);
        }
    }
    assert!(!text.is_empty());
}

async fn post_sse(http: &reqwest::Client, url: &str, body: &Value) -> Vec<Value> {
    let resp = http
        .post(format!("{url}/chat/completions"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let bytes = resp.bytes().await.unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn child(kind: &str, url: &str, runs: usize, concurrency: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let m = rt.block_on(async {
        match kind {
            "modu" => {
                let agent = modu_agent(url);
                drive(runs, concurrency, || {
                    let agent = Arc::clone(&agent);
                    async move {
                        let r = agent.run("What is 2 + 3?").await;
                        assert!(r.is_ok(), "{:?}", r.error);
                    }
                })
                .await
            }
            _ => {
                let http = reqwest::Client::builder().tcp_nodelay(true).build().unwrap();
                let url = url.to_owned();
                drive(runs, concurrency, || {
                    let http = http.clone();
                    let url = url.clone();
                    async move { by_hand(&http, &url).await }
                })
                .await
            }
        }
    });
    let json = json!({
        "runs": m.runs,
        "wall_s": m.wall.as_secs_f64(),
        "p50_ms": percentile(&m.latencies, 0.50).as_secs_f64() * 1e3,
        "p99_ms": percentile(&m.latencies, 0.99).as_secs_f64() * 1e3,
        "cpu_s": m.cpu.as_secs_f64(),
        "peak_rss_kib": m.peak_rss_kib,
    });
    println!("{json}");
}

#[derive(Clone)]
struct Row {
    runs_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_us_per_run: f64,
    rss_mib: f64,
}

fn spawn_child(kind: &str, url: &str, runs: usize, concurrency: usize) -> Row {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--child", kind, url, &runs.to_string(), &concurrency.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{kind} client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(line.trim().lines().last().unwrap_or("{}")).unwrap();
    let runs = v["runs"].as_f64().unwrap();
    Row {
        runs_per_s: runs / v["wall_s"].as_f64().unwrap(),
        p50_ms: v["p50_ms"].as_f64().unwrap(),
        p99_ms: v["p99_ms"].as_f64().unwrap(),
        cpu_us_per_run: v["cpu_s"].as_f64().unwrap() * 1e6 / runs,
        rss_mib: v["peak_rss_kib"].as_f64().unwrap() / 1024.0,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let runs = args[4].parse().unwrap();
        let concurrency = args[5].parse().unwrap();
        child(&args[2], &args[3], runs, concurrency);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let scale: f64 = args
        .iter()
        .position(|a| a == "--runs-scale")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 0.1 } else { 1.0 });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(async { MockOpenAiServer::start().await.unwrap() });
    server.without_recording();
    let url = server.base_url();
    println!(
        "mock server {url}; client processes: modu = Agent + OpenAiClient, baseline = reqwest + serde_json by hand"
    );
    println!("each run = 2 streaming chat requests (tool call, then answer) + 1 tool call");
    println!();
    println!(
        "{:>5} {:>9} {:>7} {:>9} {:>8} {:>8} {:>11} {:>9}",
        "conc", "client", "runs", "runs/s", "p50 ms", "p99 ms", "CPU µs/run", "RSS MiB"
    );
    for (concurrency, runs) in [(1usize, 2000usize), (64, 8000), (1000, 12000)] {
        let runs = ((runs as f64 * scale) as usize).max(concurrency.min(100));
        let modu = spawn_child("modu", &url, runs, concurrency);
        let base = spawn_child("baseline", &url, runs, concurrency);
        for (name, r) in [("modu", &modu), ("baseline", &base)] {
            println!(
                "{:>5} {:>9} {:>7} {:>9.0} {:>8.2} {:>8.2} {:>11.0} {:>9.1}",
                concurrency, name, runs, r.runs_per_s, r.p50_ms, r.p99_ms, r.cpu_us_per_run, r.rss_mib
            );
        }
        println!(
            "{:>5} {:>9} {:>7} {:>8.2}x {:>7.2}x {:>7.2}x {:>10.2}x {:>8.2}x",
            concurrency,
            "modu/base",
            "",
            modu.runs_per_s / base.runs_per_s,
            modu.p50_ms / base.p50_ms,
            modu.p99_ms / base.p99_ms,
            modu.cpu_us_per_run / base.cpu_us_per_run,
            modu.rss_mib / base.rss_mib
        );
    }
    drop(server);
}
