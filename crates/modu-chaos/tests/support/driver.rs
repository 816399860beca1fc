//! The chaos driver: gives runs to the workers, kills and restarts them, then checks the
//! histories, the ledger and the events, and prints the figures.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use modu_chaos::{Backend, Stores, now_us};
use modu_core::{CheckpointQuery, Message, Role};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::Chaos;
use super::fleet::{Fleet, Proc};
use super::runs::{Execution, Kill, Lcg, Run, State, Stored, has_checkpoint, in_history, pct, session_of};

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
