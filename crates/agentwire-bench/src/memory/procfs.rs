//! What the benchmark reads of a process from `/proc`: its resident set, settled (sampled until it stops
//! changing), its open descriptors, and the open-files limit it runs under; and raising that limit for
//! this process (and so for the daemon it starts, which inherits it) with `prlimit`.

use std::process::Command;
use std::time::{Duration, Instant};

/// How often the resident set is sampled while it settles.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// How long the resident set must stay within [`SETTLED_WITHIN_KIB`] to count as settled: ten samples,
/// longer than the daemon's one-second housekeeping ticks.
const SETTLED_FOR: Duration = Duration::from_secs(2);
/// The spread (largest minus smallest sample) a settled resident set may still show: 16 pages, well
/// under a thousandth of what the smallest phase adds (64 streams at a few KiB each would be ~200 KiB;
/// 1,000 jobs or 10,000 connections add tens of MiB).
const SETTLED_WITHIN_KIB: u64 = 64;

/// A process's resident set once settled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settled {
    /// VmRSS, KiB: the last sample.
    pub(crate) rss_kib: u64,
    /// Whether it stayed within [`SETTLED_WITHIN_KIB`] for [`SETTLED_FOR`] before the deadline.
    pub(crate) settled: bool,
    /// How long settling took.
    pub(crate) waited: Duration,
}

/// VmRSS of `pid` in KiB.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Samples `pid`'s resident set until it has stayed within [`SETTLED_WITHIN_KIB`] for [`SETTLED_FOR`],
/// or `limit` has passed (then the last sample, marked not settled).
pub(crate) async fn settle(pid: u32, limit: Duration) -> Result<Settled, String> {
    let started = Instant::now();
    let samples_needed = (SETTLED_FOR.as_millis() / SAMPLE_EVERY.as_millis()) as usize + 1;
    let mut window: Vec<u64> = Vec::new();
    loop {
        let rss = rss_kib(pid).ok_or("the daemon is gone")?;
        window.push(rss);
        if window.len() > samples_needed {
            window.remove(0);
        }
        let spread = window.iter().max().unwrap_or(&0) - window.iter().min().unwrap_or(&0);
        let settled = window.len() == samples_needed && spread <= SETTLED_WITHIN_KIB;
        if settled || started.elapsed() >= limit {
            return Ok(Settled {
                rss_kib: rss,
                settled,
                waited: started.elapsed(),
            });
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// How many descriptors `pid` has open.
pub(crate) fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// The soft and hard open-files limits of `pid` (`None` for unlimited).
pub(crate) fn nofile(pid: u32) -> Option<(Option<u64>, Option<u64>)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut fields = line["Max open files".len()..].split_whitespace();
    let read = |f: Option<&str>| -> Option<Option<u64>> {
        match f? {
            "unlimited" => Some(None),
            n => n.parse().ok().map(Some),
        }
    };
    Some((read(fields.next())?, read(fields.next())?))
}

/// Raises this process's soft open-files limit to `wanted` (within its hard limit) with `prlimit --pid`,
/// so that it can hold its clients' sockets and the daemon it starts inherits room for the server side.
/// Returns the soft limit in force afterwards.
pub(crate) fn raise_own_nofile(wanted: u64) -> Result<u64, String> {
    let me = std::process::id();
    let (soft, hard) = nofile(me).ok_or("cannot read /proc/self/limits")?;
    let soft = soft.unwrap_or(u64::MAX);
    if soft >= wanted {
        return Ok(soft);
    }
    let to = hard.map_or(wanted, |h| h.min(wanted));
    if to > soft {
        let hard_text = hard.map_or("unlimited".to_string(), |h| h.to_string());
        let status = Command::new("prlimit")
            .arg("--pid")
            .arg(me.to_string())
            .arg(format!("--nofile={to}:{hard_text}"))
            .status()
            .map_err(|e| format!("cannot run prlimit: {e}"))?;
        if !status.success() {
            return Err(format!("prlimit --nofile={to} failed: {status}"));
        }
    }
    let (soft, _) = nofile(me).ok_or("cannot read /proc/self/limits")?;
    Ok(soft.unwrap_or(u64::MAX))
}
