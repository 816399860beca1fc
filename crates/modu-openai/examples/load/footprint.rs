//! `--footprint`: the load bench's clients under valgrind's callgrind, a deterministic judge of
//! what each costs per run, unmoved by the machine's noise (other processes, a shared host,
//! frequency changes), and of where modu's extra cost lives.
//!
//! Each variant (baseline, the client alone, modu; non-streamed and streamed) runs twice, with
//! `R` and `2R` timed runs at the same concurrency, under callgrind with its cache simulator.
//! Counts before the client's set-up ends (`rss_kib`, right before the warm-up) are dumped
//! apart and ignored; the per-run figure is the difference of the two runs divided by `R`, so
//! the warm-up and the process's exit cancel out.
//!
//! - `estimate` = instructions + 10 × L1 misses + 50 × last-level misses, a cycle estimate
//!   (the weights of callgrind's own `--cache-sim` cycle estimate).
//! - `hot code`: the distinct 64-byte lines of machine code every run executes: those executed
//!   more often in the `2R` process than in the `R` one (code the warm-up, a first connection
//!   or the process's exit alone runs is left out). A run's code is ten times the core's
//!   32 KiB level-1 instruction cache, so each of its lines is fetched again on every run;
//!   on this machine the measured CPU per run grows by ~0.43 µs per KiB of it.
//! - The last table attributes modu's hot code beyond the client alone's to functions.
//!
//! Needs `valgrind` on the PATH (Debian: `apt-get install valgrind`). Takes a few minutes.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What callgrind counted for one client process after its set-up.
#[derive(Default)]
struct Profile {
    /// Event totals by name (`Ir`, `I1mr`, `ILmr`, `Dr`, `D1mr`, `DLmr`, `Dw`, `D1mw`, `DLmw`).
    events: HashMap<String, u64>,
    /// Instructions executed, by address, with the function each belongs to.
    executed: HashMap<u64, (u64, usize)>,
    /// Function names, indexed by `executed`'s second field.
    functions: Vec<String>,
}

impl Profile {
    fn event(&self, name: &str) -> f64 {
        self.events.get(name).copied().unwrap_or(0) as f64
    }

    fn estimate(&self) -> f64 {
        let l1 = self.event("I1mr") + self.event("D1mr") + self.event("D1mw");
        let ll = self.event("ILmr") + self.event("DLmr") + self.event("DLmw");
        self.event("Ir") + 10.0 * l1 + 50.0 * ll
    }

    /// The 64-byte code lines this process (the `2R` one) executed more often than `fewer`
    /// (the `R` one), by function: the code every run executes.
    fn per_run_lines(&self, fewer: &Profile) -> HashMap<&str, HashSet<u64>> {
        let mut lines: HashMap<&str, HashSet<u64>> = HashMap::new();
        for (address, (count, function)) in &self.executed {
            let before = fewer.executed.get(address).map_or(0, |(c, _)| *c);
            if *count > before {
                lines
                    .entry(self.functions[*function].as_str())
                    .or_default()
                    .insert(address >> 6);
            }
        }
        lines
    }
}

fn kib(lines: &HashMap<&str, HashSet<u64>>) -> f64 {
    let all: HashSet<u64> = lines.values().flatten().copied().collect();
    all.len() as f64 * 64.0 / 1024.0
}

/// Reads a callgrind output file written with `--dump-instr=yes --compress-pos=no
/// --compress-strings=no`.
fn parse(path: &Path) -> Profile {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut profile = Profile::default();
    let (mut names, mut positions) = (Vec::new(), 1usize);
    let mut function = 0usize;
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut inclusive_next = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("events:") {
            names = rest.split_whitespace().map(str::to_owned).collect();
        } else if let Some(rest) = line.strip_prefix("positions:") {
            positions = rest.split_whitespace().count();
        } else if let Some(name) = line.strip_prefix("fn=") {
            let name = name.trim();
            function = match index.get(name) {
                Some(i) => *i,
                None => {
                    profile.functions.push(name.to_owned());
                    index.insert(name.to_owned(), profile.functions.len() - 1);
                    profile.functions.len() - 1
                }
            };
        } else if line.starts_with("calls=") {
            // The next cost line is the call's inclusive cost, already counted in the callee.
            inclusive_next = true;
        } else if line.starts_with("0x") {
            if std::mem::take(&mut inclusive_next) {
                continue;
            }
            let mut fields = line.split_whitespace();
            let Some(address) = fields.next().and_then(|a| u64::from_str_radix(&a[2..], 16).ok()) else {
                continue;
            };
            for (name, value) in names.iter().zip(fields.skip(positions.saturating_sub(1))) {
                let value = value.parse::<u64>().unwrap_or(0);
                *profile.events.entry(name.clone()).or_default() += value;
                if name == "Ir" {
                    profile.executed.entry(address).or_insert((0, function)).0 += value;
                }
            }
        }
    }
    profile
}

/// Runs one client under callgrind; returns its counts after set-up.
fn profile(dir: &Path, kind: &str, mode: &str, url: &str, runs: usize, concurrency: usize) -> Profile {
    let out = dir.join(format!("{kind}-{mode}-{runs}.out"));
    let status = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--cache-sim=yes",
            // This machine's kind of core: 32 KiB L1 instruction and data caches, 1 MiB L2.
            "--I1=32768,8,64",
            "--D1=32768,8,64",
            "--LL=1048576,16,64",
            "--dump-after=modu_testing::bench::rss_kib*",
            "--dump-instr=yes",
            "--compress-pos=no",
            "--compress-strings=no",
        ])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(std::env::current_exe().unwrap())
        .args([
            "--client",
            kind,
            mode,
            url,
            &runs.to_string(),
            &concurrency.to_string(),
            "0",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("valgrind could not be started: install it (apt-get install valgrind)");
    assert!(status.success(), "{kind} {mode} under callgrind failed");
    // The set-up is `out.1` (dumped when `rss_kib` returned); `out` is everything after.
    parse(&out)
}

/// The crate a function belongs to, by its demangled path (`<T as Trait>` by `T`).
fn crate_of(function: &str) -> &str {
    let name = function.trim_start_matches('<');
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    if end == 0 { "?" } else { &name[..end] }
}

pub(crate) fn footprint(url: &str, runs: usize, concurrency: usize) {
    let dir: PathBuf = std::env::temp_dir().join(format!("modu-footprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "footprint: callgrind, {runs} and {} timed runs at concurrency {concurrency}; per run = the difference / {runs}",
        2 * runs
    );
    println!("estimate = Ir + 10 x L1 misses + 50 x LL misses (I1 = D1 = 32 KiB, LL = 1 MiB)\n");
    println!(
        "{:<28} {:>10} {:>9} {:>9} {:>10} {:>7} {:>9}",
        "variant", "Ir/run", "L1m/run", "LLm/run", "est./run", "ratio", "hot KiB"
    );
    for mode in ["non-streamed", "streamed"] {
        let mut base = None;
        let mut kept = Vec::new();
        for kind in ["baseline", "modu-client", "modu"] {
            let short = profile(&dir, kind, mode, url, runs, concurrency);
            let long = profile(&dir, kind, mode, url, 2 * runs, concurrency);
            let per = |name: &str| (long.event(name) - short.event(name)) / runs as f64;
            let l1 = per("I1mr") + per("D1mr") + per("D1mw");
            let ll = per("ILmr") + per("DLmr") + per("DLmw");
            let estimate = (long.estimate() - short.estimate()) / runs as f64;
            let base_estimate = *base.get_or_insert(estimate);
            println!(
                "{:<28} {:>10.0} {:>9.0} {:>9.0} {:>10.0} {:>6.2}x {:>9.1}",
                format!("{mode}: {kind}"),
                per("Ir"),
                l1,
                ll,
                estimate,
                estimate / base_estimate,
                kib(&long.per_run_lines(&short))
            );
            kept.push((short, long));
        }
        if let [_, (client_short, client), (modu_short, modu)] = kept.as_slice() {
            extra(&client.per_run_lines(client_short), &modu.per_run_lines(modu_short));
        }
        println!();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Prints modu's hot code beyond the client alone's, by crate and by function.
fn extra(client: &HashMap<&str, HashSet<u64>>, modu: &HashMap<&str, HashSet<u64>>) {
    let mut by_function: Vec<(usize, &str)> = modu
        .iter()
        .map(|(function, lines)| {
            let before = client.get(function).map_or(0, HashSet::len);
            (lines.len().saturating_sub(before), *function)
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    by_function.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let total: usize = by_function.iter().map(|(n, _)| n).sum();
    let mut by_crate: HashMap<&str, usize> = HashMap::new();
    for (n, function) in &by_function {
        *by_crate.entry(crate_of(function)).or_default() += n;
    }
    let mut crates: Vec<_> = by_crate.into_iter().collect();
    crates.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let kib = |n: usize| n as f64 * 64.0 / 1024.0;
    println!(
        "  modu's hot code beyond the client alone's: {:.1} KiB; by crate:",
        kib(total)
    );
    let line: Vec<String> = crates
        .iter()
        .take(10)
        .map(|(c, n)| format!("{c} {:.1}", kib(*n)))
        .collect();
    println!("    {}", line.join(", "));
    println!("  by function (KiB):");
    for (n, function) in by_function.iter().take(15) {
        let short: String = function.chars().take(110).collect();
        println!("    {:>5.2}  {short}", kib(*n));
    }
}
