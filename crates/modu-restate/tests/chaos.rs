//! Chaos at the scale of issue #18: 3 worker processes behind one address serve 200 runs over
//! 20 sessions (10 runs per session, one after the other; the sessions at once), while a random
//! worker is SIGKILLed about every 2 s (1.5 to 2.5 s) and restarted on its address.
//!
//! Each run is two model calls (the mock model answers with a call to `record`, then with a
//! text) and one tool call. `record` appends `(run id, call id, execution)` to a ledger file,
//! then works [`RECORD_MS`] before it returns, so that some kills land in the middle of it.
//! Every model reply carries a fresh nonce and every tool result names its execution, so the
//! session's history says which model reply and which tool execution the journal kept.
//!
//! What must hold at the end:
//! - every run completed (its answer is the journaled final reply);
//! - each session's history holds its 10 runs in order, each whole: the user message, the
//!   assistant's call of `record`, the tool result answering that call, the final answer;
//! - no tool call ran again after its journal entry was written: the execution the history
//!   holds is the call's last line in the ledger. Earlier lines of the same (run, call) are
//!   calls killed mid-execution: each ran on a worker that was SIGKILLed after it started.
//!   They are counted and printed, not failed;
//! - the same for model calls: the reply the history holds is the last one the mock sent for
//!   that run and step.
//!
//! What is measured and printed: runs/s (200 runs over the wall time), run latency p50/p99
//! (from the request to Restate's ingress to its answer), and the **recovery time** after a
//! kill, p50/p99. Recovery time is defined per (kill, run): for every run that was in flight
//! on the killed worker at the SIGKILL (started, not answered yet, and its latest executed
//! step, a model request seen by the mock or a tool execution seen in the ledger, ran on that
//! worker), the time from the SIGKILL until the run's next executed step on any worker, or
//! until its answer when the new attempt had no step left to execute (it only replayed).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::Path;
use axum::routing::post;
use common::{Restate, Worker, free_port, server_bin};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

const WORKERS: usize = 3;
const SESSIONS: usize = 20;
const RUNS_PER_SESSION: usize = 10;
/// How long the mock model takes to answer.
const MODEL_MS: u64 = 800;
/// How long `record` works after it appended its ledger line.
const RECORD_MS: u64 = 200;

fn now_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros()
}

/// The text of an OpenAI message's content (a string or an array of text parts).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// What the mock model saw and answered.
#[derive(Default)]
struct Model {
    /// Every request: (run id, worker generation, arrival in unix µs).
    requests: Vec<(String, usize, u128)>,
    /// The nonces of the replies sent per (run id, step), in the order they were sent.
    replies: HashMap<(String, &'static str), Vec<String>>,
    next: u64,
}

/// A model that answers from the request: a call to `record` first, then a text. Each worker
/// process talks to it under its own path (`/w/<generation>/v1`), so it knows who asked. The
/// run is the last user message (the driver makes it the run id).
async fn mock_model(model: Arc<Mutex<Model>>) -> String {
    let app = axum::Router::new().route(
        "/w/{generation}/v1/chat/completions",
        post(move |Path(generation): Path<usize>, Json(body): Json<Value>| {
            let model = Arc::clone(&model);
            async move {
                let messages = body["messages"].as_array().cloned().unwrap_or_default();
                let run = messages
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "user")
                    .map(|m| content_text(&m["content"]))
                    .unwrap_or_default();
                let answer = messages.last().is_some_and(|m| m["role"] == "tool");
                let nonce = {
                    let mut m = model.lock().unwrap();
                    m.requests.push((run.clone(), generation, now_us()));
                    m.next += 1;
                    let nonce = format!("m{}", m.next);
                    let step = if answer { "answer" } else { "call" };
                    m.replies.entry((run.clone(), step)).or_default().push(nonce.clone());
                    nonce
                };
                tokio::time::sleep(Duration::from_millis(MODEL_MS)).await;
                let message = if answer {
                    json!({"role": "assistant", "content": format!("noted {nonce}")})
                } else {
                    json!({"role": "assistant", "content": null, "tool_calls": [{
                        "id": format!("call-{run}"), "type": "function",
                        "function": {"name": "record", "arguments": json!({"note": nonce}).to_string()}}]})
                };
                Json(
                    json!({"id": "x", "object": "chat.completion", "created": 0, "model": "mock-model",
                    "choices": [{"index": 0, "message": message,
                        "finish_reason": if answer { "stop" } else { "tool_calls" }}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
                )
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
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

/// A run as the driver saw it.
struct Done {
    run: String,
    sent_us: u128,
    answered_us: u128,
    latency: Duration,
    out: Value,
}

/// A SIGKILL: when, which worker generation, its pid.
struct Kill {
    at_us: u128,
    generation: usize,
    pid: u32,
}

/// The workers, each with the generation it was started as (its model path).
struct Fleet {
    workers: Vec<(Worker, usize)>,
    pids: HashMap<u32, usize>,
    next_generation: usize,
}

impl Fleet {
    async fn start(
        &mut self,
        port: u16,
        model: &str,
        ledger: &std::path::Path,
        log: &std::path::Path,
    ) -> (Worker, usize) {
        let generation = self.next_generation;
        self.next_generation += 1;
        let worker = Worker::start_with(
            port,
            &format!("{model}/w/{generation}/v1"),
            ledger,
            0,
            log,
            &[("RECORD_MS", RECORD_MS.to_string())],
        )
        .await;
        self.pids.insert(worker.pid(), generation);
        (worker, generation)
    }
}

/// One execution of a tool call, from the ledger: its name (`<pid>.<n>`), pid, start (unix µs).
type Execution = (String, u32, u128);

/// The p-th percentile (nearest rank) of sorted values.
fn pct<T: Copy>(sorted: &[T], p: usize) -> T {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_while_workers_are_killed() {
    let Some(bin) = server_bin() else { return };
    let restate = Restate::start(&bin).await;
    let model = Arc::new(Mutex::new(Model::default()));
    let openai = mock_model(Arc::clone(&model)).await;
    let ledger_path = restate.dir.path().join("ledger");
    let log = restate.dir.path().join("workers.log");
    let ports: Vec<u16> = (0..WORKERS).map(|_| free_port()).collect();
    let mut fleet = Fleet {
        workers: Vec::new(),
        pids: HashMap::new(),
        next_generation: 0,
    };
    for &port in &ports {
        let started = fleet.start(port, &openai, &ledger_path, &log).await;
        fleet.workers.push(started);
    }
    let front = proxy(ports.clone()).await;
    restate.register(&format!("http://127.0.0.1:{front}")).await;

    let started = Instant::now();
    let mut sessions = Vec::new();
    for s in 0..SESSIONS {
        let http = restate.http.clone();
        let ingress = restate.ingress_url();
        sessions.push(tokio::spawn(async move {
            let mut done = Vec::new();
            for r in 0..RUNS_PER_SESSION {
                let run = format!("s{s}-r{r}");
                let (t, sent_us) = (Instant::now(), now_us());
                let out: Value = http
                    .post(format!("{ingress}/ModuSession/s{s}/run"))
                    .json(&json!({"message": run, "run_id": run}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                done.push(Done {
                    run,
                    sent_us,
                    answered_us: now_us(),
                    latency: t.elapsed(),
                    out,
                });
            }
            done
        }));
    }

    // The killer: a random worker about every 2 s, restarted on its address.
    let stop = Arc::new(AtomicBool::new(false));
    let killer = {
        let stop = Arc::clone(&stop);
        let (openai, ledger_path, log) = (openai.clone(), ledger_path.clone(), log.clone());
        tokio::spawn(async move {
            let mut kills = Vec::new();
            let mut seed = 0x9e37_79b9_u64;
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1500 + seed % 1000)).await;
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let i = (seed >> 33) as usize % WORKERS;
                let (worker, generation) = &mut fleet.workers[i];
                kills.push(Kill {
                    at_us: now_us(),
                    generation: *generation,
                    pid: worker.pid(),
                });
                worker.kill();
                let port = worker.port;
                fleet.workers[i] = fleet.start(port, &openai, &ledger_path, &log).await;
            }
            (kills, fleet)
        })
    };

    let mut runs = Vec::new();
    for session in sessions {
        runs.extend(
            tokio::time::timeout(Duration::from_secs(300), session)
                .await
                .expect("the sessions finished within 5 minutes")
                .unwrap(),
        );
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    // The workers stay up (returned by the killer) for the history reads.
    let (kills, fleet) = killer.await.unwrap();

    // Every run completed.
    assert_eq!(runs.len(), SESSIONS * RUNS_PER_SESSION);
    for d in &runs {
        assert_eq!(d.out["error"], Value::Null, "{}: {}", d.run, d.out);
        let output = d.out["output"].as_str().unwrap_or_default();
        assert!(output.starts_with("noted m"), "{}: {}", d.run, d.out);
    }

    // Each session's history: its runs, in order, each whole. It names the journaled model
    // replies and tool execution of every run.
    let mut journaled: HashMap<String, (String, String, String)> = HashMap::new();
    for s in 0..SESSIONS {
        let history = restate.call(&format!("s{s}"), "history", Value::Null).await;
        let history = history.as_array().unwrap();
        assert_eq!(history.len(), RUNS_PER_SESSION * 4, "session {s}: {history:?}");
        for (r, m) in history.chunks(4).enumerate() {
            let run = format!("s{s}-r{r}");
            assert_eq!(m[0]["role"], "user", "{m:?}");
            assert_eq!(m[0]["content"][0]["text"], run.as_str(), "{m:?}");
            let call = &m[1]["tool_calls"][0];
            assert_eq!(m[1]["role"], "assistant", "{m:?}");
            assert_eq!(m[1]["tool_calls"].as_array().map(Vec::len), Some(1), "{m:?}");
            assert_eq!(call["id"], format!("call-{run}").as_str(), "{m:?}");
            assert_eq!(call["name"], "record", "{m:?}");
            let note: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            assert_eq!(m[2]["role"], "tool", "{m:?}");
            assert_eq!(m[2]["tool_call_id"], call["id"], "{m:?}");
            let result: Value = serde_json::from_str(m[2]["content"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(result["recorded"], true, "{m:?}");
            assert_eq!(m[3]["role"], "assistant", "{m:?}");
            let answer = m[3]["content"][0]["text"].as_str().unwrap();
            let answer = answer.strip_prefix("noted ").expect("the final answer");
            journaled.insert(
                run,
                (
                    note["note"].as_str().unwrap().to_owned(),
                    result["exec"].as_str().unwrap().to_owned(),
                    answer.to_owned(),
                ),
            );
        }
    }
    assert_eq!(journaled.len(), SESSIONS * RUNS_PER_SESSION);

    // The ledger: `run call record done <pid>.<n> <unix µs>`, in the order the calls ran.
    let text = std::fs::read_to_string(&ledger_path).unwrap();
    let mut executions: HashMap<(String, String), Vec<Execution>> = HashMap::new();
    let mut per_pid: HashMap<u32, usize> = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 6, "ledger line {line:?}");
        let pid: u32 = f[4].split('.').next().unwrap().parse().unwrap();
        *per_pid.entry(pid).or_default() += 1;
        executions.entry((f[0].to_owned(), f[1].to_owned())).or_default().push((
            f[4].to_owned(),
            pid,
            f[5].parse().unwrap(),
        ));
    }
    let expected: BTreeSet<(String, String)> = journaled.keys().map(|r| (r.clone(), format!("call-{r}"))).collect();
    let recorded: BTreeSet<(String, String)> = executions.keys().cloned().collect();
    assert_eq!(
        recorded, expected,
        "every run's one tool call, and no other, is in the ledger"
    );
    let kill_of: HashMap<u32, u128> = kills.iter().map(|k| (k.pid, k.at_us)).collect();
    let mut tool_duplicates = 0;
    for ((run, call), execs) in &executions {
        let (_, exec, _) = &journaled[run];
        let (last, _, _) = execs.last().unwrap();
        assert_eq!(
            last, exec,
            "{run}/{call}: the journaled execution is the call's last; nothing ran after its entry was written: {execs:?}"
        );
        for (earlier, pid, at) in &execs[..execs.len() - 1] {
            let killed = kill_of.get(pid).copied();
            assert!(
                killed.is_some_and(|k| k > *at),
                "{run}/{call}: execution {earlier} ran again but its worker {pid} was not killed after it started ({killed:?}): {execs:?}"
            );
            tool_duplicates += 1;
        }
    }

    // Model calls: the journaled reply is the last one sent for its run and step.
    let model = model.lock().unwrap();
    let mut model_repeats = 0;
    for (run, (call_nonce, _, answer_nonce)) in &journaled {
        for (step, nonce) in [("call", call_nonce), ("answer", answer_nonce)] {
            let sent = &model.replies[&(run.clone(), step)];
            assert_eq!(
                sent.last(),
                Some(nonce),
                "{run} {step}: the journaled reply is the last sent; no finished model call was repeated: {sent:?}"
            );
            model_repeats += sent.len() - 1;
        }
    }

    // Recovery: per kill, the runs in flight on the killed worker, until their next step.
    let mut steps: HashMap<&str, Vec<(u128, usize)>> = HashMap::new();
    for (run, generation, at) in &model.requests {
        steps.entry(run.as_str()).or_default().push((*at, *generation));
    }
    for ((run, _), execs) in &executions {
        for (_, pid, at) in execs {
            steps.entry(run.as_str()).or_default().push((*at, fleet.pids[pid]));
        }
    }
    for s in steps.values_mut() {
        s.sort_unstable();
    }
    let mut recovery_ms = Vec::new();
    let mut hit = HashSet::new();
    for kill in &kills {
        for d in runs
            .iter()
            .filter(|d| d.sent_us < kill.at_us && kill.at_us < d.answered_us)
        {
            let Some(run_steps) = steps.get(d.run.as_str()) else {
                continue;
            };
            let Some(&(_, on)) = run_steps.iter().rev().find(|(at, _)| *at < kill.at_us) else {
                continue;
            };
            if on != kill.generation {
                continue;
            }
            let next = run_steps
                .iter()
                .find(|(at, _)| *at >= kill.at_us)
                .map_or(d.answered_us, |(at, _)| *at);
            recovery_ms.push((next - kill.at_us) as f64 / 1000.0);
            hit.insert(d.run.clone());
        }
    }
    recovery_ms.sort_unstable_by(f64::total_cmp);
    let mut latencies: Vec<Duration> = runs.iter().map(|d| d.latency).collect();
    latencies.sort_unstable();

    assert!(
        kills.len() >= 5,
        "the runs outlasted at least five kills ({})",
        kills.len()
    );
    assert!(!recovery_ms.is_empty(), "some kill hit a worker with runs in flight");
    let total = SESSIONS * RUNS_PER_SESSION;
    let mut shares: Vec<usize> = per_pid.values().copied().collect();
    shares.sort_unstable_by(|a, b| b.cmp(a));
    println!(
        "chaos (restate): {total} runs over {SESSIONS} sessions in {elapsed:.1?} = {:.2} runs/s; {} kills; \
         run latency p50 {} ms, p99 {} ms, max {} ms (of which the mock model and the tool work {} ms)",
        total as f64 / elapsed.as_secs_f64(),
        kills.len(),
        pct(&latencies, 50).as_millis(),
        pct(&latencies, 99).as_millis(),
        latencies[latencies.len() - 1].as_millis(),
        2 * MODEL_MS + RECORD_MS,
    );
    println!(
        "chaos (restate): recovery after a kill (SIGKILL to the next executed step of each run in flight on the \
         killed worker): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms over {} (kill, run) pairs, {} runs hit",
        pct(&recovery_ms, 50),
        pct(&recovery_ms, 99),
        recovery_ms[recovery_ms.len() - 1],
        recovery_ms.len(),
        hit.len(),
    );
    println!(
        "chaos (restate): {tool_duplicates} tool calls ran twice (killed mid-execution, before their entry was written), \
         {model_repeats} model calls sent again (killed before journaled); 0 journaled calls repeated; \
         tool executions per worker process: {shares:?}"
    );
}
