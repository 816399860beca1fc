//! A chaos worker: runs the chaos agent (see the library docs) with session leases on Redis or
//! PostgreSQL, and recovers orphaned runs in the background.
//!
//! ```text
//! chaos-worker --store redis|postgres --url URL --prefix PREFIX --ledger FILE --events FILE
//!     [--holder NAME] [--ttl-ms 1500] [--wait-ms 60000] [--model-ms 300] [--record-ms 100]
//!     [--recover-ms 300]
//! ```
//!
//! Reads `run <run id> <session id>` lines on stdin and runs each at once (concurrently), with
//! the run id as the user message. Prints `ready` when the stores are open, then for every run
//! that ends `done <run id>` or `failed <run id> <kind> <error>`. Every `--recover-ms` it starts
//! `Agent::recover_orphans` (each call in its own task: a call lasts until the runs it claimed
//! end); a recovered run prints the same lines with ` recovered` appended.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use modu_agent::AgentRequest;
use modu_chaos::{AgentConfig, Backend, LineFile, Stores, Worker, agent, error_kind};
use modu_core::RunOutcome;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

fn ms(args: &HashMap<String, String>, key: &str, default: u64) -> Result<Duration, String> {
    match args.get(key) {
        None => Ok(Duration::from_millis(default)),
        Some(v) => v
            .parse()
            .map(Duration::from_millis)
            .map_err(|e| format!("--{key} {v}: {e}")),
    }
}

fn report(result: &RunOutcome, recovered: bool) -> String {
    let tail = if recovered { " recovered" } else { "" };
    match result.error() {
        None => format!("done {}{tail}", result.run_id()),
        Some(e) => {
            let text = e.to_string().replace('\n', " ");
            format!("failed {} {} {text}{tail}", result.run_id(), error_kind(e))
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(key) = it.next() {
        let key = key.strip_prefix("--").ok_or(format!("unexpected argument {key}"))?;
        let value = it.next().ok_or(format!("--{key} needs a value"))?;
        args.insert(key.to_owned(), value);
    }
    let need = |key: &str| args.get(key).cloned().ok_or(format!("--{key} is required"));
    let backend: Backend = need("store")?.parse()?;
    let url = need("url")?;
    let prefix = need("prefix")?;
    let ledger = LineFile::open(need("ledger")?.as_ref())?;
    let config = AgentConfig {
        holder: args
            .get("holder")
            .cloned()
            .unwrap_or_else(|| format!("worker-{}", std::process::id())),
        ttl: ms(&args, "ttl-ms", 1500)?,
        wait: ms(&args, "wait-ms", 60_000)?,
        model: ms(&args, "model-ms", 300)?,
        events: need("events")?.into(),
    };
    let record = ms(&args, "record-ms", 100)?;
    let recover_every = ms(&args, "recover-ms", 300)?;

    let stores = Stores::open(backend, &url, &prefix).await?;
    let agent = Arc::new(agent(&config, &stores)?);
    let context = Arc::new(Worker { ledger, record });

    // One writer of stdout, so that lines never mix.
    let (out, mut lines) = mpsc::unbounded_channel::<String>();
    let printer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = lines.recv().await {
            let _ = stdout.write_all(format!("{line}\n").as_bytes()).await;
            let _ = stdout.flush().await;
        }
    });
    let _ = out.send("ready".to_owned());

    // Orphaned runs: a recovery call every `recover_every`, each in its own task.
    {
        let (agent, context, out) = (Arc::clone(&agent), Arc::clone(&context), out.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(recover_every).await;
                let (agent, context, out) = (Arc::clone(&agent), Arc::clone(&context), out.clone());
                tokio::spawn(async move {
                    match agent.recover_orphans(context).await {
                        Ok(results) => {
                            for result in &results {
                                let _ = out.send(report(result, true));
                            }
                        }
                        Err(e) => eprintln!("recover_orphans: {e}"),
                    }
                });
            }
        });
    }

    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let ["run", run_id, session_id] = parts[..] else {
            eprintln!("ignored: {line:?}");
            continue;
        };
        let request = AgentRequest::new(Arc::clone(&context), run_id)
            .session(session_id)
            .run_id(run_id);
        let (agent, out) = (Arc::clone(&agent), out.clone());
        tokio::spawn(async move {
            let result = agent.run(request).await;
            let _ = out.send(report(&result, false));
        });
    }
    // stdin closed: the driver is gone.
    drop(out);
    printer.abort();
    Ok(())
}
