//! `agentwire-bench`: the NIP-XX benchmark of the issue, against the real daemon.
//!
//! It starts `agentwire serve` (embedded relay, demo agent) as a separate process on a temp data
//! directory and measures, from NIP-XX clients in this process:
//!
//! - **Latency** (`--runs` after `--warmup`): one client runs minimal runs one after another (the demo
//!   agent's `quick` prompt: one ai.prompt in, one ai.response out, no status or deltas). Each is compared
//!   with a raw round trip through the same relay: a second client sends the same kind of signed, NIP-44
//!   encrypted prompt to an echo peer in this process, which verifies, decrypts, encrypts and signs the
//!   reply as the agent would, with no engine and no journal. The two kinds of run alternate, so drift
//!   affects both alike. Reported: median, p90, p99 of each and the ratio of the medians (target <= 1.3).
//! - **Throughput** (`--clients`, `--duration-secs` after `--warmup-secs`): that many clients, each with
//!   its own key and WebSocket connection, run prompts back to back (closed loop). Reported: completed runs
//!   per second in the window (target >= 1,000), errors and timeouts, latency under load, the daemon's CPU
//!   time per run beside the crypto floor of a run (verify, decrypt, encrypt and sign once each, timed in
//!   this process: [`crypto_floor`]; target at most 2x), and its peak RSS (VmHWM) and RSS afterwards.
//!
//! `--raw-throughput` also runs the throughput phase against the echo peer: the ceiling the relay and the
//! client-side work allow on this machine. `--repeat N` runs everything N times, each with a fresh daemon,
//! and reports the median of the rounds.
//!
//! Output: human-readable text on stderr, one JSON summary line on stdout.
//!
//! The daemon's sender rate limit and the relay's per-connection event rate are lifted for the benchmark
//! (see `daemon::config_toml` and `daemon::BENCH_SENDER_RATE`): they protect a public deployment, and the
//! benchmark measures the engine.
//!
//! Run it from the workspace root after `cargo build --release -p agentwire -p agentwire-bench`:
//! `target/release/agentwire-bench --repeat 3`. The figures and the method are in `docs/benchmarks.md`.

mod crypto_floor;
mod daemon;
mod peer;
mod stats;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use nostr::prelude::PublicKey;
use serde_json::json;

use daemon::{CpuSnapshot, CpuUse, Daemon};
use peer::{BenchClient, RunError};
use stats::{median, round3, Summary};

/// The daemon's CPU per run may be at most this many times the crypto one run needs (issue 36).
const CPU_OVER_CRYPTO_TARGET: f64 = 2.0;

/// How long one run may take before it counts as a timeout.
const RUN_TIMEOUT: Duration = Duration::from_secs(10);

/// The NIP-XX benchmark: minimal-run latency against a raw relay round trip, and runs per second with many
/// concurrent clients, against `agentwire serve` with the demo agent.
#[derive(Debug, Parser)]
#[command(name = "agentwire-bench", version, about)]
struct Args {
    /// Measured sequential runs in the latency phase (each agent run is paired with one raw round trip).
    #[arg(long, default_value_t = 2000)]
    runs: usize,
    /// Unmeasured runs (of each kind) before the latency phase.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Concurrent clients in the throughput phase.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Length of the measured window of the throughput phase, seconds.
    #[arg(long, default_value_t = 10)]
    duration_secs: u64,
    /// Unmeasured seconds of load before the window.
    #[arg(long, default_value_t = 2)]
    warmup_secs: u64,
    /// The agentwire binary to benchmark.
    #[arg(long, default_value = "target/release/agentwire")]
    daemon: PathBuf,
    /// Which phases to run.
    #[arg(long, value_enum, default_value_t = Phase::All)]
    phase: Phase,
    /// Also measure throughput against the echo peer (no engine, no journal).
    #[arg(long)]
    raw_throughput: bool,
    /// Run the whole benchmark this many times, each with a fresh daemon, and report the medians.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Keep the daemon's data directory and log (for profiling) instead of deleting them.
    #[arg(long)]
    keep_data: bool,
    /// Worker threads of this process's runtime (clients and echo peer); default: one per core.
    #[arg(long)]
    threads: Option<usize>,
    /// Keep one client on the daemon's event stream (`GET /api/v1/events`, every turn) all along, reading
    /// it as fast as it comes: what a watcher costs the turns.
    #[arg(long)]
    watch_all: bool,
    /// An open hub page and a Prometheus scraper all along: the page's event stream (as `--watch-all`),
    /// its roost view read every second, and `/metrics` scraped every second.
    #[arg(long)]
    hub_page: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    All,
    Latency,
    Throughput,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        builder.worker_threads(n);
    }
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentwire-bench: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(bench(args)) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agentwire-bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn machine() -> serde_json::Value {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    json!({ "cpus": cpus, "cpu_model": model })
}

async fn bench(args: Args) -> Result<serde_json::Value, String> {
    if !args.daemon.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p agentwire`, or pass --daemon",
            args.daemon.display()
        ));
    }
    let repeat = args.repeat.max(1);
    let mut rounds = Vec::new();
    for round in 1..=repeat {
        if repeat > 1 {
            eprintln!("== round {round} of {repeat}");
        }
        rounds.push(one_round(&args).await?);
    }
    let pick = |path: &[&str]| -> f64 {
        let values: Vec<f64> = rounds
            .iter()
            .filter_map(|r| {
                path.iter()
                    .try_fold(r, |v, k| v.get(*k))
                    .and_then(serde_json::Value::as_f64)
            })
            .collect();
        median(&values)
    };
    let total = |path: &[&str]| -> u64 {
        rounds
            .iter()
            .filter_map(|r| {
                path.iter()
                    .try_fold(r, |v, k| v.get(*k))
                    .and_then(serde_json::Value::as_u64)
            })
            .sum()
    };
    let mut summary = json!({
        "bench": "agentwire-nipxx",
        "machine": machine(),
        "daemon": args.daemon,
        "rounds": rounds.len(),
    });
    if args.phase != Phase::Throughput {
        let ratio = pick(&["latency", "ratio"]);
        summary["latency"] = json!({
            "runs": args.runs,
            "run_median_ms": round3(pick(&["latency", "run", "median_ms"])),
            "run_p90_ms": round3(pick(&["latency", "run", "p90_ms"])),
            "run_p99_ms": round3(pick(&["latency", "run", "p99_ms"])),
            "raw_median_ms": round3(pick(&["latency", "raw", "median_ms"])),
            "raw_p90_ms": round3(pick(&["latency", "raw", "p90_ms"])),
            "raw_p99_ms": round3(pick(&["latency", "raw", "p99_ms"])),
            "ratio": round3(ratio),
            "errors": total(&["latency", "errors"]),
            "target": 1.3,
            "met": ratio <= 1.3,
        });
    }
    if args.phase != Phase::Latency {
        let rps = pick(&["throughput", "runs_per_sec"]);
        summary["throughput"] = json!({
            "clients": args.clients,
            "duration_secs": args.duration_secs,
            "runs_per_sec": rps.round(),
            "latency_median_ms": round3(pick(&["throughput", "latency", "median_ms"])),
            "latency_p99_ms": round3(pick(&["throughput", "latency", "p99_ms"])),
            "errors": total(&["throughput", "errors"]),
            "timeouts": total(&["throughput", "timeouts"]),
            "daemon_cpu_us_per_run": pick(&["throughput", "daemon_cpu_us_per_run"]),
            "crypto_floor_us_per_run": round3(pick(&["throughput", "crypto_floor", "per_run_us"])),
            "daemon_cpu_over_crypto_floor": round3(pick(&["throughput", "daemon_cpu_over_crypto_floor"])),
            "cpu_target": CPU_OVER_CRYPTO_TARGET,
            "agent_side_cpu_us_per_run": pick(&["throughput", "agent_side_cpu_us_per_run"]),
            "agent_side_over_crypto_floor": round3(pick(&["throughput", "agent_side_over_crypto_floor"])),
            "daemon_peak_rss_kib": pick(&["memory", "peak_kib"]),
            "daemon_rss_kib": pick(&["memory", "rss_kib"]),
            "target": 1000,
            "met": rps >= 1000.0,
        });
        if args.raw_throughput {
            summary["raw_throughput"] = json!({
                "runs_per_sec": pick(&["raw_throughput", "runs_per_sec"]).round(),
                "daemon_cpu_us_per_round_trip": pick(&["raw_throughput", "daemon_cpu_us_per_run"]),
            });
        }
    }
    summary["per_round"] = serde_json::Value::Array(rounds);
    if repeat > 1 {
        eprintln!("== median of {repeat} rounds");
        if let Some(l) = summary.get("latency") {
            eprintln!(
                "latency: run median {} ms, raw median {} ms, ratio {} (target <= 1.3)",
                l["run_median_ms"], l["raw_median_ms"], l["ratio"]
            );
        }
        if let Some(t) = summary.get("throughput") {
            eprintln!(
                "throughput: {} runs/s with {} clients (target >= 1000), daemon peak RSS {} KiB",
                t["runs_per_sec"], t["clients"], t["daemon_peak_rss_kib"]
            );
            eprintln!(
                "CPU: daemon {} µs per run, {}x the crypto floor of {} µs (target <= {CPU_OVER_CRYPTO_TARGET}x)",
                t["daemon_cpu_us_per_run"],
                t["daemon_cpu_over_crypto_floor"],
                t["crypto_floor_us_per_run"]
            );
        }
    }
    Ok(summary)
}

async fn one_round(args: &Args) -> Result<serde_json::Value, String> {
    let dir = tempfile::Builder::new()
        .prefix("agentwire-bench-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let watching = args.watch_all || args.hub_page;
    let mut daemon = Daemon::start(&args.daemon, dir.path(), watching)?;
    eprintln!(
        "daemon pid {} on {} (agent {}), data in {}",
        daemon.pid(),
        daemon.relay,
        &daemon.agent.to_hex()[..16],
        dir.path().display()
    );
    let echo = peer::spawn_echo(&daemon.relay).await?;
    let watcher = match (watching, &daemon.http) {
        (true, Some((url, token))) => Some(watch::spawn(url, token).await?),
        (true, None) => return Err("--watch-all: the daemon runs no HTTP server".into()),
        (false, _) => None,
    };
    let page = match (args.hub_page, &daemon.http) {
        (true, Some((url, token))) => Some(watch::spawn_page_load(url, token)),
        _ => None,
    };
    let mut out = json!({});
    if let Some(m) = daemon.memory() {
        out["memory_at_start"] = json!({ "peak_kib": m.peak_kib, "rss_kib": m.rss_kib });
    }
    if args.phase != Phase::Throughput {
        out["latency"] = latency(args, &daemon, echo).await?;
    }
    if args.phase != Phase::Latency {
        let mut t = throughput(args, &daemon, daemon.agent, "agent").await?;
        // Timed after the load, on this process's own thread, so the daemon is idle meanwhile.
        let floor = tokio::task::spawn_blocking(crypto_floor::measure)
            .await
            .map_err(|e| format!("timing the crypto floor: {e}"))?;
        let per_run = t["daemon_cpu_us_per_run"].as_f64().unwrap_or(0.0);
        let over = per_run / floor.per_run_us();
        eprintln!(
            "  crypto floor of a run (verify {:.1} + decrypt {:.1} + encrypt {:.1} + sign {:.1} µs) {:.1} µs; daemon CPU per run {:.0} µs = {:.2}x the floor (target <= 2x: {})",
            floor.verify_us,
            floor.decrypt_us,
            floor.encrypt_us,
            floor.sign_us,
            floor.per_run_us(),
            per_run,
            over,
            if over <= CPU_OVER_CRYPTO_TARGET { "met" } else { "NOT met" }
        );
        t["crypto_floor"] = floor.json();
        t["daemon_cpu_over_crypto_floor"] = json!(round3(over));
        out["throughput"] = t;
        if let Some(m) = daemon.memory() {
            out["memory"] = json!({ "peak_kib": m.peak_kib, "rss_kib": m.rss_kib });
            eprintln!(
                "daemon memory after the throughput phase: peak RSS (VmHWM) {:.1} MiB, RSS (VmRSS) {:.1} MiB",
                m.peak_kib as f64 / 1024.0,
                m.rss_kib as f64 / 1024.0
            );
        }
        if args.raw_throughput {
            let raw = throughput(args, &daemon, echo, "raw (echo peer)").await?;
            // The relay alone carries a raw round trip (both events verified, stored and sent out): what is
            // left of a run's CPU is the agent's side, held to the crypto it needs.
            let cpu = |v: &serde_json::Value| v["daemon_cpu_us_per_run"].as_f64().unwrap_or(0.0);
            let floor = out["throughput"]["crypto_floor"]["per_run_us"]
                .as_f64()
                .unwrap_or(f64::NAN);
            let agent_side = cpu(&out["throughput"]) - cpu(&raw);
            eprintln!(
                "  the relay alone: {:.0} µs of daemon CPU per raw round trip; the agent's side of a run: {agent_side:.0} µs = {:.2}x the crypto floor",
                cpu(&raw),
                agent_side / floor
            );
            out["throughput"]["agent_side_cpu_us_per_run"] = json!(agent_side.round());
            out["throughput"]["agent_side_over_crypto_floor"] = json!(round3(agent_side / floor));
            out["raw_throughput"] = raw;
        }
    }
    if !daemon.alive() {
        return Err("the daemon exited during the benchmark".into());
    }
    let log = std::fs::read_to_string(&daemon.log).unwrap_or_default();
    let warnings = log.lines().count();
    if warnings > 0 {
        eprintln!(
            "daemon logged {warnings} warning/error lines; first: {}",
            log.lines().next().unwrap_or_default()
        );
    }
    out["daemon_log_lines"] = json!(warnings);
    if let Some(p) = page {
        let reads = p.stop().await;
        eprintln!("the page and the scraper read {reads} times");
        out["page_reads"] = json!(reads);
    }
    if let Some(w) = watcher {
        let seen = w.stop().await;
        eprintln!("the watcher read {seen} events");
        out["watched_events"] = json!(seen);
    }
    drop(daemon);
    if args.keep_data {
        let kept = dir.keep();
        eprintln!("kept the daemon's data and log in {}", kept.display());
    }
    Ok(out)
}

fn describe(errors: &[RunError]) -> serde_json::Value {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for e in errors {
        *counts.entry(format!("{e:?}")).or_default() += 1;
    }
    json!(counts)
}

async fn latency(
    args: &Args,
    daemon: &Daemon,
    echo: PublicKey,
) -> Result<serde_json::Value, String> {
    let mut agent = BenchClient::connect(&daemon.relay, daemon.agent).await?;
    let mut raw = BenchClient::connect(&daemon.relay, echo).await?;
    let mut errors = Vec::new();
    for _ in 0..args.warmup {
        if let Err(e) = agent.run(RUN_TIMEOUT).await {
            errors.push(e);
        }
        if let Err(e) = raw.run(RUN_TIMEOUT).await {
            errors.push(e);
        }
    }
    let warmup_errors = errors.len();
    let (mut run_samples, mut raw_samples) = (Vec::new(), Vec::new());
    let (mut run_after_ok, mut raw_after_ok) = (Vec::new(), Vec::new());
    let cpu_before = CpuSnapshot::take(daemon);
    let started = Instant::now();
    for _ in 0..args.runs {
        match agent.run(RUN_TIMEOUT).await {
            Ok(t) => {
                run_samples.push(t.total);
                run_after_ok.push(t.total.saturating_sub(t.ok));
            }
            Err(e) => errors.push(e),
        }
        match raw.run(RUN_TIMEOUT).await {
            Ok(t) => {
                raw_samples.push(t.total);
                raw_after_ok.push(t.total.saturating_sub(t.ok));
            }
            Err(e) => errors.push(e),
        }
    }
    let elapsed = started.elapsed();
    let cpu = cpu_before.until(&CpuSnapshot::take(daemon));
    let run = Summary::of(&run_samples);
    let rawsum = Summary::of(&raw_samples);
    let ratio = run.median / rawsum.median;
    let (run_tail, raw_tail) = (Summary::of(&run_after_ok), Summary::of(&raw_after_ok));
    eprintln!(
        "latency: {} minimal runs and {} raw round trips (after {} warm-up each) in {:.1} s",
        run.n,
        rawsum.n,
        args.warmup,
        elapsed.as_secs_f64()
    );
    eprintln!(
        "  minimal run     median {:.3} ms  p90 {:.3} ms  p99 {:.3} ms",
        run.median, run.p90, run.p99
    );
    eprintln!(
        "  raw round trip  median {:.3} ms  p90 {:.3} ms  p99 {:.3} ms",
        rawsum.median, rawsum.p90, rawsum.p99
    );
    eprintln!(
        "  from the prompt's OK to the answer: minimal run median {:.3} ms, raw median {:.3} ms",
        run_tail.median, raw_tail.median
    );
    eprintln!(
        "  ratio of medians {:.3} (target <= 1.3: {})",
        ratio,
        if ratio <= 1.3 { "met" } else { "NOT met" }
    );
    report_other_load(&cpu, elapsed);
    if !errors.is_empty() {
        eprintln!(
            "  errors: {} ({} in warm-up): {}",
            errors.len(),
            warmup_errors,
            describe(&errors)
        );
    }
    Ok(json!({
        "run": run.json(),
        "raw": rawsum.json(),
        "ratio": round3(ratio),
        "run_after_ok": run_tail.json(),
        "raw_after_ok": raw_tail.json(),
        "errors": errors.len(),
        "error_kinds": describe(&errors),
        "daemon_cpu_secs": round3(cpu.daemon),
        "bench_cpu_secs": round3(cpu.bench),
        "other_cpu_secs": round3(cpu.other),
    }))
}

/// Share of one core that other processes may use during a measurement before the benchmark warns. The
/// kernel's writeback threads, which flush the daemon's own database writes, count as other processes
/// and use a few percent of a core under load.
const OTHER_LOAD_WARNING: f64 = 0.10;

/// Warns when other processes used a noticeable share of the machine during a measurement: the figures
/// are then not this software's alone.
fn report_other_load(cpu: &CpuUse, elapsed: Duration) {
    let share = cpu.other / elapsed.as_secs_f64();
    if share > OTHER_LOAD_WARNING {
        eprintln!(
            "  WARNING: other processes used {:.2} CPU-seconds ({:.0}% of one core) during this measurement",
            cpu.other,
            share * 100.0
        );
    }
}

/// What one closed-loop client did.
#[derive(Default)]
struct Tally {
    /// Completion times (since the phase started) and latencies of successful runs.
    done: Vec<(Duration, Duration)>,
    /// Failed runs with their completion time.
    failed: Vec<(Duration, RunError)>,
}

async fn throughput(
    args: &Args,
    daemon: &Daemon,
    peer: PublicKey,
    label: &str,
) -> Result<serde_json::Value, String> {
    let warmup = Duration::from_secs(args.warmup_secs);
    let window = Duration::from_secs(args.duration_secs.max(1));
    let mut clients = Vec::with_capacity(args.clients);
    for _ in 0..args.clients {
        clients.push(BenchClient::connect(&daemon.relay, peer).await?);
    }
    let start = Instant::now();
    let stop_at = start + warmup + window;
    let mut tasks = Vec::new();
    for mut client in clients {
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            while Instant::now() < stop_at {
                let r = client.run(RUN_TIMEOUT).await;
                let at = start.elapsed();
                match r {
                    Ok(t) => tally.done.push((at, t.total)),
                    Err(e) => tally.failed.push((at, e)),
                }
            }
            tally
        }));
    }
    // CPU time of the daemon over the measured window only.
    tokio::time::sleep_until((start + warmup).into()).await;
    let cpu_start = CpuSnapshot::take(daemon);
    tokio::time::sleep_until(stop_at.into()).await;
    let cpu = cpu_start.until(&CpuSnapshot::take(daemon));
    let tallies: Vec<Tally> = futures_join(tasks).await?;
    let in_window = |at: &Duration| *at >= warmup && *at < warmup + window;
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    let mut total_done = 0;
    for t in &tallies {
        total_done += t.done.len();
        latencies.extend(
            t.done
                .iter()
                .filter(|(at, _)| in_window(at))
                .map(|(_, d)| *d),
        );
        errors.extend(t.failed.iter().map(|(_, e)| e.clone()));
    }
    let runs = latencies.len();
    let rps = runs as f64 / window.as_secs_f64();
    let lat = Summary::of(&latencies);
    let timeouts = errors.iter().filter(|e| **e == RunError::Timeout).count();
    eprintln!(
        "throughput ({label}): {} clients, {:.0} s window after {} s warm-up: {} runs, {:.0} runs/s{}",
        args.clients,
        window.as_secs_f64(),
        args.warmup_secs,
        runs,
        rps,
        if label == "agent" {
            if rps >= 1000.0 {
                " (target >= 1000: met)"
            } else {
                " (target >= 1000: NOT met)"
            }
        } else {
            ""
        }
    );
    eprintln!(
        "  latency under load: median {:.3} ms  p90 {:.3} ms  p99 {:.3} ms",
        lat.median, lat.p90, lat.p99
    );
    eprintln!(
        "  errors {} (timeouts {timeouts}) of {} runs in all; CPU in the window: daemon {:.2} s ({:.0} µs/run), bench {:.2} s ({:.0} µs/run)",
        errors.len(),
        total_done + errors.len(),
        cpu.daemon,
        cpu.daemon / runs.max(1) as f64 * 1e6,
        cpu.bench,
        cpu.bench / runs.max(1) as f64 * 1e6,
    );
    report_other_load(&cpu, window);
    if !errors.is_empty() {
        eprintln!("  error kinds: {}", describe(&errors));
    }
    Ok(json!({
        "runs": runs,
        "runs_per_sec": rps.round(),
        "latency": lat.json(),
        "errors": errors.len(),
        "timeouts": timeouts,
        "error_kinds": describe(&errors),
        "daemon_cpu_secs": round3(cpu.daemon),
        "daemon_cpu_us_per_run": (cpu.daemon / runs.max(1) as f64 * 1e6).round(),
        "bench_cpu_secs": round3(cpu.bench),
        "other_cpu_secs": round3(cpu.other),
    }))
}

async fn futures_join<T: Send + 'static>(
    tasks: Vec<tokio::task::JoinHandle<T>>,
) -> Result<Vec<T>, String> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.map_err(|e| format!("a client task failed: {e}"))?);
    }
    Ok(out)
}
