//! Load benchmark of the AG-UI endpoint: many concurrent `POST /agui/{agent}` SSE runs on
//! loopback against an agent whose model (a mock OpenAI server) answers after a fixed latency,
//! judged against the same agent called in-process.
//!
//! Run with: `cargo run --release -p modu-server --example server_load` (what `cargo xtask bench
//! server` runs). Options: `--quick` (one wave at full concurrency, for a smoke),
//! `--runs N` (default 5000), `--concurrency N` (default 1000), `--latency-ms N` (default 50).
//! It exits 1 when any run failed.
//!
//! # What runs where
//!
//! - The mock model ([`modu_testing::MockOpenAiServer`], the exact OpenAI wire format,
//!   recording off, `--latency-ms` before every answer) runs in its own process, pinned to the
//!   first allowed CPU.
//! - The server (this binary re-executed with `--server`): a [`ModuServer`] serving one agent
//!   (`OpenAiClient` on the mock, one tool) over `axum::serve` on 127.0.0.1, a tokio runtime
//!   with one worker, pinned to the second allowed CPU.
//! - The in-process baseline (`--inproc`): the same agent, built the same way in its own
//!   process on the same CPU and runtime, driven by `Agent::stream` consumed to its end.
//! - The HTTP client (this process, pinned to the first CPU with the mock): one
//!   `reqwest::Client`, each run a POST of a `RunAgentInput` whose SSE body is read to its end;
//!   a run counts when the stream ends with `RUN_FINISHED` and holds no `RUN_ERROR`.
//!
//! One run is the same agent job on both sides: the model asks for the tool `add`, the tool
//! runs, the model answers in text: two model calls, so at least twice the model latency.
//!
//! # What is measured
//!
//! - Added latency: p50 and p99 of the HTTP runs (request sent to the stream's last byte)
//!   minus p50 and p99 of the in-process runs at the same concurrency.
//! - Server CPU per run: user + system time from `getrusage(RUSAGE_SELF)` of the server
//!   process, taken right before and right after the timed runs (after a warm-up wave that
//!   opens the connections), divided by the runs; the in-process baseline's CPU per run is
//!   measured the same way, so the difference is what serving over HTTP costs.
//! - Peak RSS: `ru_maxrss` of the server process over its whole life (and of the baseline).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use modu_agent::{Agent, StreamItem};
use modu_core::{FunctionTool, ToolSpec};
use modu_openai::OpenAiClient;
use modu_server::ModuServer;
use modu_testing::bench::{allowed_cpus, cpu_time, max_rss_kib};
use serde_json::{Value, json};

const QUESTION: &str = "What is 2 + 3?";

fn agent(mock_url: &str) -> Agent {
    let model = OpenAiClient::new(mock_url, "mock-model").unwrap();
    let spec = ToolSpec::new(
        "add",
        "Add two integers",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
               "required": ["a", "b"]}),
    );
    let add = FunctionTool::<()>::new(spec, |_ctx, args: Value| async move {
        Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)))
    });
    Agent::builder(model).name("bench").tool(add).build().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------------------------

/// The `p` percentile of `sorted`, in milliseconds.
fn ms(sorted: &[Duration], p: f64) -> f64 {
    modu_testing::bench::percentile(sorted, p).as_secs_f64() * 1e3
}

struct Timed {
    latencies: Vec<Duration>,
    errors: usize,
    wall: Duration,
}

/// `runs` runs of `run` at most `concurrency` at a time, after a warm-up wave of
/// `concurrency` runs (which opens every connection the timed runs use). `mark` is called
/// right before and right after the timed runs.
async fn drive<F, Fut>(runs: usize, concurrency: usize, run: F, mut mark: impl FnMut()) -> Timed
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let warm: Vec<bool> = futures::stream::iter(0..concurrency)
        .map(|i| run(runs + i))
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let warm_errors = warm.iter().filter(|ok| !**ok).count();
    mark();
    let started = Instant::now();
    let results: Vec<(Duration, bool)> = futures::stream::iter(0..runs)
        .map(|i| {
            let fut = run(i);
            async move {
                let t = Instant::now();
                let ok = fut.await;
                (t.elapsed(), ok)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = started.elapsed();
    mark();
    let errors = warm_errors + results.iter().filter(|(_, ok)| !ok).count();
    let mut latencies: Vec<Duration> = results.into_iter().map(|(d, _)| d).collect();
    latencies.sort();
    Timed {
        latencies,
        errors,
        wall,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// `--server MOCK_URL CPU`: the modu server. Prints its URL, then answers each stdin line with
/// a JSON line `{"cpu_us", "max_rss_kib"}`; exits when stdin closes.
fn server(mock_url: &str, cpu: usize) {
    modu_testing::bench::pin_to(cpu).unwrap();
    let rt = runtime();
    let router = ModuServer::new().agent("bench", agent(mock_url)).router();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    println!("http://{}", listener.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    rt.spawn(async move { axum::serve(listener, router).await.unwrap() });
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
        let cpu = cpu_time().as_micros() as u64;
        println!("{}", json!({"cpu_us": cpu, "max_rss_kib": max_rss_kib()}));
        std::io::stdout().flush().unwrap();
    }
}

/// `--inproc MOCK_URL RUNS CONCURRENCY CPU`: the same agent called in-process. Prints one JSON
/// line.
fn inproc(mock_url: &str, runs: usize, concurrency: usize, cpu: usize) {
    modu_testing::bench::pin_to(cpu).unwrap();
    let rt = runtime();
    let agent = Arc::new(agent(mock_url));
    let task = rt.spawn(async move {
        let mut cpu_marks = Vec::new();
        let timed = drive(
            runs,
            concurrency,
            |_| {
                let agent = Arc::clone(&agent);
                async move {
                    let mut stream = agent.stream(QUESTION);
                    let mut ok = false;
                    while let Some(item) = stream.next().await {
                        if let StreamItem::Completed(result) = item {
                            ok = result.output == "The tool answered: 5";
                        }
                    }
                    ok
                }
            },
            || cpu_marks.push(cpu_time()),
        )
        .await;
        (timed, cpu_marks[1].saturating_sub(cpu_marks[0]))
    });
    let (timed, cpu) = rt.block_on(task).unwrap();
    println!(
        "{}",
        json!({
            "latencies_us": timed.latencies.iter().map(|d| d.as_micros() as u64).collect::<Vec<_>>(),
            "errors": timed.errors, "cpu_us": cpu.as_micros() as u64, "wall_us": timed.wall.as_micros() as u64,
            "max_rss_kib": max_rss_kib(),
        })
    );
}

struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Process {
    fn start(args: &[String]) -> Process {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Process { child, stdin, stdout }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_owned()
    }

    /// The server's CPU time (µs) and peak RSS (KiB) now.
    fn mark(&mut self) -> (u64, u64) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"mark\n").unwrap();
        stdin.flush().unwrap();
        let v: Value = serde_json::from_str(&self.line()).unwrap();
        (v["cpu_us"].as_u64().unwrap(), v["max_rss_kib"].as_u64().unwrap())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// One AG-UI run over HTTP: the SSE body read to its end; whether it finished cleanly.
async fn http_run(client: &reqwest::Client, url: &str, i: usize) -> bool {
    let body = json!({
        "threadId": format!("load-thread-{i}"), "runId": format!("load-run-{i}"),
        "messages": [{"id": "m1", "role": "user", "content": QUESTION}],
        "tools": [], "context": [], "state": {}, "forwardedProps": {},
    });
    let Ok(mut response) = client
        .post(url)
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
    else {
        return false;
    };
    if !response.status().is_success() {
        return false;
    }
    let mut text = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => text.extend_from_slice(&bytes),
            Ok(None) => break,
            Err(_) => return false,
        }
    }
    let text = String::from_utf8_lossy(&text);
    let last = text
        .split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data:")))
        .last()
        .unwrap_or("");
    !text.contains("\"RUN_ERROR\"") && last.contains("\"RUN_FINISHED\"") && text.contains("The tool answered: 5")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let n = |i: usize| arg(i).parse::<usize>().unwrap();
    match arg(1) {
        // `--mock LATENCY_MS CPU`: the mock model, until stdin closes. Prints its base URL.
        "--mock" => {
            let latency = Duration::from_millis(arg(2).parse().unwrap());
            return modu_testing::bench::serve_mock_openai(latency, n(3)).unwrap();
        }
        "--server" => return server(arg(2), n(3)),
        "--inproc" => return inproc(arg(2), n(3), n(4), n(5)),
        _ => {}
    }
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|s| s.parse::<usize>().ok())
    };
    let quick = flag("--quick");
    let concurrency = value("--concurrency").unwrap_or(1000);
    let runs = value("--runs").unwrap_or(if quick { concurrency } else { 5 * concurrency });
    let latency_ms = value("--latency-ms").unwrap_or(50);
    let started = Instant::now();

    let cpus = allowed_cpus();
    let client_cpu = cpus.first().copied().unwrap_or(0);
    let server_cpu = cpus.get(1).copied().unwrap_or(client_cpu);
    println!(
        "AG-UI load: {runs} runs, {concurrency} concurrent, model latency {latency_ms} ms (2 model calls + 1 tool per run)"
    );
    println!(
        "server and in-process baseline pinned to CPU {server_cpu} (1 tokio worker); client and mock model on CPU {client_cpu}{}",
        if client_cpu == server_cpu {
            " (one CPU allowed: all share it)"
        } else {
            ""
        }
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine load average at start: {}",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );

    let mut mock = Process::start(&["--mock".into(), latency_ms.to_string(), client_cpu.to_string()]);
    let mock_url = mock.line();

    // The same agent, in-process.
    let mut base = Process::start(&[
        "--inproc".into(),
        mock_url.clone(),
        runs.to_string(),
        concurrency.to_string(),
        server_cpu.to_string(),
    ]);
    let inproc: Value = serde_json::from_str(&base.line()).unwrap();
    drop(base);
    let mut base_latencies: Vec<Duration> = inproc["latencies_us"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Duration::from_micros(v.as_u64().unwrap()))
        .collect();
    base_latencies.sort();
    let base_errors = inproc["errors"].as_u64().unwrap() as usize;

    // Over HTTP.
    let mut server = Process::start(&["--server".into(), mock_url.clone(), server_cpu.to_string()]);
    let server_url = server.line();
    modu_testing::bench::pin_to(client_cpu).unwrap();
    let rt = runtime();
    let client = reqwest::Client::builder().tcp_nodelay(true).build().unwrap();
    let url = format!("{server_url}/agui/bench");
    let marks = Arc::new(std::sync::Mutex::new(Vec::new()));
    let timed = {
        let marks = Arc::clone(&marks);
        let server = &mut server;
        rt.block_on(drive(
            runs,
            concurrency,
            |i| {
                let (client, url) = (client.clone(), url.clone());
                async move { http_run(&client, &url, i).await }
            },
            || marks.lock().unwrap().push(server.mark()),
        ))
    };
    let marks = marks.lock().unwrap().clone();
    drop(server);
    drop(mock.stdin.take());

    let server_cpu_us = (marks[1].0 - marks[0].0) as f64 / runs as f64;
    let base_cpu_us = inproc["cpu_us"].as_f64().unwrap() / runs as f64;
    let (p50, p99) = (ms(&timed.latencies, 0.5), ms(&timed.latencies, 0.99));
    let (b50, b99) = (ms(&base_latencies, 0.5), ms(&base_latencies, 0.99));
    println!();
    println!(
        "{:<26} {:>10} {:>10} {:>12} {:>12} {:>8}",
        "", "p50 ms", "p99 ms", "CPU/run µs", "peak RSS MiB", "errors"
    );
    println!(
        "{:<26} {b50:>10.1} {b99:>10.1} {base_cpu_us:>12.0} {:>12.1} {base_errors:>8}",
        "in-process Agent::stream",
        inproc["max_rss_kib"].as_f64().unwrap() / 1024.0,
    );
    println!(
        "{:<26} {p50:>10.1} {p99:>10.1} {server_cpu_us:>12.0} {:>12.1} {:>8}",
        "AG-UI over HTTP (server)",
        marks[1].1 as f64 / 1024.0,
        timed.errors,
    );
    println!(
        "added by serving: p50 {:+.1} ms, p99 {:+.1} ms, CPU {:+.0} µs/run; HTTP runs/s {:.0}",
        p50 - b50,
        p99 - b99,
        server_cpu_us - base_cpu_us,
        runs as f64 / timed.wall.as_secs_f64()
    );
    println!(
        "{}",
        json!({
            "runs": runs, "concurrency": concurrency, "latency_ms": latency_ms,
            "inproc": {"p50_ms": b50, "p99_ms": b99, "cpu_us_per_run": base_cpu_us,
                       "peak_rss_kib": inproc["max_rss_kib"], "errors": base_errors},
            "server": {"p50_ms": p50, "p99_ms": p99, "cpu_us_per_run": server_cpu_us,
                       "peak_rss_kib": marks[1].1, "errors": timed.errors},
            "added": {"p50_ms": p50 - b50, "p99_ms": p99 - b99},
        })
    );
    println!("load bench done in {:.1}s", started.elapsed().as_secs_f64());
    if timed.errors + base_errors > 0 {
        println!("FAILED: {} runs failed", timed.errors + base_errors);
        std::process::exit(1);
    }
}
