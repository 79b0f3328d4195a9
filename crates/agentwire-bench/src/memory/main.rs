//! `memory`: what an idle connection costs the daemon (issue 36, target 5). For each phase it starts a fresh
//! `agentwire serve` (embedded relay, HTTP server, roost supervisor; a temp data dir; the relay's connection
//! caps raised in its config so 10,000 clients are let in), reads its settled resident set (VmRSS, sampled
//! until it stops changing), opens the phase's connections, holds them idle, and reads it again:
//! - `relay-req`: `--connections` WebSocket clients of the embedded relay, each with one `REQ` open (a
//!   NIP-XX client's shape: a kind and a `#p` filter, `EOSE` received, nothing live);
//! - `relay-bare`: as many clients with no subscription (measured inside the relay's 60-second idle window,
//!   after which it closes them);
//! - `roost`: `--jobs` roost jobs (each a process that only waits), then a connection for each speaking for
//!   its job (`report`, its task delivered and acked), as idle agents are;
//! - `sse`: `--watchers` watchers of the turn API's event stream (`GET /api/v1/events`, the hub's stream).
//!
//! Each phase prints the count held, the resident set before and after, the KiB per connection, and the
//! bound it must fit: the cap on such connections times that figure. Human text on stderr, one JSON line on
//! stdout. The benchmark raises its own open-files limit to its hard limit (`prlimit --pid`), which the
//! daemon inherits (the daemon only raises a soft limit under 8,192; at or over it, it keeps what it got).
//!
//! Run from the workspace root after `cargo build --release -p agentwire -p agentwire-bench`:
//! `target/release/memory`.

#[allow(dead_code)]
#[path = "../daemon.rs"]
mod daemon;
mod procfs;
mod relay;
mod roost;
mod sse;

use clap::Parser;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The target for one idle relay connection, KiB.
const RELAY_TARGET_KIB: f64 = 16.0;
/// The relay's default `max_connections` (agentwire_relay::limits::DEFAULT_MAX_CONNECTIONS), the bound a
/// deployment that keeps the default lives in.
const RELAY_DEFAULT_CAP: usize = 512;
/// Places over the clients' count the relay's `max_connections` is raised by: the daemon's own agent holds
/// a connection to its embedded relay, and a client racing a closing one must still find a place.
const RELAY_CAP_MARGIN: usize = 256;
/// Places over the watchers' count the HTTP server's `max_connections` is raised by: the benchmark's own
/// requests and a watcher racing a closing one.
const HTTP_CAP_MARGIN: usize = 64;
/// The relay closes a client that has no subscription and sends nothing for this long
/// (agentwire_relay::limits::IDLE_TIMEOUT): the bare clients are measured well inside it.
const RELAY_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Room kept before [`RELAY_IDLE_TIMEOUT`] when measuring bare clients.
const IDLE_MARGIN: Duration = Duration::from_secs(10);
/// Descriptors the benchmark needs besides its clients' (the runtime, the daemon's pipes, `/proc` reads).
const OWN_FDS: u64 = 256;

/// The daemon's memory per idle connection, for the relay, roost and the event stream.
#[derive(Debug, Parser)]
#[command(name = "memory", version, about)]
struct Args {
    /// Idle WebSocket clients of the relay.
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// Idle roost jobs (each a process and a connection speaking for it).
    #[arg(long, default_value_t = 1_000)]
    jobs: usize,
    /// Watchers of the event stream asked for (past the server's cap they are refused and counted).
    #[arg(long, default_value_t = 1_000)]
    watchers: usize,
    /// The phases to run, comma-separated: relay-req, relay-bare, roost, sse.
    #[arg(long, default_value = "relay-req,relay-bare,roost,sse")]
    phases: String,
    /// The longest wait for the resident set to settle, seconds.
    #[arg(long, default_value_t = 30)]
    settle_secs: u64,
    /// The agentwire binary.
    #[arg(long, default_value = "target/release/agentwire")]
    daemon: PathBuf,
}

/// The daemon's configuration: the relay's caps raised for `connections` clients, the HTTP server's
/// (`[http] max_event_streams` and `max_connections`) for `watchers`, the roost profile.
fn config(connections: usize, watchers: usize) -> String {
    let cap = connections + RELAY_CAP_MARGIN;
    format!(
        "# Written by the memory benchmark: the relay's caps raised to let {connections} clients in, the\n\
         # HTTP server's to let {watchers} event-stream watchers in.\n\
         [http]\n\
         max_connections = {}\n\
         max_event_streams = {watchers}\n\n\
         [relay.limits]\n\
         max_connections = {cap}\n\
         max_connections_per_address = {cap}\n\n\
         {}",
        watchers + HTTP_CAP_MARGIN,
        roost::PROFILE
    )
}

/// A fresh daemon for one phase.
struct Run {
    _dir: tempfile::TempDir,
    data: PathBuf,
    socket: PathBuf,
    d: daemon::Daemon,
}

fn start(args: &Args) -> Result<Run, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let socket = dir.path().join("roost.sock");
    let socket_arg = socket.to_string_lossy().to_string();
    let d = daemon::Daemon::start_with(
        &args.daemon,
        dir.path(),
        &config(args.connections, args.watchers),
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--roost-socket",
            &socket_arg,
        ],
    )?;
    if let Some((soft, _)) = procfs::nofile(d.pid()) {
        eprintln!(
            "  daemon {} started; its open-files limit {}",
            d.pid(),
            soft.map_or("unlimited".to_string(), |s| s.to_string())
        );
    }
    Ok(Run {
        data: dir.path().join("data"),
        socket,
        d,
        _dir: dir,
    })
}

/// One measured step: the resident set before and after `count` connections (or jobs).
struct Step {
    what: &'static str,
    count: usize,
    before: procfs::Settled,
    after: procfs::Settled,
    fds_before: usize,
    fds_after: usize,
    /// The cap on such connections in this daemon, if there is one, and what it is.
    cap: Option<(usize, &'static str)>,
    /// Connections asked for that the daemon refused (past its cap).
    refused: usize,
}

impl Step {
    fn per_kib(&self) -> f64 {
        if self.count == 0 {
            return f64::NAN;
        }
        (self.after.rss_kib as f64 - self.before.rss_kib as f64) / self.count as f64
    }

    fn print(&self) {
        let per = self.per_kib();
        eprintln!(
            "  {}: {} held; RSS {:.1} MiB -> {:.1} MiB{}; fds {} -> {}; {:.2} KiB each",
            self.what,
            self.count,
            self.before.rss_kib as f64 / 1024.0,
            self.after.rss_kib as f64 / 1024.0,
            match (self.before.settled, self.after.settled) {
                (true, true) => String::new(),
                _ => " (NOT settled)".to_string(),
            },
            self.fds_before,
            self.fds_after,
            per,
        );
        if let Some((cap, name)) = self.cap {
            eprintln!(
                "    bound: {cap} ({name}) x {per:.2} KiB = {:.1} MiB",
                cap as f64 * per / 1024.0
            );
        }
    }

    fn json(&self) -> Value {
        let per = self.per_kib();
        json!({
            "what": self.what,
            "count": self.count,
            "refused": self.refused,
            "rss_before_kib": self.before.rss_kib,
            "rss_after_kib": self.after.rss_kib,
            "settled": self.before.settled && self.after.settled,
            "settle_secs": stats_round(self.after.waited.as_secs_f64()),
            "fds_before": self.fds_before,
            "fds_after": self.fds_after,
            "kib_each": stats_round(per),
            "cap": self.cap.map(|(c, _)| c),
            "cap_is": self.cap.map(|(_, n)| n),
            "bound_mib": self.cap.map(|(c, _)| stats_round(c as f64 * per / 1024.0)),
        })
    }
}

fn stats_round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The settled resident set and open descriptors of the daemon now.
async fn measure(d: &daemon::Daemon, limit: Duration) -> Result<(procfs::Settled, usize), String> {
    let settled = procfs::settle(d.pid(), limit).await?;
    let fds = procfs::open_fds(d.pid()).ok_or("the daemon is gone")?;
    Ok((settled, fds))
}

/// Relay clients, each with one `REQ` open (`subscribe`) or none.
async fn relay_phase(args: &Args, subscribe: bool) -> Result<Vec<Step>, String> {
    let run = start(args)?;
    let settle = Duration::from_secs(args.settle_secs);
    let (before, fds_before) = measure(&run.d, settle).await?;
    let started = Instant::now();
    let held = relay::open(&run.d.relay, args.connections, subscribe).await?;
    let connected = started.elapsed();
    // Bare clients are closed by the relay after its idle timeout: settle well inside it.
    let limit = if subscribe {
        settle
    } else {
        (RELAY_IDLE_TIMEOUT - IDLE_MARGIN)
            .saturating_sub(started.elapsed())
            .min(settle)
    };
    let (after, fds_after) = measure(&run.d, limit).await?;
    if !subscribe && started.elapsed() >= RELAY_IDLE_TIMEOUT {
        return Err("the bare clients were not measured within the relay's idle timeout".into());
    }
    eprintln!(
        "  ({} clients connected in {:.1} s; measured {:.1} s after the first)",
        held.len(),
        connected.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let cap = args.connections + RELAY_CAP_MARGIN;
    let step = Step {
        what: if subscribe {
            "relay connections, one REQ each"
        } else {
            "relay connections, no subscription"
        },
        count: held.len(),
        before,
        after,
        fds_before,
        fds_after,
        cap: Some((cap, "max_connections as configured here")),
        refused: 0,
    };
    step.print();
    let per = step.per_kib();
    eprintln!(
        "    at the default cap: {RELAY_DEFAULT_CAP} x {per:.2} KiB = {:.1} MiB; target {RELAY_TARGET_KIB} KiB each: {}",
        RELAY_DEFAULT_CAP as f64 * per / 1024.0,
        if per <= RELAY_TARGET_KIB { "met" } else { "NOT met" }
    );
    drop(held);
    Ok(vec![step])
}

/// Roost jobs, then a connection speaking for each.
async fn roost_phase(args: &Args) -> Result<Vec<Step>, String> {
    let run = start(args)?;
    let settle = Duration::from_secs(args.settle_secs);
    let mut ctl = roost::Line::connect(&run.socket).await?;
    let (before, fds_before) = measure(&run.d, settle).await?;
    let mut ids = Vec::new();
    let result = async {
        ids = roost::dispatch(&mut ctl, args.jobs).await?;
        let (jobs, fds_jobs) = measure(&run.d, settle).await?;
        let held = roost::connect_all(&run.socket, &run.data, &ids).await?;
        let (after, fds_after) = measure(&run.d, settle).await?;
        let steps = vec![
            Step {
                what: "roost jobs (process running, nobody speaking for it)",
                count: ids.len(),
                before,
                after: jobs,
                fds_before,
                fds_after: fds_jobs,
                cap: None,
                refused: 0,
            },
            Step {
                what: "roost connections speaking for a job (idle agents)",
                count: held.len(),
                before: jobs,
                after,
                fds_before: fds_jobs,
                fds_after,
                cap: Some((
                    agentwire_roost::proto::wire::MAX_CONNECTIONS,
                    "roost's MAX_CONNECTIONS",
                )),
                refused: 0,
            },
            Step {
                what: "roost job with its connection, together",
                count: held.len(),
                before,
                after,
                fds_before,
                fds_after,
                cap: Some((
                    agentwire_roost::proto::wire::MAX_CONNECTIONS,
                    "roost's MAX_CONNECTIONS (jobs themselves have no cap)",
                )),
                refused: 0,
            },
        ];
        drop(held);
        Ok::<_, String>(steps)
    }
    .await;
    roost::remove(&mut ctl, &ids).await;
    let steps = result?;
    for s in &steps {
        s.print();
    }
    Ok(steps)
}

/// Watchers of the event stream.
async fn sse_phase(args: &Args) -> Result<Vec<Step>, String> {
    let run = start(args)?;
    let (url, token) = run
        .d
        .http
        .clone()
        .ok_or("no HTTP server in the ready line")?;
    let settle = Duration::from_secs(args.settle_secs);
    let (before, fds_before) = measure(&run.d, settle).await?;
    let opened = sse::open(&url, &token, args.watchers).await?;
    let (after, fds_after) = measure(&run.d, settle).await?;
    if opened.refused > 0 {
        eprintln!(
            "  {} of {} watchers refused (the server's [http] max_event_streams, configured at {}): {}",
            opened.refused,
            args.watchers,
            args.watchers,
            opened.first_refusal.as_deref().unwrap_or("").trim()
        );
    }
    let step = Step {
        what: "event-stream watchers (GET /api/v1/events)",
        count: opened.held.len(),
        before,
        after,
        fds_before,
        fds_after,
        cap: Some((args.watchers, "[http] max_event_streams as configured here")),
        refused: opened.refused,
    };
    step.print();
    let per = step.per_kib();
    eprintln!(
        "    at the {} asked for: {:.1} MiB",
        args.watchers,
        args.watchers as f64 * per / 1024.0
    );
    drop(opened);
    Ok(vec![step])
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

async fn bench(args: Args) -> Result<Value, String> {
    if !args.daemon.exists() {
        return Err(format!(
            "{} not found: run `cargo build --release -p agentwire -p agentwire-bench` first",
            args.daemon.display()
        ));
    }
    let wanted = (args.connections.max(args.jobs).max(args.watchers) as u64) * 2 + OWN_FDS;
    let nofile = procfs::raise_own_nofile(wanted)?;
    eprintln!(
        "open-files limit: {nofile} for the benchmark and the daemon it starts (wanted {wanted}); load {}",
        load()
    );
    if nofile < args.connections as u64 + OWN_FDS {
        return Err(format!(
            "an open-files limit of {nofile} cannot hold {} clients",
            args.connections
        ));
    }
    let mut phases = Vec::new();
    for phase in args.phases.split(',').map(str::trim) {
        let load_before = load();
        eprintln!("== {phase} (load {load_before})");
        let steps = match phase {
            "relay-req" => relay_phase(&args, true).await?,
            "relay-bare" => relay_phase(&args, false).await?,
            "roost" => roost_phase(&args).await?,
            "sse" => sse_phase(&args).await?,
            other => return Err(format!("no phase {other:?}")),
        };
        phases.push(json!({
            "phase": phase,
            "load": load_before,
            "steps": steps.iter().map(Step::json).collect::<Vec<_>>(),
        }));
    }
    Ok(json!({
        "open_files_limit": nofile,
        "relay_target_kib": RELAY_TARGET_KIB,
        "phases": phases,
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    match bench(Args::parse()).await {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memory: {e}");
            ExitCode::from(1)
        }
    }
}
