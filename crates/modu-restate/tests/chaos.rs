//! Chaos at a small scale: 3 worker processes behind one address, 40 runs over 8 sessions, a
//! random worker SIGKILLed (and restarted) about every 2 s. Every run must complete, each
//! session's history must hold its runs in order, and a finished tool call must not run twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::post;
use common::{Restate, Worker, free_port, ledger, server_bin};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

const WORKERS: usize = 3;
const SESSIONS: usize = 8;
const RUNS_PER_SESSION: usize = 5;

/// A model that answers from the request: a tool call to `record` first, then a text.
async fn mock_model(count: Arc<AtomicUsize>) -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<Value>| {
            let count = Arc::clone(&count);
            async move {
                let n = count.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(400)).await;
                let last = body["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .cloned()
                    .unwrap_or_default();
                let message = if last["role"] == "tool" {
                    json!({"role": "assistant", "content": "noted"})
                } else {
                    json!({"role": "assistant", "content": null, "tool_calls": [{
                        "id": format!("call_{n}"), "type": "function",
                        "function": {"name": "record", "arguments": "{}"}}]})
                };
                Json(
                    json!({"id": "x", "object": "chat.completion", "created": 0, "model": "mock-model",
                    "choices": [{"index": 0, "message": message,
                        "finish_reason": if last["role"] == "tool" { "stop" } else { "tool_calls" }}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
                )
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// One address for the workers: each connection goes to the next worker that accepts it.
async fn proxy(ports: Vec<u16>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut next = 0usize;
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut outbound = None;
            for _ in 0..ports.len() * 20 {
                next = (next + 1) % ports.len();
                if let Ok(s) = TcpStream::connect(("127.0.0.1", ports[next])).await {
                    outbound = Some(s);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if let Some(mut outbound) = outbound {
                tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_while_workers_are_killed() {
    let Some(bin) = server_bin() else { return };
    let restate = Restate::start(&bin).await;
    let model_calls = Arc::new(AtomicUsize::new(0));
    let openai = mock_model(Arc::clone(&model_calls)).await;
    let ledger_path = restate.dir.path().join("ledger");
    let log = restate.dir.path().join("workers.log");
    let ports: Vec<u16> = (0..WORKERS).map(|_| free_port()).collect();
    let mut workers = Vec::new();
    for &port in &ports {
        workers.push(Worker::start(port, &openai, &ledger_path, 0, &log).await);
    }
    let front = proxy(ports.clone()).await;
    restate.register(&format!("http://127.0.0.1:{front}")).await;

    let started = Instant::now();
    let mut sessions = Vec::new();
    for s in 0..SESSIONS {
        let http = restate.http.clone();
        let ingress = restate.ingress_url();
        sessions.push(tokio::spawn(async move {
            let mut outputs = Vec::new();
            for r in 0..RUNS_PER_SESSION {
                let t = Instant::now();
                let mut out: Value = http
                    .post(format!("{ingress}/ModuSession/s{s}/run"))
                    .json(&json!({"message": format!("s{s} run {r}")}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                out["latency_ms"] = json!(t.elapsed().as_millis() as u64);
                outputs.push(out);
            }
            outputs
        }));
    }

    // The killer: a random worker about every 2 s, restarted on its address.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let stop = Arc::clone(&stop);
        let (openai, ledger_path, log) = (openai.clone(), ledger_path.clone(), log.clone());
        tokio::spawn(async move {
            let mut kills = 0u32;
            let mut seed = 0x9e37_79b9_u64;
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1500 + seed % 1000)).await;
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let i = (seed >> 33) as usize % WORKERS;
                workers[i].kill();
                kills += 1;
                let port = workers[i].port;
                workers[i] = Worker::start(port, &openai, &ledger_path, 0, &log).await;
            }
            (kills, workers)
        })
    };

    let mut all = Vec::new();
    for (s, session) in sessions.into_iter().enumerate() {
        let outputs = tokio::time::timeout(Duration::from_secs(600), session)
            .await
            .unwrap()
            .unwrap();
        for out in &outputs {
            assert_eq!(out["output"], "noted", "session {s}: {out}");
        }
        all.push(outputs);
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    // The workers stay up (returned by the killer) for the history reads.
    let (kills, _workers) = killer.await.unwrap();

    // Each session's history: its runs, in order, each whole (user, tool call, tool, answer).
    for s in 0..SESSIONS {
        let history = restate.call(&format!("s{s}"), "history", Value::Null).await;
        let history = history.as_array().unwrap();
        assert_eq!(history.len(), RUNS_PER_SESSION * 4, "session {s}");
        for (r, run) in history.chunks(4).enumerate() {
            assert_eq!(run[0]["content"][0]["text"], format!("s{s} run {r}"), "{run:?}");
            assert_eq!(run[3]["content"][0]["text"], "noted", "{run:?}");
        }
    }
    // The ledger: every run's call once; a duplicate is a call killed between running and
    // being journaled (counted, not failed).
    let lines = ledger(&ledger_path);
    let mut seen = std::collections::HashMap::new();
    for (run, call, _, _) in &lines {
        *seen.entry((run.clone(), call.clone())).or_insert(0) += 1;
    }
    let runs = SESSIONS * RUNS_PER_SESSION;
    assert_eq!(seen.len(), runs, "one recorded call per run");
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    let mut latencies: Vec<u64> = all
        .iter()
        .flatten()
        .map(|o| o["latency_ms"].as_u64().unwrap())
        .collect();
    latencies.sort_unstable();
    let pct = |p: usize| latencies[(latencies.len() * p / 100).min(latencies.len() - 1)];
    assert!(kills >= 2, "the runs outlasted at least two kills ({kills})");
    let minimum_model_calls = runs * 2;
    let model_calls = model_calls.load(Ordering::SeqCst);
    println!(
        "chaos: {runs} runs over {SESSIONS} sessions in {elapsed:.1?} ({:.2} runs/s), {kills} kills, \
         {duplicates} duplicated tool calls (killed before journaled), model calls {model_calls} (minimum {minimum_model_calls}); \
         run latency p50 {} ms, p99 {} ms, max {} ms (a run hit by a kill pays the recovery)",
        runs as f64 / elapsed.as_secs_f64(),
        pct(50),
        pct(99),
        latencies[latencies.len() - 1]
    );
}
