//! Load benchmark: agent runs through `OpenAiClient` versus a lean hand-written reqwest loop,
//! against the same mock OpenAI server. The judge of the overhead modu adds per run.
//!
//! Run with: `cargo run --release -p modu-openai --example load` (what `cargo xtask bench load`
//! runs). Options: `--quick` (a CI smoke: fewer runs, one repetition, below the sample sizes
//! the targets ask for), `--runs-scale F` (multiply the run counts), `--reps N` (repetitions
//! per variant, default 3; the median is reported), `--enforce` (exit 1 when a target fails).
//!
//! # What runs where
//!
//! - The mock server ([`modu_testing::MockOpenAiServer`], the exact OpenAI wire format,
//!   recording off) runs in its own process (this binary re-executed with `--serve MS`), pinned
//!   to the second allowed core. One server per model latency (0 and 50 ms).
//! - Every measured variant runs in its own client process (`--client ...`), pinned to the
//!   first allowed core, on a multi-thread tokio runtime with one worker; the driving loop is
//!   a task on that worker. So the client never shares a process, an allocator or a core with
//!   the server, and modu and the baseline never share a process.
//!
//! # One run
//!
//! The same agent job for both: request 1 offers one tool (`add`) and the mock answers with a
//! tool call; the tool runs; request 2 sends the tool result and the mock answers in text. Two
//! HTTP requests per run on both sides (checked at start against a recording mock).
//!
//! - modu: one `Agent` with `OpenAiClient` and the tool, built once per process. Non-streamed:
//!   `agent.run(..)`; streamed: `agent.stream(..)` consumed to its last item.
//! - baseline: what a good engineer writes by hand: one `reqwest::Client`, typed serde request
//!   and response structs, the tool schema serialised once, a tool-call loop. Non-streamed
//!   sends `stream: false` and reads one `chat.completion`; streamed sends `stream: true` and
//!   parses the SSE lines as they arrive, folding the deltas.
//! - client only (a diagnostic, not judged): the baseline's loop written over `OpenAiClient`
//!   (`complete`, or `stream` folded by `ChatResponseBuilder`) without an agent. Its row shows
//!   how modu's cost splits between the client and the agent.
//!
//! # What is measured
//!
//! - CPU per run: user + system time from `getrusage(RUSAGE_SELF)` of the client process,
//!   taken right before and right after the timed loop (after a warm-up at full concurrency
//!   that opens the connections), divided by the runs. Linux accounts the sum to the
//!   nanosecond scheduler clock, so this resolves microseconds (unlike the 10 ms ticks of
//!   `/proc/self/stat`).
//! - Peak RSS: `ru_maxrss` of the client process (its whole life: startup, warm-up at full
//!   concurrency, timed loop), and its growth over the RSS the process had before the warm-up
//!   (`VmRSS`, after the runtime and the agent or HTTP client were built).
//! - `--footprint [--runs R] [--concurrency C]` (a diagnostic, not judged): instead of the
//!   timing table, every variant under valgrind's callgrind: instructions, cache misses and a
//!   cycle estimate per run, the hot code each executes, and where modu's extra hot code is
//!   (see `footprint.rs`). Deterministic, so it shows a change's effect on a noisy machine.
//! - `--pad-us N` (a diagnostic, not judged) adds a row: the baseline with N µs of busy CPU
//!   after each run. What it costs beyond N is what a slower client pays in the system alone,
//!   on this machine: the mock server shares it, so the client's writes wake a server that went
//!   idle while the client was busy, and its reads find fewer answers per wake-up.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use modu_openai::OpenAiClient;
use modu_testing::MockOpenAiServer;
use modu_testing::bench::{allowed_cpus, cpu_time, max_rss_kib, percentile, rss_kib};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

const QUESTION: &str = "What is 2 + 3?";

mod baseline;
mod footprint;
mod modu_side;

use modu_side::{client_only, modu_agent, modu_run};

// ---------------------------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    cpu_us_per_run: f64,
    runs_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    peak_rss_kib: u64,
    idle_rss_kib: u64,
}

async fn drive<F, Fut>(runs: usize, concurrency: usize, idle_rss_kib: u64, run: F) -> Sample
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // Warm-up at full concurrency: opens every connection the timed loop uses, grows the
    // allocator's arenas, fills lazy statics.
    futures::stream::iter(0..concurrency.max(50))
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
    Sample {
        cpu_us_per_run: cpu.as_secs_f64() * 1e6 / runs as f64,
        runs_per_s: runs as f64 / wall.as_secs_f64(),
        p50_ms: percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        p99_ms: percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        peak_rss_kib: max_rss_kib(),
        idle_rss_kib,
    }
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// `--client KIND MODE URL RUNS CONCURRENCY CPU`: one measured variant. Prints a JSON line.
fn client(kind: &str, mode: &str, url: &str, runs: usize, concurrency: usize, cpu: usize) {
    modu_testing::bench::pin_to(cpu).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let stream = mode == "streamed";
    let (kind, url) = (kind.to_owned(), url.to_owned());
    // The driving loop is a task on the one worker, as a server's request handler would be.
    let task = rt.spawn(async move {
        if kind == "modu-client" {
            // Diagnostic: the baseline's loop over `OpenAiClient` (no agent).
            let model = OpenAiClient::new(&url, "mock-model").unwrap();
            let tool =
                modu_core::ToolDefinition::new("add", "Add two integers", modu_core::tool::schema_for::<AddArgs>());
            let tools = Arc::new(vec![tool]);
            let idle = rss_kib();
            drive(runs, concurrency, idle, || {
                let (model, tools) = (model.clone(), Arc::clone(&tools));
                async move { client_only(&model, tools, stream).await }
            })
            .await
        } else if kind == "modu" {
            let agent = modu_agent(&url);
            let idle = rss_kib();
            drive(runs, concurrency, idle, || {
                let agent = Arc::clone(&agent);
                async move { modu_run(&agent, stream).await }
            })
            .await
        } else {
            // `baseline-pad-N`: the baseline, then N µs of busy CPU (see `--pad-us`).
            let pad = kind
                .strip_prefix("baseline-pad-")
                .map(|n| Duration::from_micros(n.parse().unwrap()));
            let base = Arc::new(baseline::Baseline::new(&url, "mock-model"));
            let idle = rss_kib();
            drive(runs, concurrency, idle, || {
                let base = Arc::clone(&base);
                async move {
                    let (text, _usage) = base.run(QUESTION, stream).await.unwrap();
                    assert!(!text.is_empty());
                    if let Some(pad) = pad {
                        let started = Instant::now();
                        while started.elapsed() < pad {
                            std::hint::spin_loop();
                        }
                    }
                }
            })
            .await
        }
    });
    let s = rt.block_on(task).unwrap();
    let json = json!({
        "cpu_us_per_run": s.cpu_us_per_run, "runs_per_s": s.runs_per_s, "p50_ms": s.p50_ms,
        "p99_ms": s.p99_ms, "peak_rss_kib": s.peak_rss_kib, "idle_rss_kib": s.idle_rss_kib,
    });
    println!("{json}");
}

struct Server {
    child: Child,
    url: String,
}

fn start_server(latency_ms: u64, cpu: usize) -> Server {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--serve", &latency_ms.to_string(), &cpu.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    Server {
        child,
        url: line.trim().to_owned(),
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn spawn_client(kind: &str, mode: &str, url: &str, runs: usize, concurrency: usize, cpu: usize) -> Sample {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--client",
            kind,
            mode,
            url,
            &runs.to_string(),
            &concurrency.to_string(),
            &cpu.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{kind} {mode} client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(text.trim().lines().last().unwrap_or("{}")).unwrap();
    let f = |k: &str| v[k].as_f64().unwrap();
    Sample {
        cpu_us_per_run: f("cpu_us_per_run"),
        runs_per_s: f("runs_per_s"),
        p50_ms: f("p50_ms"),
        p99_ms: f("p99_ms"),
        peak_rss_kib: f("peak_rss_kib") as u64,
        idle_rss_kib: f("idle_rss_kib") as u64,
    }
}

/// The median sample by CPU per run.
fn median(mut samples: Vec<Sample>) -> (Sample, f64, f64) {
    samples.sort_by(|a, b| a.cpu_us_per_run.total_cmp(&b.cpu_us_per_run));
    let lo = samples.first().map_or(0.0, |s| s.cpu_us_per_run);
    let hi = samples.last().map_or(0.0, |s| s.cpu_us_per_run);
    (samples[samples.len() / 2], lo, hi)
}

/// One run of each variant against a recording in-process mock: the requests each sends.
fn check_requests() -> Vec<(String, Vec<Value>)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut out = Vec::new();
        for (kind, stream) in [("modu", false), ("modu", true), ("baseline", false), ("baseline", true)] {
            let server = MockOpenAiServer::start().await.unwrap();
            let url = server.base_url();
            if kind == "modu" {
                modu_run(&modu_agent(&url), stream).await;
            } else {
                let base = baseline::Baseline::new(&url, "mock-model");
                let (text, _) = base.run(QUESTION, stream).await.unwrap();
                assert_eq!(text, "The tool answered: 5");
            }
            let mode = if stream { "streamed" } else { "non-streamed" };
            out.push((format!("{kind} {mode}"), server.requests()));
        }
        out
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match arg(1) {
        // `--serve LATENCY_MS CPU`: the mock server, until stdin closes. Prints its base URL.
        "--serve" => {
            let latency = Duration::from_millis(arg(2).parse().unwrap());
            return modu_testing::bench::serve_mock_openai(latency, arg(3).parse().unwrap()).unwrap();
        }
        "--client" => {
            let n = |i: usize| arg(i).parse::<usize>().unwrap();
            return client(arg(2), arg(3), arg(4), n(5), n(6), n(7));
        }
        _ => {}
    }
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|s| s.parse::<f64>().ok())
    };
    let quick = flag("--quick");
    let scale = value("--runs-scale").unwrap_or(if quick { 0.1 } else { 1.0 });
    let reps = value("--reps").map_or(if quick { 1 } else { 3 }, |r| (r as usize).max(1));
    let pad_us = value("--pad-us").map(|us| us as u64);
    let bench_started = Instant::now();

    let cpus = allowed_cpus();
    let client_cpu = cpus.first().copied().unwrap_or(0);
    let server_cpu = cpus.get(1).copied().unwrap_or(client_cpu);
    if flag("--footprint") {
        let server = start_server(0, server_cpu);
        let runs = value("--runs").map_or(200, |r| (r as usize).max(1));
        let concurrency = value("--concurrency").map_or(1, |c| (c as usize).max(1));
        return footprint::footprint(&server.url, runs, concurrency);
    }
    println!("load bench: modu = Agent + OpenAiClient; baseline = hand-written reqwest + typed serde");
    println!(
        "client processes pinned to CPU {client_cpu} (1 tokio worker), mock server processes pinned to CPU {server_cpu}{}",
        if client_cpu == server_cpu {
            " (only one CPU allowed: they share it)"
        } else {
            ""
        }
    );
    println!("CPU/run = getrusage(RUSAGE_SELF) user+sys of the client around the timed loop / runs; median of {reps}");
    let checked = check_requests();
    if flag("--show-requests") {
        for (name, requests) in &checked {
            for r in requests {
                println!("{name}: {r}");
            }
        }
    }
    let counts: Vec<usize> = checked.iter().map(|(_, r)| r.len()).collect();
    assert!(
        counts.iter().all(|&n| n == counts[0]),
        "modu and the baseline send different numbers of requests per run: {counts:?}"
    );
    let modu_run_streams = checked
        .iter()
        .find(|(name, _)| name == "modu non-streamed")
        .is_some_and(|(_, r)| r.iter().any(|r| r["stream"] == json!(true)));
    for (name, requests) in checked {
        let flags: Vec<String> = requests
            .iter()
            .map(|r| format!("stream={}", r["stream"].as_bool().unwrap_or(false)))
            .collect();
        let bytes: Vec<String> = requests.iter().map(|r| r.to_string().len().to_string()).collect();
        println!(
            "  one run, {name:<22} {} requests ({}; body bytes {})",
            requests.len(),
            flags.join(", "),
            bytes.join(", ")
        );
    }
    if modu_run_streams {
        println!(
            "  note: Agent::run sends stream: true here, so the modu non-streamed rows are streamed requests judged against a stream: false baseline"
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "  machine load average at start: {} (other processes on the client's core inflate both sides' CPU per run)",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    if quick {
        println!("--quick: a smoke run with fewer runs than the targets require; the verdicts are indicative only");
    }
    println!();

    // (concurrency, model latency ms, runs, CPU target)
    let scenarios: [(usize, u64, usize, f64); 3] = [(1, 0, 2000, 1.3), (64, 0, 6000, 1.3), (1000, 50, 6000, 1.5)];
    let rss_target = 1.3;
    let mut servers: Vec<(u64, Server)> = Vec::new();
    let mut rows = Vec::new();
    // (scenario, baseline, OpenAiClient alone, agent) CPU µs per run.
    let mut split: Vec<(String, f64, f64, f64)> = Vec::new();
    // (scenario, baseline, padded baseline) CPU µs per run, with `--pad-us`.
    let mut padded: Vec<(String, f64, f64)> = Vec::new();
    let mut all_pass = true;
    for (concurrency, latency, runs, target) in scenarios {
        let runs = ((runs as f64 * scale) as usize).max(concurrency.min(100));
        if !servers.iter().any(|(l, _)| *l == latency) {
            servers.push((latency, start_server(latency, server_cpu)));
        }
        let url = servers
            .iter()
            .find(|(l, _)| *l == latency)
            .map(|(_, s)| s.url.clone())
            .unwrap();
        for mode in ["non-streamed", "streamed"] {
            let (mut m, mut b, mut c, mut p) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..reps {
                m.push(spawn_client("modu", mode, &url, runs, concurrency, client_cpu));
                b.push(spawn_client("baseline", mode, &url, runs, concurrency, client_cpu));
                c.push(spawn_client("modu-client", mode, &url, runs, concurrency, client_cpu));
                if let Some(pad) = pad_us {
                    let kind = format!("baseline-pad-{pad}");
                    p.push(spawn_client(&kind, mode, &url, runs, concurrency, client_cpu));
                }
            }
            let (modu, m_lo, m_hi) = median(m);
            let (base, b_lo, b_hi) = median(b);
            let (client, ..) = median(c);
            let ratio = modu.cpu_us_per_run / base.cpu_us_per_run;
            let pass = ratio <= target;
            all_pass &= pass;
            let scenario = if latency > 0 {
                format!("c={concurrency} {latency}ms {mode}")
            } else {
                format!("c={concurrency} {mode}")
            };
            if !p.is_empty() {
                padded.push((scenario.clone(), base.cpu_us_per_run, median(p).0.cpu_us_per_run));
            }
            split.push((
                scenario.clone(),
                base.cpu_us_per_run,
                client.cpu_us_per_run,
                modu.cpu_us_per_run,
            ));
            rows.push((
                scenario,
                runs,
                concurrency,
                modu,
                base,
                (m_lo, m_hi),
                (b_lo, b_hi),
                ratio,
                target,
                pass,
            ));
        }
    }
    drop(servers);

    println!(
        "{:<26} {:>6} {:>14} {:>12} {:>7} {:>7} {:>6}",
        "scenario", "runs", "baseline µs/run", "modu µs/run", "ratio", "target", "result"
    );
    for (scenario, runs, _, modu, base, _, _, ratio, target, pass) in &rows {
        println!(
            "{:<26} {:>6} {:>14.1} {:>12.1} {:>6.2}x {:>6.1}x {:>6}",
            scenario,
            runs,
            base.cpu_us_per_run,
            modu.cpu_us_per_run,
            ratio,
            target,
            if *pass { "pass" } else { "FAIL" }
        );
    }
    println!();
    println!(
        "{:<26} {:>14} {:>12} {:>12} {:>9} {:>14}",
        "where it goes (µs/run)", "baseline", "client only", "agent", "client/b", "agent - client"
    );
    for (scenario, base, client, agent) in &split {
        println!(
            "{:<26} {:>14.1} {:>12.1} {:>12.1} {:>8.2}x {:>14.1}",
            scenario,
            base,
            client,
            agent,
            client / base,
            agent - client
        );
    }
    println!("  client only = the baseline's job over OpenAiClient, no agent (--client modu-client)");
    println!();
    if let Some(pad) = pad_us {
        println!(
            "{:<26} {:>14} {:>12} {:>12} {:>14}",
            "busy CPU added (µs/run)", "baseline", "padded", "added", "beyond added"
        );
        for (scenario, base, with_pad) in &padded {
            let added = with_pad - base;
            println!(
                "{scenario:<26} {base:>14.1} {with_pad:>12.1} {added:>12.1} {:>14.1}",
                added - pad as f64
            );
        }
        println!("  padded = the baseline, then {pad} µs of busy CPU per run (--pad-us)");
        println!();
    }
    println!(
        "{:<26} {:>14} {:>12} {:>7} {:>7} {:>6}",
        "peak RSS (ru_maxrss)", "baseline MiB", "modu MiB", "ratio", "target", "result"
    );
    for (scenario, _, concurrency, modu, base, ..) in &rows {
        if *concurrency < 1000 {
            continue;
        }
        let ratio = modu.peak_rss_kib as f64 / base.peak_rss_kib as f64;
        let pass = ratio <= rss_target;
        all_pass &= pass;
        println!(
            "{:<26} {:>14.1} {:>12.1} {:>6.2}x {:>6.1}x {:>6}",
            scenario,
            base.peak_rss_kib as f64 / 1024.0,
            modu.peak_rss_kib as f64 / 1024.0,
            ratio,
            rss_target,
            if pass { "pass" } else { "FAIL" }
        );
        let growth = |s: &Sample| s.peak_rss_kib.saturating_sub(s.idle_rss_kib) as f64 / 1024.0;
        println!(
            "{:<26} {:>14.1} {:>12.1} {:>6.2}x  (growth over the RSS before warm-up: base {:.1} MiB, modu {:.1} MiB at start)",
            "  of which growth",
            growth(base),
            growth(modu),
            growth(modu) / growth(base),
            base.idle_rss_kib as f64 / 1024.0,
            modu.idle_rss_kib as f64 / 1024.0,
        );
    }
    println!();
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>19} {:>19}",
        "detail (medians)",
        "b runs/s",
        "m runs/s",
        "b p50 ms",
        "m p50 ms",
        "b p99 ms",
        "m p99 ms",
        "b µs/run min..max",
        "m µs/run min..max"
    );
    for (scenario, _, _, modu, base, m_range, b_range, ..) in &rows {
        println!(
            "{:<26} {:>9.0} {:>9.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>19} {:>19}",
            scenario,
            base.runs_per_s,
            modu.runs_per_s,
            base.p50_ms,
            modu.p50_ms,
            base.p99_ms,
            modu.p99_ms,
            format!("{:.1}..{:.1}", b_range.0, b_range.1),
            format!("{:.1}..{:.1}", m_range.0, m_range.1),
        );
    }
    println!();
    println!(
        "{} in {:.0} s",
        if all_pass {
            "all targets met"
        } else {
            "some targets missed"
        },
        bench_started.elapsed().as_secs_f64()
    );
    if flag("--enforce") && !all_pass {
        std::process::exit(1);
    }
}
