//! The chaos driver and the take-over test, for either backend.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use modu_agent::{Agent, AgentRequest};
use modu_chaos::{Backend, Stores, now_us};
use modu_core::{AgentError, CheckpointQuery, FunctionTool, LeaseOptions, Message, Role, ToolSpec};
use modu_testing::ScriptedModel;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// One chaos test at a time in a test binary (2 cores: the timings would mix).
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The scale and timings of a chaos run.
#[derive(Clone, Debug)]
pub struct Chaos {
    pub workers: usize,
    pub sessions: usize,
    pub runs_per_session: usize,
    /// Runs of one session given to workers at once (they contend for its lease).
    pub in_flight_per_session: usize,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub model_ms: u64,
    pub record_ms: u64,
    pub recover_ms: u64,
    /// A kill every `kill_ms` ± `kill_jitter_ms`.
    pub kill_ms: u64,
    pub kill_jitter_ms: u64,
    pub deadline: Duration,
}

impl Default for Chaos {
    fn default() -> Self {
        Chaos {
            workers: 3,
            sessions: 20,
            runs_per_session: 10,
            in_flight_per_session: 1,
            ttl_ms: 1500,
            wait_ms: 120_000,
            model_ms: 500,
            record_ms: 150,
            recover_ms: 300,
            kill_ms: 2000,
            kill_jitter_ms: 500,
            deadline: Duration::from_secs(150),
        }
    }
}

/// A worker process.
struct Proc {
    child: Child,
    stdin: ChildStdin,
    generation: usize,
    pid: u32,
}

/// What a worker printed.
struct Said {
    generation: usize,
    line: String,
}

struct Fleet {
    backend: Backend,
    url: String,
    prefix: String,
    dir: PathBuf,
    config: Chaos,
    procs: Vec<Proc>,
    next_generation: usize,
    pid_of: HashMap<usize, u32>,
    tx: mpsc::UnboundedSender<Said>,
}

impl Fleet {
    fn ledger(&self) -> PathBuf {
        self.dir.join("ledger")
    }
    fn events(&self) -> PathBuf {
        self.dir.join("events")
    }

    fn spawn(&mut self) -> Proc {
        let generation = self.next_generation;
        self.next_generation += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("workers.log"))
            .unwrap();
        let c = &self.config;
        let mut child = Command::new(env!("CARGO_BIN_EXE_chaos-worker"))
            .args([
                "--store",
                self.backend.as_str(),
                "--url",
                &self.url,
                "--prefix",
                &self.prefix,
            ])
            .arg("--ledger")
            .arg(self.ledger())
            .arg("--events")
            .arg(self.events())
            .args(["--holder", &format!("worker-g{generation}")])
            .args(["--ttl-ms", &c.ttl_ms.to_string(), "--wait-ms", &c.wait_ms.to_string()])
            .args([
                "--model-ms",
                &c.model_ms.to_string(),
                "--record-ms",
                &c.record_ms.to_string(),
            ])
            .args(["--recover-ms", &c.recover_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start chaos-worker");
        let pid = child.id().unwrap();
        self.pid_of.insert(generation, pid);
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(Said { generation, line });
            }
        });
        Proc {
            child,
            stdin,
            generation,
            pid,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Queued,
    /// Given to the worker of this generation.
    On(usize),
    /// Its worker died (or lost the lease) with its checkpoint stored: another worker's
    /// `recover_orphans` owns it.
    Orphan,
    Done,
}

struct Run {
    id: String,
    session: usize,
    state: State,
    first_sent: Option<Instant>,
    done_at: Option<Instant>,
    /// `done` lines printed for it.
    dones: u32,
    resubmits: u32,
    /// Pids that reported it `lease_lost`.
    lease_lost: Vec<u32>,
}

struct Kill {
    at_us: u128,
    pid: u32,
    /// The runs in flight on it that had a checkpoint (orphans).
    orphans: Vec<String>,
}

/// A small deterministic generator (the kills' times and targets).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn pct(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

async fn has_checkpoint(stores: &Stores, run: &str) -> bool {
    stores.checkpoints.load(run).await.unwrap().is_some()
}

async fn in_history(stores: &Stores, session: usize, run: &str) -> bool {
    stores
        .conversations
        .load(&format!("s{session}"))
        .await
        .unwrap()
        .iter()
        .any(|m| m.role == Role::User && m.text() == run)
}

/// The session of a run id (`s<n>-r<m>`).
fn session_of(run: &str) -> String {
    run.split('-').next().unwrap_or_default().to_owned()
}

/// One execution of `record`, from the ledger.
struct Execution {
    exec: String,
    pid: u32,
    at_us: u128,
}

/// A run's messages in its session's history.
struct Stored {
    call_nonce: String,
    exec: String,
    answer_nonce: String,
}

/// Runs the chaos test against `backend` at `url`: see the crate's tests for what holds.
pub async fn chaos(backend: Backend, url: &str, config: Chaos) {
    let dir = tempfile::tempdir().unwrap();
    let prefix = modu_testing::unique_prefix("chaos");
    let stores = Stores::open(backend, url, &prefix).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut fleet = Fleet {
        backend,
        url: url.to_owned(),
        prefix,
        dir: dir.path().to_owned(),
        config: config.clone(),
        procs: Vec::new(),
        next_generation: 0,
        pid_of: HashMap::new(),
        tx,
    };
    for _ in 0..config.workers {
        let p = fleet.spawn();
        fleet.procs.push(p);
    }
    // All workers up (their stores open) before the clock starts.
    let mut ready = 0;
    while ready < config.workers {
        let said = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the workers start")
            .unwrap();
        assert_eq!(said.line, "ready", "{}", said.line);
        ready += 1;
    }

    let mut runs: Vec<Run> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut queues: Vec<VecDeque<usize>> = vec![VecDeque::new(); config.sessions];
    for (s, queue) in queues.iter_mut().enumerate() {
        for r in 0..config.runs_per_session {
            let id = format!("s{s}-r{r}");
            index.insert(id.clone(), runs.len());
            queue.push_back(runs.len());
            runs.push(Run {
                id,
                session: s,
                state: State::Queued,
                first_sent: None,
                done_at: None,
                dones: 0,
                resubmits: 0,
                lease_lost: Vec::new(),
            });
        }
    }
    let mut rng = Lcg(0x5eed_c4a0_u64);
    let mut kills: Vec<Kill> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let started = Instant::now();
    let next_kill = |rng: &mut Lcg| {
        let jitter = rng.next() % (2 * config.kill_jitter_ms + 1);
        Duration::from_millis(config.kill_ms - config.kill_jitter_ms + jitter)
    };
    let mut kill_at = tokio::time::Instant::now() + next_kill(&mut rng);
    let mut check = tokio::time::interval(Duration::from_millis(250));
    let total = runs.len();
    let mut done = 0;

    // Gives each session's next runs to random workers, up to the per-session limit.
    async fn schedule(
        runs: &mut [Run],
        queues: &mut [VecDeque<usize>],
        procs: &mut [Proc],
        rng: &mut Lcg,
        limit: usize,
    ) {
        for (s, queue) in queues.iter_mut().enumerate() {
            let busy = runs
                .iter()
                .filter(|r| r.session == s && matches!(r.state, State::On(_) | State::Orphan))
                .count();
            for _ in busy..limit {
                let Some(i) = queue.pop_front() else { break };
                let w = (rng.next() as usize) % procs.len();
                let run = &mut runs[i];
                run.state = State::On(procs[w].generation);
                run.first_sent.get_or_insert_with(Instant::now);
                let line = format!("run {} s{}\n", run.id, run.session);
                procs[w].stdin.write_all(line.as_bytes()).await.unwrap();
            }
        }
    }
    schedule(
        &mut runs,
        &mut queues,
        &mut fleet.procs,
        &mut rng,
        config.in_flight_per_session,
    )
    .await;

    while done < total {
        assert!(
            started.elapsed() < config.deadline,
            "not done within {:?}: {} of {total} runs done; not done: {:?}; failures: {failures:?}",
            config.deadline,
            done,
            runs.iter()
                .filter(|r| r.state != State::Done)
                .map(|r| (&r.id, r.state))
                .collect::<Vec<_>>()
        );
        tokio::select! {
            Some(said) = rx.recv() => {
                let parts: Vec<&str> = said.line.split_whitespace().collect();
                match parts.as_slice() {
                    ["ready"] => {}
                    ["done", id, ..] => {
                        let run = &mut runs[index[*id]];
                        run.dones += 1;
                        if run.state != State::Done {
                            run.state = State::Done;
                            run.done_at = Some(Instant::now());
                            done += 1;
                        }
                    }
                    ["failed", id, "lease_lost", ..] => {
                        // Its writes were refused; its checkpoint stays for the lease's holder
                        // or a recoverer.
                        let run = &mut runs[index[*id]];
                        run.lease_lost.push(fleet.pid_of[&said.generation]);
                        if matches!(run.state, State::On(_)) {
                            run.state = State::Orphan;
                        }
                    }
                    _ => failures.push(format!("g{}: {}", said.generation, said.line)),
                }
            }
            _ = tokio::time::sleep_until(kill_at) => {
                let w = (rng.next() as usize) % fleet.procs.len();
                let at_us = now_us();
                let victim = &mut fleet.procs[w];
                let (pid, generation) = (victim.pid, victim.generation);
                victim.child.start_kill().unwrap();
                let _ = victim.child.wait().await;
                fleet.procs[w] = fleet.spawn();
                // Its runs: stored checkpoint → an orphan; in the history → done; else never
                // started (no lease or no first checkpoint) → given out again. Checked in this
                // order: a run appends to the history before it deletes its checkpoint.
                let mut orphans = Vec::new();
                for run in runs.iter_mut().filter(|r| r.state == State::On(generation)) {
                    if has_checkpoint(&stores, &run.id).await {
                        run.state = State::Orphan;
                        orphans.push(run.id.clone());
                    } else if in_history(&stores, run.session, &run.id).await {
                        run.state = State::Done;
                        run.done_at = Some(Instant::now());
                        done += 1;
                    } else {
                        run.state = State::Queued;
                        run.resubmits += 1;
                        queues[run.session].push_front(index[&run.id]);
                    }
                }
                kills.push(Kill { at_us, pid, orphans });
                kill_at = tokio::time::Instant::now() + next_kill(&mut rng);
            }
            _ = check.tick() => {
                // An orphan whose checkpoint is gone completed (its `done` line may have died
                // with its recoverer).
                for run in runs.iter_mut().filter(|r| r.state == State::Orphan) {
                    if !has_checkpoint(&stores, &run.id).await {
                        assert!(
                            in_history(&stores, run.session, &run.id).await,
                            "{}: its checkpoint is gone but it is not in the history",
                            run.id
                        );
                        run.state = State::Done;
                        run.done_at = Some(Instant::now());
                        done += 1;
                    }
                }
            }
        }
        assert!(failures.is_empty(), "runs failed: {failures:?}");
        schedule(
            &mut runs,
            &mut queues,
            &mut fleet.procs,
            &mut rng,
            config.in_flight_per_session,
        )
        .await;
    }
    let elapsed = started.elapsed();

    // Nothing is left behind: no checkpoint of this agent remains once recoverers had time.
    tokio::time::sleep(Duration::from_millis(config.ttl_ms + 2 * config.recover_ms)).await;
    let left = stores.checkpoints.list(&CheckpointQuery::default()).await.unwrap();
    assert!(
        left.items.is_empty(),
        "checkpoints left: {:?}",
        left.items.iter().map(|i| &i.run_id).collect::<Vec<_>>()
    );
    for p in &mut fleet.procs {
        let _ = p.child.start_kill();
        let _ = p.child.wait().await;
    }

    // Every run completed exactly once in its session's history, its messages contiguous and
    // complete: user message, the call of `record`, its result, the answer.
    let mut stored: HashMap<String, Stored> = HashMap::new();
    for s in 0..config.sessions {
        let history = stores.conversations.load(&format!("s{s}")).await.unwrap();
        let mut seen = BTreeSet::new();
        assert_eq!(
            history.len(),
            config.runs_per_session * 4,
            "session s{s}: {:#?}",
            history.iter().map(Message::text).collect::<Vec<_>>()
        );
        for m in history.chunks(4) {
            let run = m[0].text();
            assert_eq!(m[0].role, Role::User, "{m:?}");
            assert!(run.starts_with(&format!("s{s}-r")), "{m:?}");
            assert!(seen.insert(run.clone()), "s{s}: {run} is in the history twice");
            assert_eq!(m[1].role, Role::Assistant, "{m:?}");
            assert_eq!(m[1].tool_calls.len(), 1, "{m:?}");
            let call = &m[1].tool_calls[0];
            assert_eq!(call.id, format!("call-{run}"), "{m:?}");
            assert_eq!(call.name, "record", "{m:?}");
            let note: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
            assert_eq!(m[2].role, Role::Tool, "{m:?}");
            assert_eq!(m[2].tool_call_id.as_deref(), Some(call.id.as_str()), "{m:?}");
            let result: serde_json::Value = serde_json::from_str(&m[2].text()).unwrap();
            assert_eq!(result["recorded"], true, "{m:?}");
            assert_eq!(m[3].role, Role::Assistant, "{m:?}");
            let answer = m[3].text();
            let answer = answer.strip_prefix("noted ").expect("the final answer");
            stored.insert(
                run,
                Stored {
                    call_nonce: note["note"].as_str().unwrap().to_owned(),
                    exec: result["exec"].as_str().unwrap().to_owned(),
                    answer_nonce: answer.to_owned(),
                },
            );
        }
    }
    assert_eq!(stored.len(), total);
    for run in &runs {
        assert!(run.dones <= 1, "{} was reported done {} times", run.id, run.dones);
    }

    // The ledger: each run's one call; an execution that is not the stored one is explained by
    // a kill of its worker after it started, or by its run losing the lease on that worker.
    let kill_of: HashMap<u32, u128> = kills.iter().map(|k| (k.pid, k.at_us)).collect();
    let mut executions: HashMap<(String, String), Vec<Execution>> = HashMap::new();
    for line in std::fs::read_to_string(fleet.ledger()).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 5, "ledger line {line:?}");
        executions
            .entry((f[0].to_owned(), f[1].to_owned()))
            .or_default()
            .push(Execution {
                exec: f[3].to_owned(),
                pid: f[2].parse().unwrap(),
                at_us: f[4].parse().unwrap(),
            });
    }
    let expected: BTreeSet<(String, String)> = stored.keys().map(|r| (r.clone(), format!("call-{r}"))).collect();
    let recorded: BTreeSet<(String, String)> = executions.keys().cloned().collect();
    assert_eq!(
        recorded, expected,
        "every run's one tool call, and no other, is in the ledger"
    );
    let (mut dup_killed, mut dup_lease_lost) = (0usize, 0usize);
    for ((run, call), execs) in &executions {
        let lost = &runs[index[run]].lease_lost;
        let kept = &stored[run].exec;
        if lost.is_empty() {
            assert_eq!(
                &execs.last().unwrap().exec,
                kept,
                "{run}/{call}: the stored execution is the call's last; nothing ran after its checkpoint was written"
            );
        } else {
            assert!(execs.iter().any(|e| &e.exec == kept), "{run}/{call}");
        }
        for e in execs.iter().filter(|e| &e.exec != kept) {
            if kill_of.get(&e.pid).is_some_and(|k| *k > e.at_us) {
                dup_killed += 1;
            } else if lost.contains(&e.pid) {
                dup_lease_lost += 1;
            } else {
                panic!(
                    "{run}/{call}: execution {} on {} ran again, but its worker was not killed after it and its run did not lose the lease there",
                    e.exec, e.pid
                );
            }
        }
    }

    // The events: model requests, run starts, store writes.
    let mut replies: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut writes: HashMap<String, Vec<(u128, u32)>> = HashMap::new();
    let mut claims: HashMap<String, Vec<(u128, u32)>> = HashMap::new();
    // Fresh run starts per session (the run took the session's lease).
    let mut fresh: HashMap<String, Vec<u128>> = HashMap::new();
    for line in std::fs::read_to_string(fleet.events()).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (at, pid, kind, run) = (f[0].parse::<u128>().unwrap(), f[1].parse::<u32>().unwrap(), f[2], f[3]);
        match kind {
            "model" => replies
                .entry((run.to_owned(), f[4].to_owned()))
                .or_default()
                .push(f[5].to_owned()),
            "save" | "append" | "delete" => writes.entry(run.to_owned()).or_default().push((at, pid)),
            "started" if f[4] == "resumed=true" => claims.entry(run.to_owned()).or_default().push((at, pid)),
            "started" => fresh.entry(session_of(run)).or_default().push(at),
            _ => {}
        }
    }
    let mut model_repeats = 0;
    for (run, s) in &stored {
        let lost = !runs[index[run]].lease_lost.is_empty();
        for (step, nonce) in [("call", &s.call_nonce), ("answer", &s.answer_nonce)] {
            let sent = &replies[&(run.clone(), step.to_owned())];
            if lost {
                assert!(sent.contains(nonce), "{run} {step}");
            } else {
                assert_eq!(
                    sent.last(),
                    Some(nonce),
                    "{run} {step}: the stored reply is the last one; no model call was repeated after its checkpoint: {sent:?}"
                );
            }
            model_repeats += sent.len() - 1;
        }
    }

    // Recovery: from the kill until each orphan's recovered run first writes again (and until
    // another worker claims it).
    let mut recovery_ms = Vec::new();
    let mut claim_ms = Vec::new();
    // Orphans claimed more than once before their first write (the recoverer died too), and
    // orphans whose session's lease went to later runs first (the claim never waits).
    let (mut reclaimed, mut overtaken, mut most_overtaking) = (0, 0, 0);
    for kill in &kills {
        for run in &kill.orphans {
            let first_write = writes.get(run).and_then(|v| {
                v.iter()
                    .filter(|(at, pid)| *at > kill.at_us && *pid != kill.pid)
                    .map(|(at, _)| *at)
                    .min()
            });
            let claimed: Vec<u128> = claims
                .get(run)
                .map(|v| {
                    v.iter()
                        .filter(|(at, pid)| *at > kill.at_us && *pid != kill.pid)
                        .map(|(at, _)| *at)
                        .collect()
                })
                .unwrap_or_default();
            if claimed.iter().filter(|at| Some(**at) < first_write).count() > 1 {
                reclaimed += 1;
            }
            if let Some(first_claim) = claimed.iter().min() {
                let before = fresh.get(&session_of(run)).map_or(0, |v| {
                    v.iter().filter(|at| **at > kill.at_us && *at < first_claim).count()
                });
                if before > 0 {
                    overtaken += 1;
                    most_overtaking = most_overtaking.max(before);
                }
            }
            let after = |events: Option<&Vec<(u128, u32)>>| {
                events.and_then(|v| {
                    v.iter()
                        .filter(|(at, pid)| *at > kill.at_us && *pid != kill.pid)
                        .map(|(at, _)| *at)
                        .min()
                })
            };
            if let Some(at) = after(writes.get(run)) {
                recovery_ms.push((at - kill.at_us) as f64 / 1000.0);
            }
            if let Some(at) = after(claims.get(run)) {
                claim_ms.push((at - kill.at_us) as f64 / 1000.0);
            }
        }
    }
    recovery_ms.sort_unstable_by(f64::total_cmp);
    claim_ms.sort_unstable_by(f64::total_cmp);
    let mut latency_ms: Vec<f64> = runs
        .iter()
        .map(|r| (r.done_at.unwrap() - r.first_sent.unwrap()).as_secs_f64() * 1000.0)
        .collect();
    latency_ms.sort_unstable_by(f64::total_cmp);
    let orphans: usize = kills.iter().map(|k| k.orphans.len()).sum();
    let resubmits: u32 = runs.iter().map(|r| r.resubmits).sum();
    let lease_lost: usize = runs.iter().map(|r| r.lease_lost.len()).sum();

    let name = format!(
        "{} leases, {} in flight per session",
        backend.as_str(),
        config.in_flight_per_session
    );
    println!(
        "chaos ({name}): {total} runs over {} sessions in {elapsed:.1?} = {:.2} runs/s; {} kills; \
         run latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (model {} ms x2 + tool {} ms per run; ttl {} ms)",
        config.sessions,
        total as f64 / elapsed.as_secs_f64(),
        kills.len(),
        pct(&latency_ms, 50),
        pct(&latency_ms, 99),
        latency_ms.last().copied().unwrap_or(f64::NAN),
        config.model_ms,
        config.record_ms,
        config.ttl_ms,
    );
    println!(
        "chaos ({name}): recovery (kill to the orphan's first write on another worker) p50 {:.0} ms, \
         p99 {:.0} ms over {} orphans; claimed (kill to the resumed run's start) p50 {:.0} ms, p99 {:.0} ms",
        pct(&recovery_ms, 50),
        pct(&recovery_ms, 99),
        recovery_ms.len(),
        pct(&claim_ms, 50),
        pct(&claim_ms, 99),
    );
    println!(
        "chaos ({name}): {orphans} orphans recovered, {resubmits} runs given out again (killed before their \
         first checkpoint), {lease_lost} lease losses; tool calls run twice: {dup_killed} (killed mid-call) + \
         {dup_lease_lost} (lease lost); model calls sent again: {model_repeats}; orphans claimed again after their \
         recoverer died: {reclaimed}; orphans whose session first ran later runs: {overtaken} (at most {most_overtaking} runs)"
    );
    assert!(
        kills.len() >= 5,
        "the runs outlasted at least five kills ({})",
        kills.len()
    );
    assert!(orphans > 0, "some kill left an orphan to recover");
    assert_eq!(
        recovery_ms.len(),
        orphans,
        "every orphan was written again by another worker"
    );
    assert!(
        dup_killed + dup_lease_lost <= orphans + lease_lost,
        "a duplicate needs an interrupted run"
    );
}

/// A paused worker whose session was taken over cannot write: run A's tool blocks its runtime
/// (renewal starved, like a long pause) past the lease's ttl; run B on another worker takes the
/// session and completes; A wakes up and ends with `LeaseLost`, its checkpoint unchanged, and
/// the session holds only B's messages.
pub async fn taken_over_lease_cannot_write(backend: Backend, url: &str) {
    let prefix = modu_testing::unique_prefix("takeover");
    let ttl = Duration::from_millis(500);
    let pause = Duration::from_millis(2500);
    let session = "contested";
    let (paused_tx, paused_rx) = std::sync::mpsc::channel::<()>();
    let worker_a = {
        let (url, prefix) = (url.to_owned(), prefix.clone());
        std::thread::spawn(move || {
            // One thread: while the tool blocks it, nothing else of worker A runs (not the
            // lease renewal either).
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let stores = Stores::open(backend, &url, &prefix).await.unwrap();
                let pause_tool = FunctionTool::new(
                    ToolSpec::new("pause", "Pauses the worker.", serde_json::json!({"type": "object"})),
                    move |_ctx: modu_core::RunContext<()>, _args| {
                        let paused_tx = paused_tx.clone();
                        async move {
                            let _ = paused_tx.send(());
                            std::thread::sleep(pause);
                            Ok(serde_json::json!("woke up"))
                        }
                    },
                );
                let agent = Agent::builder(
                    ScriptedModel::new()
                        .tool_call("pause", serde_json::json!({}))
                        .text("a's answer"),
                )
                .name("takeover")
                .tool(pause_tool)
                .conversation_store(Arc::clone(&stores.conversations))
                .checkpoint_store(Arc::clone(&stores.checkpoints))
                .session_leases(
                    Arc::clone(&stores.leases),
                    LeaseOptions::new().ttl(ttl).holder("worker-a"),
                )
                .build()
                .unwrap();
                agent
                    .run(AgentRequest::new((), "from a").session(session).run_id("run-a"))
                    .await
            })
        })
    };
    paused_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("run A reached its tool");
    let stores = Stores::open(backend, url, &prefix).await.unwrap();
    let before = stores.checkpoints.load("run-a").await.unwrap();
    assert!(before.is_some(), "run A saved its checkpoint before the tool");

    // Worker B: the lease expires while A is paused, B takes the session and completes.
    let agent_b = Agent::builder(ScriptedModel::new().text("b's answer"))
        .name("takeover")
        .conversation_store(Arc::clone(&stores.conversations))
        .checkpoint_store(Arc::clone(&stores.checkpoints))
        .session_leases(
            Arc::clone(&stores.leases),
            LeaseOptions::new()
                .ttl(ttl)
                .wait(Duration::from_secs(10))
                .holder("worker-b"),
        )
        .build()
        .unwrap();
    let t = Instant::now();
    let b = agent_b
        .run(AgentRequest::new((), "from b").session(session).run_id("run-b"))
        .await;
    assert_eq!(b.error(), None);
    assert_eq!(b.output().map(String::as_str), Some("b's answer"));
    assert!(
        t.elapsed() < pause,
        "B completed while A was still paused ({:?})",
        t.elapsed()
    );

    let a = tokio::task::spawn_blocking(move || worker_a.join().unwrap())
        .await
        .unwrap();
    assert!(
        matches!(&a.error(), Some(AgentError::LeaseLost { session_id }) if session_id == session),
        "run A ends with LeaseLost: {:?}",
        a.error()
    );
    let history = stores.conversations.load(session).await.unwrap();
    let texts: Vec<(Role, String)> = history.iter().map(|m| (m.role, m.text())).collect();
    assert_eq!(
        texts,
        vec![
            (Role::User, "from b".to_owned()),
            (Role::Assistant, "b's answer".to_owned())
        ],
        "the session holds only the new holder's writes"
    );
    assert_eq!(
        stores.checkpoints.load("run-a").await.unwrap(),
        before,
        "run A's checkpoint was not written after the take-over"
    );
}
