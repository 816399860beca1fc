//! What the load benchmarks measure a process with (feature `bench`): its CPU time and peak
//! RSS from `getrusage`, its current RSS, the CPUs it may run on and pinning to one of them,
//! and latency percentiles; and the mock model server as a process of its own. Off Unix (or off
//! Linux, for the CPU set) they answer zero, one CPU, and pin nothing.

use std::time::Duration;

/// User + system CPU time of this process (all its threads) so far, from `getrusage`. Linux
/// accounts it to the nanosecond scheduler clock, so differences of microseconds are real.
#[cfg(unix)]
pub fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64) + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    tv(usage.user_time()) + tv(usage.system_time())
}

/// User + system CPU time of this process (zero off Unix).
#[cfg(not(unix))]
pub fn cpu_time() -> Duration {
    Duration::ZERO
}

/// Peak RSS of this process so far, in KiB, from `getrusage`.
#[cfg(unix)]
pub fn max_rss_kib() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0, |u| u.max_rss().max(0) as u64)
}

/// Peak RSS of this process so far, in KiB (zero off Unix).
#[cfg(not(unix))]
pub fn max_rss_kib() -> u64 {
    0
}

/// Current RSS of this process, in KiB, from `/proc/self/status` (zero where there is none).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Pins this process (its calling thread, and every thread it starts later) to one CPU.
#[cfg(target_os = "linux")]
pub fn pin_to(cpu: usize) -> std::io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(std::io::Error::from)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(std::io::Error::from)
}

/// Pins nothing off Linux.
#[cfg(not(target_os = "linux"))]
pub fn pin_to(_cpu: usize) -> std::io::Result<()> {
    Ok(())
}

/// The CPUs this process may run on.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> Vec<usize> {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return vec![0];
    };
    (0..nix::sched::CpuSet::count())
        .filter(|&i| set.is_set(i).unwrap_or(false))
        .collect()
}

/// One CPU off Linux.
#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> Vec<usize> {
    vec![0]
}

/// The `p` percentile (0.0 to 1.0, nearest rank) of `sorted`; zero when it is empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A load benchmark's mock model server, as a process of its own: pinned to `cpu`, each answer
/// after `latency`, nothing recorded. Prints its base URL on one line of stdout, then serves
/// until stdin closes (the benchmark holds the pipe and drops it to stop it).
pub fn serve_mock_openai(latency: Duration, cpu: usize) -> std::io::Result<()> {
    use std::io::{Read, Write};
    pin_to(cpu)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let server = crate::MockOpenAiServer::start().await?;
        server.without_recording().latency(latency);
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", server.base_url())?;
        out.flush()?;
        drop(out);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            let _ = tx.send(());
        });
        let _ = rx.await;
        Ok(())
    })
}
