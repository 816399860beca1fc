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
//! - `hot code`: the distinct 64-byte lines of machine code executed at least once after
//!   set-up (warm-up and timed loop). On a core whose caches go cold while it waits for the
//!   server, and whose level-2 cache is shared with everything else that runs, this is what
//!   each run pays to bring back in.
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
    /// The distinct 64-byte code lines executed, per function.
    lines: HashMap<String, HashSet<u64>>,
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

    fn hot_kib(&self) -> f64 {
        let all: HashSet<u64> = self.lines.values().flatten().copied().collect();
        all.len() as f64 * 64.0 / 1024.0
    }
}

/// Reads a callgrind output file written with `--dump-instr=yes --compress-pos=no
/// --compress-strings=no`.
fn parse(path: &Path) -> Profile {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut profile = Profile::default();
    let (mut names, mut positions) = (Vec::new(), 1usize);
    let mut function = String::from("?");
    let mut inclusive_next = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("events:") {
            names = rest.split_whitespace().map(str::to_owned).collect();
        } else if let Some(rest) = line.strip_prefix("positions:") {
            positions = rest.split_whitespace().count();
        } else if let Some(name) = line.strip_prefix("fn=") {
            function = name.trim().to_owned();
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
            profile.lines.entry(function.clone()).or_default().insert(address >> 6);
            for (name, value) in names.iter().zip(fields.skip(positions.saturating_sub(1))) {
                *profile.events.entry(name.clone()).or_default() += value.parse::<u64>().unwrap_or(0);
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
                long.hot_kib()
            );
            kept.push(long);
        }
        if let [_, client, modu] = kept.as_slice() {
            extra(client, modu);
        }
        println!();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Prints modu's hot code beyond the client alone's, by crate and by function.
fn extra(client: &Profile, modu: &Profile) {
    let mut by_function: Vec<(usize, &str)> = modu
        .lines
        .iter()
        .map(|(function, lines)| {
            let before = client.lines.get(function).map_or(0, HashSet::len);
            (lines.len().saturating_sub(before), function.as_str())
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
